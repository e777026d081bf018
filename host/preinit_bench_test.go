package host

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPreInitActivation is an entity's activation in the runtime, from the
// module's pre-initialized image into a resident slot of a closed instance ("slots",
// residentslots.go) or into a slot the kernel backs anew ("image", no instance pool),
// and by running its initialisation ("fresh", no pool), in one run so that the load
// and the price of a page weigh on all alike:
// a new instance of the counter example (TinyGo, Go's port, Rust) and its first "inc",
// then its close, as an entity passivated and activated again. It reports the
// activation's p50/p99 (instance and first message), the process's CPU time and minor
// page faults (/proc/self/stat) per activation, close included.
func BenchmarkPreInitActivation(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, rustCounter, goCounter} {
		for _, path := range []string{"fresh", "image", "slots"} {
			b.Run(mod.name+"/"+path, func(b *testing.B) {
				rt, _ := newTestRuntime(b, func(c *RuntimeConfig) {
					if path != "slots" {
						c.InstancePoolBytes = -1
					}
				})
				ctx := context.Background()
				m, err := rt.Compile(ctx, mod.wasm(b))
				if err != nil {
					b.Fatal(err)
				}
				if err := m.PrepareRestore(ctx); err != nil {
					b.Fatal(err)
				}
				if ok, why := m.PreInitialized(); !ok && path != "fresh" {
					b.Skip("not pre-initialized: " + why)
				}
				m.pre.off.Store(path == "fresh")
				msg := []byte("inc")
				activate := func() time.Duration {
					start := time.Now()
					inst, err := m.Instantiate(ctx, "counter", "c")
					if err != nil {
						b.Fatal(err)
					}
					if _, err := inst.Receive(ctx, msg); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					inst.Close(ctx)
					return d
				}
				for i := 0; i < 20; i++ { // the warm slots learn and fill
					activate()
				}
				samples := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				faults, rewritten := minorFaults(), rt.arena.resident.rewritten.Load()
				done := reportCPU(b)
				for i := 0; i < b.N; i++ {
					samples = append(samples, activate())
				}
				b.StopTimer()
				done()
				if f := minorFaults(); f >= 0 && faults >= 0 {
					b.ReportMetric(float64(f-faults)/float64(b.N), "minflt/op")
				}
				if path == "slots" {
					// The pages an activation wrote: what it would keep of its own were
					// the image mapped copy-on-write.
					b.ReportMetric(float64(rt.arena.resident.rewritten.Load()-rewritten)/float64(b.N), "written-pages/op")
					// The backed memory a closed instance keeps: an active entity's.
					if n, charged := rt.arena.residentCounts(); n > 0 {
						b.ReportMetric(float64(charged)/float64(n)/1024, "slot-KiB")
					}
				}
				reportLatency(b, samples)
			})
		}
	}
}

// minorFaults returns the process's minor page faults so far (/proc/self/stat's tenth
// field), -1 where there is none.
func minorFaults() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		b = b[i+2:]
	}
	f := bytes.Fields(b)
	if len(f) < 8 {
		return -1
	}
	n, err := strconv.ParseInt(string(f[7]), 10, 64) // field 10: minflt
	if err != nil {
		return -1
	}
	return n
}
