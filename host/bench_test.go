package host

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

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
	for _, n := range nodes {
		for len(n.Members()) != count || !n.Membership().View().Converged {
			time.Sleep(10 * time.Millisecond)
		}
	}
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
