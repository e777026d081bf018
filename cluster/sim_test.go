package cluster

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// sim runs membership cores on a simulated network with a simulated clock: no sockets,
// no sleeps, the same result on every run.
type sim struct {
	t     *testing.T
	now   time.Time
	step  time.Duration
	nodes []*simNode
	queue []simMsg
	cut   map[[2]string]bool
	delay map[string]func(now time.Time) time.Duration // extra latency of messages from an address
	// inFlight makes a cut drop the messages sent across it from then on, and deliver
	// those already on their way, as a network whose link fails behind a queue does.
	// Otherwise a cut drops what arrives across it.
	inFlight bool
	mutate   func(*CoreConfig)
}

type simNode struct {
	addr    string
	core    *Core
	crashed bool
	paused  bool
}

type simMsg struct {
	at       time.Time
	from, to string
	msg      Message
	cut      bool // sent across a cut
}

func newSim(t *testing.T, mutate func(*CoreConfig)) *sim {
	return &sim{t: t, now: time.Unix(1_800_000_000, 0), step: 100 * time.Millisecond,
		cut: map[[2]string]bool{}, delay: map[string]func(time.Time) time.Duration{}, mutate: mutate}
}

// add starts a member at 10.0.0.N:7946 (N from 1) with the given seeds.
func (s *sim) add(seeds ...string) *simNode {
	s.t.Helper()
	n := len(s.nodes) + 1
	return s.addAt(fmt.Sprintf("10.0.0.%d:7946", n), UID(n), seeds...)
}

func (s *sim) addAt(addr string, uid UID, seeds ...string) *simNode {
	s.t.Helper()
	return s.addNamed(addr, uid, "", seeds...)
}

// addNamed starts a member at addr with the stable name name (CoreConfig.Name).
func (s *sim) addNamed(addr string, uid UID, name string, seeds ...string) *simNode {
	s.t.Helper()
	cfg := DefaultCoreConfig()
	cfg.Name = name
	cfg.Self = UniqueAddress{Address: addr, UID: uid}
	cfg.TransportAddr = addr
	cfg.Seeds = seeds
	cfg.RandomSeed = int64(uid)
	if s.mutate != nil {
		s.mutate(&cfg)
	}
	core, err := NewCore(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	node := &simNode{addr: addr, core: core}
	s.nodes = append(s.nodes, node)
	return node
}

func (s *sim) node(addr string) *simNode {
	for i := len(s.nodes) - 1; i >= 0; i-- {
		if s.nodes[i].addr == addr && !s.nodes[i].crashed {
			return s.nodes[i]
		}
	}
	return nil
}

// partition cuts every link between the groups of addresses.
func (s *sim) partition(a, b []*simNode) {
	for _, x := range a {
		for _, y := range b {
			s.cut[pairKey(x.addr, y.addr)] = true
		}
	}
}

func (s *sim) heal() { s.cut = map[[2]string]bool{} }

func (s *sim) send(from string, outs []Outbound) {
	for _, o := range outs {
		// Every message goes through the wire encoding, as it would between processes.
		b, err := cbor.Marshal(o.Msg)
		if err != nil {
			s.t.Fatalf("encoding %v: %v", o.Msg.Kind, err)
		}
		var m Message
		if err := gossipDecMode.Unmarshal(b, &m); err != nil {
			s.t.Fatalf("decoding %v: %v", o.Msg.Kind, err)
		}
		latency := 10 * time.Millisecond
		if d := s.delay[from]; d != nil {
			latency += d(s.now)
		}
		s.queue = append(s.queue, simMsg{at: s.now.Add(latency), from: from, to: o.To.Address, msg: m,
			cut: s.cut[pairKey(from, o.To.Address)]})
	}
}

// run advances the simulation by d: every member ticks every step, and messages arrive
// after their latency unless the link is cut or the receiver is down.
func (s *sim) run(d time.Duration) {
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.now = s.now.Add(s.step)
		for _, n := range s.nodes {
			if !n.crashed && !n.paused {
				s.send(n.addr, n.core.Tick(s.now))
			}
		}
		for {
			var due, later []simMsg
			for _, m := range s.queue {
				if !m.at.After(s.now) {
					due = append(due, m)
				} else {
					later = append(later, m)
				}
			}
			s.queue = later
			if len(due) == 0 {
				break
			}
			for _, m := range due {
				to := s.node(m.to)
				cut := s.cut[pairKey(m.from, m.to)]
				if s.inFlight {
					cut = m.cut
				}
				if to == nil || to.paused || cut {
					continue
				}
				s.send(to.addr, to.core.Step(s.now, m.msg))
			}
		}
	}
}

// until runs until cond holds, failing after limit; it returns the simulated time taken.
func (s *sim) until(limit time.Duration, what string, cond func() bool) time.Duration {
	s.t.Helper()
	start := s.now
	for !cond() {
		if s.now.Sub(start) > limit {
			s.t.Fatalf("after %v of simulated time, not %s:\n%s", limit, what, s.describe())
		}
		s.run(s.step)
	}
	return s.now.Sub(start)
}

func (s *sim) live() []*simNode {
	var out []*simNode
	for _, n := range s.nodes {
		if !n.crashed && !n.core.View().Exited {
			out = append(out, n)
		}
	}
	return out
}

// allSee reports whether every live member in nodes has converged on exactly the
// members in want, all with status.
func (s *sim) allSee(nodes []*simNode, status MemberStatus, want ...*simNode) bool {
	for _, n := range nodes {
		v := n.core.View()
		if !v.Converged || len(v.Members) != len(want) {
			return false
		}
		for _, m := range v.Members {
			if m.Status != status || !m.Reachable {
				return false
			}
			found := false
			for _, w := range want {
				if w.core.self() == m.Node() {
					found = true
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}

func (s *sim) describe() string {
	var b strings.Builder
	for _, n := range s.nodes {
		state := ""
		switch {
		case n.crashed:
			state = " (crashed)"
		case n.paused:
			state = " (paused)"
		}
		v := n.core.View()
		fmt.Fprintf(&b, "  %s%s: leader=%s converged=%v exited=%q %s\n", n.addr, state, v.Leader.Address, v.Converged, v.ExitReason, n.core.gossip)
	}
	return b.String()
}

// startCluster adds n members, the first starting the cluster and the others joining
// it, and waits until all are up and converged.
func (s *sim) startCluster(n int) []*simNode {
	s.t.Helper()
	first := s.add()
	nodes := []*simNode{first}
	for i := 1; i < n; i++ {
		nodes = append(nodes, s.add(first.addr))
	}
	s.until(30*time.Second, "all up", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
	return nodes
}

func leaders(nodes []*simNode) []string {
	set := map[string]bool{}
	for _, n := range nodes {
		v := n.core.View()
		set[v.Leader.String()] = true
	}
	var out []string
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func TestSimFiveMembersJoinAndConverge(t *testing.T) {
	s := newSim(t, nil)
	first := s.add()
	nodes := []*simNode{first}
	for i := 1; i < 5; i++ {
		nodes = append(nodes, s.add(first.addr))
	}
	took := s.until(30*time.Second, "5 up members", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
	t.Logf("5 members up and converged after %v of simulated time", took)
	if l := leaders(nodes); len(l) != 1 || l[0] != first.core.self().String() {
		t.Fatalf("leaders %v, want only %s", l, first.core.self())
	}
	// Up-numbers are distinct and the first member is the oldest.
	ups := map[int]bool{}
	for _, m := range nodes[2].core.View().Members {
		if ups[m.UpNumber] || m.UpNumber == 0 {
			t.Fatalf("up-numbers %v", nodes[2].core.View().Members)
		}
		ups[m.UpNumber] = true
	}
	oldest, _ := Oldest(nodes[4].core.View().Members)
	if oldest.Node() != first.core.self() {
		t.Fatalf("oldest %v", oldest)
	}
}

func TestSimMinMembersHoldsJoiningMembers(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.MinMembers = 3 })
	a := s.add()
	b := s.add(a.addr)
	s.run(10 * time.Second)
	for _, m := range b.core.View().Members {
		if m.Status != StatusJoining {
			t.Fatalf("with 2 of 3 members, %s is %s", m.Address, m.Status)
		}
	}
	c := s.add(a.addr)
	s.until(20*time.Second, "3 up", func() bool { return s.allSee([]*simNode{a, b, c}, StatusUp, a, b, c) })
}

func TestSimGracefulLeave(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(4)
	leaver := nodes[2]
	if !nodes[0].core.Leave(leaver.addr) {
		t.Fatal("leave refused")
	}
	rest := []*simNode{nodes[0], nodes[1], nodes[3]}
	s.until(20*time.Second, "the leaver removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	if v := leaver.core.View(); !v.Exited || v.ExitReason != ReasonLeft {
		t.Fatalf("leaver: exited=%v %q, want %q", v.Exited, v.ExitReason, ReasonLeft)
	}
}

func TestSimLeaderLeaves(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(3)
	nodes[0].core.Leave(nodes[0].addr)
	rest := nodes[1:]
	s.until(30*time.Second, "the old leader removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	if l := leaders(rest); len(l) != 1 || l[0] != nodes[1].core.self().String() {
		t.Fatalf("leaders %v", l)
	}
}

func TestSimCrashIsUnreachableThenDownedThenRemoved(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(5)
	victim := nodes[3]
	victim.crashed = true
	rest := []*simNode{nodes[0], nodes[1], nodes[2], nodes[4]}
	unreachable := s.until(20*time.Second, "unreachable on all", func() bool {
		for _, n := range rest {
			for _, m := range n.core.View().Members {
				if m.Node() == victim.core.self() && m.Reachable {
					return false
				}
			}
		}
		return true
	})
	// Never downed before the resolver's stable period.
	for _, n := range rest {
		for _, m := range n.core.View().Members {
			if m.Node() == victim.core.self() && m.Status == StatusDown {
				t.Fatal("downed before stable-after")
			}
		}
	}
	removed := s.until(30*time.Second, "removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	t.Logf("crash → unreachable on all: %v; → removed: %v more (simulated)", unreachable, removed)
}

func TestSimSlowMemberStaysReachable(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(3)
	// Every seventh second the slow member stalls for 3.5 s (a GC pause, a busy
	// network): phi rises far above its calm level but stays under 8, thanks to the
	// acceptable pause of 3 s.
	s.delay[nodes[2].addr] = func(now time.Time) time.Duration {
		phase := time.Duration(now.UnixNano() % int64(7*time.Second))
		if phase < 3500*time.Millisecond {
			return 3500*time.Millisecond - phase // held until the stall ends
		}
		return 0
	}
	maxPhi := 0.0
	for i := 0; i < 600; i++ {
		s.run(100 * time.Millisecond)
		for _, n := range nodes[:2] {
			if d := n.core.detectors[nodes[2].core.self()]; d != nil {
				maxPhi = max(maxPhi, d.phi(s.now))
			}
		}
	}
	t.Logf("highest phi of the slow member: %.2f", maxPhi)
	if maxPhi < 0.5 {
		t.Fatalf("phi never rose (%.2f): the delays did not reach the detector", maxPhi)
	}
	for _, n := range nodes {
		for _, m := range n.core.View().Members {
			if !m.Reachable || m.Status != StatusUp {
				t.Fatalf("%s sees %s %s reachable=%v", n.addr, m.Address, m.Status, m.Reachable)
			}
		}
	}
}

func TestSimPartitionHealedBeforeStableAfterDownsNobody(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStableAfter = 20 * time.Second })
	nodes := s.startCluster(4)
	s.partition(nodes[:2], nodes[2:])
	s.until(20*time.Second, "unreachability seen", func() bool {
		for _, m := range nodes[0].core.View().Members {
			if !m.Reachable {
				return true
			}
		}
		return false
	})
	s.heal()
	s.until(20*time.Second, "all reachable and converged again", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
}

// checkOneSideSurvives partitions a cluster into sides and checks that, once the
// resolver has acted, the members of at most one side keep running and that side
// converges on itself.
func checkOneSideSurvives(t *testing.T, s *sim, sides [][]*simNode, wantSurvivor int) {
	t.Helper()
	for i := range sides {
		for j := i + 1; j < len(sides); j++ {
			s.partition(sides[i], sides[j])
		}
	}
	s.run(40 * time.Second)
	running := -1
	for i, side := range sides {
		alive := 0
		for _, n := range side {
			if !n.core.View().Exited {
				alive++
			}
		}
		if alive > 0 {
			if running >= 0 {
				t.Fatalf("sides %d and %d both keep running:\n%s", running, i, s.describe())
			}
			running = i
			if alive != len(side) {
				t.Fatalf("side %d is half running:\n%s", i, s.describe())
			}
		}
	}
	if running != wantSurvivor {
		t.Fatalf("side %d survived, want %d:\n%s", running, wantSurvivor, s.describe())
	}
	if running >= 0 {
		side := sides[running]
		s.until(20*time.Second, "the survivors converge", func() bool { return s.allSee(side, StatusUp, side...) })
	}
	// After healing, the downed side stays out.
	s.heal()
	s.run(10 * time.Second)
	for i, side := range sides {
		for _, n := range side {
			if i != running && !n.core.View().Exited {
				t.Fatalf("%s came back after healing", n.addr)
			}
		}
	}
}

func TestSimSplitBrainKeepMajority(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(5)
	checkOneSideSurvives(t, s, [][]*simNode{nodes[:2], nodes[2:]}, 1)
}

func TestSimSplitBrainKeepMajorityTieGoesToLowestAddress(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(4)
	checkOneSideSurvives(t, s, [][]*simNode{{nodes[1], nodes[2]}, {nodes[0], nodes[3]}}, 1)
}

func TestSimSplitBrainStaticQuorum(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStrategy, c.SBRQuorumSize = StaticQuorum, 3 })
	nodes := s.startCluster(5)
	checkOneSideSurvives(t, s, [][]*simNode{nodes[:3], nodes[3:]}, 0)
}

func TestSimSplitBrainStaticQuorumNoSideHasIt(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStrategy, c.SBRQuorumSize = StaticQuorum, 3 })
	nodes := s.startCluster(4)
	checkOneSideSurvives(t, s, [][]*simNode{nodes[:2], nodes[2:]}, -1)
}

func TestSimSplitBrainKeepOldest(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStrategy = KeepOldest })
	nodes := s.startCluster(5)
	// The oldest (the first) is on the smaller side with another member: that side wins.
	checkOneSideSurvives(t, s, [][]*simNode{{nodes[0], nodes[1]}, nodes[2:]}, 0)
}

func TestSimSplitBrainKeepOldestDownIfAlone(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStrategy = KeepOldest })
	nodes := s.startCluster(4)
	checkOneSideSurvives(t, s, [][]*simNode{{nodes[0]}, nodes[1:]}, 1)
}

func TestSimSplitBrainDownAll(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStrategy = DownAll })
	nodes := s.startCluster(4)
	checkOneSideSurvives(t, s, [][]*simNode{nodes[:3], nodes[3:]}, -1)
}

func TestSimPausedMemberComesBackAfterBeingRemoved(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(3)
	nodes[2].paused = true
	rest := nodes[:2]
	s.until(30*time.Second, "the paused member removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	nodes[2].paused = false
	s.until(20*time.Second, "the paused member to learn it is out", func() bool { return nodes[2].core.View().Exited })
	s.run(5 * time.Second)
	if !s.allSee(rest, StatusUp, rest...) {
		t.Fatalf("the others were disturbed:\n%s", s.describe())
	}
}

// TestSimNewIncarnationOfANameDownsTheOld: a member that joins at a new address with
// the stable name of a member not down (a pod recreated at a new IP) downs that member
// at once, as a new incarnation of one address does; members without a name, or with
// another, are left alone.
func TestSimNewIncarnationOfANameDownsTheOld(t *testing.T) {
	s := newSim(t, nil)
	first := s.addNamed("10.0.0.1:7946", 1, "m-0")
	nodes := []*simNode{first, s.addNamed("10.0.0.2:7946", 2, "m-1", first.addr), s.addNamed("10.0.0.3:7946", 3, "", first.addr)}
	s.until(30*time.Second, "all up", func() bool { return s.allSee(nodes, StatusUp, nodes...) })
	for _, m := range first.core.View().Members {
		if want := map[string]string{"10.0.0.1:7946": "m-0", "10.0.0.2:7946": "m-1"}[m.Address]; m.Name != want {
			t.Fatalf("%s is named %q, want %q", m.Address, m.Name, want)
		}
	}
	old := nodes[1]
	// The new incarnation's join reaches the first member while the old one still runs
	// and answers heartbeats: nothing but its name says that it replaced it.
	again := s.addNamed("10.0.0.9:7946", 9, "m-1")
	joiner := again.core.selfMember()
	first.core.Step(s.now, Message{Kind: msgJoin, From: again.core.self(), Joiner: &joiner})
	status := map[string]MemberStatus{}
	for _, m := range first.core.View().Members {
		status[m.Address] = m.Status
	}
	if status[old.addr] != StatusDown || status[again.addr] != StatusJoining || status[nodes[2].addr] != StatusUp || status[first.addr] != StatusUp {
		t.Fatalf("after the join of m-1's new incarnation: %v; want %s down, %s joining, the others up", status, old.addr, again.addr)
	}
	// A joiner with another name, or none, downs nobody.
	other := s.addNamed("10.0.0.10:7946", 10, "m-9")
	joiner = other.core.selfMember()
	first.core.Step(s.now, Message{Kind: msgJoin, From: other.core.self(), Joiner: &joiner})
	for _, m := range first.core.View().Members {
		if m.Address != old.addr && m.Status == StatusDown {
			t.Fatalf("%s downed by the join of a member of another name", m.Address)
		}
	}
}

func TestSimRestartedProcessIsANewMember(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(3)
	old := nodes[2]
	old.crashed = true
	restarted := s.addAt(old.addr, 99, nodes[0].addr)
	want := []*simNode{nodes[0], nodes[1], restarted}
	s.until(30*time.Second, "the new incarnation up, the old one gone", func() bool { return s.allSee(want, StatusUp, want...) })
	// The old UID can never come back.
	oldJoin := old.core.selfMember()
	outs := nodes[0].core.Step(s.now, Message{Kind: msgJoin, From: old.core.self(), Joiner: &oldJoin})
	if len(outs) != 0 {
		t.Fatalf("a removed UID was welcomed: %v", outs)
	}
}

func TestSimOperatorDown(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(3)
	if !nodes[1].core.Down(nodes[2].addr) {
		t.Fatal("down refused")
	}
	rest := nodes[:2]
	s.until(20*time.Second, "the downed member removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	s.until(10*time.Second, "the downed member to learn it", func() bool { return nodes[2].core.View().Exited })
	if v := nodes[2].core.View(); !strings.Contains(v.ExitReason, "down") && !strings.Contains(v.ExitReason, "removed") {
		t.Fatalf("downed member: %v %q", v.Exited, v.ExitReason)
	}
}

func TestSimNoLeaderActionsWithoutConvergence(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) { c.SBRStableAfter = time.Hour })
	nodes := s.startCluster(3)
	nodes[2].crashed = true
	s.run(10 * time.Second) // now unreachable: no convergence
	joiner := s.add(nodes[0].addr)
	s.run(20 * time.Second)
	for _, m := range nodes[0].core.View().Members {
		if m.Node() == joiner.core.self() && m.Status != StatusJoining {
			t.Fatalf("a member became %s without convergence", m.Status)
		}
	}
	// An operator downs the crashed member: convergence returns, the joiner comes up.
	nodes[0].core.Down(nodes[2].addr)
	want := []*simNode{nodes[0], nodes[1], joiner}
	s.until(30*time.Second, "the joiner up", func() bool { return s.allSee(want, StatusUp, want...) })
}

// A leaving member that misses its own exiting status (cut off just after the leader
// moved it to exiting) and next hears of its removal has still left the cluster: it
// exits with ReasonLeft, as one that saw itself exiting does.
func TestSimLeaverThatMissesExitingHasLeft(t *testing.T) {
	// A resolver slow enough that the cut-off leaver does not down the others meanwhile.
	s := newSim(t, func(c *CoreConfig) { c.SBRStableAfter = time.Minute })
	nodes := s.startCluster(4)
	leader, leaver := nodes[0], nodes[2]
	if !leader.core.Leave(leaver.addr) {
		t.Fatal("leave refused")
	}
	rest := []*simNode{nodes[0], nodes[1], nodes[3]}
	s.until(10*time.Second, "the leader moves the leaver to exiting", func() bool {
		for _, m := range leader.core.View().Members {
			if m.Node() == leaver.core.self() {
				return m.Status == StatusExiting
			}
		}
		return false
	})
	// The leader's news is still on its way: the cut drops it.
	s.partition([]*simNode{leaver}, rest)
	s.until(30*time.Second, "the leaver removed", func() bool { return s.allSee(rest, StatusUp, rest...) })
	if v := leaver.core.View(); v.Exited {
		t.Fatalf("the cut-off leaver exited before hearing of it: %q", v.ExitReason)
	}
	for _, m := range leaver.core.View().Members {
		if m.Node() == leaver.core.self() && m.Status != StatusLeaving {
			t.Fatalf("the leaver saw itself %s; the test needs it to miss exiting", m.Status)
		}
	}
	s.heal()
	s.until(20*time.Second, "the leaver out", func() bool { return leaver.core.View().Exited })
	if v := leaver.core.View(); v.ExitReason != ReasonLeft {
		t.Fatalf("the leaver exited with %q, want %q", v.ExitReason, ReasonLeft)
	}
}

// fresh reports whether n's majority contact is within d of the simulated now.
func (s *sim) fresh(n *simNode, d time.Duration) bool {
	c := n.core.View().MajorityContact
	return !c.IsZero() && s.now.Sub(c) <= d
}

// A member cut off from the majority, fully or behind a bridge member, loses its
// majority contact (sharding's hosting lease ends); the majority keeps it, and the
// cut-off member has it again once healed.
func TestSimMajorityContact(t *testing.T) {
	s := newSim(t, nil) // heartbeats every second
	nodes := s.startCluster(5)
	s.run(3 * time.Second)
	for _, n := range nodes {
		if !s.fresh(n, 2*time.Second) {
			t.Fatalf("%s: majority contact %v at %v, want within 2 s:\n%s", n.addr, n.core.View().MajorityContact, s.now, s.describe())
		}
	}
	// A bridge: nodes[0] reaches only nodes[1], which reaches everyone.
	s.partition(nodes[:1], nodes[2:])
	s.run(4 * time.Second)
	if s.fresh(nodes[0], 3*time.Second) {
		t.Fatalf("%s, behind a bridge, kept majority contact: %v at %v", nodes[0].addr, nodes[0].core.View().MajorityContact, s.now)
	}
	for _, n := range nodes[1:] {
		if !s.fresh(n, 2*time.Second) {
			t.Fatalf("%s, on the majority side, lost majority contact: %v at %v", n.addr, n.core.View().MajorityContact, s.now)
		}
	}
	// A minority of two: both lose it.
	s.heal()
	s.partition(nodes[:2], nodes[2:])
	s.run(4 * time.Second)
	for i, n := range nodes {
		if got, want := s.fresh(n, 3*time.Second), i >= 2; got != want {
			t.Fatalf("%s: fresh majority contact %v, want %v (contact %v at %v)", n.addr, got, want, n.core.View().MajorityContact, s.now)
		}
	}
	s.heal()
	s.until(5*time.Second, "majority contact back everywhere", func() bool {
		for _, n := range nodes {
			if !n.core.View().Exited && !s.fresh(n, 2*time.Second) {
				return false
			}
		}
		return true
	})
}

// With more members than the monitored ones can make a majority of (here 15, each
// monitoring 5, a majority needing 7 others), members still have majority contact, from
// heartbeats for contact only; and a side of 7 cut off from 8 loses it while the 8 keep
// it. Without the contact heartbeats no member of 15 ever had it (no shard could be
// hosted under sharding's lease).
func TestSimMajorityContactBeyondTheMonitoredMembers(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(15)
	s.until(30*time.Second, "majority contact everywhere", func() bool {
		for _, n := range nodes {
			if !s.fresh(n, 2*time.Second) {
				return false
			}
		}
		return true
	})
	// The majority side's contact heartbeats go along the ring, partly to the cut-off
	// side until the failure detectors mark it unreachable: it may lapse for that while.
	s.partition(nodes[:7], nodes[7:])
	s.until(30*time.Second, "the 8 with contact, the 7 without", func() bool {
		for i, n := range nodes {
			if s.fresh(n, 3*time.Second) != (i >= 7) {
				return false
			}
		}
		return true
	})
	s.run(5 * time.Second)
	for i, n := range nodes[:7] {
		if s.fresh(n, 3*time.Second) {
			t.Fatalf("%s (cut off, %d) has majority contact %v at %v", n.addr, i, n.core.View().MajorityContact, s.now)
		}
	}
}

// Faults seed 11214: a member paused past the failure detector was downed by the
// others; when it resumed, they still answered its heartbeats, so it had majority
// contact again, in a view it still saw converged, and hosted an entity and
// acknowledged a write before their gossip told it it was down. A downed member gets
// no heartbeat answers: its majority contact never covers a moment after it resumed.
// At 15 members most of its contact comes from contact requests (msgContact), which
// get no answers either.
func TestSimDownedMemberGetsNoMajorityContact(t *testing.T) {
	for _, n := range []int{5, 15} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testDownedMemberGetsNoMajorityContact(t, n) })
	}
}

func testDownedMemberGetsNoMajorityContact(t *testing.T, size int) {
	s := newSim(t, nil)
	nodes := s.startCluster(size)
	s.run(3 * time.Second)
	paused, rest := nodes[size-1], nodes[:size-1]
	paused.paused = true
	s.until(30*time.Second, "the paused member downed", func() bool {
		for _, n := range rest {
			down := false
			for _, m := range n.core.View().Members {
				down = down || m.Node() == paused.core.self() && m.Status == StatusDown
			}
			if !down {
				return false
			}
		}
		return true
	})
	paused.paused = false
	resumed := s.now
	for !paused.core.View().Exited {
		if c := paused.core.View().MajorityContact; !c.Before(resumed) {
			t.Fatalf("the downed member has majority contact as of %v, after it resumed at %v:\n%s", c, resumed, s.describe())
		}
		if s.now.Sub(resumed) > 20*time.Second {
			t.Fatalf("the downed member did not learn it is out within 20 s:\n%s", s.describe())
		}
		s.run(s.step)
	}
}

// Faults seeds 11053 and 11573: a bridge partition of 6 members ({0}|4|{1,2,3,5}: member 4
// reaches everyone, member 0 and the other four do not reach each other) downed the
// whole cluster. Member 0's observations (the four unreachable) reached the four
// through the bridge, so each of them saw the other three unreachable too, took itself
// for the leader of a side of two (itself and the bridge) and downed that side. The
// split brain resolver now leaves out the observations of members that the deciding
// member itself cannot reach (Akka's resolver likewise sets apart indirectly connected
// members): the four down member 0, member 0 downs its own side, and the four remain.
func TestSimBridgePartitionKeepsTheMajority(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(6)
	s.run(3 * time.Second)
	cut, bridge := nodes[0], nodes[4]
	majority := []*simNode{nodes[1], nodes[2], nodes[3], nodes[5]}
	s.partition([]*simNode{cut}, majority)
	s.run(40 * time.Second)
	for _, n := range majority {
		if n.core.View().Exited {
			t.Fatalf("%s, on the majority side of the bridge, is out of the cluster:\n%s", n.addr, s.describe())
		}
	}
	if !cut.core.View().Exited {
		t.Fatalf("%s, cut off from the majority, is still in the cluster:\n%s", cut.addr, s.describe())
	}
	s.until(20*time.Second, "the majority converged without the cut-off member", func() bool {
		return s.allSee(majority, StatusUp, append(majority, bridge)...) || s.allSee(majority, StatusUp, majority...)
	})
}

// Faults seed 13364: a member restarted alone formed a new cluster, and gossip from a
// process of the old cluster (downed, not yet stopped) sent to its address was merged:
// the old cluster's members, its own previous incarnation among them, came back into the
// new cluster as up. Gossip from a process the state does not hold is ignored.
func TestSimGossipFromAnotherClusterIsIgnored(t *testing.T) {
	s := newSim(t, nil)
	nodes := s.startCluster(2)
	other := s.add() // no seeds: a cluster of its own
	s.until(10*time.Second, "the other cluster up", func() bool { return s.allSee([]*simNode{other}, StatusUp, other) })
	w := other.core.gossip.wire()
	nodes[0].core.Step(s.now, Message{Kind: msgGossip, From: other.core.self(), Gossip: &w})
	for _, m := range nodes[0].core.View().Members {
		if m.Node() == other.core.self() {
			t.Fatalf("the other cluster's member is in this one after its gossip:\n%s", s.describe())
		}
	}
	s.run(5 * time.Second)
	if !s.allSee(nodes, StatusUp, nodes...) {
		t.Fatalf("the cluster changed:\n%s", s.describe())
	}
}

// A leader that leaves moves itself to exiting and exits in the same tick; its process
// then stops. Unless it tells the others first, they keep it as leaving, then see it
// unreachable, and only their resolver takes it out, by downing it (host's
// TestReadyProbe waited past 15 s for the removal of a leaver that was the leader of
// two members). The others must see it removed, never downed.
func TestSimLeavingLeaderIsRemovedNotDowned(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d members", n), func(t *testing.T) {
			s := newSim(t, nil)
			nodes := s.startCluster(n)
			leaver, rest := nodes[0], nodes[1:]
			if v := leaver.core.View(); v.Leader != leaver.core.self() {
				t.Fatalf("the leaver is not the leader:\n%s", s.describe())
			}
			leaver.core.Leave(leaver.addr)
			s.until(20*time.Second, "the leaver removed", func() bool {
				if leaver.core.View().Exited {
					leaver.crashed = true // the process stops once it has left
				}
				for _, o := range rest {
					for _, m := range o.core.View().Members {
						if m.Node() == leaver.core.self() && m.Status == StatusDown {
							t.Fatalf("%s downed the leaver:\n%s", o.addr, s.describe())
						}
					}
				}
				return s.allSee(rest, StatusUp, rest...)
			})
		})
	}
}

// Faults seed 240900: a member cut off from the two others (paused) heard from one of
// them after the cut, through a response already on its way, and for longer than the
// resolver's stable-after counted it on its own side: as the leader of a majority of
// two, it downed the third member, while the two downed it. Each side then ran alone as
// a cluster, with its own copies of every entity. A leader now decides only on a state
// every member it counts on its side has seen (Akka's convergence among the reachable):
// a member that has not seen the state may count the leader on the other side.
func TestSeed240900ALeaderDecidesOnlyOnAStateItsSideHasSeen(t *testing.T) {
	s := newSim(t, func(c *CoreConfig) {
		local := DefaultLocalCoreConfig()
		c.HeartbeatInterval, c.FailureDetector, c.GossipInterval = local.HeartbeatInterval, local.FailureDetector, local.GossipInterval
		c.SBRStableAfter, c.JoinRetryInterval = local.SBRStableAfter, local.JoinRetryInterval
	})
	s.inFlight = true
	nodes := s.startCluster(3)
	// Member 2's messages take 1.5 s to arrive: longer than a failure detector takes
	// to find member 1 unreachable, and longer than the resolver's stable-after.
	s.delay[nodes[2].addr] = func(time.Time) time.Duration { return 1500 * time.Millisecond }
	s.run(5 * time.Second)
	for _, n := range nodes {
		if v := n.core.View(); v.Exited || !v.Converged {
			t.Fatalf("%s before the cut: %+v\n%s", n.addr, v, s.describe())
		}
	}
	s.partition(nodes[:1], nodes[1:])
	s.run(20 * time.Second)
	if !nodes[0].core.View().Exited {
		t.Fatalf("%s, cut off from both others, is still in the cluster:\n%s", nodes[0].addr, s.describe())
	}
	for _, n := range nodes[1:] {
		if v := n.core.View(); v.Exited {
			t.Fatalf("%s, on the majority side, is out of the cluster (%s):\n%s", n.addr, v.ExitReason, s.describe())
		}
	}
}
