package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/sharding"
)

// The coordinator experiments time the shard coordinator's decisions with S shards
// over M regions. The coordinator itself is unexported (sharding/coordinator.go); its
// decision is: take region → shards from its index, kept as allocations change
// (sharding/coordinator_index.go), then ask the type's allocation strategy; a rebalance
// round builds region → shards from every recorded allocation of the type. The harness
// keeps the same index, builds the same map, and calls the real, exported strategies
// (sharding.LeastShardAllocationStrategy, the default, and
// sharding.PriorityAllocationStrategy). The state in distributed data is the real
// ddata.EpochMap the coordinator writes (shard → region at its epoch), one per bucket of
// 1,000 shards with a GSet of the buckets (sharding/coordinator_state.go), encoded by
// ddata.Encode, and read back with ReadMajority through real replicators on
// clustertest's in-memory networks, the buckets 16 at a time as the coordinator reads
// them; beside it, in the same run, the layout before it (an LWWMap shard →
// "region|epoch" a bucket), which the coordinator still reads.

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

// currentMap is what the coordinator builds per rebalance round: every candidate region with
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

// regionIndex is the coordinator's index (sharding/coordinator_index.go): region → its
// shards, changed one shard at a time.
type regionIndex struct {
	ids map[string][]int
	pos map[int]int // shard → its position in its region's ids
}

func newRegionIndex(regions []string, alloc []int) *regionIndex {
	x := &regionIndex{ids: map[string][]int{}, pos: map[int]int{}}
	for shard, r := range alloc {
		if r >= 0 {
			x.add(regions[r], shard)
		}
	}
	return x
}

func (x *regionIndex) add(region string, shard int) {
	x.pos[shard] = len(x.ids[region])
	x.ids[region] = append(x.ids[region], shard)
}

func (x *regionIndex) remove(region string, shard int) {
	ids := x.ids[region]
	i, last := x.pos[shard], len(ids)-1
	ids[i] = ids[last]
	x.pos[ids[i]] = i
	x.ids[region] = ids[:last]
	delete(x.pos, shard)
}

// current is the map of a decision: every candidate with its shards, the index's own
// slices.
func (x *regionIndex) current(candidates []string) map[string][]int {
	out := make(map[string][]int, len(candidates))
	for _, r := range candidates {
		out[r] = slices.Clip(x.ids[r])
	}
	return out
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
	idx := newRegionIndex(regions, alloc)
	for range reps {
		idx.remove(regions[alloc[shards-1]], shards-1)
		alloc[shards-1] = -1
		t := time.Now()
		r, err := strat.AllocateShard(regions[0], shards-1, idx.current(regions))
		if err == nil {
			idx.add(r, shards-1)
		}
		ds = append(ds, time.Since(t))
		if err != nil {
			return row, err
		}
		alloc[shards-1] = index[r]
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
	// The coordinator forgets the crashed member's allocations once (forgetRegions, a
	// pass over them), then decides each shard from its index.
	crashed := members - 1
	survivors := regions[:max(crashed, 1)]
	t := time.Now()
	var orphans []int
	for s, r := range alloc {
		if r == crashed {
			orphans = append(orphans, s)
			idx.remove(regions[r], s)
			alloc[s] = -1
		}
	}
	for _, s := range orphans {
		r, err := strat.AllocateShard(survivors[0], s, idx.current(survivors))
		if err != nil {
			return row, err
		}
		idx.add(r, s)
		alloc[s] = index[r]
	}
	row.Replace = time.Since(t)
	return row, nil
}

type stateRow struct {
	Layout   string // stateEpochMap or stateLWWMap
	Shards   int
	Members  int
	Bytes    int           // the state's encoding (ddata.Encode), every bucket
	MaxKey   int           // the largest key's encoding: what one message carries
	Put      time.Duration // one Put on a full bucket: the coordinator's CPU per recorded allocation
	Write    time.Duration // writing it (one Update a bucket, WriteMajority)
	ReadBack time.Duration // the buckets' GSet, then every bucket, with ReadMajority from another member, as a new coordinator does
	ReadCPU  time.Duration // this process's CPU time (user and system) during ReadBack: every replica's share, the gossip's too
	IdleCPU  float64       // this process's CPU seconds per second with the members at rest, before the first write
	Err      string        // what failed, if something did
}

// The layouts of the coordinator's state (sharding/coordinator_state.go).
const (
	stateEpochMap = "epochmap" // one ddata.EpochMap a bucket: this version's
	stateLWWMap   = "lwwmap"   // one ddata.LWWMap shard → "region|epoch" a bucket: the version before, still read
)

// stateBucket is the coordinator's bucket size (sharding/coordinator_state.go).
const stateBucket = 1000

// stateEpoch is the epoch the harness gives shard s: as nextEpoch gives them
// (sharding/coordinator.go), a count in the high 40 bits and a coordinator's tag in the
// low 24.
func stateEpoch(s int) uint64 { return uint64(s+1)<<24 | 0xa5c3e1 }

// coordinatorState returns the bucket the coordinator keeps for the shards [from, to)
// of one type allocated over members, in layout, written by node.
func coordinatorState(layout string, node ddata.NodeID, members int, from, to int) ddata.ReplicatedData {
	if layout == stateEpochMap {
		var m ddata.EpochMap
		for s := from; s < to; s++ {
			m, _ = m.Put(uint64(s), stateEpoch(s), regionName(s%members))
		}
		return m
	}
	clock := ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() })
	var m ddata.LWWMap
	for s := from; s < to; s++ {
		value := []byte(regionName(s%members) + "|" + strconv.FormatUint(stateEpoch(s), 10))
		m, _ = m.Put(node, strconv.Itoa(s), value, clock)
	}
	return m
}

// stateKeys returns the keys of layout for type typ (sharding/coordinator_state.go):
// the GSet of buckets, and a bucket's key.
func stateKeys(layout, typ string) (string, func(int) string) {
	if layout == stateEpochMap {
		return "sharding-coordinator-epochs:" + typ,
			func(b int) string { return "sharding-coordinator-epochs@" + strconv.Itoa(b) + ":" + typ }
	}
	return "sharding-coordinator-buckets:" + typ,
		func(b int) string { return "sharding-coordinator@" + strconv.Itoa(b) + ":" + typ }
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
	start := time.Now()
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
			return nil, fmt.Errorf("member %d of %d, after %v: %w", i+1, n, time.Since(start).Round(time.Second), err)
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

// idleCPU returns the process's CPU seconds per second over d with the members at rest:
// the gossip's share of a read back's CPU is about this times its wall time.
func (c *stateCluster) idleCPU(d time.Duration) float64 {
	cpu0, t := processCPU(), time.Now()
	time.Sleep(d)
	return (processCPU() - cpu0).Seconds() / time.Since(t).Seconds()
}

func (c *stateCluster) close() {
	for i := len(c.repls) - 1; i >= 0; i-- {
		c.repls[i].Close()
	}
	for i := len(c.members) - 1; i >= 0; i-- {
		c.members[i].Crash()
	}
}

func runState(ctx context.Context, c *stateCluster, layout string, shards int) stateRow {
	members := len(c.members)
	row := stateRow{Layout: layout, Shards: shards, Members: members}
	// The state: one value a bucket of 1,000 shards, each written by a coordinator of
	// its own (as if successive coordinators had written them).
	var buckets []ddata.ReplicatedData
	for from := 0; from < shards; from += stateBucket {
		b := coordinatorState(layout, ddata.NodeID("coordinator-"+strconv.Itoa(from/stateBucket)), members, from, min(from+stateBucket, shards))
		enc, err := ddata.Encode(b)
		if err != nil {
			row.Err = err.Error()
			return row
		}
		row.Bytes += len(enc)
		row.MaxKey = max(row.MaxKey, len(enc))
		buckets = append(buckets, b)
	}
	// The coordinator's persist: one Put on a full bucket (median of 5).
	var ds []time.Duration
	clock := ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() })
	for i := range 5 {
		t := time.Now()
		switch b := buckets[0].(type) {
		case ddata.EpochMap:
			b.Put(uint64(i), stateEpoch(shards), regionName(0))
		case ddata.LWWMap:
			b.Put("coordinator-x", strconv.Itoa(i), []byte(regionName(0)+"|"+strconv.FormatUint(stateEpoch(shards), 10)), clock)
		}
		ds = append(ds, time.Since(t))
	}
	row.Put = median(ds)
	listKey, bucketKey := stateKeys(layout, "scale-"+strconv.Itoa(shards))
	w := c.repls[0]
	t := time.Now()
	for i, b := range buckets {
		_, err := w.Update(ctx, listKey, ddata.GSet{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				s, delta := d.(ddata.GSet).Add(strconv.Itoa(i))
				return s, delta, nil
			})
		if err == nil {
			_, err = w.Update(ctx, bucketKey(i), b, ddata.WriteMajority(0),
				func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
					merged, err := d.Merge(b)
					return merged, b, err
				})
		}
		if err != nil {
			row.Err = "write: " + err.Error()
			return row
		}
	}
	row.Write = time.Since(t)
	// A new coordinator on another member reads it back with ReadMajority: the list of
	// buckets, then the buckets, 16 at a time (sharding/coordinator_state.go), and
	// walks every entry as it merges them.
	r := c.repls[members-1]
	runtime.GC() // the write's garbage is not the read's
	cpu0 := processCPU()
	t = time.Now()
	d, err := r.Get(ctx, listKey, ddata.ReadMajority(0))
	if err != nil {
		row.Err = "read: " + err.Error()
		return row
	}
	list := d.(ddata.GSet).Elements()
	var mu sync.Mutex
	got, errs := 0, []error{}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, e := range list {
		b, _ := strconv.Atoi(e)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d, err := r.Get(ctx, bucketKey(b), ddata.ReadMajority(0))
			n := 0
			switch v := d.(type) {
			case ddata.EpochMap:
				for e := range v.All() {
					if e.Epoch != 0 {
						n++
					}
				}
			case ddata.LWWMap:
				n = v.Len()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			got += n
		}()
	}
	wg.Wait()
	row.ReadBack = time.Since(t)
	row.ReadCPU = processCPU() - cpu0
	if err := errors.Join(errs...); err != nil {
		row.Err = "read: " + err.Error()
		return row
	}
	if got != shards {
		row.Err = fmt.Sprintf("read %d entries of %d", got, shards)
	}
	return row
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
