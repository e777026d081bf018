package replstore

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
)

// ringTestView is a view of members at addresses "m0".."m5": those in live are up, those
// in gone are down; admitted is the ring.
func ringTestView(self string, live, gone, admitted []string) stateRingView {
	v := stateRingView{self: self, members: map[string]cluster.Member{}, live: live, up: live, admitted: admitted}
	for _, a := range live {
		v.members[a] = cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusUp, Reachable: true}
	}
	for _, a := range gone {
		v.members[a] = cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusDown}
	}
	return v
}

func TestReplicaSetIsJointWhileTheRingChanges(t *testing.T) {
	s := &Store{cfg: Config{Replicas: 3}}
	all := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	const typ, shard = "counter", 7
	order := sharding.PriorityAllocationStrategy{Type: typ}.Order(shard, all)
	a, b := order[0], order[1]
	rest := slices.DeleteFunc(slices.Clone(all), func(x string) bool { return x == a || x == b })
	slices.Sort(rest)

	// Steady: one configuration, the first three.
	rs, err := s.replicaSetIn(ringTestView(rest[0], all, nil, all), typ, shard)
	if err != nil || rs.joint() || len(rs.reps) != 3 {
		t.Fatalf("steady: %+v, %v; want one configuration of 3", rs, err)
	}

	// a and b downed, still in the ring: old {a, b, order[2]}, new the first three of
	// the rest; a and b are retained (not asked), and a majority of the old set is out
	// of reach.
	rs, err = s.replicaSetIn(ringTestView(rest[0], rest, []string{a, b}, all), typ, shard)
	if err != nil || !rs.joint() {
		t.Fatalf("after the downing: %+v, %v; want two configurations", rs, err)
	}
	if !slices.Equal(rs.sizes, []int{3, 3}) {
		t.Fatalf("sizes %v, want [3 3]", rs.sizes)
	}
	reachableOld := 0
	for _, r := range rs.reps {
		inOld, inNew := r.in&1 != 0, r.in&2 != 0
		switch r.addr {
		case a, b:
			if !r.retained || !inOld || inNew || r.transport != "" {
				t.Fatalf("gone member %s: %+v, want retained, in the old set only, not asked", r.addr, r)
			}
		case order[2]:
			if !inOld || !inNew {
				t.Fatalf("%s is in both sets: %+v", r.addr, r)
			}
		default:
			if inOld || !inNew {
				t.Fatalf("%s is in the new set only: %+v", r.addr, r)
			}
		}
		if inOld && !r.retained {
			reachableOld++
		}
	}
	if g := rs.groups()[0]; reachableOld >= g.Need {
		t.Fatalf("%d of the old set reachable, %d needed: the shard should be out of reach", reachableOld, g.Need)
	}

	// Handed over (the ring is the members up): one configuration again.
	rs, err = s.replicaSetIn(ringTestView(rest[0], rest, []string{a, b}, rest), typ, shard)
	if err != nil || rs.joint() {
		t.Fatalf("after the handover: %+v, %v; want one configuration", rs, err)
	}

	// a comes back after the handover: it joins (the new set), the old set is the
	// ring's.
	back := append(slices.Clone(rest), a)
	slices.Sort(back)
	rs, err = s.replicaSetIn(ringTestView(rest[0], back, nil, rest), typ, shard)
	if err != nil || !rs.joint() {
		t.Fatalf("a member back after the handover: %+v, %v; want two configurations", rs, err)
	}
	for _, r := range rs.reps {
		if r.addr == a && (r.in != 2 || r.retained) {
			t.Fatalf("the returning member: %+v, want in the new set only, asked", r)
		}
	}
}

// restartSSMembers starts, on fresh networks, the given members of a stopped cluster on
// their directories, gossip and transport addresses, as processes restarted with a
// fixed --bind and their data, and waits until they see each other up. The others stay
// stopped. It does not wait for the rings: the members may retain the others.
func restartSSMembers(tb testing.TB, old *ssCluster, nodes ...*ssNode) *ssCluster {
	tb.Helper()
	c := &ssCluster{tb: tb, network: clustertest.NewNetwork(), lc: old.lc, mutate: old.mutate}
	tb.Cleanup(c.stopAll)
	for _, n := range nodes {
		c.startAt(n.dir, n.gossipAddr, n.transport)
	}
	c.waitMembers()
	return c
}

// ssUnavailable checks that a load of key via n fails with sharding.ErrStoreUnavailable.
func ssUnavailable(tb testing.TB, n *ssNode, key sharding.EntityKey, why string) {
	tb.Helper()
	data, err := n.store.Load(ssCtx(tb), key)
	if err == nil {
		tb.Fatalf("load via %s %s: %q, want ErrStoreUnavailable", n.transport, why, data)
	}
	if !errors.Is(err, sharding.ErrStoreUnavailable) {
		tb.Fatalf("load via %s %s: %v, want ErrStoreUnavailable", n.transport, why, err)
	}
}

// TestRetainedMembersSurviveAWholeClusterRestart: a write acknowledged by two of a
// shard's three replicas, which are then downed together, leaves the shard unavailable
// (TestReplicaSetChangeLosesNoAcknowledgedWrite). When the whole cluster then
// restarts without them, the members must still wait for them: with the ring in
// memory alone, the first member up admitted itself, the others joined it, and the
// shard was served from the third replica, which missed the write (the fault
// harness restarts downed members this way when none is left running). Then an
// operator forgets one of the two (ForgetMember), which it refuses for a member up:
// one retained member is few enough for a handover round, and the shard is served
// again, without the write that only the two held, as the operator accepted.
func TestRetainedMembersSurviveAWholeClusterRestart(t *testing.T) {
	c, key, a, b, third := twoReplicasGoneWithTheLastWrite(t)
	survivors := c.live()
	for _, n := range survivors {
		ssUnavailable(t, n, key, "with two of the shard's three replicas gone")
	}
	c.stopAll()

	// The survivors restart, the third replica first and alone (it forms the cluster).
	order := slices.DeleteFunc(slices.Clone(survivors), func(n *ssNode) bool { return n == third })
	order = append([]*ssNode{third}, order...)
	r := restartSSMembers(t, c, order...)
	for _, n := range r.nodes {
		v := n.store.ringView()
		if !slices.Contains(v.admitted, a.addr()) || !slices.Contains(v.admitted, b.addr()) {
			t.Fatalf("%s after the restart ranks over %v: it forgot the retained %s and %s", n.addr(), v.admitted, a.addr(), b.addr())
		}
	}
	for _, n := range r.nodes {
		if err := n.store.Repair(ssCtx(t)); err != nil {
			t.Logf("repair via %s: %v", n.transport, err)
		}
		if _, err := n.store.handoverRound(ssCtx(t)); err == nil {
			t.Fatalf("a handover round via %s with two retained members: no error", n.transport)
		}
		ssUnavailable(t, n, key, "after a whole-cluster restart without two of the shard's replicas")
	}

	// An operator forgets a: refused for a member up, accepted for a.
	if _, err := r.nodes[0].store.ForgetMember(ssCtx(t), r.nodes[1].addr()); !errors.Is(err, ErrMemberNotGone) {
		t.Fatalf("forgetting a member up: %v, want ErrMemberNotGone", err)
	}
	if _, err := r.nodes[0].store.ForgetMember(ssCtx(t), r.nodes[0].addr()); !errors.Is(err, ErrMemberNotGone) {
		t.Fatalf("forgetting this member: %v, want ErrMemberNotGone", err)
	}
	by, err := r.nodes[1].store.ForgetMember(ssCtx(t), a.addr())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range r.nodes {
		want = append(want, n.addr())
	}
	sort.Strings(want)
	if !slices.Equal(by, want) {
		t.Fatalf("%s was retained by %v, want by every member up %v", a.addr(), by, want)
	}
	r.waitRing()
	for _, n := range r.nodes {
		ssLoad(t, n, key, []byte("v1"))
	}
	// The entity's reminder too, from the due indexes, which agree with the records on
	// every member once repair has placed them.
	for _, n := range r.nodes {
		due, next, err := n.store.DueReminders(ssCtx(t), key.Type, key.Shard, 1000, 10)
		if err != nil || len(due) != 1 || due[0].ID != key.ID || due[0].Name != "r" || due[0].Due != 500 || next != 0 {
			t.Fatalf("due reminders via %s after the forgetting: %+v next %d %v, want %s's r at 500", n.addr(), due, next, err, key.ID)
		}
	}
	testutil.EventuallyNil(t, 60*time.Second, "the due indexes after the forgetting", func() error {
		for _, n := range r.nodes {
			if diff, _ := dueIndexMismatch(t, n.store.disk); diff != "" {
				return fmt.Errorf("%s: %s", n.addr(), diff)
			}
		}
		return nil
	})

	// The forgetting is kept too: a member restarted alone ranks over the two others
	// (and waits for them; itself it counts once a round admits it), not over a or b.
	r.stopAll()
	r2 := restartSSMembers(t, r, r.nodes[2])
	alone := r2.nodes[0].addr()
	others := slices.DeleteFunc(slices.Clone(want), func(a string) bool { return a == alone })
	if v := r2.nodes[0].store.ringView(); !slices.Equal(v.admitted, others) {
		t.Fatalf("restarted alone after the forgetting, %s ranks over %v, want %v", alone, v.admitted, others)
	}
}

// TestRestoredRingTakesANewerGeneration: a member restarted with a saved ring that the
// others have moved past (two members gone and handed over while it was down) would
// retain those two, too many for a handover round, and, sharing them in its answers,
// make the others retain them too. It takes the others' newer ring instead, and joins.
func TestRestoredRingTakesANewerGeneration(t *testing.T) {
	lc := cluster.DefaultLocalCoreConfig()
	lc.FailureDetector.AcceptableHeartbeatPause = 3 * time.Second
	lc.SBRStableAfter = 3 * time.Second
	c := newSSCluster(t, 6, lc, func(cfg *Config) {
		cfg.RepairInterval = 300 * time.Millisecond
	})
	x, y, u := c.nodes[0], c.nodes[1], c.nodes[2]
	for _, n := range []*ssNode{x, y, u} {
		c.kill(n)
		c.waitGone(n.addr())
		c.waitRing() // handed over: a new generation without n
	}
	c.restart(x)
	c.waitMembers()
	c.waitRing()
	for _, n := range c.live() {
		if v := n.store.ringView(); slices.Contains(v.admitted, y.addr()) || slices.Contains(v.admitted, u.addr()) {
			t.Fatalf("%s retains %v", n.addr(), v.admitted)
		}
	}
}

// TestRingStartsFromTheSavedRing: the rules by which a store's ring starts (the file
// comment of ring.go), on views of members "m0".."m5".
func TestRingStartsFromTheSavedRing(t *testing.T) {
	saved := &stateRingRecord{Gen: 4, Self: "m0", Admitted: []string{"m0", "m1", "m2", "m3", "m4"}}
	for _, tc := range []struct {
		name       string
		rec        *stateRingRecord
		live, gone []string
		want       []string
		gen        uint64
	}{
		{"restarted alone: the saved ring but itself", saved, []string{"m0"}, nil, saved.Admitted[1:], 4},
		{"restarted into members up: the saved ring but itself, not the member it lacks, and the members down",
			saved, []string{"m0", "m1", "m5"}, []string{"m4", "m3"}, []string{"m1", "m2", "m3", "m4"}, 4},
		{"saved at another address: a new ring", &stateRingRecord{Gen: 4, Self: "m9", Admitted: []string{"m9", "m1", "m2"}},
			[]string{"m0", "m1", "m5"}, []string{"m3"}, []string{"m0", "m1", "m3", "m5"}, 0},
		{"nothing saved, alone: itself", nil, []string{"m0"}, nil, []string{"m0"}, 0},
		{"nothing saved: the members up (itself with no store ID: what its address held is lost), and those down", nil, []string{"m0", "m1"}, []string{"m2"}, []string{"m0", "m1", "m2"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{cfg: Config{Replicas: 3}, log: quiet}
			s.ring.restored = tc.rec
			s.ring.mu.Lock()
			s.startRingLocked(ringTestView("m0", tc.live, tc.gone, nil))
			got := slices.Sorted(maps.Keys(s.ring.admitted))
			gen := s.ring.gen
			s.ring.mu.Unlock()
			if !slices.Equal(got, tc.want) || gen != tc.gen {
				t.Fatalf("the ring starts as %v (gen %d), want %v (gen %d)", got, gen, tc.want, tc.gen)
			}
		})
	}
}

// TestAWipedMemberDoesNotCountAsItsFormerReplica: a member that restarts at its address
// on an empty directory (its disk lost) lacks every write; rings named replicas by
// address, so the others counted it as the replica it had been. A write acknowledged
// by it and one other replica (b), the third cut off from b, was then held by b alone:
// a read whose majority was the wiped member and the third returned the older state
// (bug 9 of faults/doc.go). Raft's rule: a server that lost its disk is a new server.
// Its new directory has a new store ID, the others' rings hold the one it was admitted
// with, so its answers do not count as its former replica's: the shard needs a
// majority of the others until a handover round has given it the shard and admits
// it.
func TestAWipedMemberDoesNotCountAsItsFormerReplica(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) {
		cfg.RepairInterval = time.Hour // only membership changes and handover retries start passes
	})
	c.waitRing()
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "acked"}
	reps := c.replicas(key, 3)
	a, b, third := reps[0], reps[1], reps[2]
	ssSave(t, b, key, 1, []byte("v1"))
	c.waitPlaced(key, []byte("v1"))

	// v2 is acknowledged by a and b: b's link to the third replica is cut.
	c.network.Frames.Disconnect(b.transport, third.transport)
	ssSave(t, b, key, 1, []byte("v2"))
	if got := c.holders(key, []byte("v2")); !slices.Equal(got, sortedAddrs(a, b)) {
		t.Fatalf("v2 is on %v, want on %v only", got, sortedAddrs(a, b))
	}
	oldID := a.store.disk.storeID

	// a restarts at once, at its address, on an empty directory; b stays cut off from
	// it too, so that nothing brings v2 to a or the third.
	c.network.Frames.Disconnect(b.transport, a.transport)
	c.kill(a)
	if err := os.RemoveAll(a.dir); err != nil {
		t.Fatal(err)
	}
	a = c.restart(a)
	c.waitMembers()
	if a.store.disk.storeID == oldID {
		t.Fatalf("%s's new directory has its old store ID %s", a.addr(), oldID)
	}

	// Via the third replica, a majority is {a, third}: a must not count as its former
	// replica.
	testutil.EventuallyNil(t, 20*time.Second, "the third sees a replaced", func() error {
		data, err := third.store.Load(ssCtx(t), key)
		switch {
		case err == nil:
			t.Fatalf("load via %s with the wiped %s and %s cut off: %q, want v2 or ErrStoreUnavailable", third.transport, a.transport, b.transport, data)
		case !errors.Is(err, sharding.ErrStoreUnavailable):
			t.Fatalf("load via %s: %v, want ErrStoreUnavailable", third.transport, err)
		}
		if r := third.store.Ring(); !slices.Equal(r.Replaced, []string{a.addr()}) {
			return fmt.Errorf("%s's ring: %+v, want %s replaced", third.addr(), r, a.addr())
		}
		return nil
	})
	// Via a itself, likewise (its own replica does not count either).
	if data, err := a.store.Load(ssCtx(t), key); err == nil || !errors.Is(err, sharding.ErrStoreUnavailable) {
		t.Fatalf("load via the wiped %s: %q, %v; want ErrStoreUnavailable", a.transport, data, err)
	}
	// The ring cannot settle while b, which holds v2, is cut off from the others.
	if r := third.store.Ring(); r.Settled {
		t.Fatalf("%s's ring settled with b cut off: %+v", third.addr(), r)
	}

	// Once b is back, its repair pass gives a the shard, a handover round admits a's
	// new directory, and every member serves v2.
	c.network.Frames.Reconnect(b.transport, third.transport)
	c.network.Frames.Reconnect(b.transport, a.transport)
	c.waitRing()
	for _, n := range c.live() {
		if r := n.store.Ring(); len(r.Replaced) > 0 {
			t.Fatalf("%s's ring after the handover: %+v", n.addr(), r)
		}
		ssLoad(t, n, key, []byte("v2"))
	}
	if got := c.holders(key, []byte("v2")); len(got) != 3 {
		t.Fatalf("v2 is on %v after the handover, want on all three", got)
	}
}

// TestAReplacedMemberIsTwoReplicas: in the ranking, a member whose data directory is
// not the one the ring admitted it with is a lost replica in the old configuration
// (retained: not asked) and a joining one in the new configuration, asked as its new
// store. While the ring has no more members than K, the lost replica is left out of
// the old configuration instead (a majority of the others meets every write).
func TestAReplacedMemberIsTwoReplicas(t *testing.T) {
	s := &Store{cfg: Config{Replicas: 3}}
	const typ, shard = "counter", 7
	view := func(all []string, replaced string) stateRingView {
		v := ringTestView(all[0], all, nil, all)
		v.ids, v.stores = map[string]string{}, map[string]string{}
		for _, a := range all {
			v.ids[a], v.stores[a] = "s-"+a, "s-"+a
		}
		if replaced != "" {
			v.stores[replaced] = "new-" + replaced
		}
		v.markReplaced()
		return v
	}
	all := []string{"m0", "m1", "m2", "m3"}
	order := sharding.PriorityAllocationStrategy{Type: typ}.Order(shard, all)
	// Seen from a member other than the one replaced, which is the shard's first.
	victim := order[0]
	all = append([]string{order[1]}, slices.DeleteFunc(slices.Clone(all), func(a string) bool { return a == order[1] })...)

	v := view(all, "")
	rs, err := s.replicaSetIn(v, typ, shard)
	if err != nil || rs.joint() {
		t.Fatalf("steady: %+v, %v; want one configuration", rs, err)
	}
	for _, r := range rs.reps {
		if r.store != v.ids[r.addr] {
			t.Fatalf("steady: %+v asked as store %q, want %q", r, r.store, v.ids[r.addr])
		}
	}

	v = view(all, victim)
	if !slices.Equal(v.replaced, []string{victim}) || v.settled() {
		t.Fatalf("%s answering from a new directory: replaced %v, settled %v", victim, v.replaced, v.settled())
	}
	rs, err = s.replicaSetIn(v, typ, shard)
	if err != nil || !rs.joint() || !slices.Equal(rs.sizes, []int{3, 3}) || len(rs.reps) != 4 {
		t.Fatalf("%s replaced: %+v, %v; want two configurations of 3, over 4 replicas", victim, rs, err)
	}
	var lost, joining int
	for _, r := range rs.reps {
		switch {
		case r.addr != victim:
			if r.in != 3 || r.retained {
				t.Fatalf("%+v: want in both configurations, asked", r)
			}
		case r.retained:
			lost++
			if r.in != 1 || r.local || r.store != "s-"+victim {
				t.Fatalf("%s's lost replica %+v: want in the old configuration only, its old store", victim, r)
			}
		default:
			joining++
			if r.in != 2 || r.store != "new-"+victim || r.transport == "" {
				t.Fatalf("%s's new replica %+v: want in the new configuration only, asked as its new store", victim, r)
			}
		}
	}
	if lost != 1 || joining != 1 {
		t.Fatalf("%s: %d lost and %d joining replicas, want 1 and 1", victim, lost, joining)
	}
	if got, limit := retainedCount(v), s.handoverLimit(v); got != 1 || got > limit {
		t.Fatalf("retained %d, limit %d; want 1 within the limit", got, limit)
	}

	// Three members, K = 3: the old configuration is the two others.
	three := []string{"m0", "m1", "m2"}
	v = view(three, "m1")
	rs, err = s.replicaSetIn(v, typ, shard)
	if err != nil || !rs.joint() || !slices.Equal(rs.sizes, []int{2, 3}) || len(rs.reps) != 3 {
		t.Fatalf("m1 replaced of 3: %+v, %v; want an old configuration of the 2 others, a new one of 3", rs, err)
	}
	for _, r := range rs.reps {
		if want := uint64(3); r.addr == "m1" {
			if r.in != 2 || r.retained {
				t.Fatalf("m1's replica %+v: want in the new configuration only", r)
			}
		} else if r.in != want {
			t.Fatalf("%+v: want in both configurations", r)
		}
	}
}

// TestRingsOfOneGenerationShareStoreIDs: a ring takes from another of its generation
// the store IDs it lacks, and an earlier directory's ID where it has the one the member
// answers from now (so that both count the earlier replica as lost); it admits itself
// only as its own directory.
func TestRingsOfOneGenerationShareStoreIDs(t *testing.T) {
	v := ringTestView("m0", []string{"m0", "m1", "m2"}, []string{"m3"}, []string{"m0", "m1", "m2"})
	v.ids = map[string]string{"m0": "", "m1": "", "m2": "s2-new"}
	v.stores = map[string]string{"m0": "s0", "m1": "s1", "m2": "s2-new"}
	got := sameGenLearned(v, stateHandoverReply{
		Admitted: []string{"m0", "m1", "m2", "m3"},
		Stores:   []string{"s0", "s1", "s2", "s3"},
	})
	want := map[string]string{"m0": "s0", "m1": "s1", "m2": "s2", "m3": "s3"}
	if !maps.Equal(got, want) {
		t.Fatalf("learned %v, want %v", got, want)
	}
	// Another directory of this member, or none known: not admitted as itself.
	for _, other := range []string{"s0-old", ""} {
		if got := sameGenLearned(v, stateHandoverReply{Admitted: []string{"m0"}, Stores: []string{other}}); len(got) > 0 {
			t.Fatalf("learned %v from a ring admitting m0 as %q", got, other)
		}
	}
	// This ring's earlier directory stays: the other's is the one m2 answers from.
	v.ids["m2"] = "s2"
	if got := sameGenLearned(v, stateHandoverReply{Admitted: []string{"m2"}, Stores: []string{"s2-new"}}); len(got) > 0 {
		t.Fatalf("learned %v: replaced an earlier directory's ID by the current one", got)
	}
}

// TestNoShardIsDroppedByAnUnsettledRing: a member drops a shard it does not rank for
// only by a started, settled ring. Fault seeds 74059 and 74065 (members downed and
// restarted over and over on a loaded machine) lost acknowledged writes to members
// that dropped their copies by the view's guess before they were up, each after a
// member that then dropped its own had acknowledged holding it.
func TestNoShardIsDroppedByAnUnsettledRing(t *testing.T) {
	all := []string{"m0", "m1", "m2"}
	settled := ringTestView("m0", all, nil, all)
	settled.started = true
	if !settled.mayDropReplicas() {
		t.Fatal("a started ring admitting the members up may not drop")
	}
	for name, v := range map[string]stateRingView{
		"not started (this member not up yet)": ringTestView("m0", all, nil, all),
		"a member gone, still admitted":        ringTestView("m0", all[:2], all[2:], all),
		"a member joining":                     ringTestView("m0", all, nil, all[:2]),
	} {
		if name != "not started (this member not up yet)" {
			v.started = true
		}
		if v.mayDropReplicas() {
			t.Errorf("%s: may drop replicas", name)
		}
	}
	replaced := settled
	replaced.replaced = []string{"m1"}
	if replaced.mayDropReplicas() {
		t.Error("a ring with a replaced member may drop replicas")
	}
}

// TestAMemberBackAloneDoesNotTakeItselfForTheCluster: alone, a member starts its ring
// with itself admitted only on a new directory (the first member of a new cluster): one
// made just now, or opened before by a process that took no part in a cluster. Fault seed 75005: a ring of two, {a, b}, that b shrank to {b} while a was
// downed (b acknowledging writes alone since), became {a} when a restarted alone from
// its saved ring, and a served the older state. Fault seed 75012: a member whose ring
// had never started (it was never up long) restarted alone, took itself for a new
// cluster and served its shards from nothing.
func TestAMemberBackAloneDoesNotTakeItselfForTheCluster(t *testing.T) {
	start := func(t *testing.T, dir string, rec *stateRingRecord, live, gone []string) (*Store, stateRingView) {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.close() })
		s := &Store{cfg: Config{Replicas: 3, Membership: selfOnly{self: cluster.Member{Address: "m0"}}},
			log: quiet, disk: d}
		s.ring.restored = rec
		s.ring.mu.Lock()
		s.startRingLocked(ringTestView("m0", live, gone, nil))
		v := ringTestView("m0", live, gone, slices.Sorted(maps.Keys(s.ring.admitted)))
		v.ids = maps.Clone(s.ring.admitted)
		v.stores = map[string]string{"m0": s.storeID()}
		v.markReplaced()
		s.ring.mu.Unlock()
		return s, v
	}
	alone, other := []string{"m0"}, []string{"m1"}

	t.Run("a ring of two, restored alone", func(t *testing.T) {
		s, v := start(t, t.TempDir(), &stateRingRecord{Gen: 9, Self: "m0", Admitted: []string{"m0", "m1"}}, alone, other)
		if !slices.Equal(v.admitted, other) {
			t.Fatalf("the ring starts as %v, want %v", v.admitted, other)
		}
		if retainedCount(v) <= s.handoverLimit(v) {
			t.Fatalf("%d retained within the handover limit %d: m0 would admit itself alone", retainedCount(v), s.handoverLimit(v))
		}
	})
	t.Run("a directory that was in a cluster, no ring, alone", func(t *testing.T) {
		dir := t.TempDir()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.noteInCluster(); err != nil {
			t.Fatal(err)
		}
		_ = d.close()
		s, v := start(t, dir, nil, alone, nil)
		if id, ok := v.ids["m0"]; !ok || id == s.storeID() {
			t.Fatalf("m0 admitted as %q (admitted: %v), want with no store ID", id, ok)
		}
		if retainedCount(v) <= s.handoverLimit(v) {
			t.Fatalf("%d retained within the handover limit %d: m0 would admit itself alone", retainedCount(v), s.handoverLimit(v))
		}
	})
	t.Run("a directory made now, alone: a new cluster", func(t *testing.T) {
		s, v := start(t, t.TempDir(), nil, alone, nil)
		if v.ids["m0"] != s.storeID() {
			t.Fatalf("m0 admitted as %q, want its store ID %s", v.ids["m0"], s.storeID())
		}
	})
	// e2e TestComposeFile on a loaded machine: the first seed's join found no other
	// seed within --seed-node-timeout, and it formed the cluster alone with a second
	// host.Start on the directory the first had made (cmd/shardhost's startMember).
	t.Run("a directory opened before by a process that saw no member, alone: a new cluster", func(t *testing.T) {
		dir := t.TempDir()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.close()
		s, v := start(t, dir, nil, alone, nil)
		if v.ids["m0"] != s.storeID() || s.ring.unconfirmed {
			t.Fatalf("m0 admitted as %q (unconfirmed %v), want its store ID %s, confirmed", v.ids["m0"], s.ring.unconfirmed, s.storeID())
		}
	})
}

// selfOnly is a Membership that answers Self alone (the ring's start saves the ring
// under this member's address).
type selfOnly struct {
	sharding.Membership
	self cluster.Member
}

func (m selfOnly) Self() cluster.Member { return m.self }

// ringMembers is a Membership that answers Self and Members from a list, for ringView.
type ringMembers struct {
	selfOnly
	members []cluster.Member
}

func (m *ringMembers) Members() []cluster.Member { return m.members }

func upMembers(addrs ...string) []cluster.Member {
	var out []cluster.Member
	for _, a := range addrs {
		out = append(out, cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusUp, Reachable: true})
	}
	return out
}

// TestSeed2227AFirstMemberBackAloneWaitsForTheMembersThatJoinedIt: fault seed 2227
// (-max-side=2, a loaded machine). The first member of a cluster admits itself alone;
// members join it and it stops (downed) before a handover round admits them; they go
// on without it (their round leaves it out) and serve writes; then every member
// stops, and it is the first restarted, alone. From its ring of itself it took itself
// for the whole cluster and served its older state. Its ring is now saved with the
// members that joined, and restored alone it waits for them; a ring of one that no
// member joined still restarts alone as the whole cluster.
func TestSeed2227AFirstMemberBackAloneWaitsForTheMembersThatJoinedIt(t *testing.T) {
	open := func(t *testing.T, dir string, mem sharding.Membership) *Store {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.close() })
		rec, err := d.loadRing()
		if err != nil {
			t.Fatal(err)
		}
		s := &Store{cfg: Config{Replicas: 3, Membership: mem}, log: quiet, disk: d}
		s.ring.restored = rec
		return s
	}
	for _, c := range []struct {
		name   string
		joined []string
	}{
		{"members joined it", []string{"m1", "m2"}},
		{"no member joined it", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mem := &ringMembers{selfOnly: selfOnly{self: cluster.Member{Address: "m0"}}, members: upMembers("m0")}
			s := open(t, dir, mem)
			if v := s.ringView(); !slices.Equal(v.admitted, []string{"m0"}) {
				t.Fatalf("the first member of a new cluster admits %v, want itself", v.admitted)
			}
			mem.members = upMembers(append([]string{"m0"}, c.joined...)...)
			s.ringView()
			if err := s.disk.close(); err != nil {
				t.Fatal(err)
			}

			mem.members = upMembers("m0")
			s = open(t, dir, mem)
			v := s.ringView()
			if c.joined == nil {
				if len(v.admitted) != 0 || retainedCount(v) > s.handoverLimit(v) {
					t.Fatalf("a ring of one restored alone: admitted %v, %d retained (limit %d); want the member to admit itself again",
						v.admitted, retainedCount(v), s.handoverLimit(v))
				}
				return
			}
			if !slices.Equal(v.admitted, c.joined) {
				t.Fatalf("restored alone, the ring admits %v, want the members that joined it, %v", v.admitted, c.joined)
			}
			if retainedCount(v) <= s.handoverLimit(v) {
				t.Fatalf("%d retained within the handover limit %d: m0 would admit itself alone", retainedCount(v), s.handoverLimit(v))
			}
		})
	}
}

// TestSeed82074MembersWithoutARingDoNotFormOne: fault seed 82074 (a machine at load 12,
// every member downed over and over). Two members that had joined the cluster but never
// saved a ring (downed each time before they were up) came back first after the whole
// cluster was downed, saw each other up, and their handover round admitted the two:
// they served their entities as new, while the cluster's acknowledged state was on the
// members not yet back. A ring started from a view on directories made earlier is now
// unconfirmed, and its rounds admit nobody until a member with a confirmed ring is up
// (nor does a member on a new directory that joins them confirm it).
func TestSeed82074MembersWithoutARingDoNotFormOne(t *testing.T) {
	c := &ssCluster{tb: t, network: clustertest.NewNetwork(), lc: clustertest.Tolerant(),
		mutate: func(cfg *Config) { cfg.RepairInterval = 200 * time.Millisecond }}
	t.Cleanup(c.stopAll)
	for range 2 {
		dir := filepath.Join(t.TempDir(), "state")
		d, err := openStateDisk(dir) // a directory that was in a cluster, with no ring saved
		if err != nil {
			t.Fatal(err)
		}
		if err := d.noteInCluster(); err != nil {
			t.Fatal(err)
		}
		if err := d.close(); err != nil {
			t.Fatal(err)
		}
		c.start(dir)
	}
	c.start(filepath.Join(t.TempDir(), "state")) // a new one
	c.waitMembers()
	// Each member's rounds are refused: for want of a confirmed ring, or (a member whose
	// ring started while it was alone) for its own replica, which counts as lost.
	refused := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "has a confirmed ring") || strings.Contains(err.Error(), "members retained"))
	}
	confirmedRefusals := 0
	for _, n := range c.nodes {
		testutil.EventuallyNil(t, 60*time.Second, "a handover round refused on "+n.transport, func() error {
			_, err := n.store.handoverRound(ssCtx(t))
			if v := n.store.ringView(); v.settled() {
				t.Fatalf("%s admitted %v: members without a confirmed ring formed one", n.transport, v.admitted)
			}
			if !refused(err) {
				return fmt.Errorf("round: %v", err)
			}
			if strings.Contains(err.Error(), "has a confirmed ring") {
				confirmedRefusals++
			}
			return nil
		})
	}
	if confirmedRefusals == 0 {
		t.Fatal("no round was refused for want of a confirmed ring")
	}
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "c1"}
	if _, err := c.nodes[0].store.Load(ssCtx(t), key); !errors.Is(err, sharding.ErrStoreUnavailable) {
		t.Fatalf("a read: %v, want ErrStoreUnavailable", err)
	}
}

// listMembership is a Membership whose members a test sets (Self is members' "m0").
type listMembership struct {
	sharding.Membership
	mu      sync.Mutex
	members []cluster.Member
}

func (m *listMembership) Self() cluster.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range m.members {
		if mem.Address == "m0" {
			return mem
		}
	}
	return cluster.Member{Address: "m0", Status: cluster.StatusJoining}
}

func (m *listMembership) Members() []cluster.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// freshRingView builds the view without the kept one: what ringView must return.
func freshRingView(s *Store) stateRingView {
	self, members, own := memberKey(s.cfg.Membership.Self()), s.cfg.Membership.Members(), s.storeID()
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	return s.buildRingViewLocked(self, own, members)
}

// The view ringView keeps is the one a build would give after every change of what it is
// built from: the members (each field of each), the ring's admitted members and their
// store IDs, its generation, and the store IDs members answer with. A view that missed
// one would rank replicas over the wrong members: majorities that miss acknowledged
// writes.
func TestRingViewFollowsEveryChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	statuses := []cluster.MemberStatus{cluster.StatusJoining, cluster.StatusUp, cluster.StatusLeaving,
		cluster.StatusExiting, cluster.StatusDown}
	ms := &listMembership{}
	for _, a := range addrs[:4] {
		ms.members = append(ms.members, cluster.Member{Address: a, UID: cluster.UID(rng.Uint64()), TransportAddr: "t-" + a,
			Status: cluster.StatusUp, Reachable: true})
	}
	s := &Store{cfg: Config{Replicas: 3, Membership: ms}, log: quiet}
	changes := []struct {
		name  string
		apply func()
	}{
		{"a member's status", func() {
			ms.mu.Lock()
			i := 1 + rng.IntN(len(ms.members)-1)
			ms.members[i].Status = statuses[rng.IntN(len(statuses))]
			ms.mu.Unlock()
		}},
		{"a member's reachability", func() {
			ms.mu.Lock()
			i := rng.IntN(len(ms.members))
			ms.members[i].Reachable = !ms.members[i].Reachable
			ms.mu.Unlock()
		}},
		{"a member's name", func() {
			ms.mu.Lock()
			i := 1 + rng.IntN(len(ms.members)-1)
			ms.members[i].Name = []string{"", "n1", "n2"}[rng.IntN(3)]
			ms.mu.Unlock()
		}},
		{"a member's transport address", func() {
			ms.mu.Lock()
			ms.members[rng.IntN(len(ms.members))].TransportAddr = fmt.Sprintf("t%d", rng.IntN(4))
			ms.mu.Unlock()
		}},
		{"a member joins, or a second incarnation of one", func() {
			ms.mu.Lock()
			a := addrs[1+rng.IntN(len(addrs)-1)]
			ms.members = append(ms.members, cluster.Member{Address: a, UID: cluster.UID(rng.Uint64()), TransportAddr: "t-" + a,
				Status: statuses[rng.IntN(len(statuses))], Reachable: true})
			slices.SortStableFunc(ms.members, func(x, y cluster.Member) int { return cmp.Compare(x.Address, y.Address) })
			ms.mu.Unlock()
		}},
		{"a member is removed", func() {
			ms.mu.Lock()
			if i := 1 + rng.IntN(len(ms.members)-1); len(ms.members) > 2 {
				ms.members = slices.Delete(ms.members, i, i+1)
			}
			ms.mu.Unlock()
		}},
		{"a member answers with a store ID", func() {
			a := addrs[rng.IntN(len(addrs))]
			_ = s.noteStore(stateReplica{addr: a}, fmt.Sprintf("store-%d", rng.IntN(3)))
		}},
		{"the ring admits a member, or another store ID", func() {
			s.ring.mu.Lock()
			if s.ring.admitted != nil {
				s.ring.admitted[addrs[rng.IntN(len(addrs))]] = fmt.Sprintf("store-%d", rng.IntN(3))
			}
			s.ring.mu.Unlock()
		}},
		{"the ring drops a member", func() {
			s.ring.mu.Lock()
			delete(s.ring.admitted, addrs[rng.IntN(len(addrs))])
			s.ring.mu.Unlock()
		}},
		{"the ring's generation", func() {
			s.ring.mu.Lock()
			s.ring.gen++
			s.ring.mu.Unlock()
		}},
	}
	if v := s.ringView(); !v.started {
		t.Fatal("the ring did not start with m0 up")
	}
	for step := 0; step < 2000; step++ {
		c := changes[rng.IntN(len(changes))]
		c.apply()
		for k := 0; k < 2; k++ { // a view built, then the one kept
			if got, want := s.ringView(), freshRingView(s); !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d, after a change of %s: ringView\n%+v\nwant\n%+v", step, c.name, got, want)
			}
		}
	}
}

// ringView builds no view while nothing it is built from changed: every state request
// reads one, and building it took 3-7 µs of an activation.
func TestRingViewIsKeptWhileNothingChanges(t *testing.T) {
	ms := &listMembership{}
	for _, a := range []string{"m0", "m1", "m2"} {
		ms.members = append(ms.members, cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusUp, Reachable: true})
	}
	s := &Store{cfg: Config{Replicas: 3, Membership: ms}, log: quiet}
	_ = s.noteStore(stateReplica{addr: "m1"}, "store-1")
	s.ringView()
	// One allocation: the members as Membership.Members returns them.
	if n := testing.AllocsPerRun(100, func() { s.ringView() }); n > 1 {
		t.Fatalf("ringView allocates %v times with nothing changed, want at most 1: it builds a new view", n)
	}
}

// TestALeavingMemberIsLiveButNotUp: members leaving are live (they answer, a handover
// round asks them, none is retained) but the shards' new replica sets rank over the
// members up alone, so a round lets go of them, however many leave at once; the key a
// round agrees on says who is leaving. When every live member is leaving (a whole
// cluster stopping) the ring keeps them.
func TestALeavingMemberIsLiveButNotUp(t *testing.T) {
	all := []string{"m0", "m1", "m2", "m3", "m4"}
	ms := &listMembership{}
	for _, a := range all {
		ms.members = append(ms.members, cluster.Member{Address: a, UID: 1, TransportAddr: "t-" + a, Status: cluster.StatusUp, Reachable: true})
	}
	s := &Store{cfg: Config{Replicas: 3, Membership: ms}, log: quiet}
	s.ring.admitted = map[string]string{}
	for _, a := range all {
		s.ring.admitted[a] = ""
	}
	if v := freshRingView(s); !v.settled() || !slices.Equal(v.up, all) {
		t.Fatalf("all up: settled %v, up %v", v.settled(), v.up)
	}
	ms.members[3].Status, ms.members[4].Status = cluster.StatusLeaving, cluster.StatusLeaving
	v := freshRingView(s)
	if !slices.Equal(v.live, all) || !slices.Equal(v.up, all[:3]) || v.settled() {
		t.Fatalf("two leaving: live %v, up %v, settled %v; want all live, m0-m2 up, not settled", v.live, v.up, v.settled())
	}
	if n, limit := retainedCount(v), s.handoverLimit(v); n != 0 || n > limit {
		t.Fatalf("two leaving: %d retained (limit %d), want none: a round may run", n, limit)
	}
	if key := v.liveKey(); key != "m0=,m1=,m2=,m3=/leaving,m4=/leaving" {
		t.Fatalf("liveKey %q", key)
	}
	joint := 0
	for shard := range 20 {
		rs, err := s.replicaSetIn(v, "counter", shard)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs.reps {
			if r.in&2 != 0 && (r.addr == "m3" || r.addr == "m4") {
				t.Fatalf("shard %d: leaving %s in the new replica set %+v", shard, r.addr, rs)
			}
			if r.retained {
				t.Fatalf("shard %d: %s counted as gone", shard, r.addr)
			}
		}
		if rs.joint() {
			joint++
		}
	}
	if joint == 0 {
		t.Fatal("no shard's replica set is joint while two of five members leave")
	}
	for i := range ms.members {
		ms.members[i].Status = cluster.StatusLeaving
	}
	if v := freshRingView(s); !v.settled() || !slices.Equal(v.up, all) || strings.Contains(v.liveKey(), "leaving") {
		t.Fatalf("all leaving: settled %v, up %v, key %q; want the ring kept", v.settled(), v.up, v.liveKey())
	}
}
