package host

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkCounterFigures gives bench/README.md's table of the counter example built three
// ways: by TinyGo (the Makefile's TINYGO_FLAGS), by Go's wasip1 port, and in Rust
// (counter-rust, the same messages). Each sub-benchmark does a fixed amount of work per
// operation, so run it once: make figures (go test -run '^$' -bench CounterFigures
// -benchtime 1x ./host/). Without the race detector: it measures memory.
//
//   - activation: 1,000 activations of a compiled module (instantiate, _initialize,
//     on_activate, the first "inc"); p50-µs and p99-µs, and module-bytes.
//   - rss: one member with 1,000 active counters (one "inc" each, through sharding):
//     the process's resident memory added per active entity, KiB-rss/entity, after a
//     collection; and KiB-memory, one instance's linear memory.
//   - snapshot: a transparent snapshot of a counter after 100 messages, taken and
//     encoded as a checkpoint does, 200 times: µs-per-snapshot and snapshot-bytes.
//   - checkpoint: three members on loopback; 300 "inc" asks to a warm counter through
//     the member that hosts it, of a type with every-message checkpoints (the state saved
//     to 3 replicas, fsynced by a majority, before the reply) and of one without:
//     p50-µs of each and µs-added (the difference of the p50s).
func BenchmarkCounterFigures(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, goCounter, rustCounter} {
		b.Run(mod.name, func(b *testing.B) {
			b.Run("activation", func(b *testing.B) { benchCounterActivation(b, mod.wasm(b)) })
			b.Run("rss", func(b *testing.B) { benchCounterRSS(b, mod.wasm(b)) })
			b.Run("snapshot", func(b *testing.B) { benchCounterSnapshot(b, mod.wasm(b)) })
			b.Run("checkpoint", func(b *testing.B) { benchCounterCheckpoint(b, mod.wasm(b)) })
		})
	}
}

func benchCounterActivation(b *testing.B, wasm []byte) {
	rt, _ := newTestRuntime(b, nil)
	ctx := context.Background()
	m, err := rt.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	var samples []time.Duration
	for i := 0; i < b.N; i++ {
		insts := make([]*wasmInstance, 0, n)
		for k := 0; k < n; k++ {
			start := time.Now()
			inst, err := m.Instantiate(ctx, "counter", "a"+strconv.Itoa(k))
			if err != nil {
				b.Fatal(err)
			}
			if err := inst.Activate(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
			insts = append(insts, inst)
		}
		b.StopTimer()
		for _, inst := range insts {
			inst.Close(ctx)
		}
		b.StartTimer()
	}
	reportLatency(b, samples)
	b.ReportMetric(float64(len(wasm)), "module-bytes")
}

func benchCounterRSS(b *testing.B, wasm []byte) {
	ctx := context.Background()
	nodes := startBenchNodes(b, 1, nil)
	if err := nodes[0].Membership().WaitUp(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
		b.Fatal(err)
	}
	ask := func(id string) {
		if _, err := nodes[0].Sharding().Ask(ctx, "counter", id, []byte("inc")); err != nil {
			b.Fatal(err)
		}
	}
	ask("warm") // the first activation compiles and allocates what every one shares
	const n = 1000
	var perEntity float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		before := residentBytes(b)
		b.StartTimer()
		for k := 0; k < n; k++ {
			ask("r" + strconv.Itoa(i) + "-" + strconv.Itoa(k))
		}
		b.StopTimer()
		perEntity = float64(residentBytes(b)-before) / n
		b.StartTimer()
	}
	b.ReportMetric(perEntity/1024, "KiB-rss/entity")
	rt, _ := newTestRuntime(b, nil)
	m, err := rt.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, "counter", "m")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(inst.MemorySize())/1024, "KiB-memory")
}

// residentBytes is the process's resident memory after a collection that returns what
// it can to the OS.
func residentBytes(b *testing.B) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("no /proc/self/statm: %v", err)
	}
	f := bytes.Fields(statm)
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

func benchCounterSnapshot(b *testing.B, wasm []byte) {
	rt, _ := newTestRuntime(b, nil)
	ctx := context.Background()
	m, err := rt.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, "counter", "s")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	for k := 0; k < 100; k++ {
		if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
			b.Fatal(err)
		}
	}
	const n = 200
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := 0; k < n; k++ {
			s, err := inst.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			enc, err := s.MarshalBinary()
			if err != nil {
				b.Fatal(err)
			}
			size = len(enc)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs-per-snapshot")
	b.ReportMetric(float64(size), "snapshot-bytes")
}

func benchCounterCheckpoint(b *testing.B, wasm []byte) {
	ctx := context.Background()
	nodes := startBenchNodes(b, 3, nil)
	for _, n := range nodes {
		if err := n.Membership().WaitUp(ctx); err != nil {
			b.Fatal(err)
		}
	}
	waitMembers(b, nodes)
	p50 := map[string]float64{}
	for _, policy := range []string{sharding.CheckpointPassivation, sharding.CheckpointEveryMessage} {
		typ := "counter-" + policy
		if _, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: typ, Checkpoint: policy}); err != nil {
			b.Fatal(err)
		}
		// Ask through the member that hosts the entity: no forward in the figure.
		r, err := nodes[0].Sharding().Ask(ctx, typ, "c", []byte("inc"))
		if err != nil {
			b.Fatal(err)
		}
		via := nodes[0]
		for _, n := range nodes {
			if n.Self().Address == r.Node {
				via = n
			}
		}
		const n = 300
		var samples []time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for k := 0; k < n; k++ {
				start := time.Now()
				if _, err := via.Sharding().Ask(ctx, typ, "c", []byte("inc")); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
		}
		b.StopTimer()
		p50[policy] = float64(median(samples).Nanoseconds()) / 1e3
	}
	b.ReportMetric(p50[sharding.CheckpointPassivation], "p50-µs-no-checkpoint")
	b.ReportMetric(p50[sharding.CheckpointEveryMessage], "p50-µs-every-message")
	b.ReportMetric(p50[sharding.CheckpointEveryMessage]-p50[sharding.CheckpointPassivation], "µs-added")
}

func median(samples []time.Duration) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s[len(s)/2]
}
