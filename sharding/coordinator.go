package sharding

import (
	"context"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// coordinator is the shard coordinator (Akka's ShardCoordinator), run as a cluster
// singleton: every member has one, active only where the singleton runs. It decides the home of each shard with the
// allocation strategy, makes the chosen region host the shard before anyone learns the
// home, and answers GetShardHome requests.
//
// Its state (shard → region) lives in memory. When the singleton starts on a member, its
// coordinator rebuilds the state by asking every region what it hosts before it answers
// (the state moves to distributed data with the full sharding work).
type coordinator struct {
	s *Sharding

	mu         sync.Mutex
	active     bool
	recovering bool
	epoch      uint64                    // bumped whenever activity changes; stale recoveries are dropped
	alloc      map[string]map[int]string // type → shard → region address
	inflight   map[shardRef][]func(string, error)
	// tentative holds allocations decided but not yet acknowledged by their region;
	// the strategy counts them, so concurrent requests spread as sequential ones would.
	tentative map[shardRef]string
	// leaving holds regions that said they are leaving: they get no new shards even
	// before this member's view shows them leaving.
	leaving map[string]bool
	// rebalancing holds the shards being handed off by a rebalance, per type.
	rebalancing map[string]map[int]bool
}

func newCoordinator(s *Sharding) *coordinator {
	return &coordinator{s: s, alloc: map[string]map[int]string{},
		inflight: map[shardRef][]func(string, error){}, tentative: map[shardRef]string{}, leaving: map[string]bool{},
		rebalancing: map[string]map[int]bool{}}
}

// Start activates the coordinator on this member (cluster.SingletonService): it rebuilds
// its allocations from the regions, then answers requests.
func (c *coordinator) Start() {
	members := c.s.cfg.Membership.Members()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recovering = true
	c.epoch++
	epoch := c.epoch
	if !c.s.goroutine(func() { c.recover(epoch, members) }) {
		c.recovering = false
	}
	c.s.goroutine(func() { c.rebalanceLoop(epoch) })
}

// Stop deactivates the coordinator (cluster.SingletonService): requests are refused
// with ErrNotCoordinator until it starts again, here or elsewhere.
func (c *coordinator) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active, c.recovering = false, false
	c.epoch++
	c.alloc = map[string]map[int]string{}
	c.tentative = map[shardRef]string{}
	c.rebalancing = map[string]map[int]bool{}
}

// recover rebuilds the allocations from what the regions host.
func (c *coordinator) recover(epoch uint64, members []cluster.Member) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
	defer cancel()
	type answer struct {
		m  cluster.Member
		st RegionState
	}
	answers := make(chan answer, len(members))
	var wg sync.WaitGroup
	for _, m := range members {
		if !hosting(m) {
			continue
		}
		if m.Address == c.s.self {
			answers <- answer{m, c.s.LocalState()}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.s.remoteState(ctx, m)
			if err != nil {
				c.s.log.Warn("shard coordinator recovery: region did not answer", "region", m.Address, "err", err)
				return
			}
			answers <- answer{m, st}
		}()
	}
	wg.Wait()
	close(answers)
	alloc := map[string]map[int]string{}
	owner := map[shardRef]cluster.Member{}
	shards := 0
	for a := range answers {
		for _, sh := range a.st.Shards {
			ref := shardRef{Type: sh.Type, Shard: sh.ID}
			if prev, dup := owner[ref]; dup {
				c.s.log.Warn("shard hosted by two regions; keeping the older", "shard", ref.String(),
					"regions", []string{prev.Address, a.m.Address})
				if prev.IsOlderThan(a.m) {
					continue
				}
			}
			owner[ref] = a.m
			if alloc[sh.Type] == nil {
				alloc[sh.Type] = map[int]string{}
			}
			alloc[sh.Type][sh.ID] = a.m.Address
			shards++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch || !c.recovering {
		return
	}
	c.alloc = alloc
	c.active, c.recovering = true, false
	c.s.log.Info("shard coordinator active", "recovered_shards", shards)
}

// getShardHome answers where a shard lives, allocating it if it has no home. cb is
// called exactly once, possibly on another goroutine, never with c.mu held.
func (c *coordinator) getShardHome(ref shardRef, cb func(string, error)) {
	requester := ref.Requester
	ref.Requester = ""
	c.mu.Lock()
	if !c.active {
		c.mu.Unlock()
		cb("", ErrNotCoordinator)
		return
	}
	members := c.s.cfg.Membership.Members()
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		if hosting(m) {
			alive[m.Address] = true
		}
	}
	if home, ok := c.alloc[ref.Type][ref.Shard]; ok && alive[home] {
		c.mu.Unlock()
		cb(home, nil)
		return
	}
	if waiters, ok := c.inflight[ref]; ok {
		c.inflight[ref] = append(waiters, cb)
		c.mu.Unlock()
		return
	}
	c.inflight[ref] = []func(string, error){cb}
	settings := c.s.typeSettings(ref.Type)
	current := c.candidatesLocked(members, settings)
	for shardID, home := range c.alloc[ref.Type] {
		if _, ok := current[home]; ok {
			current[home] = append(current[home], shardID)
		}
	}
	for other, home := range c.tentative {
		if _, ok := current[home]; other.Type == ref.Type && ok {
			current[home] = append(current[home], other.Shard)
		}
	}
	epoch := c.epoch
	region, err := strategyFor(settings, c.s.cfg.Strategy, c.s.cfg.MaxSimultaneousRebalance).AllocateShard(requester, ref.Shard, current)
	if err == nil {
		c.tentative[ref] = region
	}
	c.mu.Unlock()
	if err != nil {
		c.finish(ref, "", err)
		return
	}
	c.s.hostShard(region, ref, func(err error) {
		if err == nil {
			c.mu.Lock()
			if epoch == c.epoch {
				if c.alloc[ref.Type] == nil {
					c.alloc[ref.Type] = map[int]string{}
				}
				c.alloc[ref.Type][ref.Shard] = region
				c.s.log.Debug("shard allocated", "shard", ref.String(), "region", region)
			} else {
				err = ErrNotCoordinator
			}
			c.mu.Unlock()
		}
		c.finish(ref, region, err)
	})
}

func (c *coordinator) finish(ref shardRef, home string, err error) {
	c.mu.Lock()
	waiters := c.inflight[ref]
	delete(c.inflight, ref)
	delete(c.tentative, ref)
	c.mu.Unlock()
	if err != nil {
		home = ""
	}
	for _, cb := range waiters {
		cb(home, err)
	}
}

// candidatesLocked returns the regions that may take new shards of a type, each with no
// shards yet: reachable up members with the type's role that are not leaving. Joining,
// leaving, unreachable and down members get none.
func (c *coordinator) candidatesLocked(members []cluster.Member, t TypeSettings) map[string][]int {
	current := make(map[string][]int, len(members))
	for _, m := range members {
		if m.Status == cluster.StatusUp && m.Reachable && !c.leaving[m.Address] &&
			(t.Role == "" || hasRole(m.Roles, t.Role)) {
			current[m.Address] = nil
		}
	}
	return current
}

func hasRole(roles []string, role string) bool {
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}

// rebalanceLoop runs rounds of rebalancing while this coordinator is active (epoch).
func (c *coordinator) rebalanceLoop(epoch uint64) {
	t := time.NewTicker(c.s.cfg.RebalanceInterval)
	defer t.Stop()
	for {
		select {
		case <-c.s.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		current := c.epoch == epoch
		c.mu.Unlock()
		if !current {
			return
		}
		c.rebalanceRound(epoch)
	}
}

// rebalanceRound asks each type's strategy which shards to move and has their regions
// hand them off; the coordinator allocates them anew when asked for them next.
func (c *coordinator) rebalanceRound(epoch uint64) {
	members := c.s.cfg.Membership.Members()
	type move struct {
		ref    shardRef
		region string
	}
	var moves []move
	c.mu.Lock()
	if !c.active || c.epoch != epoch {
		c.mu.Unlock()
		return
	}
	for typ, shards := range c.alloc {
		settings := c.s.typeSettings(typ)
		current := c.candidatesLocked(members, settings)
		for shard, region := range shards {
			if _, ok := current[region]; ok {
				current[region] = append(current[region], shard)
			}
		}
		if c.rebalancing[typ] == nil {
			c.rebalancing[typ] = map[int]bool{}
		}
		for _, shard := range strategyFor(settings, c.s.cfg.Strategy, c.s.cfg.MaxSimultaneousRebalance).Rebalance(current, c.rebalancing[typ]) {
			c.rebalancing[typ][shard] = true
			moves = append(moves, move{shardRef{Type: typ, Shard: shard}, shards[shard]})
		}
	}
	c.mu.Unlock()
	for _, mv := range moves {
		c.s.log.Info("rebalancing a shard", "shard", mv.ref.String(), "from", mv.region)
		c.s.handOffShardAt(mv.region, mv.ref, func(err error) {
			if err != nil {
				c.s.log.Warn("rebalance handoff failed", "shard", mv.ref.String(), "from", mv.region, "err", err)
			}
			c.mu.Lock()
			delete(c.rebalancing[mv.ref.Type], mv.ref.Shard)
			c.mu.Unlock()
		})
	}
}

// handedOff forgets a shard's allocation after its region handed it off.
func (c *coordinator) handedOff(ref shardRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref.Leaving && ref.Requester != "" {
		c.leaving[ref.Requester] = true
	}
	if home, ok := c.alloc[ref.Type][ref.Shard]; ok && (ref.Requester == "" || home == ref.Requester) {
		delete(c.alloc[ref.Type], ref.Shard)
		c.s.log.Debug("shard handed off", "shard", ref.String(), "from", home)
	}
}

// memberRemoved forgets the allocations at a member that left.
func (c *coordinator) memberRemoved(addr string) {
	c.forgetRegions(func(region string) bool { return region == addr })
}

func (c *coordinator) forgetRegions(gone func(string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range c.leaving {
		if gone(r) {
			delete(c.leaving, r)
		}
	}
	for _, shards := range c.alloc {
		for id, region := range shards {
			if gone(region) {
				delete(shards, id)
			}
		}
	}
}

// allocations returns a copy of the allocations, for tests and inspection.
func (c *coordinator) allocations() map[string]map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[int]string, len(c.alloc))
	for t, shards := range c.alloc {
		out[t] = make(map[int]string, len(shards))
		for id, r := range shards {
			out[t][id] = r
		}
	}
	return out
}
