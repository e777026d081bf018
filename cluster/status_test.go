package cluster

import (
	"testing"
	"time"
)

// TestStatusSeenBits: a converged member's status carries the seen set as one bit per
// member, which a member of the same version reads as the set; a member that sends
// the set as a list of addresses (one that does not know the bits) is answered with a
// list, and a status whose bits do not fit the state counts as nothing seen.
func TestStatusSeenBits(t *testing.T) {
	s := newSim(t, nil)
	first := s.add()
	nodes := []*simNode{first, s.add(first.addr), s.add(first.addr), s.add(first.addr)}
	s.until(60*time.Second, "all up and converged", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
	a, b := nodes[0].core, nodes[1].core

	st := b.statusTo(a.self()).Msg
	if st.Seen != nil || len(st.SeenBits) != 1 || st.SeenBits[0] != 0b1111 {
		t.Fatalf("status of a converged member of 4: seen %v, bits %08b; want bits 00001111 and no list", st.Seen, st.SeenBits)
	}
	got := a.statusSeen(st)
	if len(got) != 4 {
		t.Fatalf("bits read as %v, want the 4 members", got)
	}
	if out := a.Step(s.now, st); len(out) != 0 {
		t.Fatalf("a status with everything seen was answered: %+v", out)
	}

	// A list lacking members a has seen: the answer is a list too.
	legacy := Message{Kind: msgGossipStatus, From: b.self(), Version: a.gossip.version, Seen: []UniqueAddress{b.self()}}
	out := a.Step(s.now, legacy)
	if len(out) != 1 || out[0].Msg.SeenBits != nil || len(out[0].Msg.Seen) != 4 {
		t.Fatalf("answer to a status with a list: %+v; want one status listing the 4 members", out)
	}

	// Bits lacking members: the answer has bits.
	short := Message{Kind: msgGossipStatus, From: b.self(), Version: a.gossip.version, SeenBits: []byte{0b0001}}
	out = a.Step(s.now, short)
	if len(out) != 1 || out[0].Msg.Seen != nil || len(out[0].Msg.SeenBits) != 1 || out[0].Msg.SeenBits[0] != 0b1111 {
		t.Fatalf("answer to a status with bits: %+v; want one status with the bits of the 4 members", out)
	}

	// Bits of the wrong length mean nothing seen.
	if got := a.statusSeen(Message{SeenBits: []byte{0xff, 0xff}}); len(got) != 0 {
		t.Fatalf("2 bytes of bits for 4 members read as %v, want nothing", got)
	}
}

// View.Member finds a member by address by binary search, and of two incarnations at
// one address the one earlier in the lifecycle; an address between two listed, before
// the first or after the last is not found.
func TestViewMemberFindsTheLiveIncarnation(t *testing.T) {
	v := View{Members: []Member{
		{Address: "10.0.0.1:7946", UID: 1, Status: StatusUp},
		{Address: "10.0.0.3:7946", UID: 2, Status: StatusDown},
		{Address: "10.0.0.3:7946", UID: 3, Status: StatusUp},
		{Address: "10.0.0.3:7946", UID: 4, Status: StatusExiting},
		{Address: "10.0.0.5:7946", UID: 5, Status: StatusLeaving},
	}}
	for addr, want := range map[string]UID{"10.0.0.1:7946": 1, "10.0.0.3:7946": 3, "10.0.0.5:7946": 5} {
		if m, ok := v.Member(addr); !ok || m.UID != want {
			t.Errorf("Member(%s) = %v %v, want uid %d", addr, m, ok, want)
		}
	}
	for _, addr := range []string{"10.0.0.0:7946", "10.0.0.2:7946", "10.0.0.9:7946", ""} {
		if m, ok := v.Member(addr); ok {
			t.Errorf("Member(%s) = %v, want none", addr, m)
		}
	}
	if _, ok := (View{}).Member("10.0.0.1:7946"); ok {
		t.Error("an empty view has a member")
	}
}
