package main

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// The membership experiment runs n cluster.Cores, the membership protocol itself, on a
// simulated network with a simulated clock: every message a Core returns is encoded
// with cluster.EncodeMessage (the bytes are what is counted), delivered after a
// latency of 1-3 ms and decoded with cluster.DecodeMessage before the receiver's
// Step; each Core is ticked every 100 ms (Membership's TickInterval) at its own phase.
// Nothing sleeps: an hour of cluster time costs only the CPU of the Cores and the
// codec. What it leaves out is the carrier: memberlist's own probes and push-pull
// exchanges (docs/scale.md, "What the membership figures leave out").

const (
	tickInterval = 100 * time.Millisecond // cluster.DefaultMembershipConfig's TickInterval
	phaseLimit   = 300 * time.Second      // simulated: a phase that takes longer is reported as not reached
	restWindow   = 10 * time.Second       // simulated: the window at rest over which gossip bytes are counted
)

type simEvent struct {
	at   time.Time
	seq  uint64
	to   int    // node index
	msg  []byte // nil: a tick
	from int
}

type eventQueue []simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simNode struct {
	addr    string
	core    *cluster.Core
	crashed bool
	side    int // partition side; links between different sides are cut
}

type memSim struct {
	now    time.Time
	seq    uint64
	q      eventQueue
	nodes  []*simNode
	index  map[string]int
	rng    *rand.Rand
	bytes  uint64 // encoded bytes sent
	msgs   uint64
	cutOn  bool
	lc     cluster.CoreConfig
	encErr error
}

func newMemSim(n int, lc cluster.CoreConfig, seed int64) (*memSim, error) {
	s := &memSim{now: time.Unix(1_800_000_000, 0), index: map[string]int{}, rng: rand.New(rand.NewSource(seed)), lc: lc}
	for i := range n {
		addr := fmt.Sprintf("10.%d.%d.%d:7946", i/65536, (i/256)%256, i%256)
		cfg := lc
		// A random UID as Membership draws one (8 bytes on the wire, where a small
		// one would take 1 to 3 and flatter every message that names a member).
		cfg.Self = cluster.UniqueAddress{Address: addr, UID: cluster.UID(s.rng.Uint64() | 1<<63)}
		cfg.TransportAddr = addr
		cfg.RandomSeed = seed*7919 + int64(i)
		if i > 0 {
			cfg.Seeds = []string{s.nodesAddr(0)}
		}
		core, err := cluster.NewCore(cfg)
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, &simNode{addr: addr, core: core})
		s.index[addr] = i
		// Each member ticks at its own phase; the first starts the cluster a tick ahead.
		phase := time.Duration(s.rng.Int63n(int64(tickInterval)))
		if i > 0 {
			phase += tickInterval
		}
		s.push(simEvent{at: s.now.Add(phase), to: i})
	}
	return s, nil
}

func (s *memSim) nodesAddr(i int) string { return s.nodes[i].addr }

func (s *memSim) push(e simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *memSim) send(from int, outs []cluster.Outbound) {
	for _, o := range outs {
		b, err := cluster.EncodeMessage(o.Msg)
		if err != nil {
			s.encErr = err
			continue
		}
		s.bytes += uint64(len(b))
		s.msgs++
		to, ok := s.index[o.To.Address]
		if !ok {
			continue
		}
		latency := time.Millisecond + time.Duration(s.rng.Int63n(int64(2*time.Millisecond)))
		s.push(simEvent{at: s.now.Add(latency), to: to, from: from, msg: b})
	}
}

// runUntil processes events until simulated time reaches end.
func (s *memSim) runUntil(end time.Time) error {
	for s.q.Len() > 0 && !s.q[0].at.After(end) {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		n := s.nodes[e.to]
		if e.msg == nil {
			if n.crashed {
				continue
			}
			s.send(e.to, n.core.Tick(s.now))
			s.push(simEvent{at: s.now.Add(tickInterval), to: e.to})
			continue
		}
		if n.crashed || (s.cutOn && s.nodes[e.from].side != n.side) {
			continue
		}
		m, err := cluster.DecodeMessage(e.msg)
		if err != nil {
			return fmt.Errorf("decoding a message to %s: %w", n.addr, err)
		}
		s.send(e.to, n.core.Step(s.now, m))
	}
	s.now = end
	if s.encErr != nil {
		return s.encErr
	}
	return nil
}

// waitFor advances in steps of a tick until cond holds or limit passes; it returns the
// simulated time taken, or -1.
func (s *memSim) waitFor(limit time.Duration, cond func() bool) (time.Duration, error) {
	start := s.now
	for s.now.Sub(start) <= limit {
		if cond() {
			return s.now.Sub(start), nil
		}
		if err := s.runUntil(s.now.Add(tickInterval)); err != nil {
			return -1, err
		}
	}
	return -1, nil
}

func (s *memSim) live() []*simNode {
	var out []*simNode
	for _, n := range s.nodes {
		if !n.crashed {
			out = append(out, n)
		}
	}
	return out
}

// allSee reports whether every node of ns has a view for which ok holds; the first
// that fails ends the check, and the next check starts with it (most checks fail
// early while the cluster is changing, and at 1,000 members a View of each on every
// tick was most of the harness's CPU).
func allSee(ns []*simNode, ok func(v cluster.View) bool) bool {
	if len(ns) == 0 {
		return true
	}
	start := lastFailing[len(ns)] % len(ns)
	for k := range ns {
		i := (start + k) % len(ns)
		if !ok(ns[i].core.View()) {
			lastFailing[len(ns)] = i
			return false
		}
	}
	return true
}

// lastFailing is, by the length of the list checked, the index allSee last found
// failing.
var lastFailing = map[int]int{}

// upView reports whether v is converged with exactly want members, all up and reachable.
func upView(v cluster.View, want int) bool {
	if !v.Converged || len(v.Members) != want {
		return false
	}
	for _, m := range v.Members {
		if m.Status != cluster.StatusUp || !m.Reachable {
			return false
		}
	}
	return true
}

func findMember(v cluster.View, addr string) (cluster.Member, bool) {
	for _, m := range v.Members {
		if m.Address == addr {
			return m, true
		}
	}
	return cluster.Member{}, false
}

// memRow is one size's figures; a duration of -1 is a phase not reached within
// phaseLimit, NaN a phase not run.
type memRow struct {
	N              int
	Converge       time.Duration // all n see all n up, converged, after all joined at once
	Unreachable    time.Duration // after one crash: every live member sees it unreachable (or gone)
	Downed         time.Duration // ... sees it down (or gone)
	Removed        time.Duration // ... no longer lists it
	LeaveRemoved   time.Duration // after a graceful leave: no live member lists it
	PartitionSplit time.Duration // after cutting off a third: the two thirds list only themselves
	RestBytes      float64       // gossip bytes per member per second at rest
	JoinBytes      float64       // gossip bytes per member per second from the start until converged (churn: n joining)
	CrashBytes     float64       // ... from one crash until it is removed everywhere (churn: a failure)
	RestMsgs       float64       // messages per member per second at rest
	RestCPU        float64       // CPU seconds per member per simulated second at rest (this process, the codec included)
	HeapPerMember  float64       // bytes of heap per member after convergence
	Wall           time.Duration // real time of the whole run
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// runMembership runs the phases for n members with the lifecycle lc and logs progress
// with logf.
// Above churnMax members the leave and partition phases are not run (notRun): their
// simulated minutes cost too much CPU on a small machine. The phases in skip (crash,
// leave) are not run either; the next then starts from the cluster as it is.
func runMembership(n int, lc cluster.CoreConfig, seed int64, churnMax int, skip map[string]bool, logf func(string, ...any)) (memRow, error) {
	wall := time.Now()
	row := memRow{N: n}
	base := heapInUse()
	s, err := newMemSim(n, lc, seed)
	if err != nil {
		return row, err
	}
	// Join: all n start together, each with the first as its seed.
	all := s.nodes
	if row.Converge, err = s.waitFor(phaseLimit, func() bool {
		// The leader's view first: cheap, and it is the last to see itself converged
		// only rarely.
		return upView(all[0].core.View(), n) && allSee(all, func(v cluster.View) bool { return upView(v, n) })
	}); err != nil || row.Converge < 0 {
		return row, err
	}
	row.JoinBytes = float64(s.bytes) / float64(n) / math.Max(row.Converge.Seconds(), tickInterval.Seconds())
	logf("n=%d converged in %v simulated (%v real), %.0f B/s per member while joining", n, row.Converge, time.Since(wall).Round(time.Millisecond), row.JoinBytes)
	row.HeapPerMember = float64(int64(heapInUse())-int64(base)) / float64(n)

	// At rest: bytes, messages and CPU over a window.
	b0, m0, c0 := s.bytes, s.msgs, cpuTime()
	if err := s.runUntil(s.now.Add(restWindow)); err != nil {
		return row, err
	}
	secs := restWindow.Seconds()
	row.RestBytes = float64(s.bytes-b0) / float64(n) / secs
	row.RestMsgs = float64(s.msgs-m0) / float64(n) / secs
	row.RestCPU = (cpuTime() - c0).Seconds() / float64(n) / secs
	logf("n=%d at rest: %.0f B/s and %.1f messages/s per member, %.0f µs of CPU per member per simulated second",
		n, row.RestBytes, row.RestMsgs, row.RestCPU*1e6)

	row.Unreachable, row.Downed, row.Removed, row.LeaveRemoved, row.PartitionSplit = notRun, notRun, notRun, notRun, notRun
	row.CrashBytes = math.NaN()
	live := s.live()
	if !skip["crash"] {
		if err := s.crashPhase(&row, logf); err != nil {
			return row, err
		}
		live = s.live()
	}
	if n > churnMax {
		row.Wall = time.Since(wall)
		return row, nil
	}
	if !skip["leave"] && n >= 3 && row.Removed != -1 {
		// A graceful leave of the second to last member, once the view has settled again.
		if _, err := s.waitFor(phaseLimit, func() bool {
			return allSee(live, func(v cluster.View) bool { return upView(v, len(live)) })
		}); err != nil {
			return row, err
		}
		leaver := live[len(live)-1]
		leaver.core.Leave(leaver.addr)
		rest := live[:len(live)-1]
		if row.LeaveRemoved, err = s.waitFor(phaseLimit, func() bool {
			return allSee(rest, func(v cluster.View) bool { _, ok := findMember(v, leaver.addr); return !ok })
		}); err != nil {
			return row, err
		}
		leaver.crashed = true // its process stops once it has left
		logf("n=%d leave: removed in %v", n, row.LeaveRemoved)
	}
	if row.Removed == -1 || row.LeaveRemoved == -1 {
		row.Wall = time.Since(wall)
		return row, nil // a phase did not end: the next would start from an unsettled cluster
	}

	// A partition that cuts off a third: the majority side (keep-majority) downs and
	// removes the others.
	rest := s.live()
	if len(rest) >= 3 {
		if _, err := s.waitFor(phaseLimit, func() bool {
			return allSee(rest, func(v cluster.View) bool { return upView(v, len(rest)) })
		}); err != nil {
			return row, err
		}
		cut := len(rest) / 3
		majority := rest[:len(rest)-cut]
		for _, m := range rest[len(rest)-cut:] {
			m.side = 1
		}
		s.cutOn = true
		t0, w0, next := s.now, time.Now(), 10*time.Second
		if row.PartitionSplit, err = s.waitFor(phaseLimit, func() bool {
			if el := s.now.Sub(t0); el >= next {
				// Progress, as the majority's first member sees it: the long phase at
				// 1,000 members is worth watching.
				next += 10 * time.Second
				v := majority[0].core.View()
				unreachable, down := 0, 0
				for _, m := range v.Members {
					if !m.Reachable {
						unreachable++
					}
					if m.Status == cluster.StatusDown {
						down++
					}
				}
				logf("n=%d partition: %v simulated (%v real): %s sees %d members, %d unreachable, %d down, converged %v",
					n, el, time.Since(w0).Round(time.Second), majority[0].addr, len(v.Members), unreachable, down, v.Converged)
			}
			return allSee(majority, func(v cluster.View) bool { return len(v.Members) == len(majority) && v.Converged })
		}); err != nil {
			return row, err
		}
		logf("n=%d partition of %d: majority alone in %v", n, cut, row.PartitionSplit)
	}
	row.Wall = time.Since(wall)
	return row, nil
}

// crashPhase crashes the last member and measures until every live member has seen
// it unreachable, down, and no longer lists it (into row).
func (s *memSim) crashPhase(row *memRow, logf func(string, ...any)) error {
	// One crash: the last member (never the leader, the lowest address).
	victim := s.nodes[len(s.nodes)-1]
	victim.crashed = true
	live := s.live()
	t0 := s.now
	cb0 := s.bytes
	var tU, tD time.Duration = -1, -1
	// The three conditions are checked in turn, each with allSee: a member that no
	// longer lists the victim has seen it unreachable and down too.
	removed, err := s.waitFor(phaseLimit, func() bool {
		if tU < 0 {
			if !allSee(live, func(v cluster.View) bool { m, ok := findMember(v, victim.addr); return !ok || !m.Reachable }) {
				return false
			}
			tU = s.now.Sub(t0)
		}
		if tD < 0 {
			if !allSee(live, func(v cluster.View) bool {
				m, ok := findMember(v, victim.addr)
				return !ok || m.Status == cluster.StatusDown
			}) {
				return false
			}
			tD = s.now.Sub(t0)
		}
		return allSee(live, func(v cluster.View) bool { _, ok := findMember(v, victim.addr); return !ok })
	})
	if err != nil {
		return err
	}
	row.Unreachable, row.Downed, row.Removed = tU, tD, removed
	if removed > 0 {
		row.CrashBytes = float64(s.bytes-cb0) / float64(len(live)) / removed.Seconds()
	}
	if tD < 0 && removed >= 0 {
		row.Downed = removed
	}
	logf("n=%d crash: unreachable %v, downed %v, removed %v", len(s.nodes), row.Unreachable, row.Downed, row.Removed)

	return nil
}

// notRun marks a phase not run.
const notRun = -2

func secondsOrNaN(d time.Duration) float64 {
	if d < 0 {
		return math.NaN()
	}
	return d.Seconds()
}
