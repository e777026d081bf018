package sharding

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// hostedEpoch returns the member hosting a shard of typ and the epoch it hosts it at.
func hostedEpoch(tc *testCluster, typ string, shard int) (*testNode, uint64, bool) {
	for _, n := range tc.live() {
		for _, sh := range n.sharding.LocalState().Shards {
			if sh.Type == typ && sh.ID == shard {
				return n, sh.Epoch, true
			}
		}
	}
	return nil, 0, false
}

// Faults seed 10011 lost acknowledged increments: a member crashed and was restarted at
// its address within DownRemovalMargin, and the coordinator, which names regions by
// address, handed the new process its previous incarnation's shards at their old
// epochs. The state store orders one epoch's writes by the writer's clock, which had
// been skewed forward before the crash and was back after it: the new process's
// writes ranked below its previous incarnation's, and the next activation read the
// older state. A new incarnation at an address is a new process that hosts nothing:
// the shards it is given must have new epochs.
func TestARestartedMemberGetsItsShardsAtNewEpochs(t *testing.T) {
	tc := newTestCluster(t, 3, withFastFailureDetection(), withConfig(func(c *Config) {
		// Long: the restart comes well within it, as in the seed.
		c.DownRemovalMargin = time.Minute
	}))
	first, victim := tc.nodes[0], tc.nodes[2]
	const typ, shards = "counter", 10
	// Until the members' first heartbeat round trips, they hold no hosting lease.
	testutil.EventuallyNil(t, 30*time.Second, "a first entity served", func() error {
		_, err := ask(t, first, typ, "e0", "inc")
		return err
	})
	id, shard := "", -1
	for i := 0; i < 200 && id == ""; i++ {
		cand := fmt.Sprintf("e%d", i)
		mustAsk(t, first, typ, cand, "inc")
		if n, _, ok := hostedEpoch(tc, typ, abiShard(cand, shards)); ok && n == victim {
			id, shard = cand, abiShard(cand, shards)
		}
	}
	if id == "" {
		t.Fatal("no entity of 200 went to the third member")
	}
	_, before, _ := hostedEpoch(tc, typ, shard)
	oldUID := victim.membership.Self().UID

	tc.stop(victim, false)
	testutil.Eventually(t, 30*time.Second, "the crashed member downed", func() bool {
		for _, m := range first.membership.Members() {
			if m.UID == oldUID {
				return m.Status == cluster.StatusDown || m.Status == cluster.StatusRemoved
			}
		}
		return true // removed already
	})
	restarted := tc.restart(victim)
	if restarted.membership.Self().UID == oldUID {
		t.Fatal("the restarted member has its previous UID")
	}
	tc.waitMembers()

	testutil.EventuallyNil(t, 30*time.Second, "the entity served again", func() error {
		_, err := ask(t, first, typ, id, "get")
		return err
	})
	n, after, ok := hostedEpoch(tc, typ, shard)
	if !ok {
		t.Fatalf("shard %d is hosted nowhere after the entity answered", shard)
	}
	if after <= before {
		t.Fatalf("after the restart, %s hosts shard %d at epoch %d, its previous incarnation's was %d: want a new epoch",
			n.name, shard, after, before)
	}
}

// Faults seed 73128 found two lives of a counter: a member downed by a bridge partition
// was restarted at its address, and the coordinator, which had not yet seen the new
// process join and still listed the previous one up there, sent the shard's HostShard
// to the address: the new process hosted it, the coordinator recorded it as the
// previous process's allocation, and when that process was downed it forgot the
// allocation and gave the shard to another member while the new process ran it. A
// HostShard names the process it is for (the UID of the member the coordinator saw up),
// and another process at the address refuses it.
func TestAHostShardForAnEarlierProcessIsRefused(t *testing.T) {
	tc := newTestCluster(t, 2)
	coord, target := tc.nodes[0], tc.nodes[1]
	const typ = "counter"
	testutil.EventuallyNil(t, 30*time.Second, "a first entity served", func() error {
		_, err := ask(t, coord, typ, "e0", "inc")
		return err
	})
	host := func(uid cluster.UID) error {
		done := make(chan error, 1)
		ref := shardRef{Type: typ, Shard: 7, Epoch: 99, UID: uint64(uid)}
		coord.sharding.hostShard(context.Background(), target.membership.Self().Address, ref, func(err error) { done <- err })
		return <-done
	}
	self := target.membership.Self().UID
	if err := host(self + 1); err == nil || !strings.Contains(err.Error(), "the request is for process") {
		t.Fatalf("host-shard for another process at %s: %v, want it refused", target.name, err)
	}
	for _, sh := range target.sharding.LocalState().Shards {
		if sh.Type == typ && sh.ID == 7 {
			t.Fatalf("%s hosts shard 7 (epoch %d) after refusing it", target.name, sh.Epoch)
		}
	}
	if err := host(self); err != nil {
		t.Fatalf("host-shard for %s's own process: %v", target.name, err)
	}
	found := false
	for _, sh := range target.sharding.LocalState().Shards {
		found = found || (sh.Type == typ && sh.ID == 7 && sh.Epoch == 99)
	}
	if !found {
		t.Fatalf("%s does not host shard 7 at epoch 99 after accepting it", target.name)
	}
}
