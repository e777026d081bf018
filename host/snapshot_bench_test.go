package host

import (
	"context"
	"testing"
)

// Benchmarks of snapshots for the Go counter and the Rust echo: taking one (Snapshot),
// encoding and decoding it (MarshalBinary, unmarshalSnapshot), and starting an instance
// from it (Restore, on both paths), against a fresh Instantiate. Each reports the
// snapshot's sizes: memory, its non-zero pages, and the encoding.

type snapshotBench struct {
	name string
	m    func(b *testing.B, rt *wasmRuntime) *wasmModule
	msg  string
}

var snapshotBenches = []snapshotBench{
	{"go-counter", func(b *testing.B, rt *wasmRuntime) *wasmModule { return compile(b, rt, "counter") }, "inc"},
	{"rust-echo", func(b *testing.B, rt *wasmRuntime) *wasmModule { return compileRust(b, rt, echoRust) }, "echo hello"},
}

// warmSnapshot returns the module and a snapshot of an instance that handled 100
// messages.
func warmSnapshot(b *testing.B, c snapshotBench) (*wasmModule, *wasmInstance, *instanceSnapshot) {
	b.Helper()
	rt, _ := newTestRuntime(b, nil)
	m := c.m(b, rt)
	inst, err := m.Instantiate(context.Background(), c.name, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { inst.Close(context.Background()) })
	for i := 0; i < 100; i++ {
		ask(b, inst, c.msg)
	}
	s := snapshot(b, inst)
	if err := m.PrepareRestore(context.Background()); err != nil {
		b.Fatal(err)
	}
	return m, inst, s
}

func reportSizes(b *testing.B, s *instanceSnapshot) {
	enc, err := s.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(s.MemoryPages)*wasmPageSize/1024, "memory-KiB")
	b.ReportMetric(float64(s.SparseSize())/1024, "sparse-KiB")
	b.ReportMetric(float64(len(enc))/1024, "encoded-KiB")
}

func BenchmarkSnapshot(b *testing.B) {
	for _, c := range snapshotBenches {
		b.Run(c.name, func(b *testing.B) {
			_, inst, s := warmSnapshot(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := inst.Snapshot(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportSizes(b, s)
		})
	}
}

func BenchmarkSnapshotMarshal(b *testing.B) {
	for _, c := range snapshotBenches {
		b.Run(c.name, func(b *testing.B) {
			_, _, s := warmSnapshot(b, c)
			b.ReportAllocs()
			b.SetBytes(int64(s.SparseSize()))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.MarshalBinary(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportSizes(b, s)
		})
	}
}

func BenchmarkSnapshotUnmarshal(b *testing.B) {
	for _, c := range snapshotBenches {
		b.Run(c.name, func(b *testing.B) {
			m, _, s := warmSnapshot(b, c)
			enc, err := s.MarshalBinary()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(s.SparseSize()))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.rt.UnmarshalSnapshot(enc); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportSizes(b, s)
		})
	}
}

// BenchmarkRestore starts an instance from a snapshot: "image" is what Restore does
// (the restore image, no initialisation), "initialise" instantiates the module and runs
// _initialize first, and "instantiate" is a fresh Instantiate for comparison (which,
// for a real entity, would then still have to catch up on its state). Each op includes
// closing the instance.
func BenchmarkRestore(b *testing.B) {
	for _, c := range snapshotBenches {
		for _, path := range []string{"image", "initialise", "instantiate"} {
			b.Run(c.name+"/"+path, func(b *testing.B) {
				m, _, s := warmSnapshot(b, c)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var inst *wasmInstance
					var err error
					if path == "instantiate" {
						inst, err = m.Instantiate(ctx, c.name, "bench")
					} else {
						inst, err = m.restore(ctx, c.name, "bench", s, path == "initialise")
					}
					if err != nil {
						b.Fatal(err)
					}
					inst.Close(ctx)
				}
				b.StopTimer()
				reportSizes(b, s)
			})
		}
	}
}
