package ddata

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// BenchmarkORSetWireBytesAfterOneAdd measures the bytes replicator messages carry, from
// the member that adds, for one element added to an ORSet of 10,000 elements already on
// every member: with delta propagation (the delta travels) and without (gossip sends the
// whole set once the digests differ). Each add is measured from the update until every
// other replica has the element (its subscription says so), once the adding member has
// no delta left to propagate (the set's own, written before, or the previous add's).
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
			var subs []*Subscription
			for _, n := range rc.nodes[1:] {
				sub := n.r.Subscribe("s", 16)
				defer sub.Close()
				subs = append(subs, sub)
			}
			var bytes uint64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				waitNoPendingDeltas(b, a.r)
				before := a.r.BytesSent()
				elem := "added-" + strconv.Itoa(i)
				a.r.Update(ctx, "s", ORSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
					s, delta := d.(ORSet).Add(a.r.SelfNodeID(), elem)
					return s, delta, nil
				})
				for _, sub := range subs {
					waitForElement(b, sub, elem)
				}
				bytes += a.r.BytesSent() - before
			}
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/add")
		})
	}
}

// waitNoPendingDeltas waits until r has propagated its deltas.
func waitNoPendingDeltas(b *testing.B, r *Replicator) {
	testutil.Eventually(b, 30*time.Second, "the deltas propagated", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.deltas) == 0
	})
}

// waitForElement waits until sub is told of an ORSet holding elem.
func waitForElement(b *testing.B, sub *Subscription, elem string) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case c := <-sub.C:
			if s, ok := c.Data.(ORSet); ok && s.Contains(elem) {
				return
			}
		case <-timeout:
			b.Fatalf("%s not replicated within 30 s", elem)
		}
	}
}
