// The shard coordinator's state: the allocations it records in distributed data
// (WriteMajority) and recovers when it starts (ReadMajority, then checked against what
// the regions host).

package sharding

import (
	"context"
	"errors"
	"fmt"
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
// allocations, and per type an LWWMap shard → "region|epoch" (region empty: not
// allocated). Entries are never removed, so the highest epoch is always known.
const coordinatorTypesKey = "sharding-coordinator-types"

func coordinatorKey(typ string) string { return "sharding-coordinator:" + typ }

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

// readState reads the coordinator's state from distributed data with ReadMajority.
func (c *coordinator) readState() (map[string]map[int]allocation, map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
	defer cancel()
	alloc := map[string]map[int]allocation{}
	maxEpoch := map[string]uint64{}
	d, err := c.s.cfg.DData.Get(ctx, coordinatorTypesKey, ddata.ReadMajority(0))
	if errors.Is(err, ddata.ErrNotFound) {
		return alloc, maxEpoch, nil
	}
	if err != nil {
		return nil, nil, err
	}
	types, ok := d.(ddata.GSet)
	if !ok {
		return nil, nil, fmt.Errorf("sharding: %s holds %s", coordinatorTypesKey, d.Type())
	}
	for _, typ := range types.Elements() {
		d, err := c.s.cfg.DData.Get(ctx, coordinatorKey(typ), ddata.ReadMajority(0))
		if errors.Is(err, ddata.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		m, ok := d.(ddata.LWWMap)
		if !ok {
			return nil, nil, fmt.Errorf("sharding: %s holds %s", coordinatorKey(typ), d.Type())
		}
		alloc[typ] = map[int]allocation{}
		for key, v := range m.Entries() {
			shard, err1 := strconv.Atoi(key)
			region, epochStr, _ := strings.Cut(string(v), "|")
			epoch, err2 := strconv.ParseUint(epochStr, 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			maxEpoch[typ] = max(maxEpoch[typ], epoch)
			alloc[typ][shard] = allocation{region, epoch}
		}
		c.mu.Lock()
		c.typesSaved[typ] = true
		c.mu.Unlock()
	}
	return alloc, maxEpoch, nil
}

// persist records a shard's allocation (region "" when it has none) in distributed data
// with WriteMajority.
func (c *coordinator) persist(ctx context.Context, typ string, shard int, a allocation) error {
	dd := c.s.cfg.DData
	if dd == nil {
		return nil
	}
	node := dd.SelfNodeID()
	c.mu.Lock()
	saved := c.typesSaved[typ]
	c.mu.Unlock()
	if !saved {
		if _, err := dd.Update(ctx, coordinatorTypesKey, ddata.GSet{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				s, delta := d.(ddata.GSet).Add(typ)
				return s, delta, nil
			}); err != nil {
			return err
		}
		c.mu.Lock()
		c.typesSaved[typ] = true
		c.mu.Unlock()
	}
	value := []byte(a.region + "|" + strconv.FormatUint(a.epoch, 10))
	_, err := dd.Update(ctx, coordinatorKey(typ), ddata.LWWMap{}, ddata.WriteMajority(0),
		func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
			m, delta := d.(ddata.LWWMap).Put(node, strconv.Itoa(shard), value, ddata.DefaultClock(func() int64 { return c.s.cfg.Now().UnixMilli() }))
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
