package ddata

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkORSetWireBytesAfterOneAdd measures the bytes replicator messages carry, from
// the member that adds, for one element added to an ORSet of 10,000 elements already on
// every member: with delta propagation (the delta travels) and without (gossip sends the
// whole set once the digests differ).
func BenchmarkORSetWireBytesAfterOneAdd(b *testing.B) {
	for _, mode := range []struct {
		name   string
		deltas bool
	}{{"deltas", true}, {"no-deltas", false}} {
		b.Run(mode.name, func(b *testing.B) {
			// The default intervals: deltas every 200 ms, gossip every 2 s.
			rc := newReplCluster(b, 3, func(c *ReplicatorConfig) {
				d := DefaultReplicatorConfig()
				c.DeltaEnabled = mode.deltas
				c.GossipInterval, c.DeltaPropagationInterval = d.GossipInterval, d.DeltaPropagationInterval
			})
			a := rc.nodes[0]
			ctx := context.Background()
			big := ORSet{}
			for i := 0; i < 10_000; i++ {
				big, _ = big.Add(a.r.SelfNodeID(), "element-"+strconv.Itoa(i))
			}
			a.r.Update(ctx, "s", ORSet{}, WriteAll(), func(ReplicatedData) (ReplicatedData, ReplicatedData, error) {
				return big, big, nil
			})
			var bytes uint64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(300 * time.Millisecond) // let the previous round settle
				before := a.r.BytesSent()
				elem := "added-" + strconv.Itoa(i)
				a.r.Update(ctx, "s", ORSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
					s, delta := d.(ORSet).Add(a.r.SelfNodeID(), elem)
					return s, delta, nil
				})
				for _, n := range rc.nodes[1:] {
					for {
						d, err := n.r.Get(ctx, "s", ReadLocal())
						if err == nil && d.(ORSet).Contains(elem) {
							break
						}
						time.Sleep(time.Millisecond)
					}
				}
				bytes += a.r.BytesSent() - before
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/add")
		})
	}
}
