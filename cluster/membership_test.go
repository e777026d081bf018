package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
)

var quiet = slog.New(slog.DiscardHandler)

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

// newCluster is clustertest.New with the local profile's fast failure detection, and a
// check, once the members are stopped, that none of their goroutines is left.
func newCluster(t *testing.T, n int, opts ...clustertest.Option) *clustertest.Cluster {
	t.Helper()
	// Registered first, so it runs after the cleanup that stops the members.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	return clustertest.New(t, n, append([]clustertest.Option{clustertest.FastFailureDetection()}, opts...)...)
}

// withTextStates gives the i-th member started the state delegate "test" of states[i],
// holding "from-i".
func withTextStates(states *[]*textState) clustertest.Option {
	return clustertest.WithConfig(func(i int, c *cluster.MembershipConfig) {
		st := &textState{set: map[string]bool{fmt.Sprintf("from-%d", i): true}}
		*states = append(*states, st)
		c.States = map[string]cluster.StateDelegate{"test": st}
	})
}

// memberships returns the memberships of ms.
func memberships(ms []*clustertest.Member) []*cluster.Membership {
	out := make([]*cluster.Membership, len(ms))
	for i, m := range ms {
		out[i] = m.Membership
	}
	return out
}

func allUp(ms []*clustertest.Member) bool { return clustertest.AllUp(memberships(ms)...) == nil }

// waitTicks waits until m's core has run n more ticks.
func waitTicks(t *testing.T, m *cluster.Membership, n uint64) {
	t.Helper()
	from := cluster.TicksOf(m)
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d ticks of %s", n, m.Self().Address), func() bool {
		return cluster.TicksOf(m) >= from+n
	})
}

// memberOf returns the member of ms whose incarnation is node.
func memberOf(t *testing.T, ms []*clustertest.Member, node cluster.UniqueAddress) *clustertest.Member {
	t.Helper()
	for _, m := range ms {
		if m.Membership.Self().Node() == node {
			return m
		}
	}
	t.Fatalf("no member %v", node)
	return nil
}

func TestMembershipJoinLeaderAndEvents(t *testing.T) {
	var states []*textState
	c := newCluster(t, 1, withTextStates(&states))
	sub := c.Members()[0].Membership.Subscribe(64)
	defer sub.Close()
	c.Add()
	c.Add()
	ms := c.Members()
	testutil.Eventually(t, 10*time.Second, "3 up members", func() bool { return allUp(ms) })
	leader := ms[0].Membership.View().Leader
	for _, m := range ms {
		v := m.Membership.View()
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
		if got, ok := m.Membership.Member(ms[2].Addr.Gossip); !ok || got.TransportAddr != "transport-2" {
			t.Fatalf("Member(2) = %v %v", got, ok)
		}
	}
	// Push-pull carried every named state.
	testutil.Eventually(t, 10*time.Second, "state exchange", func() bool {
		return states[0].has("from-1") && states[0].has("from-2") && states[1].has("from-0")
	})
	// The first member saw both joiners come up.
	up := map[cluster.UID]bool{}
	testutil.Eventually(t, 5*time.Second, "up events", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == cluster.MemberUp {
					up[e.Member.UID] = true
				}
			default:
				return len(up) == 3
			}
		}
	})
}

func TestMembershipBroadcastReachesAll(t *testing.T) {
	var states []*textState
	c := newCluster(t, 3, withTextStates(&states))
	c.Members()[2].Membership.Broadcast("test", []byte("news\n"))
	for i := 0; i < 2; i++ {
		testutil.Eventually(t, 5*time.Second, "broadcast", func() bool { return states[i].has("news") })
	}
}

// A leaving member's leave hooks run before the leader moves it to exiting: the hook
// here lasts until the leader has ticked twice on a converged view that shows the member
// leaving, and the member is still leaving then.
func TestMembershipGracefulLeaveRunsHooksFirst(t *testing.T) {
	c := newCluster(t, 3)
	ms := c.Members()
	leader := memberOf(t, ms, ms[0].Membership.View().Leader).Membership
	leaver := ms[2]
	if leaver.Membership == leader {
		leaver = ms[1]
	}
	var hookRan atomic.Bool
	var hookErr atomic.Pointer[error]
	leaver.Membership.RegisterLeaveHook(func(ctx context.Context) error {
		err := func() error {
			// A handoff that lasts until the leader has acted on this member leaving.
			for {
				v := leader.View()
				if m, ok := leader.Member(leaver.Addr.Gossip); ok && m.Status == cluster.StatusLeaving && v.Converged {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the leader did not see this member leaving: %w", ctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
			from := cluster.TicksOf(leader)
			for cluster.TicksOf(leader) < from+2 {
				select {
				case <-ctx.Done():
					return fmt.Errorf("the leader did not tick: %w", ctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
			// While the hook runs, the leader must not have moved us to exiting.
			if m, _ := leader.Member(leaver.Addr.Gossip); m.Status != cluster.StatusLeaving {
				return fmt.Errorf("the leader has this member %s during the hook", m.Status)
			}
			if s := leaver.Membership.Self().Status; s != cluster.StatusLeaving {
				return fmt.Errorf("status %s during the hook", s)
			}
			return nil
		}()
		if err != nil {
			hookErr.Store(&err)
			return err
		}
		hookRan.Store(true)
		return nil
	})
	sub := leader.Subscribe(64)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hookErr.Load(); err != nil {
		t.Fatalf("the leave hook: %v", *err)
	}
	if !hookRan.Load() {
		t.Fatal("the leave hook did not run")
	}
	testutil.Eventually(t, 10*time.Second, "the leaver removed", func() bool { return allUp(c.Live()) })
	kinds := map[cluster.EventKind]bool{}
	uid := leaver.Membership.Self().UID
	testutil.Eventually(t, 5*time.Second, "leave events", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Member.UID == uid {
					kinds[e.Kind] = true
				}
			default:
				return kinds[cluster.MemberLeft] && kinds[cluster.MemberRemoved]
			}
		}
	})
}

func TestMembershipCrashIsDownedAndRemoved(t *testing.T) {
	c := newCluster(t, 3)
	ms := c.Members()
	start := time.Now()
	victim := ms[1].Membership.Self().UID
	ms[1].Crash()
	testutil.Eventually(t, 10*time.Second, "unreachable", func() bool {
		for _, mem := range ms[0].Membership.View().Members {
			if mem.UID == victim && !mem.Reachable {
				return true
			}
		}
		return false
	})
	unreachable := time.Since(start)
	testutil.Eventually(t, 15*time.Second, "removed", func() bool { return allUp(c.Live()) })
	t.Logf("local profile: crash → unreachable %v, → removed %v", unreachable.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
}

func TestMembershipOperatorDownAndLeaveOther(t *testing.T) {
	c := newCluster(t, 4)
	ms := c.Members()
	downed := ms[3].Addr.Gossip
	sub := ms[3].Membership.Subscribe(16)
	defer sub.Close()
	if err := ms[0].Membership.DownMember(downed); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the downed member told", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == cluster.SelfExited {
					return true
				}
			default:
				return false
			}
		}
	})
	if err := ms[0].Membership.LeaveMember(ms[2].Addr.Gossip); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "both gone", func() bool { return allUp(ms[:2]) })
	if err := ms[0].Membership.DownMember("10.9.9.9:1"); !errors.Is(err, cluster.ErrNoSuchMember) {
		t.Fatalf("down of nobody: %v", err)
	}
}

// With 2 of 3 minimum members, the leader leaves both joining: it ticks on a converged
// view of the two and moves neither up; the third brings all three up.
func TestMembershipMinMembers(t *testing.T) {
	c := newCluster(t, 0, clustertest.WithConfig(func(_ int, c *cluster.MembershipConfig) { c.Lifecycle.MinMembers = 3 }))
	c.Add()
	c.Add()
	ms := c.Members()
	testutil.Eventually(t, 10*time.Second, "2 members in each view, converged", func() bool {
		for _, m := range ms {
			if v := m.Membership.View(); !v.Converged || len(v.Members) != 2 || !v.HasLeader {
				return false
			}
		}
		return true
	})
	leader := memberOf(t, ms, ms[1].Membership.View().Leader).Membership
	waitTicks(t, leader, 2)
	for _, m := range ms {
		for _, mem := range m.Membership.View().Members {
			if mem.Status != cluster.StatusJoining {
				t.Fatalf("%s is %s with 2 of 3 members", mem.Address, mem.Status)
			}
		}
	}
	c.Add()
	c.WaitUp()
}

func TestMembershipGossipKey(t *testing.T) {
	key := []byte("0123456789abcdef")
	c := newCluster(t, 2, clustertest.WithConfig(func(_ int, c *cluster.MembershipConfig) { c.GossipKey = key }))
	// A member with another key cannot join.
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile = "local"
	cfg.Lifecycle = cluster.DefaultLocalCoreConfig()
	cfg.Logger = quiet
	cfg.GossipKey = []byte("fedcba9876543210")
	cfg.Seeds = []string{c.Members()[0].Addr.Gossip}
	intruder, err := c.Network.Start(clustertest.Addr{Transport: "intruder"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Crash()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := intruder.Membership.Join(ctx); !errors.Is(err, cluster.ErrJoinFailed) {
		t.Fatalf("a member with the wrong key joined: %v", err)
	}
	if n := len(c.Members()[0].Membership.View().Members); n != 2 {
		t.Fatalf("the cluster has %d members", n)
	}
	cfg.GossipKey = []byte("short")
	if _, err := c.Network.Start(clustertest.Addr{Transport: "short"}, cfg); !errors.Is(err, cluster.ErrBadGossipKey) {
		t.Fatalf("short key: %v", err)
	}
}

func TestMembershipJoinGivesUpAtDeadline(t *testing.T) {
	c := newCluster(t, 0)
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile = "local"
	cfg.Logger = quiet
	cfg.Seeds = []string{"127.0.0.1:999"}
	m, err := c.Network.Start(clustertest.Addr{Transport: "lonely"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Crash()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := m.Membership.Join(ctx); !errors.Is(err, cluster.ErrJoinFailed) {
		t.Fatalf("joined nobody: %v", err)
	}
}

func TestMembershipOverUDP(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var ms []*cluster.Membership
	for i := 0; i < 2; i++ {
		cfg := cluster.DefaultMembershipConfig()
		cfg.BindAddr = "127.0.0.1:0"
		cfg.Profile = "local"
		cfg.Lifecycle = cluster.DefaultLocalCoreConfig()
		cfg.Logger = quiet
		cfg.TransportAddr = "t"
		if i > 0 {
			cfg.Seeds = []string{ms[0].Self().Address}
		}
		m, err := cluster.NewMembership(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown()
		ms = append(ms, m)
	}
	testutil.EventuallyNil(t, 10*time.Second, "2 up members over UDP", func() error { return clustertest.AllUp(ms...) })
}

func TestMemberStatusText(t *testing.T) {
	for s := cluster.StatusJoining; s <= cluster.StatusRemoved; s++ {
		b, _ := s.MarshalText()
		var back cluster.MemberStatus
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Fatalf("%v round trip: %v %v", s, back, err)
		}
	}
	var s cluster.MemberStatus
	if s.UnmarshalText([]byte("bogus")) == nil {
		t.Fatal("bogus status parsed")
	}
}

// TestMembershipLeaveAfterShutdown: Leave on a member already shut down (a downed
// member's process stopping gossip as it exits, then an operator's or a signal's
// graceful leave) returns; memberlist panics on a Leave after its Shutdown (a soak of
// the fault schedules met it: the whole test process crashed).
func TestMembershipLeaveAfterShutdown(t *testing.T) {
	c := newCluster(t, 2)
	m := c.Members()[1].Membership
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Leave(ctx); err != nil {
		t.Fatalf("leave after shutdown: %v", err)
	}
	// And the two at once.
	m = c.Members()[0].Membership
	done := make(chan error, 1)
	go func() { done <- m.Leave(ctx) }()
	_ = m.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("leave beside shutdown: %v", err)
	}
}
