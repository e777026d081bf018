package host

import (
	"context"
	"testing"
	"time"
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
