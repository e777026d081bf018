package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// member states.
const (
	stateRunning = iota
	stateExited  // downed or removed by the cluster: its sharding aborted, waiting for a restart
	stateStopped // crashed, left, or never started
)

// member is one slot of the cluster: a fixed gossip and transport address and data
// directory, and the process running there, if any.
type member struct {
	slot int
	addr clustertest.Addr
	dir  string

	// The process; nil while stopped.
	ms     *cluster.Membership
	msgr   *cluster.Messenger
	store  *ddata.BoltStore
	repl   *ddata.Replicator
	states *replstore.Store
	sh     *sharding.Sharding
	watch  *owner.Group // runs watchExit

	state  int // guarded by Cluster.mu
	paused bool
	ever   bool // has run
}

// Cluster is the members of one run on one in-memory network.
type Cluster struct {
	seed     uint64
	base     string // data directories
	log      *slog.Logger
	net      *clustertest.Network
	reg      *Registry
	life     cluster.CoreConfig
	members  [MaxMembers]*member
	mu       sync.Mutex
	restarts int

	netMu   sync.Mutex
	blocked map[[2]int]bool // slot pairs (from, to) cut, as applied to both networks
	// isolated slots (crashed, paused) and the partition's cut slot pairs.
	isolated  map[int]bool
	partition map[[2]int]bool
	// clocks are the members' simulated clocks, by slot (a restarted process keeps its
	// slot's clock, as it would its machine's).
	clocks [MaxMembers]*clustertest.Clock
}

// newCluster prepares the slots; start starts members.
func newCluster(seed uint64, base string, reg *Registry, log *slog.Logger) *Cluster {
	c := &Cluster{seed: seed, base: base, log: log, reg: reg, net: clustertest.NewNetwork(),
		blocked: map[[2]int]bool{}, isolated: map[int]bool{}, partition: map[[2]int]bool{}}
	// The local profile: a crash is suspected within about a second, and the split brain
	// resolver acts after a second of stability.
	c.life = cluster.DefaultLocalCoreConfig()
	for i := range c.members {
		c.members[i] = &member{slot: i,
			addr: clustertest.Addr{Gossip: fmt.Sprintf("127.0.0.1:%d", 7000+i), Transport: fmt.Sprintf("transport-%d", i)},
			dir:  filepath.Join(base, fmt.Sprintf("member-%d", i)), state: stateStopped}
		c.clocks[i] = clustertest.NewClock()
	}
	return c
}

// skew steps m's clock to offset from its drift (ClockSkew; 0 undoes it).
func (c *Cluster) skew(m *member, offset time.Duration) { c.clocks[m.slot].SetOffset(offset) }

// drift makes m's clock run at rate (ClockDrift; 1 ends it, keeping what it gained).
func (c *Cluster) drift(m *member, rate float64) { c.clocks[m.slot].SetRate(rate) }

// seeds are the gossip addresses of the running members other than m.
func (c *Cluster) seeds(m *member) []string {
	var out []string
	for _, o := range c.members {
		if o != m && o.state == stateRunning {
			out = append(out, o.addr.Gossip)
		}
	}
	return out
}

// start starts the process of m and joins it to the running members (or forms the
// cluster, if it is the first).
func (c *Cluster) start(ctx context.Context, m *member) (err error) {
	c.mu.Lock()
	seeds := c.seeds(m)
	c.mu.Unlock()
	defer func() {
		if err != nil {
			c.closeProcess(m, false)
			err = fmt.Errorf("starting member %d: %w", m.slot, err)
		}
	}()
	log := c.log.With("member", m.slot)
	log.Info("faults: starting member", "gossip", m.addr.Gossip, "seeds", seeds)
	// Every component that reads time through a hook reads the member's clock.
	now := c.clocks[m.slot].Now
	mc := cluster.DefaultMembershipConfig()
	mc.Profile, mc.Logger = "local", log
	mc.Now = now
	mc.Lifecycle = c.life
	mc.Lifecycle.RandomSeed = int64(c.seed)*31 + int64(m.slot)*7 + int64(c.restarts)
	c.restarts++
	mc.Seeds = seeds
	proc, err := c.net.Start(m.addr, mc)
	if err != nil {
		return err
	}
	m.ms, m.msgr = proc.Membership, proc.Messenger
	sub := m.ms.Subscribe(64)
	if m.store, err = ddata.OpenBoltStore(filepath.Join(m.dir, "ddata")); err != nil {
		sub.Close()
		return err
	}
	dc := ddata.DefaultReplicatorConfig()
	dc.Membership, dc.Messenger, dc.Logger = m.ms, m.msgr, log
	dc.Store, dc.DurableKeys = m.store, []string{"sharding-coordinator*", ddataKey}
	dc.GossipInterval = 500 * time.Millisecond
	dc.Now = now
	if m.repl, err = ddata.NewReplicator(dc); err != nil {
		sub.Close()
		return err
	}
	sc := replstore.DefaultLocalConfig()
	sc.Membership, sc.Messenger, sc.Logger, sc.Dir = m.ms, m.msgr, log, filepath.Join(m.dir, "state")
	sc.Now = now
	if m.states, err = replstore.New(sc); err != nil {
		sub.Close()
		return err
	}
	cfg := sharding.DefaultConfig()
	cfg.Membership, cfg.Messenger, cfg.Types, cfg.Logger = m.ms, m.msgr, types{}, log
	cfg.Factory = &factory{member: fmt.Sprintf("member-%d", m.slot), reg: c.reg}
	cfg.DData, cfg.States = m.repl, m.states
	cfg.ReconcileInterval = 100 * time.Millisecond
	cfg.RebalanceInterval = 500 * time.Millisecond
	cfg.RequestTimeout = time.Second
	// The margin matches the resolver's stable-after, as the default does.
	cfg.DownRemovalMargin = c.life.SBRStableAfter
	cfg.Now = now
	if m.sh, err = sharding.New(cfg); err != nil {
		sub.Close()
		return err
	}
	watch := owner.New()
	m.watch = watch
	watch.Go(func() { c.watchExit(m, sub, watch.Done()) })
	jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.ms.Join(jctx); err != nil {
		return err
	}
	c.mu.Lock()
	m.state, m.ever, m.paused = stateRunning, true, false
	c.mu.Unlock()
	return nil
}

// watchExit does what the host does when the cluster downs or removes its member: stop
// hosting at once (sharding.Abort), then stop gossiping and answering. It returns then,
// or when stop is closed.
func (c *Cluster) watchExit(m *member, sub *cluster.Subscription, stop <-chan struct{}) {
	defer sub.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-sub.C:
		case <-tick.C:
		}
		if v := m.ms.View(); v.Exited && v.ExitReason != cluster.ReasonLeft {
			c.log.Info("faults: member exited", "member", m.slot, "reason", v.ExitReason)
			c.mu.Lock()
			if m.state == stateRunning {
				m.state = stateExited
			}
			c.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.sh.Abort(ctx)
			cancel()
			// The host's process stops here (cmd/shardhost's start kills the node): it
			// gossips and answers no more. Left running until its restart, an exited
			// member's gossip carried the old cluster's state, its old incarnations
			// up, into the cluster that the first member restarted with no seeds
			// formed, and that cluster downed itself again (seed 2006 before 2ad2128,
			// which downed whole clusters: 23 whole-cluster restarts in 3 minutes).
			_ = m.ms.Shutdown()
			_ = m.msgr.Close()
			return
		}
	}
}

// closeProcess takes m's process down: gracefully (leave, hand off, save) or as a crash.
func (c *Cluster) closeProcess(m *member, leave bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if m.ms != nil {
		if leave {
			_ = m.ms.Leave(ctx)
			if m.sh != nil {
				_ = m.sh.Drain(ctx)
			}
		}
		_ = m.ms.Shutdown()
	}
	if m.watch != nil {
		m.watch.Close()
		m.watch.Wait()
		m.watch = nil
	}
	if m.sh != nil {
		if leave {
			_ = m.sh.Stop(ctx)
		} else {
			_ = m.sh.Abort(ctx)
		}
	}
	if m.repl != nil {
		_ = m.repl.Close()
	}
	if m.states != nil {
		_ = m.states.Close()
	}
	if m.store != nil {
		_ = m.store.Close()
	}
	if m.msgr != nil {
		_ = m.msgr.Close()
	}
	c.mu.Lock() // quorumSet reads m.ms under c.mu
	m.ms, m.msgr, m.store, m.repl, m.states, m.sh = nil, nil, nil, nil, nil, nil
	c.mu.Unlock()
}

// crash kills m's process: clients stop using it, its links are cut at once (frames in
// flight from it are lost), its entity lives end, then its components are closed
// without a leave or a save.
func (c *Cluster) crash(m *member) {
	c.mu.Lock()
	was := m.state
	m.state = stateStopped
	c.mu.Unlock()
	if was == stateStopped {
		return
	}
	c.log.Info("faults: crash", "member", m.slot)
	c.setIsolated(m.slot, true)
	c.reg.Crash(fmt.Sprintf("member-%d", m.slot))
	c.closeProcess(m, false)
	c.setIsolated(m.slot, false)
}

// leave makes m leave gracefully.
func (c *Cluster) leave(m *member) {
	c.mu.Lock()
	if m.state != stateRunning {
		c.mu.Unlock()
		return
	}
	m.state = stateStopped // clients turn away at once, as from a member not ready
	c.mu.Unlock()
	c.closeProcess(m, true)
}

// restart starts a stopped or exited member again at its address, with its data
// directory or (wipe) an empty one.
func (c *Cluster) restart(ctx context.Context, m *member, wipe bool) error {
	c.mu.Lock()
	st := m.state
	c.mu.Unlock()
	if st == stateRunning {
		return nil
	}
	if st == stateExited {
		c.reg.Crash(fmt.Sprintf("member-%d", m.slot))
		c.closeProcess(m, false)
	}
	if wipe {
		if err := os.RemoveAll(m.dir); err != nil {
			return err
		}
	}
	return c.start(ctx, m)
}

// running returns the members whose process runs and are in the cluster, in slot order.
func (c *Cluster) running() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*member
	for _, m := range c.members {
		if m.state == stateRunning {
			out = append(out, m)
		}
	}
	return out
}

// targets are the members clients may ask: running and not paused.
func (c *Cluster) targets() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*member
	for _, m := range c.members {
		if m.state == stateRunning && !m.paused {
			out = append(out, m)
		}
	}
	return out
}

// free returns a slot with no process, preferring one never used; nil if all run.
func (c *Cluster) free() *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var used *member
	for _, m := range c.members {
		switch {
		case m.state != stateStopped:
		case !m.ever:
			return m
		case used == nil:
			used = m
		}
	}
	return used
}

// coordinatorMember returns the member of the shard coordinator: the oldest member up,
// as the running members see it.
func (c *Cluster) coordinatorMember() *member {
	for _, m := range c.running() {
		var up []cluster.Member
		for _, o := range m.ms.View().Members {
			if o.Status == cluster.StatusUp {
				up = append(up, o)
			}
		}
		if old, ok := cluster.Oldest(up); ok {
			for _, o := range c.members {
				if o.addr.Gossip == old.Address {
					return o
				}
			}
		}
	}
	return nil
}

// setIsolated cuts (or restores) every link of a slot, both ways.
func (c *Cluster) setIsolated(slot int, on bool) {
	c.netMu.Lock()
	defer c.netMu.Unlock()
	if on {
		c.isolated[slot] = true
	} else {
		delete(c.isolated, slot)
	}
	c.applyLocked()
}

// setPartition replaces the partition's cuts: pairs of slots (from, to) cut one way.
func (c *Cluster) setPartition(cuts map[[2]int]bool) {
	c.netMu.Lock()
	defer c.netMu.Unlock()
	c.partition = cuts
	c.applyLocked()
}

// applyLocked brings both networks to the cuts of the isolated slots and the
// partition, changing only the links that differ (a link that stays cut is never
// healed in between).
func (c *Cluster) applyLocked() {
	want := map[[2]int]bool{}
	for p := range c.partition {
		want[p] = true
	}
	for s := range c.isolated {
		for o := range MaxMembers {
			if o != s {
				want[[2]int{s, o}], want[[2]int{o, s}] = true, true
			}
		}
	}
	for p := range c.blocked {
		if !want[p] {
			c.net.ReconnectOneWay(c.members[p[0]].addr, c.members[p[1]].addr)
			delete(c.blocked, p)
		}
	}
	for p := range want {
		if !c.blocked[p] {
			c.net.DisconnectOneWay(c.members[p[0]].addr, c.members[p[1]].addr)
			c.blocked[p] = true
		}
	}
}

// stopAll crashes every member (the end of a run), all at once; the goroutines it
// starts for that live no longer than the call, which waits for them.
func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.mu.Lock()
			m.state = stateStopped
			c.mu.Unlock()
			c.closeProcess(m, false)
		}()
	}
	wg.Wait()
}

// waitConverged waits until the running members see each other up and converged, or
// ctx ends (which is not an error: a run checks safety, not liveness).
func (c *Cluster) waitConverged(ctx context.Context) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		run := c.running()
		ok := len(run) > 0
		for _, m := range run {
			v := m.ms.View()
			up := 0
			for _, o := range v.Members {
				if o.Status == cluster.StatusUp && o.Reachable {
					up++
				}
			}
			if !v.Converged || up != len(run) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// pick resolves a fault's Pick against the running members.
func pick(run []*member, p int) *member {
	if len(run) == 0 {
		return nil
	}
	return run[p%len(run)]
}

var errNoMembers = errors.New("faults: no member running")

// sides splits the running members into a side of n members starting at pick, and the
// rest (in slot order).
func sides(run []*member, p, n int) (a, b []*member) {
	n = min(n, (len(run)-1)/2, len(run)-1)
	n = max(n, 1)
	start := p % len(run)
	for i := range run {
		m := run[(start+i)%len(run)]
		if i < n {
			a = append(a, m)
		} else {
			b = append(b, m)
		}
	}
	slices.SortFunc(a, func(x, y *member) int { return x.slot - y.slot })
	slices.SortFunc(b, func(x, y *member) int { return x.slot - y.slot })
	return a, b
}

// cutBetween returns the slot pairs cut between sides a and b: both ways, or only from
// a to b.
func cutBetween(a, b []*member, oneWay bool) map[[2]int]bool {
	cuts := map[[2]int]bool{}
	for _, x := range a {
		for _, y := range b {
			cuts[[2]int{x.slot, y.slot}] = true
			if !oneWay {
				cuts[[2]int{y.slot, x.slot}] = true
			}
		}
	}
	return cuts
}
