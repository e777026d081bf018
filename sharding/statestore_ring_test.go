package sharding

import (
	"slices"
	"testing"

	"github.com/shardhost/shardhost/cluster"
)

// ringTestView is a view of members at addresses "m0".."m5": those in live are up, those
// in gone are down; admitted is the ring.
func ringTestView(self string, live, gone, admitted []string) stateRingView {
	v := stateRingView{self: self, members: map[string]cluster.Member{}, live: live, admitted: admitted}
	for _, a := range live {
		v.members[a] = cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusUp, Reachable: true}
	}
	for _, a := range gone {
		v.members[a] = cluster.Member{Address: a, TransportAddr: "t-" + a, Status: cluster.StatusDown}
	}
	return v
}

func TestReplicaSetIsJointWhileTheRingChanges(t *testing.T) {
	s := &ReplicatedStateStore{cfg: ReplicatedStateStoreConfig{Replicas: 3}}
	all := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	const typ, shard = "counter", 7
	order := PriorityAllocationStrategy{Type: typ}.Order(shard, all)
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
