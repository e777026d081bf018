package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
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

type memberCluster struct {
	t       *testing.T
	network *InmemGossipNetwork
	members []*Membership
	states  []*textState
	mutate  func(*MembershipConfig)
}

func newMemberCluster(t *testing.T, n int, mutate func(*MembershipConfig)) *memberCluster {
	t.Helper()
	// Registered first, so it runs after the cleanups that shut the members down.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	mc := &memberCluster{t: t, network: NewInmemGossipNetwork(), mutate: mutate}
	for i := 0; i < n; i++ {
		mc.add()
	}
	return mc
}

func (mc *memberCluster) add() *Membership {
	mc.t.Helper()
	i := len(mc.members)
	cfg := DefaultMembershipConfig()
	cfg.Transport = mc.network.NewTransport()
	cfg.TransportAddr = fmt.Sprintf("transport-%d", i)
	cfg.Profile = "local"
	cfg.Lifecycle = DefaultLocalCoreConfig()
	cfg.Logger = quiet
	if i > 0 {
		cfg.Seeds = []string{mc.members[0].Self().Address}
	}
	st := &textState{set: map[string]bool{fmt.Sprintf("from-%d", i): true}}
	cfg.States = map[string]StateDelegate{"test": st}
	if mc.mutate != nil {
		mc.mutate(&cfg)
	}
	m, err := NewMembership(cfg)
	if err != nil {
		mc.t.Fatal(err)
	}
	mc.t.Cleanup(func() { m.Shutdown() })
	mc.members = append(mc.members, m)
	mc.states = append(mc.states, st)
	return m
}

// allUp reports whether each of ms sees exactly ms, all up and reachable, converged.
func allUp(ms []*Membership) bool {
	for _, m := range ms {
		v := m.View()
		if !v.Converged || len(v.Members) != len(ms) {
			return false
		}
		for _, mem := range v.Members {
			if mem.Status != StatusUp || !mem.Reachable {
				return false
			}
		}
	}
	return true
}

func TestMembershipJoinLeaderAndEvents(t *testing.T) {
	mc := newMemberCluster(t, 1, nil)
	sub := mc.members[0].Subscribe(64)
	defer sub.Close()
	mc.add()
	mc.add()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range mc.members {
		if err := m.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(mc.members) })
	leader := mc.members[0].View().Leader
	for _, m := range mc.members {
		v := m.View()
		if v.Leader != leader {
			t.Fatalf("leaders differ: %v and %v", leader, v.Leader)
		}
		leaders := 0
		for _, mem := range v.Members {
			if mem.Leader {
				leaders++
			}
		}
		if leaders != 1 {
			t.Fatalf("%d members flagged leader", leaders)
		}
		if got, ok := m.Member(mc.members[2].Self().Address); !ok || got.TransportAddr != "transport-2" {
			t.Fatalf("Member(2) = %v %v", got, ok)
		}
	}
	// Push-pull carried every named state.
	testutil.Eventually(t, 10*time.Second, "state exchange", func() bool {
		return mc.states[0].has("from-1") && mc.states[0].has("from-2") && mc.states[1].has("from-0")
	})
	// The first member saw both joiners come up.
	up := map[UID]bool{}
	testutil.Eventually(t, 5*time.Second, "up events", func() bool {
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
	mc := newMemberCluster(t, 3, nil)
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(mc.members) })
	mc.members[2].Broadcast("test", []byte("news\n"))
	for i := 0; i < 2; i++ {
		testutil.Eventually(t, 5*time.Second, "broadcast", func() bool { return mc.states[i].has("news") })
	}
}

func TestMembershipGracefulLeaveRunsHooksFirst(t *testing.T) {
	mc := newMemberCluster(t, 3, nil)
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(mc.members) })
	leaver := mc.members[2]
	var hookRan atomic.Bool
	leaver.RegisterLeaveHook(func(ctx context.Context) error {
		time.Sleep(300 * time.Millisecond) // a handoff takes a while
		// While the hook runs, the leader must not have moved us to exiting.
		if s := leaver.Self().Status; s != StatusLeaving {
			return fmt.Errorf("status %s during the hook", s)
		}
		hookRan.Store(true)
		return nil
	})
	sub := mc.members[0].Subscribe(64)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if !hookRan.Load() {
		t.Fatal("the leave hook did not run (or saw the wrong status)")
	}
	rest := mc.members[:2]
	testutil.Eventually(t, 10*time.Second, "the leaver removed", func() bool { return allUp(rest) })
	kinds := map[EventKind]bool{}
	testutil.Eventually(t, 5*time.Second, "leave events", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Member.UID == leaver.self.UID {
					kinds[e.Kind] = true
				}
			default:
				return kinds[MemberLeft] && kinds[MemberRemoved]
			}
		}
	})
}

func TestMembershipCrashIsDownedAndRemoved(t *testing.T) {
	mc := newMemberCluster(t, 3, nil)
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(mc.members) })
	start := time.Now()
	mc.members[1].Shutdown()
	rest := []*Membership{mc.members[0], mc.members[2]}
	testutil.Eventually(t, 10*time.Second, "unreachable", func() bool {
		for _, mem := range mc.members[0].View().Members {
			if mem.UID == mc.members[1].self.UID && !mem.Reachable {
				return true
			}
		}
		return false
	})
	unreachable := time.Since(start)
	testutil.Eventually(t, 15*time.Second, "removed", func() bool { return allUp(rest) })
	t.Logf("local profile: crash → unreachable %v, → removed %v", unreachable.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
}

func TestMembershipOperatorDownAndLeaveOther(t *testing.T) {
	mc := newMemberCluster(t, 4, nil)
	testutil.Eventually(t, 10*time.Second, "4 up members", func() bool { return allUp(mc.members) })
	downed := mc.members[3].Self().Address
	sub := mc.members[3].Subscribe(16)
	defer sub.Close()
	if err := mc.members[0].DownMember(downed); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the downed member told", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == SelfExited {
					return true
				}
			default:
				return false
			}
		}
	})
	if err := mc.members[0].LeaveMember(mc.members[2].Self().Address); err != nil {
		t.Fatal(err)
	}
	rest := mc.members[:2]
	testutil.Eventually(t, 15*time.Second, "both gone", func() bool { return allUp(rest) })
	if err := mc.members[0].DownMember("10.9.9.9:1"); !errors.Is(err, ErrNoSuchMember) {
		t.Fatalf("down of nobody: %v", err)
	}
}

func TestMembershipMinMembers(t *testing.T) {
	mc := newMemberCluster(t, 2, func(c *MembershipConfig) { c.Lifecycle.MinMembers = 3 })
	time.Sleep(time.Second) // long enough for two members to come up, if allowed
	for _, mem := range mc.members[0].View().Members {
		if mem.Status != StatusJoining {
			t.Fatalf("%s is %s with 2 of 3 members", mem.Address, mem.Status)
		}
	}
	mc.add()
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(mc.members) })
}

func TestMembershipGossipKey(t *testing.T) {
	key := []byte("0123456789abcdef")
	mc := newMemberCluster(t, 2, func(c *MembershipConfig) { c.GossipKey = key })
	testutil.Eventually(t, 10*time.Second, "2 up members with the key", func() bool { return allUp(mc.members) })
	// A member with another key cannot join.
	cfg := DefaultMembershipConfig()
	cfg.Transport = mc.network.NewTransport()
	cfg.Profile = "local"
	cfg.Lifecycle = DefaultLocalCoreConfig()
	cfg.Logger = quiet
	cfg.GossipKey = []byte("fedcba9876543210")
	cfg.Seeds = []string{mc.members[0].Self().Address}
	intruder, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := intruder.Join(ctx); !errors.Is(err, ErrJoinFailed) {
		t.Fatalf("a member with the wrong key joined: %v", err)
	}
	if n := len(mc.members[0].View().Members); n != 2 {
		t.Fatalf("the cluster has %d members", n)
	}
	cfg.GossipKey = []byte("short")
	if _, err := NewMembership(cfg); !errors.Is(err, ErrBadGossipKey) {
		t.Fatalf("short key: %v", err)
	}
}

func TestMembershipJoinGivesUpAtDeadline(t *testing.T) {
	mc := newMemberCluster(t, 0, nil)
	cfg := DefaultMembershipConfig()
	cfg.Transport = mc.network.NewTransport()
	cfg.Profile = "local"
	cfg.Logger = quiet
	cfg.Seeds = []string{"127.0.0.1:999"}
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := m.Join(ctx); !errors.Is(err, ErrJoinFailed) {
		t.Fatalf("joined nobody: %v", err)
	}
}

func TestMembershipOverUDP(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var ms []*Membership
	for i := 0; i < 2; i++ {
		cfg := DefaultMembershipConfig()
		cfg.BindAddr = "127.0.0.1:0"
		cfg.Profile = "local"
		cfg.Lifecycle = DefaultLocalCoreConfig()
		cfg.Logger = quiet
		cfg.TransportAddr = "t"
		if i > 0 {
			cfg.Seeds = []string{ms[0].Self().Address}
		}
		m, err := NewMembership(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown()
		ms = append(ms, m)
	}
	testutil.Eventually(t, 10*time.Second, "2 up members over UDP", func() bool { return allUp(ms) })
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

// TestMembershipLeaveAfterShutdown: Leave on a member already shut down (a downed
// member's process stopping gossip as it exits, then an operator's or a signal's
// graceful leave) returns; memberlist panics on a Leave after its Shutdown (a soak of
// the fault schedules met it: the whole test process crashed).
func TestMembershipLeaveAfterShutdown(t *testing.T) {
	mc := newMemberCluster(t, 2, nil)
	testutil.Eventually(t, 10*time.Second, "2 up members", func() bool { return allUp(mc.members) })
	m := mc.members[1]
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Leave(ctx); err != nil {
		t.Fatalf("leave after shutdown: %v", err)
	}
	// And the two at once.
	m = mc.members[0]
	done := make(chan error, 1)
	go func() { done <- m.Leave(ctx) }()
	_ = m.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("leave beside shutdown: %v", err)
	}
}
