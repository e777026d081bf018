package host

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/ddata"
)

func ddataNodes(b *testing.B, deltas bool) []*Node {
	b.Helper()
	nodes := startBenchNodes(b, 3, func(cfg *Config) { cfg.DData.DeltaEnabled = deltas })
	waitMembers(b, nodes)
	return nodes
}

func incrOp(b *testing.B) ddata.Op {
	op, err := ddata.ParseOp(ddata.TypePNCounter, "incr 1")
	if err != nil {
		b.Fatal(err)
	}
	return op
}

// BenchmarkDDataUpdate is a PNCounter increment on one of three members over TCP, with
// each write consistency (updates per second = 1e9 / ns/op).
func BenchmarkDDataUpdate(b *testing.B) {
	for _, wc := range []struct {
		name string
		c    ddata.WriteConsistency
	}{{"WriteLocal", ddata.WriteLocal()}, {"WriteMajority", ddata.WriteMajority(0)}, {"WriteAll", ddata.WriteAll()}} {
		b.Run(wc.name, func(b *testing.B) {
			nodes := ddataNodes(b, true)
			r := nodes[0].Replicator()
			modify := incrOp(b).Modify(r.SelfNodeID(), nil)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := r.Update(ctx, "bench", ddata.PNCounter{}, wc.c, modify); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}

// BenchmarkDDataPropagation is the time from a WriteLocal update on one member until
// both others read it locally: by deltas (every 200 ms), and by gossip alone (a status
// to one random member every 2 s).
func BenchmarkDDataPropagation(b *testing.B) {
	for _, mode := range []struct {
		name   string
		deltas bool
	}{{"deltas", true}, {"gossip-only", false}} {
		b.Run(mode.name, func(b *testing.B) {
			nodes := ddataNodes(b, mode.deltas)
			r := nodes[0].Replicator()
			modify := incrOp(b).Modify(r.SelfNodeID(), nil)
			ctx := context.Background()
			var total time.Duration
			for i := 0; i < b.N; i++ {
				key := "p" + strconv.Itoa(i)
				start := time.Now()
				r.Update(ctx, key, ddata.PNCounter{}, ddata.WriteLocal(), modify)
				for _, n := range nodes[1:] {
					for {
						if _, err := n.Replicator().Get(ctx, key, ddata.ReadLocal()); err == nil {
							break
						}
						time.Sleep(time.Millisecond) // the measured wait's poll: testutil's backoff would blur the figure
					}
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-all")
		})
	}
}
