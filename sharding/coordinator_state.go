// The shard coordinator's state: the allocations it records in distributed data
// (WriteMajority) and recovers when it starts (ReadMajority, then checked against what
// the regions host).

package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/ddata"
)

// DData is what the coordinator needs of distributed data; *ddata.Replicator has it.
type DData interface {
	Get(ctx context.Context, key string, rc ddata.ReadConsistency) (ddata.ReplicatedData, error)
	Update(ctx context.Context, key string, initial ddata.ReplicatedData, wc ddata.WriteConsistency,
		modify func(ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error)) (ddata.ReplicatedData, error)
	SelfNodeID() ddata.NodeID
}

// Keys of the coordinator's state in distributed data: the set of entity types with
// allocations (coordinatorTypesKey); per type, the set of its buckets with allocations
// (coordinatorBucketsKey), and per bucket of coordinatorBucketShards shards a
// ddata.EpochMap shard → region at its epoch (region empty: not allocated;
// coordinatorBucketKey). The EpochMap keeps per shard the higher epoch, and at one epoch
// the record without region, as mergeAllocation does, so two coordinators active for a
// moment that record different shards of one bucket keep both. Entries are never
// removed, so the highest epoch is always known.
//
// Two earlier layouts are still read, and merged with it by epoch (mergeAllocation), so
// that the state they hold is recovered; they are no longer written (docs/scale.md says
// in what order an upgrade goes):
//   - per type, one LWWMap shard → "region|epoch" for every shard (legacyMapKey): about
//     82 bytes a shard encoded, 98.8% of the transport's frame limit at 100,000 shards;
//   - per type, a GSet of buckets (legacyBucketsKey) and per bucket such an LWWMap
//     (legacyBucketKey): each entry a register encoded as a value of its own, so that
//     reading 100,000 shards back decoded 100,000 values.
//
// A bucket's EpochMap is 8 to 13 bytes a shard (10 to 300 regions); a new coordinator
// reads the buckets back in parallel, coordinatorReadParallel at once.
const (
	coordinatorTypesKey     = "sharding-coordinator-types"
	coordinatorBucketShards = 1000
	// coordinatorReadParallel bounds the keys read at once by a recovering coordinator.
	coordinatorReadParallel = 16
)

// coordinatorBucketsKey is the GSet of a type's buckets (decimal numbers) with an EpochMap.
func coordinatorBucketsKey(typ string) string { return "sharding-coordinator-epochs:" + typ }

// coordinatorBucketKey is the EpochMap of the shards of typ in bucket (shard /
// coordinatorBucketShards).
func coordinatorBucketKey(typ string, bucket int) string {
	return "sharding-coordinator-epochs@" + strconv.Itoa(bucket) + ":" + typ
}

// legacyMapKey is the first layout's LWWMap of every shard of a type: read, not written.
func legacyMapKey(typ string) string { return "sharding-coordinator:" + typ }

// legacyBucketsKey is the second layout's GSet of a type's buckets: read, not written.
func legacyBucketsKey(typ string) string { return "sharding-coordinator-buckets:" + typ }

// legacyBucketKey is the second layout's LWWMap of a bucket: read, not written.
func legacyBucketKey(typ string, bucket int) string {
	return "sharding-coordinator@" + strconv.Itoa(bucket) + ":" + typ
}

// mergeAllocation returns which of two records of one shard's allocation stands: the
// higher epoch, and at one epoch the record without region (a handoff recorded after
// the allocation it ends, which keeps the allocation's epoch).
func mergeAllocation(a, b allocation) allocation {
	switch {
	case a.epoch != b.epoch:
		if a.epoch > b.epoch {
			return a
		}
		return b
	case a.region == "" || b.region == "":
		return allocation{"", a.epoch}
	case a.region < b.region: // not expected: one epoch is given once; decided alike everywhere
		return a
	}
	return b
}

// recover rebuilds the allocations: from distributed data (ReadMajority; retried until
// it succeeds, as a coordinator that cannot read its state must not allocate), then
// checked against what the regions host.
func (c *coordinator) recover(gen uint64) {
	if !c.awaitDownMargin(gen) {
		return
	}
	alloc := map[string]map[int]allocation{}
	maxEpoch := map[string]uint64{}
	if c.s.cfg.DData != nil && !c.retryRead(gen, "shard coordinator cannot read its state yet", func() (err error) {
		alloc, maxEpoch, err = c.readState()
		return err
	}) {
		return
	}
	// A store that outlives the cluster's data may hold newer epochs, and shards with
	// remembered entities, that distributed data did not record (new data directories).
	var storedShards map[string][]int
	if es, ok := StateStoreAs[ExternalStateStore](c.s.cfg.States); ok && !c.retryRead(gen, "shard coordinator cannot read the state store's epochs yet", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
		defer cancel()
		stored, err := es.MaxEpochs(ctx)
		if err == nil {
			storedShards, err = es.RememberedShards(ctx)
		}
		for typ, e := range stored {
			maxEpoch[typ] = max(maxEpoch[typ], e)
		}
		return err
	}) {
		return
	}
	members := c.s.cfg.Membership.Members()
	alive := map[string]cluster.Member{}
	for _, m := range members {
		if c.s.holding(m) {
			alive[m.Address] = m
		}
	}
	// What the regions host: adds allocations the state lacks, finds stale copies, and
	// drops allocations their region (asked, and answering) does not host: after a
	// full restart the recorded regions are new processes that host nothing yet.
	var stale []shardRef
	states := c.regionStates(members)
	hosted := map[string]map[shardRef]bool{}
	for _, st := range states {
		hosted[st.Node] = map[shardRef]bool{}
		for _, sh := range st.Shards {
			hosted[st.Node][shardRef{Type: sh.Type, Shard: sh.ID}] = true
		}
	}
	for typ, shardsOf := range alloc {
		for id, a := range shardsOf {
			if h, answered := hosted[a.region]; answered && a.region != "" && !h[shardRef{Type: typ, Shard: id}] {
				shardsOf[id] = allocation{"", a.epoch}
			}
		}
	}
	for _, st := range states {
		for _, sh := range st.Shards {
			if alloc[sh.Type] == nil {
				alloc[sh.Type] = map[int]allocation{}
			}
			cur, known := alloc[sh.Type][sh.ID]
			switch {
			case !known || cur.region == "" && sh.Epoch >= cur.epoch:
				alloc[sh.Type][sh.ID] = allocation{st.Node, sh.Epoch}
			case cur.region != st.Node && sh.Epoch < cur.epoch:
				stale = append(stale, shardRef{Type: sh.Type, Shard: sh.ID, Requester: st.Node, Epoch: cur.epoch})
			case cur.region != st.Node && sh.Epoch > cur.epoch:
				alloc[sh.Type][sh.ID] = allocation{st.Node, sh.Epoch}
			}
			maxEpoch[sh.Type] = max(maxEpoch[sh.Type], sh.Epoch)
		}
	}
	shards := 0
	known := map[string]map[int]bool{}
	for typ, ids := range storedShards {
		known[typ] = map[int]bool{}
		for _, id := range ids {
			known[typ][id] = true
		}
	}
	for typ, shardsOf := range alloc {
		if known[typ] == nil {
			known[typ] = map[int]bool{}
		}
		for id, a := range shardsOf {
			known[typ][id] = true
			if _, ok := alive[a.region]; a.region == "" || !ok && !c.s.withinDownMargin(a.region) {
				delete(shardsOf, id)
				continue
			}
			shards++
		}
	}
	c.mu.Lock()
	if gen != c.gen || !c.recovering {
		c.mu.Unlock()
		return
	}
	c.setAllAllocLocked(alloc)
	c.maxEpoch, c.known = maxEpoch, known
	c.incarnation = map[string]cluster.UID{}
	for _, shardsOf := range alloc {
		for _, a := range shardsOf {
			c.noteIncarnationLocked(a.region, members)
		}
	}
	c.active, c.recovering = true, false
	c.mu.Unlock()
	c.s.owner.Go(c.allocateRemembered)
	for _, ref := range stale {
		c.s.dropShardAt(ref.Requester, ref)
	}
	c.s.log.Info("shard coordinator active", "recovered_shards", shards, "stale_copies", len(stale))
}

// awaitDownMargin waits, before the coordinator reads its state, until no member older
// than this one was downed less than DownRemovalMargin ago (Sharding.downMarginLeft), as Akka's singleton
// hands over only once the previous oldest member is removed, after its
// down-removal-margin. The coordinator starts here because the previous one's member
// was downed, and that member may not know it yet: its coordinator went on allocating
// shards (with WriteMajority, it still had contact with a majority) after this one had
// read the allocations, and this one gave a shard it had just allocated to another
// member (fault seed 82278: two lives of a counter on two members). false if the
// coordinator stopped or moved meanwhile.
func (c *coordinator) awaitDownMargin(gen uint64) bool {
	for {
		left := c.s.downMarginLeft()
		if left <= 0 {
			return true
		}
		c.s.log.Info("shard coordinator waits for the down-removal margin of a downed member before it starts", "left", left)
		select {
		case <-c.s.owner.Done():
			return false
		case <-time.After(min(left, 500*time.Millisecond)):
		}
		if !c.current(gen) {
			return false
		}
	}
}

// retryRead runs read until it succeeds (every 500 ms, logging what on failure): a
// coordinator that cannot read its state must not allocate. false if the coordinator
// stopped or moved meanwhile.
func (c *coordinator) retryRead(gen uint64, what string, read func() error) bool {
	for {
		err := read()
		if err == nil {
			return true
		}
		c.s.log.Warn(what, "err", err)
		select {
		case <-c.s.owner.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
		if !c.current(gen) {
			return false
		}
	}
}

// readState reads the coordinator's state from distributed data with ReadMajority: the
// types; per type, the two sets of buckets (this layout's and the second's), then the
// buckets and the first layout's map, at most coordinatorReadParallel keys at once; all
// merged by mergeAllocation.
func (c *coordinator) readState() (map[string]map[int]allocation, map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
	defer cancel()
	alloc := map[string]map[int]allocation{}
	maxEpoch := map[string]uint64{}
	types, err := c.readKeys(ctx, []string{coordinatorTypesKey})
	if err != nil {
		return nil, nil, err
	}
	if types[0] == nil {
		return alloc, maxEpoch, nil
	}
	typeSet, ok := types[0].(ddata.GSet)
	if !ok {
		return nil, nil, fmt.Errorf("sharding: %s holds %s", coordinatorTypesKey, types[0].Type())
	}
	for _, typ := range typeSet.Elements() {
		lists, err := c.readKeys(ctx, []string{coordinatorBucketsKey(typ), legacyBucketsKey(typ)})
		if err != nil {
			return nil, nil, err
		}
		bucketsOf := func(key string, d ddata.ReplicatedData) ([]int, error) {
			if d == nil {
				return nil, nil
			}
			set, ok := d.(ddata.GSet)
			if !ok {
				return nil, fmt.Errorf("sharding: %s holds %s", key, d.Type())
			}
			var out []int
			for _, b := range set.Elements() {
				n, err := strconv.Atoi(b)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("sharding: %s holds %q, not a bucket", key, b)
				}
				out = append(out, n)
			}
			return out, nil
		}
		buckets, err := bucketsOf(coordinatorBucketsKey(typ), lists[0])
		if err != nil {
			return nil, nil, err
		}
		legacy, err := bucketsOf(legacyBucketsKey(typ), lists[1])
		if err != nil {
			return nil, nil, err
		}
		keys := make([]string, 0, len(buckets)+len(legacy)+1)
		for _, b := range buckets {
			keys = append(keys, coordinatorBucketKey(typ, b))
		}
		keys = append(keys, legacyMapKey(typ))
		for _, b := range legacy {
			keys = append(keys, legacyBucketKey(typ, b))
		}
		values, err := c.readKeys(ctx, keys)
		if err != nil {
			return nil, nil, err
		}
		shards := make(map[int]allocation, len(buckets)*coordinatorBucketShards)
		note := func(shard int, a allocation) {
			maxEpoch[typ] = max(maxEpoch[typ], a.epoch)
			if cur, ok := shards[shard]; ok {
				a = mergeAllocation(cur, a)
			}
			shards[shard] = a
		}
		for i, d := range values {
			switch v := d.(type) {
			case nil:
			case ddata.EpochMap:
				if i >= len(buckets) {
					return nil, nil, fmt.Errorf("sharding: %s holds %s", keys[i], d.Type())
				}
				for e := range v.All() {
					if e.Key > math.MaxInt {
						continue // not a shard this coordinator wrote
					}
					note(int(e.Key), allocation{e.Value, e.Epoch})
				}
			case ddata.LWWMap:
				if i < len(buckets) {
					return nil, nil, fmt.Errorf("sharding: %s holds %s", keys[i], d.Type())
				}
				for key, v := range v.Entries() {
					shard, err1 := strconv.Atoi(key)
					region, epochStr, _ := strings.Cut(string(v), "|")
					epoch, err2 := strconv.ParseUint(epochStr, 10, 64)
					if err1 != nil || err2 != nil {
						continue
					}
					note(shard, allocation{region, epoch})
				}
			default:
				return nil, nil, fmt.Errorf("sharding: %s holds %s", keys[i], d.Type())
			}
		}
		alloc[typ] = shards
		c.mu.Lock()
		c.typesSaved[typ] = true
		if c.bucketsSaved[typ] == nil {
			c.bucketsSaved[typ] = map[int]bool{}
		}
		for _, b := range buckets {
			c.bucketsSaved[typ][b] = true
		}
		c.mu.Unlock()
	}
	return alloc, maxEpoch, nil
}

// readKeys reads the values at keys with ReadMajority, at most coordinatorReadParallel
// at once: nil for a key not found or deleted (an earlier layout's keys may be deleted
// once every member is upgraded, docs/scale.md), the errors joined otherwise.
func (c *coordinator) readKeys(ctx context.Context, keys []string) ([]ddata.ReplicatedData, error) {
	out := make([]ddata.ReplicatedData, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, coordinatorReadParallel)
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // no owner: it lives one read, which the call waits for
			defer func() { <-sem; wg.Done() }()
			d, err := c.s.cfg.DData.Get(ctx, key, ddata.ReadMajority(0))
			switch {
			case errors.Is(err, ddata.ErrNotFound), errors.Is(err, ddata.ErrDataDeleted):
			case err != nil:
				errs[i] = err
			default:
				out[i] = d
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// persist records a shard's allocation (region "" when it has none) in distributed data
// with WriteMajority, in its bucket's EpochMap; the type and the bucket are recorded
// first, once.
func (c *coordinator) persist(ctx context.Context, typ string, shard int, a allocation) error {
	dd := c.s.cfg.DData
	if dd == nil {
		return nil
	}
	if shard < 0 {
		return fmt.Errorf("sharding: shard %d of %s: negative", shard, typ)
	}
	bucket := shard / coordinatorBucketShards
	c.mu.Lock()
	saved, bucketSaved := c.typesSaved[typ], c.bucketsSaved[typ][bucket]
	c.mu.Unlock()
	add := func(key, element string) error {
		_, err := dd.Update(ctx, key, ddata.GSet{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				s, delta := d.(ddata.GSet).Add(element)
				return s, delta, nil
			})
		return err
	}
	if !saved {
		if err := add(coordinatorTypesKey, typ); err != nil {
			return err
		}
		c.mu.Lock()
		c.typesSaved[typ] = true
		c.mu.Unlock()
	}
	if !bucketSaved {
		if err := add(coordinatorBucketsKey(typ), strconv.Itoa(bucket)); err != nil {
			return err
		}
		c.mu.Lock()
		if c.bucketsSaved[typ] == nil {
			c.bucketsSaved[typ] = map[int]bool{}
		}
		c.bucketsSaved[typ][bucket] = true
		c.mu.Unlock()
	}
	_, err := dd.Update(ctx, coordinatorBucketKey(typ, bucket), ddata.EpochMap{}, ddata.WriteMajority(0),
		func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
			m, ok := d.(ddata.EpochMap)
			if !ok {
				return nil, nil, fmt.Errorf("sharding: %s holds %s", coordinatorBucketKey(typ, bucket), d.Type())
			}
			m, delta := m.Put(uint64(shard), a.epoch, a.region)
			return m, delta, nil
		})
	return err
}

// regionStates asks every hosting member what it hosts (at most RequestTimeout).
func (c *coordinator) regionStates(members []cluster.Member) []RegionState {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
	defer cancel()
	var mu sync.Mutex
	var out []RegionState
	var wg sync.WaitGroup
	for _, m := range members {
		if !hosting(m) {
			continue
		}
		if m.Address == c.s.self {
			mu.Lock()
			out = append(out, c.s.LocalState())
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() { // no owner: it lives one request, which the call waits for
			defer wg.Done()
			st, err := c.s.remoteState(ctx, m)
			if err != nil {
				c.s.log.Warn("shard coordinator recovery: region did not answer", "region", m.Address, "err", err)
				return
			}
			mu.Lock()
			out = append(out, st)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
