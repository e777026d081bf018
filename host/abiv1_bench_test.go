package host

import (
	"context"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// Benchmarks of ABI v1 from each SDK, with the conformance modules (abitest, abitest-rust):
// what one host function call adds to a message, and what an active instance costs.

// v1Modules are the conformance modules by SDK.
var v1Modules = []struct {
	sdk  string
	wasm func(testing.TB) []byte
}{
	{"tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "abitest") }},
	{"go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "abitest") }},
	{"rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "abitest-rust") }},
}

// BenchmarkHostCall measures a message that makes 1,000 host calls against one that
// makes none, and reports the difference per call (ns/host-call): "now", the cheapest
// function, and "ddata_update" on a fake replicator (strings in, a JSON value out
// through result), which is what SDK helpers pay besides the replicator itself.
func BenchmarkHostCall(b *testing.B) {
	for _, mod := range v1Modules {
		b.Run(mod.sdk, func(b *testing.B) {
			rt, _ := newTestRuntime(b, nil)
			m, err := rt.Compile(context.Background(), mod.wasm(b))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			inst, err := m.Instantiate(ctx, "abitest", "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Close(ctx)
			inst.svc = newFakeServices()
			for _, c := range []struct{ name, none, many string }{
				{"now", "budget 0", "budget 1000"},
			} {
				b.Run(c.name, func(b *testing.B) {
					var none, many time.Duration
					for i := 0; i < b.N; i++ {
						start := time.Now()
						if _, err := inst.Receive(ctx, []byte(c.none)); err != nil {
							b.Fatal(err)
						}
						mid := time.Now()
						if _, err := inst.Receive(ctx, []byte(c.many)); err != nil {
							b.Fatal(err)
						}
						none, many = none+mid.Sub(start), many+time.Since(mid)
					}
					b.ReportMetric(float64(many-none)/float64(b.N)/1000, "ns/host-call")
				})
			}
			b.Run("ddata_update", func(b *testing.B) {
				msg := []byte("ddup bench-counter pncounter local incr 1")
				for i := 0; i < b.N; i++ {
					if _, err := inst.Receive(ctx, msg); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("message without host call", func(b *testing.B) {
				msg := []byte("echo x")
				for i := 0; i < b.N; i++ {
					if _, err := inst.Receive(ctx, msg); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkV1Activation is a new instance of the conformance module with its
// on_activate and first message, as a region activates an entity (p50/p99), and the
// linear memory of an active instance (KiB-memory).
func BenchmarkV1Activation(b *testing.B) {
	for _, mod := range v1Modules {
		b.Run(mod.sdk, func(b *testing.B) {
			rt, _ := newTestRuntime(b, nil)
			m, err := rt.Compile(context.Background(), mod.wasm(b))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			msg := []byte("count")
			samples := make([]time.Duration, 0, b.N)
			var memory uint32
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				inst, err := m.Instantiate(ctx, "abitest", "b")
				if err != nil {
					b.Fatal(err)
				}
				if err := inst.Activate(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := inst.Receive(ctx, msg); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
				b.StopTimer()
				memory = inst.MemorySize()
				inst.Close(ctx)
				b.StartTimer()
			}
			b.StopTimer()
			reportLatency(b, samples)
			b.ReportMetric(float64(memory)/1024, "KiB-memory")
		})
	}
}
