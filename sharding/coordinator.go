package sharding

import (
	"context"
	"sync"

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
}

func newCoordinator(s *Sharding) *coordinator {
	return &coordinator{s: s, alloc: map[string]map[int]string{},
		inflight: map[shardRef][]func(string, error){}, tentative: map[shardRef]string{}, leaving: map[string]bool{}}
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
	// New shards go to reachable up members only; leaving, joining, unreachable and
	// down members get none.
	current := make(map[string][]int, len(members))
	for _, m := range members {
		if m.Status == cluster.StatusUp && m.Reachable && !c.leaving[m.Address] {
			current[m.Address] = nil
		}
	}
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
	region, err := c.s.cfg.Strategy.AllocateShard(requester, ref.Shard, current)
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
