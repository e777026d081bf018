package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// textState is a StateDelegate holding a set of strings, merged by union.
type textState struct {
	mu  sync.Mutex
	set map[string]bool
}

func (s *textState) LocalState() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []byte
	for k := range s.set {
		out = append(out, k...)
		out = append(out, '\n')
	}
	return out
}

func (s *textState) MergeRemoteState(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := 0
	for i, c := range b {
		if c == '\n' {
			s.set[string(b[start:i])] = true
			start = i + 1
		}
	}
}

func (s *textState) has(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[k]
}

// waitFor polls cond every 10 ms until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newMockMembers(t *testing.T, n int) ([]*Membership, []*textState) {
	t.Helper()
	// Registered first, so it runs after the cleanups that shut the members down.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	network := NewInmemGossipNetwork()
	var ms []*Membership
	var states []*textState
	base := time.Unix(1_700_000_000, 0)
	for i := 0; i < n; i++ {
		m, err := NewMembership(MembershipConfig{
			Transport:     network.NewTransport(),
			TransportAddr: fmt.Sprintf("transport-%d", i),
			Profile:       "local",
			StartedAt:     base.Add(time.Duration(i) * time.Second),
			Logger:        quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		st := &textState{set: map[string]bool{fmt.Sprintf("from-%d", i): true}}
		m.RegisterState("test", st)
		t.Cleanup(func() { m.Shutdown() })
		ms = append(ms, m)
		states = append(states, st)
	}
	return ms, states
}

func TestMembershipJoinListsEveryMember(t *testing.T) {
	ms, states := newMockMembers(t, 3)
	sub := ms[0].Subscribe(16)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms[1:] {
		if _, err := m.Join(ctx, []string{ms[0].Self().Address}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms {
		waitFor(t, 5*time.Second, "3 members", func() bool { return len(m.Members()) == 3 })
	}
	for _, m := range ms {
		members := m.Members()
		for i, mem := range members {
			if mem.Status != StatusUp || !mem.Reachable || mem.UID == 0 {
				t.Fatalf("member %v", mem)
			}
			if i > 0 && members[i-1].Address >= mem.Address {
				t.Fatalf("members not sorted: %v", members)
			}
		}
		oldest, _ := Oldest(members)
		if oldest.UID != ms[0].Self().UID {
			t.Fatalf("oldest is %v, want node-0", oldest)
		}
		got, ok := m.Member(ms[2].Self().Address)
		if !ok || got.TransportAddr != "transport-2" {
			t.Fatalf("Member(node-2) = %v %v", got, ok)
		}
	}
	// Push-pull at join carried every state to the seed, and back.
	waitFor(t, 5*time.Second, "state exchange", func() bool {
		return states[0].has("from-1") && states[0].has("from-2") && states[1].has("from-0")
	})
	// The subscriber saw itself and both joiners come up.
	up := map[UID]bool{}
	waitFor(t, 5*time.Second, "3 up events", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == MemberUp {
					up[e.Member.UID] = true
				}
			default:
				return len(up) == 3
			}
		}
	})
}

func TestMembershipBroadcastReachesAll(t *testing.T) {
	ms, states := newMockMembers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms[1:] {
		if _, err := m.Join(ctx, []string{ms[0].Self().Address}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms {
		waitFor(t, 5*time.Second, "3 members", func() bool { return len(m.Members()) == 3 })
	}
	ms[2].Broadcast("test", []byte("news\n"))
	for i := 0; i < 2; i++ {
		waitFor(t, 5*time.Second, "broadcast", func() bool { return states[i].has("news") })
	}
}

func TestMembershipLeaveIsSeenAsRemoved(t *testing.T) {
	ms, _ := newMockMembers(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ms[1].Join(ctx, []string{ms[0].Self().Address}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "2 members", func() bool { return len(ms[0].Members()) == 2 })
	sub := ms[0].Subscribe(8)
	defer sub.Close()
	leaver := ms[1].Self()
	if err := ms[1].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "1 member", func() bool { return len(ms[0].Members()) == 1 })
	for {
		select {
		case e := <-sub.C:
			if e.Kind == MemberRemoved {
				if e.Member.UID != leaver.UID || e.Member.Status != StatusRemoved {
					t.Fatalf("removed event %v", e)
				}
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no removed event")
		}
	}
}

func TestMembershipJoinGivesUpAtDeadline(t *testing.T) {
	ms, _ := newMockMembers(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ms[0].Join(ctx, []string{"127.0.0.1:999"}); err == nil {
		t.Fatal("joined nobody")
	}
}

func TestMembershipOverUDP(t *testing.T) {
	var ms []*Membership
	for i := 0; i < 2; i++ {
		m, err := NewMembership(MembershipConfig{BindAddr: "127.0.0.1:0", Profile: "local", Logger: quiet, TransportAddr: "t"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		ms = append(ms, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ms[1].Join(ctx, []string{ms[0].Self().Address}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "2 members over UDP", func() bool { return len(ms[0].Members()) == 2 && len(ms[1].Members()) == 2 })
}

func TestMemberStatusText(t *testing.T) {
	for s := StatusJoining; s <= StatusRemoved; s++ {
		b, _ := s.MarshalText()
		var back MemberStatus
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Fatalf("%v round trip: %v %v", s, back, err)
		}
	}
	var s MemberStatus
	if s.UnmarshalText([]byte("bogus")) == nil {
		t.Fatal("bogus status parsed")
	}
}
