package sharding

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// TestSeed300850AnUnansweredHostShardKeepsTheShardThere: fault seed 300850. The
// coordinator's member was cut off just after its HostShard reached a region, which
// hosted the shard; the answer was lost, the request timed out, and the coordinator,
// which then forgot the allocation, gave the shard to another member (the region, cut
// off from it, was not a candidate), while its drop to the first region was lost too:
// an entity of the shard lived on both. A HostShard without an answer now leaves the
// shard allocated to its region, as Akka's coordinator keeps an allocation it recorded.
func TestSeed300850AnUnansweredHostShardKeepsTheShardThere(t *testing.T) {
	tc := newTestCluster(t, 3)
	n0, n1, n2 := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	// node-1 has not looked up "other" yet: the first HostShard of it waits there.
	n1.types.block, n1.types.entered = make(chan struct{}), make(chan struct{})
	ids := make(chan string, 100)
	go func() {
		// Through node-0, entities of "other" until an allocation goes to node-1 (the
		// second shard, least-shard allocation): that ask waits.
		for i := 0; ; i++ {
			id := fmt.Sprint("e", i)
			ids <- id
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err := n0.sharding.Ask(ctx, "other", id, []byte("inc"))
			cancel()
			if err != nil || i > 50 {
				return
			}
		}
	}()
	select {
	case <-n1.types.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no HostShard of \"other\" reached node-1")
	}
	var id string
	for len(ids) > 0 {
		id = <-ids
	}
	// node-0 and node-1 are cut off from each other (node-2 reaches both); node-1
	// hosts the shard and its answer is lost.
	tc.link(n0, n1, false)
	defer tc.link(n0, n1, true)
	close(n1.types.block)
	testutil.Eventually(t, 20*time.Second, "node-0 sees node-1 unreachable", func() bool {
		for _, m := range n0.membership.Members() {
			if m.Address == n1.addr() {
				return !m.Reachable
			}
		}
		return false
	})
	// The entity through node-2, then through node-1: one life.
	for _, n := range []*testNode{n2, n1} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.sharding.Ask(ctx, "other", id, []byte("inc"))
		cancel()
		t.Logf("other/%s through %s: %v", id, n.name, err)
	}
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.double) > 0 {
		t.Fatalf("two lives: %v (activations %v)", tc.acts.double, tc.acts.log)
	}
	if tc.acts.lives[n1.addr()+" other/"+id] != 1 {
		t.Fatalf("other/%s is not alive on node-1, where the shard was hosted: activations %v", id, tc.acts.log)
	}
}
