package main

import (
	"context"

	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/sharding"
)

// The coordinator experiments time the shard coordinator's decisions with S shards
// over M regions. The coordinator itself is unexported (sharding/coordinator.go); its
// decision is: build the map region → shards from every recorded allocation of the
// type (getShardHome and rebalanceRound do this on every call), then ask the type's
// allocation strategy. The harness builds that map the same way and calls the real,
// exported strategies (sharding.LeastShardAllocationStrategy, the default, and
// sharding.PriorityAllocationStrategy). The state in distributed data is the real
// ddata.LWWMap the coordinator writes (shard → "region|epoch"), encoded by ddata.Encode,
// and read back with ReadMajority through real replicators on clustertest's in-memory
// networks.

type shardRow struct {
	Strategy  string
	Shards    int
	Members   int
	Allocate  time.Duration // one allocation decision with every other shard allocated
	Rebalance time.Duration // one rebalance round after an empty member joined
	Replace   time.Duration // allocating every shard of a crashed member, one decision each
	Moves     int           // shards the rebalance round hands off
}

func regionName(i int) string { return fmt.Sprintf("10.0.%d.%d:7946", i/256, i%256) }

// currentMap is what the coordinator builds per decision: every candidate region with
// the shards allocated to it.
func currentMap(regions []string, alloc []int) map[string][]int {
	current := make(map[string][]int, len(regions))
	for _, r := range regions {
		current[r] = nil
	}
	for shard, r := range alloc {
		if r >= 0 {
			if _, ok := current[regions[r]]; ok {
				current[regions[r]] = append(current[regions[r]], shard)
			}
		}
	}
	return current
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func runStrategy(name string, strat sharding.ShardAllocationStrategy, shards, members int) (shardRow, error) {
	row := shardRow{Strategy: name, Shards: shards, Members: members}
	regions := make([]string, members)
	index := map[string]int{}
	for i := range regions {
		regions[i] = regionName(i)
		index[regions[i]] = i
	}
	// Everything allocated by the strategy itself, one shard after the other as the
	// requests come, would cost shards²/2; the state it reaches is the even spread (or,
	// for priority, each shard on the first region of its order), built directly.
	_, priority := strat.(sharding.PriorityAllocationStrategy)
	// placed is where the strategy puts shard over rs: for priority, the first of its
	// order, which does not depend on the counts; the even spread otherwise.
	placed := func(shard int, rs []string) (int, error) {
		if !priority {
			return shard % len(rs), nil
		}
		empty := make(map[string][]int, len(rs))
		for _, r := range rs {
			empty[r] = nil
		}
		r, err := strat.AllocateShard(rs[0], shard, empty)
		return index[r], err
	}
	alloc := make([]int, shards)
	for s := range alloc {
		var err error
		if alloc[s], err = placed(s, regions); err != nil {
			return row, err
		}
	}
	// Allocation: the last shard unallocated, decided anew (median of several).
	reps := 9
	var ds []time.Duration
	for range reps {
		last := alloc[shards-1]
		alloc[shards-1] = -1
		t := time.Now()
		r, err := strat.AllocateShard(regions[0], shards-1, currentMap(regions, alloc))
		ds = append(ds, time.Since(t))
		if err != nil {
			return row, err
		}
		alloc[shards-1] = index[r]
		_ = last
	}
	row.Allocate = median(ds)

	// Rebalance: every shard on members-1 regions, the last region new and empty.
	spread := make([]int, shards)
	for s := range spread {
		var err error
		if spread[s], err = placed(s, regions[:max(members-1, 1)]); err != nil {
			return row, err
		}
	}
	ds = ds[:0]
	for range 3 {
		t := time.Now()
		moves := strat.Rebalance(currentMap(regions, spread), map[int]bool{})
		ds = append(ds, time.Since(t))
		row.Moves = len(moves)
		if ds[len(ds)-1] > time.Second {
			break // one is enough when it is that slow
		}
	}
	row.Rebalance = median(ds)

	// A member crashes: each of its shards is asked for and allocated anew, one
	// decision each (the coordinator's CPU only; the writes to distributed data and the
	// HostShard requests come on top).
	crashed := members - 1
	survivors := regions[:crashed]
	var orphans []int
	for s, r := range alloc {
		if r == crashed {
			orphans = append(orphans, s)
			alloc[s] = -1
		}
	}
	t := time.Now()
	for _, s := range orphans {
		r, err := strat.AllocateShard(survivors[0], s, currentMap(survivors, alloc))
		if err != nil {
			return row, err
		}
		alloc[s] = index[r]
	}
	row.Replace = time.Since(t)
	return row, nil
}

type stateRow struct {
	Shards   int
	Members  int
	Bytes    int           // the LWWMap's encoding (ddata.Encode)
	Put      time.Duration // one LWWMap.Put on the whole state: the coordinator's CPU per recorded allocation
	Write    time.Duration // writing it (batches of 1000 entries, WriteMajority)
	ReadBack time.Duration // Get with ReadMajority from another member, as a new coordinator does
	Err      string        // what failed, if something did
}

// coordinatorState returns the LWWMap the coordinator keeps for one type with shards
// allocated over members, written by node.
func coordinatorState(node ddata.NodeID, shards, members int, from, to int, m ddata.LWWMap) ddata.LWWMap {
	clock := ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() })
	for s := from; s < to; s++ {
		value := []byte(regionName(s%members) + "|" + strconv.FormatUint(uint64(1<<40+s), 10))
		m, _ = m.Put(node, strconv.Itoa(s), value, clock)
	}
	return m
}

// stateCluster is members real members (membership over memberlist on the in-memory
// gossip network, messengers on the in-memory frames network) each with a replicator.
type stateCluster struct {
	members []*clustertest.Member
	repls   []*ddata.Replicator
}

func startStateCluster(ctx context.Context, n int) (*stateCluster, error) {
	net := clustertest.NewNetwork()
	c := &stateCluster{}
	log := slog.New(slog.DiscardHandler)
	for i := range n {
		cfg := cluster.DefaultMembershipConfig()
		cfg.Profile, cfg.Logger = "local", log
		cfg.Lifecycle = clustertest.Tolerant()
		cfg.Lifecycle.RandomSeed = int64(i + 1)
		if i > 0 {
			cfg.Seeds = []string{c.members[0].Addr.Gossip}
		}
		m, err := net.Start(clustertest.Addr{Transport: fmt.Sprintf("transport-%d", i)}, cfg)
		if err != nil {
			c.close()
			return nil, err
		}
		c.members = append(c.members, m)
		dc := ddata.DefaultReplicatorConfig()
		dc.Membership, dc.Messenger, dc.Logger = m.Membership, m.Messenger, log
		r, err := ddata.NewReplicator(dc)
		if err != nil {
			c.close()
			return nil, err
		}
		c.repls = append(c.repls, r)
		if err := m.Membership.Join(ctx); err != nil {
			c.close()
			return nil, err
		}
	}
	ms := make([]*cluster.Membership, n)
	for i, m := range c.members {
		ms[i] = m.Membership
	}
	for clustertest.AllUp(ms...) != nil {
		select {
		case <-ctx.Done():
			c.close()
			return nil, fmt.Errorf("%d members not up: %w", n, clustertest.AllUp(ms...))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c, nil
}

func (c *stateCluster) close() {
	for i := len(c.repls) - 1; i >= 0; i-- {
		c.repls[i].Close()
	}
	for i := len(c.members) - 1; i >= 0; i-- {
		c.members[i].Crash()
	}
}

func runState(ctx context.Context, c *stateCluster, shards int) stateRow {
	members := len(c.members)
	row := stateRow{Shards: shards, Members: members}
	// The state, a batch of shards to a writer. LWWMap.Put copies the whole map (ddata's
	// ORMap.set clones its entries), so one writer's puts cost O(shards²) to build the
	// state; a writer per batch (as if successive coordinators had written them) keeps
	// each batch's puts on a small map, and the batches merge in O(shards) each.
	// Updates of 1,000 shards, or of a tenth of them above 10,000: each write costs every
	// replica O(shards) (it encodes the whole value for its digest), so 100 writes of a
	// 100k-shard state cost hours on a small machine (docs/scale.md).
	batch := max(1000, shards/10)
	var batches []ddata.ReplicatedData
	var full ddata.ReplicatedData = ddata.LWWMap{}
	for from := 0; from < shards; from += batch {
		b := coordinatorState(ddata.NodeID("coordinator-"+strconv.Itoa(from/batch)), shards, members, from, min(from+batch, shards), ddata.LWWMap{})
		batches = append(batches, b)
		var err error
		if full, err = full.Merge(b); err != nil {
			row.Err = err.Error()
			return row
		}
	}
	// The coordinator's persist: one Put on the whole map (median of 5).
	var ds []time.Duration
	clock := ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() })
	for i := range 5 {
		t := time.Now()
		full.(ddata.LWWMap).Put("coordinator-x", strconv.Itoa(i), []byte(regionName(0)+"|1"), clock)
		ds = append(ds, time.Since(t))
	}
	row.Put = median(ds)
	b, err := ddata.Encode(full)
	if err != nil {
		row.Err = err.Error()
		return row
	}
	row.Bytes = len(b)
	key := "sharding-coordinator:scale-" + strconv.Itoa(shards)
	w := c.repls[0]
	t := time.Now()
	for from := 0; from < shards; from += batch {
		_, err := w.Update(ctx, key, ddata.LWWMap{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				merged, err := d.Merge(batches[from/batch])
				return merged, batches[from/batch], err
			})
		if err != nil {
			row.Err = "write: " + err.Error()
			return row
		}
	}
	row.Write = time.Since(t)
	// A new coordinator on another member reads it back with ReadMajority.
	t = time.Now()
	d, err := c.repls[members-1].Get(ctx, key, ddata.ReadMajority(0))
	row.ReadBack = time.Since(t)
	if err != nil {
		row.Err = "read: " + err.Error()
		return row
	}
	if got := d.(ddata.LWWMap).Len(); got != shards {
		row.Err = fmt.Sprintf("read %d entries of %d", got, shards)
	}
	return row
}
