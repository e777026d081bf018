package host

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The Rust counterparts of BenchmarkInstanceReceive and BenchmarkInstantiate (bench_test.go),
// with examples/wasm/echo-rust in place of the Go counter.

// BenchmarkRustInstanceReceive is one message into a warm Rust instance without routing:
// the wasm round trip alone (alloc, write, receive, reply).
func BenchmarkRustInstanceReceive(b *testing.B) {
	rt, _ := newTestRuntime(b, nil)
	m := compileRust(b, rt, echoRust)
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, echoRust, "b")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	msg := []byte("count")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := inst.Receive(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRustInstantiate is a new Rust instance from a compiled module; it also reports
// the instance's linear memory.
func BenchmarkRustInstantiate(b *testing.B) {
	rt, _ := newTestRuntime(b, nil)
	m := compileRust(b, rt, echoRust)
	ctx := context.Background()
	var memory uint32
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inst, err := m.Instantiate(ctx, echoRust, "b")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		memory = inst.MemorySize()
		inst.Close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(memory)/1024, "KiB-memory")
}

// BenchmarkRustActivate is what activating a Rust entity costs in the runtime: a new
// instance and its first message (which reads the entity's ID and type from the host and
// creates the entity), with p50/p99.
func BenchmarkRustActivate(b *testing.B) {
	rt, _ := newTestRuntime(b, nil)
	m := compileRust(b, rt, echoRust)
	ctx := context.Background()
	msg := []byte("count")
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		inst, err := m.Instantiate(ctx, echoRust, "b")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inst.Receive(ctx, msg); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		b.StopTimer()
		inst.Close(ctx)
		b.StartTimer()
	}
	b.StopTimer()
	reportLatency(b, samples)
}

// BenchmarkActivationChurn is an entity's life in the runtime, again and again: an
// instance of the counter example (built by TinyGo and in Rust) made, its first "inc",
// and its close, as an entity passivated and activated again. Both the making and the
// close are timed; cpu-µs/op is the process's CPU time per life, including the warm
// slots' refill (linearmem_prefault.go).
func BenchmarkActivationChurn(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, rustCounter} {
		b.Run(mod.name, func(b *testing.B) {
			rt, _ := newTestRuntime(b, nil)
			ctx := context.Background()
			m, err := rt.Compile(ctx, mod.wasm(b))
			if err != nil {
				b.Fatal(err)
			}
			msg := []byte("inc")
			b.ReportAllocs()
			b.ResetTimer()
			done := reportCPU(b)
			for i := 0; i < b.N; i++ {
				inst, err := m.Instantiate(ctx, "counter", "c")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := inst.Receive(ctx, msg); err != nil {
					b.Fatal(err)
				}
				inst.Close(ctx)
			}
			b.StopTimer()
			done()
		})
	}
}

// BenchmarkMemberActivation is the activation cost of one member, of the counter example
// built by TinyGo and in Rust, through sharding (routing, a new instance, on_activate and
// the first "inc"), with every shard already homed: "alone" asks one new entity at a time
// (the activation latency), "16askers" asks from 16 goroutines (b.SetParallelism), each
// to an entity not active yet (the activation rate). It reports activations/s, the asks'
// p50/p99, the process's CPU time per activation (cpu-µs/op), which the load of a
// shared machine moves less than the latencies, and its minor page faults (minflt/op).
// Each runs with new instances from the module's pre-initialized image ("image") and
// with the module's initialisation run at every activation ("fresh").
func BenchmarkMemberActivation(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, rustCounter} {
		for _, parallel := range []bool{false, true} {
			for _, path := range []string{"fresh", "image"} {
				name := mod.name + "/alone/" + path
				if parallel {
					name = mod.name + "/16askers/" + path
				}
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					n := startBenchNodes(b, 1, nil)[0]
					if err := n.Membership().WaitUp(ctx); err != nil {
						b.Fatal(err)
					}
					wasm := mod.wasm(b)
					if _, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
						b.Fatal(err)
					}
					// "fresh" runs the module's initialisation at every activation, as
					// before pre-initialized images (preinit.go).
					m := n.modules.loaded(moduleDigest(wasm))
					if err := m.PrepareRestore(ctx); err != nil {
						b.Fatal(err)
					}
					m.pre.off.Store(path == "fresh")
					for i := 0; i < 200; i++ { // home every shard
						if _, err := n.Sharding().Ask(ctx, "counter", "warmup-"+strconv.Itoa(i), []byte("inc")); err != nil {
							b.Fatal(err)
						}
					}
					var next atomic.Int64
					var mu sync.Mutex
					samples := make([]time.Duration, 0, b.N)
					ask := func(local []time.Duration) ([]time.Duration, bool) {
						id := "a" + strconv.FormatInt(next.Add(1), 10)
						start := time.Now()
						if _, err := n.Sharding().Ask(ctx, "counter", id, []byte("inc")); err != nil {
							b.Error(err)
							return local, false
						}
						return append(local, time.Since(start)), true
					}
					b.ResetTimer()
					faults := minorFaults()
					done := reportCPU(b)
					if parallel {
						b.SetParallelism(8) // 16 askers on 2 cores
						b.RunParallel(func(pb *testing.PB) {
							local := make([]time.Duration, 0, 1024)
							for pb.Next() {
								var ok bool
								if local, ok = ask(local); !ok {
									break
								}
							}
							mu.Lock()
							samples = append(samples, local...)
							mu.Unlock()
						})
					} else {
						for i := 0; i < b.N; i++ {
							var ok bool
							if samples, ok = ask(samples); !ok {
								break
							}
						}
					}
					b.StopTimer()
					done()
					if f := minorFaults(); f >= 0 && faults >= 0 {
						b.ReportMetric(float64(f-faults)/float64(b.N), "minflt/op")
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "activations/s")
					reportLatency(b, samples)
				})
			}
		}
	}
}
