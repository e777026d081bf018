package cluster

import (
	"math"
	"testing"
	"time"
)

// A contact request and its answer stay small whatever the UID and however many
// requests a member has sent (below 2³²): they are most of the gossip at rest above 11
// members (docs/scale.md, "Membership").
func TestContactMessagesAreSmall(t *testing.T) {
	for _, tc := range []struct {
		msg  Message
		most int
	}{
		{Message{Kind: msgContact, FromUID: math.MaxUint64, Seq: math.MaxUint32}, 19},
		{Message{Kind: msgContactRsp, Seq: math.MaxUint32}, 9},
	} {
		b, err := EncodeMessage(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > tc.most {
			t.Errorf("kind %d: %d bytes, want at most %d", tc.msg.Kind, len(b), tc.most)
		}
		m, err := DecodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != tc.msg.Kind || m.FromUID != tc.msg.FromUID || m.Seq != tc.msg.Seq || m.From != (UniqueAddress{}) {
			t.Errorf("round trip: %+v, want %+v", m, tc.msg)
		}
	}
	// A member's address still encodes as before (the omitempty of UniqueAddress
	// leaves out only the zero value).
	b, err := EncodeMessage(Message{Kind: msgHeartbeat, From: UniqueAddress{Address: "10.0.0.1:7946", UID: 1}, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := DecodeMessage(b); err != nil || m.From != (UniqueAddress{Address: "10.0.0.1:7946", UID: 1}) {
		t.Fatalf("heartbeat round trip: %+v, %v", m, err)
	}
}

// A contact request is answered only when its UID names one member of the state: from
// an unknown UID, or one two members share, there is no address to answer. An answer
// whose number no recent request had counts for nothing.
func TestContactRequestsAreAnsweredOnlyForOneMember(t *testing.T) {
	s := newSim(t, nil)
	first := s.add()
	nodes := []*simNode{first, s.addAt("10.0.0.2:7946", 7, first.addr), s.addAt("10.0.0.3:7946", 7, first.addr), s.add(first.addr)}
	s.until(30*time.Second, "all up", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
	c := first.core
	if out := c.Step(s.now, Message{Kind: msgContact, FromUID: 4, Seq: 3}); len(out) != 1 ||
		out[0].To != nodes[3].core.self() || out[0].Msg.Kind != msgContactRsp || out[0].Msg.Seq != 3 {
		t.Fatalf("a member's contact request: %+v, want an answer with its number to it", out)
	}
	for _, uid := range []UID{7, 99} {
		if out := c.Step(s.now, Message{Kind: msgContact, FromUID: uid, Seq: 3}); len(out) != 0 {
			t.Fatalf("contact request from UID %d: %+v, want none", uid, out)
		}
	}
	before := c.View().MajorityContact
	c.Step(s.now.Add(time.Second), Message{Kind: msgContactRsp, Seq: c.contactNext + 10})
	if got := c.View().MajorityContact; !got.Equal(before) {
		t.Fatalf("an answer to no request moved the majority contact from %v to %v", before, got)
	}
}

// The hosting lease's soundness with contact requests (15 members, a majority needing
// 7 others, so most of a member's contact comes from them): a side cut off from the
// majority, fully or behind a bridge, never has majority contact as of a moment after
// the cut, so a lease of any length lapses within that length of the cut; the
// majority has it again once its failure detectors have seen the cut-off side.
func TestSimCutOffSideLosesContactWithinTheLease(t *testing.T) {
	const lease = 2500 * time.Millisecond // sharding's default, half the down-removal margin
	for _, tc := range []struct {
		name   string
		cutOff func(nodes []*simNode) (cut, rest []*simNode)
		bridge bool
	}{
		{"7 of 15", func(nodes []*simNode) ([]*simNode, []*simNode) { return nodes[:7], nodes[7:] }, false},
		// nodes[0] reaches only nodes[1], which reaches everyone.
		{"behind a bridge", func(nodes []*simNode) ([]*simNode, []*simNode) { return nodes[:1], nodes[1:] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, nil)
			s.inFlight = true // what is on its way when the link fails still arrives
			nodes := s.startCluster(15)
			s.until(30*time.Second, "majority contact everywhere", func() bool {
				for _, n := range nodes {
					if !s.fresh(n, 2*time.Second) {
						return false
					}
				}
				return true
			})
			cut, rest := tc.cutOff(nodes)
			at := s.now
			if tc.bridge {
				s.partition(cut, rest[1:])
			} else {
				s.partition(cut, rest)
			}
			for s.now.Sub(at) < 30*time.Second {
				s.run(s.step)
				for _, n := range cut {
					v := n.core.View()
					if v.MajorityContact.After(at) {
						t.Fatalf("%s, cut off at %v, has majority contact as of %v (now %v)", n.addr, at, v.MajorityContact, s.now)
					}
					if held := !v.Exited && !v.MajorityContact.IsZero() && s.now.Sub(v.MajorityContact) < lease; held && s.now.Sub(at) >= lease {
						t.Fatalf("%s holds a lease of %v at %v, %v after the cut", n.addr, lease, s.now, s.now.Sub(at))
					}
				}
			}
			for _, n := range rest {
				// A member the resolver downed is out (a bridge partition may down
				// more than the cut-off member: docs/scale.md): it hosts nothing.
				if !n.core.View().Exited && !s.fresh(n, 2*time.Second) {
					t.Fatalf("%s, on the majority side, has no recent majority contact 30 s after the cut: %v at %v :\n%s", n.addr, n.core.View().MajorityContact, s.now, s.describe())
				}
			}
		})
	}
}

// When a partition cuts off a third of 15 members, the other two thirds keep majority
// contact within the lease all along: a member asks again, but no longer counts, the
// members that did not answer its last round, and asks further along the ring, a round
// after the cut, before its failure detectors see the third unreachable (which takes
// longer than the lease).
func TestSimMajorityKeepsContactThroughAPartition(t *testing.T) {
	const lease = 2500 * time.Millisecond
	s := newSim(t, nil)
	s.inFlight = true
	nodes := s.startCluster(15)
	s.until(30*time.Second, "majority contact everywhere", func() bool {
		for _, n := range nodes {
			if !s.fresh(n, 2*time.Second) {
				return false
			}
		}
		return true
	})
	majority, cut := nodes[:10], nodes[10:]
	s.partition(majority, cut)
	at := s.now
	for s.now.Sub(at) < 30*time.Second {
		s.run(s.step)
		for _, n := range majority {
			if c := n.core.View().MajorityContact; s.now.Sub(c) >= lease {
				t.Fatalf("%s, on the majority side, %v after the cut: majority contact %v old, the lease (%v) lapsed:\n%s",
					n.addr, s.now.Sub(at), s.now.Sub(c), lease, s.describe())
			}
		}
	}
}
