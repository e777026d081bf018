package sharding

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestShardIndexMatchesAllocations changes allocations and tentative allocations at
// random and checks, after each change, that the index counts at each region exactly
// the shards the map built from every allocation counted (the coordinator's former
// way).
func TestShardIndexMatchesAllocations(t *testing.T) {
	c := &coordinator{}
	c.reset()
	rng := rand.New(rand.NewPCG(1, 2))
	regions := []string{"", "a:1", "b:1", "c:1", "d:1"}
	types := []string{"t1", "t2"}
	for step := range 5000 {
		typ := types[rng.IntN(len(types))]
		shard := rng.IntN(40)
		region := regions[rng.IntN(len(regions))]
		ref := shardRef{Type: typ, Shard: shard}
		switch rng.IntN(5) {
		case 0, 1:
			c.setAllocLocked(typ, shard, allocation{region, uint64(step)})
		case 2:
			c.deleteAllocLocked(typ, shard)
		case 3:
			if _, ok := c.tentative[ref]; !ok && region != "" {
				c.tentative[ref] = region
				c.index.add(typ, region, indexSlot{shard: shard, tentative: true})
			}
		case 4:
			c.finish(ref, shardHome{}, nil)
		}
		if step%1000 == 999 {
			c.setAllAllocLocked(c.alloc)
		}
		for _, typ := range types {
			want := map[string][]int{}
			got := map[string][]int{}
			for _, r := range regions[1:] {
				want[r], got[r] = nil, nil
			}
			for id, a := range c.alloc[typ] {
				if _, ok := want[a.region]; ok {
					want[a.region] = append(want[a.region], id)
				}
			}
			for other, home := range c.tentative {
				if other.Type == typ {
					want[home] = append(want[home], other.Shard)
				}
			}
			c.index.fill(typ, got, step%2 == 0)
			for _, r := range regions[1:] {
				w, g := slices.Sorted(slices.Values(want[r])), slices.Sorted(slices.Values(got[r]))
				if !slices.Equal(w, g) {
					t.Fatalf("step %d, type %s, region %s: index has %v, allocations %v", step, typ, r, g, w)
				}
			}
		}
	}
	if len(c.index) == 0 {
		t.Fatal("the index is empty after the changes: nothing was checked")
	}
}
