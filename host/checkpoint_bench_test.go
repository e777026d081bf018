package host

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkEveryMessageCheckpoint is what an every-message checkpoint adds to a message
// of a warm counter ("inc", which changes its state), built by TinyGo and by Go's
// wasip1 port, with the state in memory (sharding.MemoryStateStore) and in the
// node's replicated store (one member: one replica, on disk, fsynced before it
// acknowledges). Each op is one message to each of three entities, in turn: one without
// checkpoints, one that saves a whole snapshot after each message (as before deltas),
// and one that saves a delta against its base (checkpoint.go); and, as the store's
// floor, a Save of 64 bytes. It reports the p50 of each, what the whole and the delta
// checkpoints add to a message (µs-added-*), and the bytes saved per message. The "delta" sub-benchmarks run the delta entity alone, for
// CPU profiles (go test -bench 'EveryMessageCheckpoint/go/memory/delta' -cpuprofile).
func BenchmarkEveryMessageCheckpoint(b *testing.B) {
	for _, g := range []counterBuild{tinygoCounter, goCounter} {
		b.Run(g.name, func(b *testing.B) {
			wasm := g.wasm(b)
			n := startBenchNodes(b, 1, nil)[0]
			ctx := context.Background()
			if err := n.Membership().WaitUp(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
				b.Fatal(err)
			}
			for _, st := range []struct {
				name  string
				store sharding.StateStore
			}{
				{"memory", newDeltaStates(sharding.NewMemoryStateStore())},
				{"replicated", newDeltaStates(n.states)},
			} {
				b.Run(st.name, func(b *testing.B) {
					b.Run("interleaved", func(b *testing.B) { benchCheckpoints(b, n, st.store, []string{"none", "whole", "delta", "floor"}) })
					b.Run("delta", func(b *testing.B) { benchCheckpoints(b, n, st.store, []string{"delta"}) })
				})
			}
		})
	}
}

var benchCheckpointSeq int

func benchCheckpoints(b *testing.B, n *Node, store sharding.StateStore, modes []string) {
	ctx := context.Background()
	benchCheckpointSeq++
	type subject struct {
		mode    string
		e       *wasmEntity
		key     sharding.EntityKey
		samples []time.Duration
		bytes   int
	}
	var subjects []*subject
	for _, mode := range modes {
		if mode == "floor" {
			subjects = append(subjects, &subject{mode: mode, key: sharding.EntityKey{Type: "counter", Shard: 0, ID: "floor"}})
			continue
		}
		id := mode + strconv.Itoa(benchCheckpointSeq)
		e, err := n.newEntity(ctx, "counter", id, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Stop(ctx) })
		e.wholeSnapshots = mode == "whole"
		subjects = append(subjects, &subject{mode: mode, e: e, key: sharding.EntityKey{Type: "counter", Shard: 0, ID: id}})
	}
	floor := make([]byte, 64)
	step := func(s *subject) {
		if s.mode == "floor" {
			if err := store.Save(ctx, s.key, 1, floor); err != nil {
				b.Fatal(err)
			}
			return
		}
		if _, err := s.e.Receive(ctx, []byte("inc")); err != nil {
			b.Fatal(err)
		}
		if s.mode == "none" {
			return
		}
		state, err := s.e.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Save(ctx, s.key, 1, state); err != nil {
			b.Fatal(err)
		}
		s.e.StateSaved()
		s.bytes += len(state)
	}
	for _, s := range subjects {
		step(s) // the first checkpoint is a base
		s.bytes = 0
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range subjects {
			start := time.Now()
			step(s)
			s.samples = append(s.samples, time.Since(start))
		}
	}
	b.StopTimer()
	p50 := map[string]float64{}
	for _, s := range subjects {
		p50[s.mode] = float64(median(s.samples).Nanoseconds()) / 1e3
		if s.mode != "floor" {
			b.ReportMetric(p50[s.mode], "p50-µs-"+s.mode)
		}
		if s.mode != "none" && s.mode != "floor" {
			b.ReportMetric(float64(s.bytes)/float64(b.N), "bytes/msg-"+s.mode)
		}
	}
	if _, ok := p50["none"]; ok {
		b.ReportMetric(p50["whole"]-p50["none"], "µs-added-whole")
		b.ReportMetric(p50["delta"]-p50["none"], "µs-added-delta")
		b.ReportMetric(p50["floor"], "p50-µs-store-floor")
	}
}
