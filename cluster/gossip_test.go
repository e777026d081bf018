package cluster

import (
	"bytes"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// randomGossip builds a membership state from random changes by random members, merged
// at random: the values replicas really hold.
func randomGossip(r *rand.Rand) gossipState {
	nodes := []UniqueAddress{{"a:1", 1}, {"b:1", 2}, {"c:1", 3}, {"d:1", 4}, {"e:1", 5}}
	statuses := []MemberStatus{StatusJoining, StatusUp, StatusLeaving, StatusExiting, StatusDown}
	g := emptyGossip()
	for i := 0; i < 1+r.Intn(8); i++ {
		self := nodes[r.Intn(len(nodes))]
		g = g.changed(self)
		switch r.Intn(4) {
		case 0, 1:
			n := nodes[r.Intn(len(nodes))]
			g.members[n] = gossipMember{Node: n, Status: statuses[r.Intn(len(statuses))], UpNumber: r.Intn(4), Roles: []string{"r"}}
		case 2:
			rec := g.reachability[self]
			g.reachability[self] = observerRecord{Version: rec.Version + 1, Unreachable: unionSorted(nil, []UniqueAddress{nodes[r.Intn(len(nodes))]})}
		case 3:
			if r.Intn(3) == 0 {
				n := nodes[r.Intn(len(nodes))]
				delete(g.members, n)
				g.tombstones[n] = int64(r.Intn(3) + 1)
			}
		}
		for _, n := range nodes {
			if r.Intn(3) == 0 {
				g = g.seenBy(n)
			}
		}
	}
	return g.Merge(emptyGossip()) // normal form: tombstoned members removed everywhere
}

func encodeGossip(t *testing.T, g gossipState) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := em.Marshal(g.wire())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGossipMergeLaws(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	same := func(a, b gossipState) bool { return bytes.Equal(encodeGossip(t, a), encodeGossip(t, b)) }
	for i := 0; i < 2000; i++ {
		a, b, c := randomGossip(r), randomGossip(r), randomGossip(r)
		if !same(a.Merge(b), b.Merge(a)) {
			t.Fatalf("not commutative:\n%s\n%s", a, b)
		}
		if !same(a.Merge(b).Merge(c), a.Merge(b.Merge(c))) {
			t.Fatalf("not associative:\n%s\n%s\n%s", a, b, c)
		}
		if !same(a.Merge(a), a) {
			t.Fatalf("not idempotent:\n%s", a)
		}
		// Merge is monotonic: the result dominates or equals both versions.
		m := a.Merge(b)
		if o := m.version.Compare(a.version); o == orderBefore || o == orderConcurrent {
			t.Fatalf("merged version %v does not dominate %v", m.version, a.version)
		}
	}
}

func TestGossipWireRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 200; i++ {
		g := randomGossip(r)
		back, err := g.wire().gossip()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(encodeGossip(t, g), encodeGossip(t, back)) {
			t.Fatalf("round trip changed %s into %s", g, back)
		}
	}
	if _, err := (gossipWire{Members: []gossipMember{{Node: UniqueAddress{"", 1}, Status: StatusUp}}}).gossip(); err == nil {
		t.Fatal("member without an address accepted")
	}
}

// TestLeaderIsTheSameOnConvergedMembers: members that hold the same converged state
// agree on the leader, whatever member computes it.
func TestLeaderIsTheSameOnConvergedMembers(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	checked := 0
	for i := 0; i < 5000; i++ {
		g := randomGossip(r)
		var viewers []UniqueAddress
		for n, m := range g.members {
			if (m.Status == StatusUp || m.Status == StatusLeaving) && g.converged(n) {
				viewers = append(viewers, n)
			}
		}
		if len(viewers) < 2 {
			continue
		}
		checked++
		first, _ := g.leader(viewers[0])
		for _, v := range viewers[1:] {
			if l, _ := g.leader(v); l != first {
				t.Fatalf("on %s, %s sees leader %s and %s sees %s", g, viewers[0], first, v, l)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d converged states checked", checked)
	}
}

func TestVectorClockCompare(t *testing.T) {
	a := vectorClock{"x": 1}
	b := vectorClock{"x": 1, "y": 1}
	c := vectorClock{"x": 2}
	for _, tc := range []struct {
		a, b vectorClock
		want ordering
	}{{a, a, orderSame}, {a, b, orderBefore}, {b, a, orderAfter}, {b, c, orderConcurrent}, {vectorClock{}, vectorClock{"z": 0}, orderSame}} {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v vs %v: %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestPhiRisesWithSilence(t *testing.T) {
	d := newPhiDetector(DefaultPhiAccrualConfig())
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		d.heartbeat(t0.Add(time.Duration(i) * time.Second))
	}
	last := t0.Add(19 * time.Second)
	prev := -1.0
	for _, after := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 4 * time.Second, 5 * time.Second, 8 * time.Second} {
		phi := d.phi(last.Add(after))
		if phi < prev || math.IsNaN(phi) {
			t.Fatalf("phi %v after %v is below %v", phi, after, prev)
		}
		prev = phi
	}
	if !d.available(last.Add(3 * time.Second)) {
		t.Fatal("unavailable within the acceptable pause")
	}
	if d.available(last.Add(8 * time.Second)) {
		t.Fatalf("still available after 8 s of silence (phi %.2f)", d.phi(last.Add(8*time.Second)))
	}
}

func TestHeartbeatRingCoversEveryMember(t *testing.T) {
	var nodes []UniqueAddress
	for i := 1; i <= 12; i++ {
		nodes = append(nodes, UniqueAddress{Address: "n" + string(rune('a'+i)), UID: UID(i)})
	}
	ring := newHeartbeatRing(nodes)
	watchers := map[UniqueAddress]int{}
	for _, n := range nodes {
		recv := ring.receivers(n, 5, nil)
		if len(recv) != 5 {
			t.Fatalf("%s monitors %d", n, len(recv))
		}
		for _, r := range recv {
			watchers[r]++
		}
	}
	for _, n := range nodes {
		if watchers[n] != 5 {
			t.Fatalf("%s is watched by %d members", n, watchers[n])
		}
	}
	// Unreachable members stay watched, and one more reachable member is added.
	unreachable := map[UniqueAddress]bool{ring.receivers(nodes[0], 5, nil)[0]: true}
	if got := ring.receivers(nodes[0], 5, unreachable); len(got) != 6 {
		t.Fatalf("with one unreachable, %d receivers", len(got))
	}
}

func TestSBRDecisions(t *testing.T) {
	m := func(addr string, up int) gossipMember {
		return gossipMember{Node: UniqueAddress{addr, UID(up + 1)}, Status: StatusUp, UpNumber: up}
	}
	all := []gossipMember{m("a", 1), m("b", 2), m("c", 3), m("d", 4), m("e", 5)}
	side := func(addrs ...string) func(UniqueAddress) bool {
		return func(n UniqueAddress) bool {
			for _, a := range addrs {
				if n.Address == a {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		strategy SBRStrategy
		quorum   int
		mine     []string
		wantDown string
	}{
		{KeepMajority, 0, []string{"a", "b", "c"}, "de"},
		{KeepMajority, 0, []string{"d", "e"}, "de"},
		{StaticQuorum, 3, []string{"c", "d", "e"}, "ab"},
		{StaticQuorum, 4, []string{"a", "b", "c"}, "abc"},
		{KeepOldest, 0, []string{"a", "b"}, "cde"},
		{KeepOldest, 0, []string{"b", "c", "d", "e"}, "a"},
		{KeepOldest, 0, []string{"a"}, "a"},
		{DownAll, 0, []string{"a", "b", "c"}, "abcde"},
	} {
		var got string
		for _, n := range sbrDecide(tc.strategy, tc.quorum, all, side(tc.mine...)) {
			got += n.Address
		}
		if got != tc.wantDown {
			t.Errorf("%s (quorum %d) from side %v downs %q, want %q", tc.strategy, tc.quorum, tc.mine, got, tc.wantDown)
		}
	}
}
