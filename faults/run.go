package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/history"
)

// Options tune a run.
type Options struct {
	// Dir holds the members' data directories (one per slot). Required.
	Dir string
	// Clients is the number of concurrent clients; default 4.
	Clients int
	// Logger receives the members' logs; nil discards them.
	Logger *slog.Logger
	// Transfers adds the transfer workload (transfer.go): a client moving units
	// between accounts, and the check that the units are conserved.
	Transfers bool
}

// Result is what a run saw.
type Result struct {
	Schedule Schedule
	// Failures are the violations found: non-linearizable entities, majority reads
	// that missed acknowledged writes, double activations. None: the run passed.
	Failures []string
	// Errors are the harness's troubles (a member that could not start or rejoin);
	// they are not violations.
	Errors []string
	// Unknown lists the entities whose check ran out of time.
	Unknown []string
	// Applied describes each fault as applied (the members it named).
	Applied []string
	// Operations: all, acknowledged, ambiguous.
	Ops, Acked, Ambiguous int
	// Operations called during a partition on a member of the majority side, and of the
	// minority side, and how many of each were acknowledged.
	MajorityOps, MajorityAcked, MinorityOps, MinorityAcked int
	// Pairs of a distributed data majority read and a majority increment acknowledged
	// before it: checked, and left out because the membership changed between them so
	// that their majorities need not meet (checkMajority).
	MajorityPairsChecked, MajorityPairsSkipped int
	// Lives is the number of entity activations.
	Lives int
	// Scheduled messages (scheduled.go): scheduled, and acknowledged.
	Scheduled, ScheduledAcked int
	// Took is the run's wall time.
	Took time.Duration
	// Transfers says what the transfer workload did (empty without it).
	Transfers string
}

// Failed reports whether the run found a violation.
func (r Result) Failed() bool { return len(r.Failures) > 0 }

// Run runs one schedule: it starts the members, runs clients while the faults happen
// one after the other, heals everything, reads every entity a last time, stops the
// members and checks the history.
func Run(ctx context.Context, s Schedule, o Options) (res Result) {
	begin := time.Now()
	if o.Clients <= 0 {
		o.Clients = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res = Result{Schedule: s}
	reg := newRegistry(begin)
	h := history.New(begin)
	c := newCluster(s.Seed, o.Dir, reg, o.Logger)
	defer func() { res.Took = time.Since(begin) }()
	r := &runner{c: c, s: s, res: &res, minority: map[int]bool{}}

	for i := range s.Members {
		if err := c.start(ctx, c.members[i]); err != nil {
			res.Errors = append(res.Errors, err.Error())
			c.stopAll()
			return res
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	c.waitConverged(cctx)
	cancel()

	// The clients' goroutines live no longer than the run, which stops them and waits
	// for them before it checks the history.
	wctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range o.Clients {
		cl := &client{c: c, h: h, r: rand.New(rand.NewPCG(s.Seed, uint64(i)+1)), cid: h.NewClient(), n: i,
			minority: r.sideOf}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.run(wctx)
		}()
	}
	tr := &transfers{}
	if o.Transfers {
		r := rand.New(rand.NewPCG(s.Seed, uint64(o.Clients)+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runTransfers(wctx, r, tr)
		}()
	}
	// The scheduled messages' workload, on a random stream of its own so that the
	// clients' operations stay what each seed drew before it.
	sched := &scheduler{c: c, r: rand.New(rand.NewPCG(s.Seed, 1<<32)), sent: map[string]scheduledOutcome{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sched.run(wctx)
	}()
	sleep(ctx, 300*time.Millisecond)
	for _, f := range s.Faults {
		o.Logger.Info("faults: applying", "fault", f.String())
		res.Applied = append(res.Applied, r.apply(ctx, f))
		o.Logger.Info("faults: applied", "fault", res.Applied[len(res.Applied)-1])
		r.recover(ctx)
		sleep(ctx, s.Gap)
	}
	c.setPartition(nil)
	c.net.Frames.SetFaults(cluster.InmemFaults{})
	r.recover(ctx)
	sleep(ctx, 300*time.Millisecond)
	stopClients()
	wg.Wait()

	// A last read of everything, so that a lost write shows.
	final := &client{c: c, h: h, r: rand.New(rand.NewPCG(s.Seed, 0)), cid: h.NewClient(), minority: r.sideOf}
	if t := c.targets(); len(t) > 0 {
		for i, id := range counterIDs {
			final.do(ctx, t[i%len(t)], history.Op{Kind: history.Get, Key: typeCounter + "/" + id})
		}
		for i, id := range registerIDs {
			final.do(ctx, t[i%len(t)], history.Op{Kind: history.Read, Key: typeRegister + "/" + id})
		}
		final.do(ctx, t[0], history.Op{Kind: opSum, Key: ddataKey})
	}
	if o.Transfers {
		violations, trouble := c.checkTransfers(ctx, tr)
		res.Failures = append(res.Failures, violations...)
		if trouble != "" {
			res.Errors = append(res.Errors, trouble)
		}
		res.Transfers = tr.summary()
	}
	schedFailures, schedUnknown, scheduled, schedAcked := sched.check(ctx)
	res.Failures = append(res.Failures, schedFailures...)
	if schedUnknown != "" {
		res.Unknown = append(res.Unknown, schedUnknown)
	}
	res.Scheduled, res.ScheduledAcked = scheduled, schedAcked
	c.stopAll()

	ops := h.Ops()
	n := history.Count(ops)
	res.Ops, res.Acked, res.Ambiguous = n.Ops, n.Acked, n.Ambiguous
	res.MajorityOps, res.MajorityAcked, res.MinorityOps, res.MinorityAcked = n.MajorityOps, n.MajorityAcked, n.MinorityOps, n.MinorityAcked
	violations, unknown := history.CheckEntities(ops, checkTimeout)
	res.Failures = append(res.Failures, violations...)
	res.Unknown = append(res.Unknown, unknown...)
	mc := checkMajority(ops)
	res.Failures = append(res.Failures, mc.Failures...)
	res.MajorityPairsChecked, res.MajorityPairsSkipped = mc.Checked, mc.Skipped
	doubles, lives := reg.Doubles()
	res.Failures = append(res.Failures, doubles...)
	res.Lives = lives
	return res
}

// runner applies a schedule's faults to a cluster.
type runner struct {
	c   *Cluster
	s   Schedule
	res *Result

	mu          sync.Mutex
	partitioned bool
	minority    map[int]bool
}

// sideOf reports whether slot is on the minority side of the partition now, and
// whether a partition is on.
func (r *runner) sideOf(slot int) (minority, partitioned bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.minority[slot], r.partitioned
}

func (r *runner) setSides(minority []*member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partitioned = minority != nil
	r.minority = map[int]bool{}
	for _, m := range minority {
		r.minority[m.slot] = true
	}
}

func slots(ms []*member) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprint(m.slot))
	}
	return "{" + strings.Join(s, ",") + "}"
}

// apply applies one fault, waits for its duration and undoes it; it returns what it did.
func (r *runner) apply(ctx context.Context, f Fault) string {
	c := r.c
	run := c.running()
	if len(run) == 0 {
		return f.Kind.String() + ": no member running"
	}
	switch f.Kind {
	case Partition, OneWay:
		a, b := sides(run, f.Pick, f.Side)
		c.setPartition(cutBetween(a, b, f.Kind == OneWay))
		r.setSides(a)
		sleep(ctx, f.For)
		c.setPartition(nil)
		r.setSides(nil)
		return fmt.Sprintf("%s %s|%s for %v", f.Kind, slots(a), slots(b), f.For)
	case Bridge:
		if len(run) < 3 {
			return "bridge: fewer than 3 members"
		}
		bridge := pick(run, f.Pick)
		rest := slices.DeleteFunc(slices.Clone(run), func(m *member) bool { return m == bridge })
		a, b := sides(rest, f.Pick+1, f.Side)
		c.setPartition(cutBetween(a, b, false))
		r.setSides(a)
		sleep(ctx, f.For)
		c.setPartition(nil)
		r.setSides(nil)
		return fmt.Sprintf("bridge %s|%d|%s for %v", slots(a), bridge.slot, slots(b), f.For)
	case Crash:
		m := pick(run, f.Pick)
		wipe := f.Wipe
		if wipe && len(run) == 1 {
			// The cluster has shrunk to this member (the others downed): its disk holds
			// the only copy of what it acknowledged since, and wiping it loses that
			// whatever the store does (seed 40295). A lost disk is a fault the store
			// tolerates while other replicas hold the data; the harness draws no more.
			wipe = false
		}
		c.crash(m)
		sleep(ctx, f.For)
		r.restart(ctx, m, wipe)
		return fmt.Sprintf("crash %d, restart after %v (wipe %v)", m.slot, f.For, wipe)
	case Pause:
		m := pick(run, f.Pick)
		c.mu.Lock()
		m.paused = true
		c.mu.Unlock()
		c.setIsolated(m.slot, true)
		sleep(ctx, f.For)
		c.setIsolated(m.slot, false)
		c.mu.Lock()
		m.paused = false
		c.mu.Unlock()
		return fmt.Sprintf("pause %d for %v", m.slot, f.For)
	case Lossy, Duplicate:
		c.net.Frames.SetFaults(cluster.InmemFaults{Loss: f.Loss, Duplicate: f.Duplicate, Reorder: f.Reorder,
			Delay: f.NetDelay, Seed: r.s.Seed})
		sleep(ctx, f.For)
		c.net.Frames.SetFaults(cluster.InmemFaults{})
		return f.String()
	case Leave:
		if len(run) < 3 {
			return "leave: fewer than 3 members"
		}
		m := pick(run, f.Pick)
		c.leave(m)
		sleep(ctx, f.For)
		j := r.join(ctx)
		return fmt.Sprintf("leave %d, join %d after %v", m.slot, j, f.For)
	case Join:
		return fmt.Sprintf("join %d", r.join(ctx))
	case KillCoordinator:
		j := r.join(ctx)
		sleep(ctx, f.Delay)
		m := c.coordinatorMember()
		if m == nil {
			return "kill-coordinator: no coordinator"
		}
		c.crash(m)
		sleep(ctx, f.For)
		r.restart(ctx, m, false)
		return fmt.Sprintf("join %d, crash coordinator's member %d after %v, restart after %v", j, m.slot, f.Delay, f.For)
	case ClockSkew:
		m := pick(run, f.Pick)
		c.skew(m, f.Skew)
		sleep(ctx, f.For)
		c.skew(m, 0)
		return fmt.Sprintf("clock of %d skewed by %v for %v", m.slot, f.Skew, f.For)
	case ClockDrift:
		m := pick(run, f.Pick)
		c.drift(m, f.Rate)
		sleep(ctx, f.For)
		c.drift(m, 1)
		return fmt.Sprintf("clock of %d at rate %.3f for %v", m.slot, f.Rate, f.For)
	}
	return "unknown fault " + f.Kind.String()
}

// join starts a member in a free slot (a fresh data directory); -1 if none is free.
func (r *runner) join(ctx context.Context) int {
	m := r.c.free()
	if m == nil {
		return -1
	}
	r.restart(ctx, m, true)
	return m.slot
}

func (r *runner) restart(ctx context.Context, m *member, wipe bool) {
	if wipe && len(r.c.running()) == 0 {
		// With no member running, the member started first forms a new cluster: an
		// operator starts one that has its data, not one with an empty directory,
		// which would serve the entities as new (seed 13340: a crash with a wipe after
		// the other members had downed themselves). The downed members come back first.
		r.restartExited(ctx)
	}
	if err := r.c.restart(ctx, m, wipe); err != nil {
		r.res.Errors = append(r.res.Errors, err.Error())
	}
}

// recover brings the cluster back after a fault, as a supervisor would: members the
// cluster downed (some learn it only after the heal) restart with their data, until the
// running members converge with none exited. Each fault then hits a whole cluster.
func (r *runner) recover(ctx context.Context) {
	for range 4 {
		sleep(ctx, 300*time.Millisecond)
		restarted := r.restartExited(ctx)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok := r.c.waitConverged(cctx)
		cancel()
		if ok && !restarted {
			return
		}
	}
}

// restartExited restarts, with their data, the members the cluster downed; it reports
// whether there were any.
func (r *runner) restartExited(ctx context.Context) bool {
	r.c.mu.Lock()
	var exited []*member
	for _, m := range r.c.members {
		if m.state == stateExited {
			exited = append(exited, m)
		}
	}
	r.c.mu.Unlock()
	for _, m := range exited {
		r.restart(ctx, m, false)
	}
	return len(exited) > 0
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Shrink reruns a failing schedule without each of its faults in turn, keeping a
// removal while the run still fails, and returns the smallest failing schedule found
// with the indexes of the original faults it keeps. run runs a schedule.
func Shrink(s Schedule, run func(Schedule) Result) (Schedule, []int) {
	keep := make([]int, len(s.Faults))
	for i := range keep {
		keep[i] = i
	}
	for i := 0; i < len(keep); {
		try := slices.Delete(slices.Clone(keep), i, i+1)
		if run(s.Keep(try)).Failed() {
			keep = try
			continue
		}
		i++
	}
	return s.Keep(keep), keep
}
