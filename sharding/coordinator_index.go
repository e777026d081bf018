package sharding

import "slices"

// The coordinator's count of shards per region, kept as allocations and tentative
// allocations change, so that a decision does not rebuild it from every allocation of
// the type: that cost O(shards) a decision, and allocating again the shards of a member
// that crashed, one request each, O(shards²/members) (docs/scale.md).

// indexSlot is one entry of a region's shards: a recorded allocation, or a tentative one
// (decided, not yet hosted). A shard may hold both for a moment, in two regions or one,
// as the map the coordinator built on every request counted it.
type indexSlot struct {
	shard     int
	tentative bool
}

// regionShards is the shards counted at one region, in no order: ids for the strategy,
// slots beside them, pos the index of each slot (removal swaps the last one in).
type regionShards struct {
	ids   []int
	slots []indexSlot
	pos   map[indexSlot]int
}

// shardIndex is, per entity type, region → the shards counted there.
type shardIndex map[string]map[string]*regionShards

func (x shardIndex) add(typ, region string, s indexSlot) {
	if region == "" {
		return
	}
	byRegion := x[typ]
	if byRegion == nil {
		byRegion = map[string]*regionShards{}
		x[typ] = byRegion
	}
	rs := byRegion[region]
	if rs == nil {
		rs = &regionShards{pos: map[indexSlot]int{}}
		byRegion[region] = rs
	}
	if _, ok := rs.pos[s]; ok {
		return
	}
	rs.pos[s] = len(rs.ids)
	rs.ids = append(rs.ids, s.shard)
	rs.slots = append(rs.slots, s)
}

func (x shardIndex) remove(typ, region string, s indexSlot) {
	rs := x[typ][region]
	if rs == nil {
		return
	}
	i, ok := rs.pos[s]
	if !ok {
		return
	}
	last := len(rs.ids) - 1
	rs.ids[i], rs.slots[i] = rs.ids[last], rs.slots[last]
	rs.pos[rs.slots[i]] = i
	rs.ids, rs.slots = rs.ids[:last], rs.slots[:last]
	delete(rs.pos, s)
	if last == 0 {
		delete(x[typ], region)
		if len(x[typ]) == 0 {
			delete(x, typ)
		}
	}
}

// fill sets, for each region of current (the candidates), the shards of typ counted
// there. The slices are the index's own, capped (an append copies), unless clone is set:
// a strategy the coordinator does not know might modify them.
func (x shardIndex) fill(typ string, current map[string][]int, clone bool) {
	byRegion := x[typ]
	for r := range current {
		rs := byRegion[r]
		switch {
		case rs == nil:
		case clone:
			current[r] = slices.Clone(rs.ids)
		default:
			current[r] = slices.Clip(rs.ids)
		}
	}
}

// setAllocLocked records the allocation of a shard in c.alloc and the index.
func (c *coordinator) setAllocLocked(typ string, shard int, a allocation) {
	shards := c.alloc[typ]
	if shards == nil {
		shards = map[int]allocation{}
		c.alloc[typ] = shards
	}
	if old, ok := shards[shard]; ok {
		c.index.remove(typ, old.region, indexSlot{shard: shard})
	}
	shards[shard] = a
	c.index.add(typ, a.region, indexSlot{shard: shard})
}

// deleteAllocLocked forgets the allocation of a shard in c.alloc and the index.
func (c *coordinator) deleteAllocLocked(typ string, shard int) {
	if old, ok := c.alloc[typ][shard]; ok {
		c.index.remove(typ, old.region, indexSlot{shard: shard})
		delete(c.alloc[typ], shard)
	}
}

// setAllAllocLocked replaces every allocation (a recovery) and rebuilds the index,
// keeping the tentative allocations.
func (c *coordinator) setAllAllocLocked(alloc map[string]map[int]allocation) {
	c.alloc = alloc
	c.index = shardIndex{}
	for typ, shards := range alloc {
		for id, a := range shards {
			c.index.add(typ, a.region, indexSlot{shard: id})
		}
	}
	for ref, region := range c.tentative {
		c.index.add(ref.Type, region, indexSlot{shard: ref.Shard, tentative: true})
	}
}
