package host

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shardhost/shardhost/internal/telemetry"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// reportLatency adds p50 and p99 of the samples to the benchmark's output.
func reportLatency(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// startBenchNodes starts count members on loopback with OS-chosen ports, no API and
// the package's compilation cache, each joining the first; mutate adjusts each config.
// It does not wait for them to be up.
func startBenchNodes(b *testing.B, count int, mutate func(*Config)) []*Node {
	b.Helper()
	nodes := []*Node{}
	for i := 0; i < count; i++ {
		cfg := DefaultConfig()
		cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", ""
		cfg.DataDir = b.TempDir()
		cfg.GossipProfile = "local"
		cfg.Lifecycle = tolerantLifecycle()
		cfg.Runtime.CacheDir = cacheDir
		cfg.Runtime.CompileBeforeServing = true // the benchmarks measure compiled code
		cfg.Logger = quietLogger()
		if mutate != nil {
			mutate(&cfg)
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].Self().Address}
		}
		n, err := Start(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Kill() })
		nodes = append(nodes, n)
	}
	return nodes
}

func benchNode(b *testing.B, count int) []*Node {
	b.Helper()
	nodes := startBenchNodes(b, count, nil)
	for _, n := range nodes {
		if err := n.Membership().WaitUp(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	waitMembers(b, nodes)
	if _, err := nodes[0].Deploy(context.Background(), testwasm.Bytes(b, "counter"), sharding.TypeSettings{Name: "counter"}); err != nil {
		b.Fatal(err)
	}
	return nodes
}

// BenchmarkLocalAsk is an ask into a warm entity hosted by the node asked: routing,
// mailbox, a guest call into a Go counter and the reply.
func BenchmarkLocalAsk(b *testing.B) {
	n := benchNode(b, 1)[0]
	ctx := context.Background()
	if _, err := n.Sharding().Ask(ctx, "counter", "warm", []byte("inc")); err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.Sharding().Ask(ctx, "counter", "warm", []byte("get")); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, samples)
}

// BenchmarkRemoteAsk is an ask into a warm entity on the other of two nodes, over the
// TCP transport on loopback.
func BenchmarkRemoteAsk(b *testing.B) {
	nodes := benchNode(b, 2)
	ctx := context.Background()
	id := ""
	for i := 0; ; i++ {
		r, err := nodes[0].Sharding().Ask(ctx, "counter", "r"+strconv.Itoa(i), []byte("inc"))
		if err != nil {
			b.Fatal(err)
		}
		if r.Node == nodes[1].Self().Address {
			id = "r" + strconv.Itoa(i)
			break
		}
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := nodes[0].Sharding().Ask(ctx, "counter", id, []byte("get")); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, samples)
}

// BenchmarkActivation is the first ask to a new entity on a node whose module is
// compiled: routing, a new Go instance (instantiate + _initialize) and the first call.
// Shards are already homed, so the coordinator is not in the loop.
func BenchmarkActivation(b *testing.B) {
	n := benchNode(b, 1)[0]
	ctx := context.Background()
	for i := 0; i < 200; i++ { // home every shard
		n.Sharding().Ask(ctx, "counter", "warmup-"+strconv.Itoa(i), []byte("get"))
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.Sharding().Ask(ctx, "counter", "new-"+strconv.Itoa(i), []byte("inc")); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, samples)
}

// BenchmarkInstanceReceive is one message into a warm instance without routing: the
// wasm round trip alone (alloc, write, receive, reply).
func BenchmarkInstanceReceive(b *testing.B) {
	rt, _ := newTestRuntime(b, nil)
	m := compile(b, rt, "counter")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "counter", "b")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	msg := []byte("get")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := inst.Receive(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstantiate is a new Go instance from a compiled module (with _initialize).
func BenchmarkInstantiate(b *testing.B) {
	rt, _ := newTestRuntime(b, nil)
	m := compile(b, rt, "counter")
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inst, err := m.Instantiate(ctx, "counter", "b")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		inst.Close(ctx)
		b.StartTimer()
	}
}

// BenchmarkLocalAskTelemetry is BenchmarkLocalAsk on three single-member clusters in one
// process: telemetry off; metrics on (the Prometheus pipeline of a shardhost process,
// not scraped meanwhile); tracing on (always_on sampler, a batching span processor
// exporting by OTLP/HTTP to an endpoint that discards what it gets). The asks are
// interleaved (off, metrics, tracing, in turn), so that the load of a shared machine
// weighs on the three alike. It reports each one's p50 and the ratios of the p50s:
// metrics-x and tracing-x (targets: at most 1.05 and 1.25).
func BenchmarkLocalAskTelemetry(b *testing.B) {
	discard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer discard.Close()
	m, err := telemetry.NewMetrics(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(discard.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(exp))
	defer tp.Shutdown(context.Background())
	modes := []struct {
		name   string
		mutate func(*Config)
	}{
		{"off", nil},
		{"metrics", func(c *Config) { c.MeterProvider, c.MetricsHandler = m.Provider, m.Handler }},
		{"tracing", func(c *Config) { c.TracerProvider = tp }},
	}
	ctx := context.Background()
	nodes := make([]*Node, len(modes))
	for i, mode := range modes {
		nodes[i] = startBenchNodes(b, 1, mode.mutate)[0]
		if err := nodes[i].Membership().WaitUp(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := nodes[i].Deploy(ctx, testwasm.Bytes(b, "counter"), sharding.TypeSettings{Name: "counter"}); err != nil {
			b.Fatal(err)
		}
		if _, err := nodes[i].Sharding().Ask(ctx, "counter", "warm", []byte("inc")); err != nil {
			b.Fatal(err)
		}
	}
	samples := make([][]time.Duration, len(modes))
	for i := range samples {
		samples[i] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range modes {
			k := (i + j) % len(modes)
			start := time.Now()
			if _, err := nodes[k].Sharding().Ask(ctx, "counter", "warm", []byte("get")); err != nil {
				b.Fatal(err)
			}
			samples[k] = append(samples[k], time.Since(start))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(modes))
	for i, mode := range modes {
		sort.Slice(samples[i], func(a, c int) bool { return samples[i][a] < samples[i][c] })
		p50[i] = float64(samples[i][len(samples[i])/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[i], mode.name+"-p50-µs")
	}
	b.ReportMetric(p50[1]/p50[0], "metrics-x")
	b.ReportMetric(p50[2]/p50[0], "tracing-x")
}

// BenchmarkRecoveryOverhead is the cost of in-memory recovery (recovery.go) on the local
// ask p50 of a warm counter taking "inc" (a state change on every message), for each
// guest toolchain: two single-member nodes, recovery off and on, asked in turn in one
// run. It reports both p50s and their ratio (the performance target: ×1.10 at most for
// the Rust guest).
func BenchmarkRecoveryOverhead(b *testing.B) {
	guests := []struct {
		name  string
		bytes func(testing.TB, string) []byte
		src   string
	}{
		{"rust", testwasm.RustBytes, "counter-rust"},
		{"tinygo", testwasm.TinyGoBytes, "counter"},
		{"go", testwasm.Bytes, "counter"},
	}
	for _, g := range guests {
		b.Run(g.name, func(b *testing.B) {
			ctx := context.Background()
			wasm := g.bytes(b, g.src)
			var nodes [2]*Node
			for i, on := range []bool{false, true} {
				nodes[i] = startBenchNodes(b, 1, func(c *Config) { c.Recovery = on })[0]
				if err := nodes[i].Membership().WaitUp(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := nodes[i].Deploy(ctx, wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
					b.Fatal(err)
				}
				if _, err := nodes[i].Sharding().Ask(ctx, "counter", "warm", []byte("inc")); err != nil {
					b.Fatal(err)
				}
			}
			var samples [2][]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range nodes {
					k := (i + j) % 2
					start := time.Now()
					if _, err := nodes[k].Sharding().Ask(ctx, "counter", "warm", []byte("inc")); err != nil {
						b.Fatal(err)
					}
					samples[k] = append(samples[k], time.Since(start))
				}
			}
			b.StopTimer()
			var p50 [2]float64
			for i, name := range []string{"off", "on"} {
				s := samples[i]
				sort.Slice(s, func(a, c int) bool { return s[a] < s[c] })
				p50[i] = float64(s[len(s)/2].Nanoseconds()) / 1e3
				b.ReportMetric(p50[i], "recovery-"+name+"-p50-µs")
			}
			b.ReportMetric(p50[1]/p50[0], "recovery-x")
		})
	}
}

// counterBuild is the counter example as one toolchain built it, for benchmarks that
// run each build in turn.
type counterBuild struct {
	name string
	wasm func(testing.TB) []byte
}

var (
	tinygoCounter = counterBuild{"tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "counter") }}
	goCounter     = counterBuild{"go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "counter") }}
	rustCounter   = counterBuild{"rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "counter-rust") }}
)
