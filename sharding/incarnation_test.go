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

// entityHostedBy increments entities e0, e1 … of typ (with shards shards) through via
// until one lands on a shard that target hosts, and returns it and its shard (at most
// 200 tries).
func entityHostedBy(t *testing.T, tc *testCluster, via, target *testNode, typ string, shards int) (string, int) {
	t.Helper()
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("e%d", i)
		mustAsk(t, via, typ, id, "inc")
		if n, _, ok := hostedEpoch(tc, typ, abiShard(id, shards)); ok && n == target {
			return id, abiShard(id, shards)
		}
	}
	t.Fatalf("no entity of 200 went to %s", target.name)
	return "", -1
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
	id, shard := entityHostedBy(t, tc, first, victim, typ, shards)
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

// Faults seed 2172 (-max-side=2) found two lives of a register: the coordinator's
// member was killed and restarted at its address; the new coordinator forgot the
// previous incarnation's allocations (forgetReplacedLocked) and gave the new process
// one of them again at a new epoch. The membership then removed the previous
// incarnation, and the MemberRemoved event, which this member's sharding handled some
// 40 ms after the allocation on a loaded machine, made the coordinator forget every
// allocation at the address: the new process's too, while it hosted the shard. The
// shard was allocated again elsewhere and the new process, not told, activated the
// entity beside its new home. A removal names a process (address and UID): the
// allocations of another process at the address stay. The event is delivered here by
// hand, after the new process has its shard: no timing.
func TestSeed2172LateRemovalOfAPreviousIncarnationKeepsTheNewOnesShards(t *testing.T) {
	tc := newTestCluster(t, 3, withFastFailureDetection())
	first, victim := tc.nodes[0], tc.nodes[2]
	const typ, shards = "counter", 10
	testutil.EventuallyNil(t, 30*time.Second, "a first entity served", func() error {
		_, err := ask(t, first, typ, "e0", "inc")
		return err
	})
	old := victim.membership.Self()
	tc.stop(victim, false)
	testutil.Eventually(t, 30*time.Second, "the crashed member removed", func() bool {
		for _, m := range first.membership.Members() {
			if m.UID == old.UID {
				return false
			}
		}
		return true
	})
	restarted := tc.restart(victim)
	tc.waitMembers()

	id, shard := entityHostedBy(t, tc, first, restarted, typ, shards)
	var coord *testNode
	for _, n := range tc.live() {
		if n.sharding.coord.allocations()[typ][shard] == restarted.addr() {
			coord = n
		}
	}
	if coord == nil {
		t.Fatal("no coordinator records the restarted member's shard")
	}
	// Past DownRemovalMargin since the address was last seen downed, as in the seed
	// (the new process came up at once after the removal).
	testutil.Eventually(t, 30*time.Second, "the down margin of the address over", func() bool {
		return !coord.sharding.withinDownMargin(restarted.addr())
	})

	// The previous incarnation's removal, handled late.
	old.Status, old.Reachable = cluster.StatusRemoved, false
	coord.sharding.onMemberEvent(cluster.MemberEvent{Kind: cluster.MemberRemoved, Member: old})
	if got := coord.sharding.coord.allocations()[typ][shard]; got != restarted.addr() {
		t.Fatalf("after the late removal of the previous incarnation (uid %s), shard %d of the new process (uid %s) is allocated to %q: want %s",
			old.UID, shard, restarted.membership.Self().UID, got, restarted.addr())
	}
	if r, err := ask(t, first, typ, id, "get"); err != nil || r.Node != restarted.addr() {
		t.Fatalf("%s/%s after the late removal: %v from %s, want an answer from %s", typ, id, err, r.Node, restarted.addr())
	}
}

// TestProcessAtChoosesTheOneProcessThatCanHost: the process a HostShard names
// (processAt) is the one up at the address, or, beside a previous incarnation not yet
// downed, the one reachable; with no way to choose, none.
func TestProcessAtChoosesTheOneProcessThatCanHost(t *testing.T) {
	const addr = "127.0.0.1:1"
	m := func(uid cluster.UID, st cluster.MemberStatus, reachable bool) cluster.Member {
		return cluster.Member{Address: addr, UID: uid, Status: st, Reachable: reachable}
	}
	other := cluster.Member{Address: "127.0.0.1:2", UID: 9, Status: cluster.StatusUp, Reachable: true}
	for _, c := range []struct {
		name    string
		members []cluster.Member
		want    cluster.UID // 0: an error
	}{
		{"one up", []cluster.Member{other, m(1, cluster.StatusUp, false)}, 1},
		{"one leaving beside a downed one", []cluster.Member{m(1, cluster.StatusDown, false), m(2, cluster.StatusLeaving, true)}, 2},
		{"the restarted one reachable", []cluster.Member{m(1, cluster.StatusUp, false), m(2, cluster.StatusUp, true)}, 2},
		{"both reachable", []cluster.Member{m(1, cluster.StatusUp, true), m(2, cluster.StatusUp, true)}, 0},
		{"neither reachable", []cluster.Member{m(1, cluster.StatusUp, false), m(2, cluster.StatusUp, false)}, 0},
		{"only joining", []cluster.Member{other, m(2, cluster.StatusJoining, true)}, 0},
	} {
		got, err := processAt(c.members, addr)
		switch {
		case c.want == 0 && err == nil:
			t.Errorf("%s: process %s, want an error", c.name, got)
		case c.want != 0 && (err != nil || got != c.want):
			t.Errorf("%s: process %s, %v; want %s", c.name, got, err, c.want)
		}
	}
}

// Faults seed 2443 (-max-side=2) found two lives of a register: a member downed by a
// one-way partition was restarted at its address and, before the coordinator had
// forgotten its previous process's allocations, asked the coordinator for a shard's
// home; the answer named its own address, and it hosted the shard at the previous
// process's epoch. The coordinator then forgot that allocation and gave the shard to
// another member while the new process ran the entity. The coordinator's answer now
// names the process the allocation is for, and another process at the address does not
// take it.
func TestSeed2443AHomeAllocatedToAPreviousProcessIsNotTaken(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "e0", "inc")
	self := uint64(n.membership.Self().UID)
	// The coordinator's answer names the process.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := shardRef{Type: "counter", Shard: abiShard("e0", 10)}
	home, err := n.sharding.shardHome(ctx, ref)
	if err != nil || home.Region != n.addr() || home.Process != self {
		t.Fatalf("home of %s: %+v, %v; want %s, process %016x", ref, home, err, n.addr(), self)
	}
	// A region takes a home at its address only for its own process.
	for _, c := range []struct {
		home shardHome
		take bool
	}{
		{shardHome{Region: n.addr(), Epoch: 3, Process: self}, true},
		{shardHome{Region: n.addr(), Epoch: 3}, true}, // a coordinator of an older version
		{shardHome{Region: n.addr(), Epoch: 3, Process: self + 1}, false},
		{shardHome{Region: "127.0.0.1:9", Epoch: 3, Process: self + 1}, true}, // not here: forwarded
	} {
		if err := n.sharding.notAnotherProcess(ref, c.home); (err == nil) != c.take {
			t.Errorf("home %+v at %s (process %016x): %v, want taken %v", c.home, n.addr(), self, err, c.take)
		}
	}
}
