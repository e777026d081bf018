package sharding

import (
	"errors"
	"hash/fnv"
	"sort"
	"strconv"
)

// ShardAllocationStrategy decides where the coordinator puts shards and which it moves
// (Akka's ShardAllocationStrategy). Implementations are pure: no I/O, no clock.
type ShardAllocationStrategy interface {
	// AllocateShard returns the region (member address) that should host shard.
	// requester is the region that asked for the shard's home; current maps every region
	// that can host the type to the shards it holds now (possibly none). It returns
	// ErrNoRegion if there is no region at all.
	AllocateShard(requester string, shard int, current map[string][]int) (string, error)
	// Rebalance returns the shards to hand off now (they are then allocated anew), given
	// the current allocations and the shards already being handed off.
	Rebalance(current map[string][]int, inProgress map[int]bool) []int
}

// ErrNoRegion is returned by an allocation strategy that has no region to choose from.
var ErrNoRegion = errors.New("sharding: no region to allocate the shard to")

// LeastShardAllocationStrategy is Akka's default: a new shard goes to the region with
// the fewest shards (ties to the lowest address, so every coordinator decides alike),
// and rebalancing moves shards from the region with the most to the one with the
// fewest while their difference is over RebalanceThreshold, at most
// MaxSimultaneousRebalance at a time.
type LeastShardAllocationStrategy struct {
	// RebalanceThreshold is the difference of shard counts that starts a rebalance.
	// Default (0) 1: regions end within one shard of each other.
	RebalanceThreshold int
	// MaxSimultaneousRebalance caps the shards in handoff at once. Default (0) 3.
	MaxSimultaneousRebalance int
}

var _ ShardAllocationStrategy = LeastShardAllocationStrategy{}

func (s LeastShardAllocationStrategy) threshold() int { return max(s.RebalanceThreshold, 1) }

func (s LeastShardAllocationStrategy) maxMoves() int {
	if s.MaxSimultaneousRebalance <= 0 {
		return 3
	}
	return s.MaxSimultaneousRebalance
}

func sortedRegions(current map[string][]int) []string {
	regions := make([]string, 0, len(current))
	for r := range current {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	return regions
}

// AllocateShard implements ShardAllocationStrategy.
func (LeastShardAllocationStrategy) AllocateShard(requester string, shard int, current map[string][]int) (string, error) {
	if len(current) == 0 {
		return "", ErrNoRegion
	}
	regions := sortedRegions(current)
	best := regions[0]
	for _, r := range regions[1:] {
		if len(current[r]) < len(current[best]) {
			best = r
		}
	}
	return best, nil
}

// Rebalance implements ShardAllocationStrategy: it simulates moving one shard at a time
// (the highest-numbered shard of the most loaded region to the least loaded one) while
// the difference is over the threshold.
func (s LeastShardAllocationStrategy) Rebalance(current map[string][]int, inProgress map[int]bool) []int {
	budget := s.maxMoves() - len(inProgress)
	if budget <= 0 || len(current) < 2 {
		return nil
	}
	counts := map[string][]int{}
	for r, shards := range current {
		var keep []int
		for _, sh := range shards {
			if !inProgress[sh] {
				keep = append(keep, sh)
			}
		}
		sort.Ints(keep)
		counts[r] = keep
	}
	regions := sortedRegions(current)
	var out []int
	for len(out) < budget {
		most, least := regions[0], regions[0]
		for _, r := range regions {
			if len(counts[r]) > len(counts[most]) {
				most = r
			}
			if len(counts[r]) < len(counts[least]) {
				least = r
			}
		}
		if len(counts[most])-len(counts[least]) <= s.threshold() {
			break
		}
		shards := counts[most]
		moved := shards[len(shards)-1]
		counts[most] = shards[:len(shards)-1]
		counts[least] = append(counts[least], -1) // a placeholder: the new home is decided at allocation
		out = append(out, moved)
	}
	return out
}

// PriorityAllocationStrategy gives each shard a deterministic priority order of the
// regions (rendezvous, or highest-random-weight, hashing of region and shard) and puts
// the shard on the first region of its order that is present. When a region fails, its
// shards go to their next region, which is a different one for each shard, so they
// spread evenly over the survivors; when a region joins, it takes only the shards that
// rank it first, about 1/N. This is Zeebe's priority election for an even spread of
// leaders, applied to shard placement (docs/design.md, "Cluster sharding").
type PriorityAllocationStrategy struct {
	// Type is the entity type: shards of different types rank regions differently.
	Type string
	// MaxSimultaneousRebalance caps the shards in handoff at once. Default (0) 3.
	MaxSimultaneousRebalance int
}

var _ ShardAllocationStrategy = PriorityAllocationStrategy{}

// Priority returns the rank weight of region for shard: higher comes first.
func (s PriorityAllocationStrategy) Priority(region string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s.Type))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(shard)))
	h.Write([]byte{0})
	h.Write([]byte(region))
	// FNV's low bits mix poorly over similar inputs: finish with a 64-bit mixer
	// (SplitMix64's) so that ranks are uniform.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Order returns the regions in shard's priority order.
func (s PriorityAllocationStrategy) Order(shard int, regions []string) []string {
	out := append([]string(nil), regions...)
	sort.Slice(out, func(i, j int) bool {
		pi, pj := s.Priority(out[i], shard), s.Priority(out[j], shard)
		if pi != pj {
			return pi > pj
		}
		return out[i] < out[j]
	})
	return out
}

// Top returns the first k regions of shard's order (Order(shard, regions)[:k], all of
// them if there are fewer than k; none if k < 1) in a new slice, with one Priority per
// region and a selection of k: O(regions × k) instead of a sort with two hashes a
// comparison. The state store's ring asks it for each request's replica set
// (docs/scale.md).
func (s PriorityAllocationStrategy) Top(shard int, regions []string, k int) []string {
	if k < 1 || len(regions) == 0 {
		return nil
	}
	type ranked struct {
		region string
		p      uint64
	}
	before := func(a, b ranked) bool { return a.p > b.p || a.p == b.p && a.region < b.region }
	best := make([]ranked, 0, min(k, len(regions)))
	for _, r := range regions {
		c := ranked{r, s.Priority(r, shard)}
		if len(best) == k && !before(c, best[k-1]) {
			continue
		}
		if len(best) < k {
			best = append(best, c)
		} else {
			best[k-1] = c
		}
		for i := len(best) - 1; i > 0 && before(best[i], best[i-1]); i-- {
			best[i], best[i-1] = best[i-1], best[i]
		}
	}
	out := make([]string, len(best))
	for i, b := range best {
		out[i] = b.region
	}
	return out
}

// first returns the first region of shard's order (Order(shard, regions)[0]) without
// sorting them all: one Priority per region instead of two per comparison of a sort.
// Rebalance asks it of every shard, so a full sort cost O(shards × regions log regions)
// hashes a round (docs/scale.md). regions must not be empty.
func (s PriorityAllocationStrategy) first(shard int, regions []string) string {
	best, bestP := regions[0], s.Priority(regions[0], shard)
	for _, r := range regions[1:] {
		if p := s.Priority(r, shard); p > bestP || (p == bestP && r < best) {
			best, bestP = r, p
		}
	}
	return best
}

// AllocateShard implements ShardAllocationStrategy: the first region of the shard's
// order.
func (s PriorityAllocationStrategy) AllocateShard(requester string, shard int, current map[string][]int) (string, error) {
	if len(current) == 0 {
		return "", ErrNoRegion
	}
	return s.first(shard, sortedRegions(current)), nil
}

// Rebalance implements ShardAllocationStrategy: shards that are not on the first region
// of their order move there (a joined region takes its shards back), a few at a time.
func (s PriorityAllocationStrategy) Rebalance(current map[string][]int, inProgress map[int]bool) []int {
	budget := s.MaxSimultaneousRebalance
	if budget <= 0 {
		budget = 3
	}
	budget -= len(inProgress)
	regions := sortedRegions(current)
	var misplaced []int
	for _, r := range regions {
		for _, sh := range current[r] {
			if !inProgress[sh] && s.first(sh, regions) != r {
				misplaced = append(misplaced, sh)
			}
		}
	}
	sort.Ints(misplaced)
	if budget <= 0 {
		return nil
	}
	if len(misplaced) > budget {
		misplaced = misplaced[:budget]
	}
	return misplaced
}

// strategyFor returns the allocation strategy of an entity type's settings; custom
// overrides both built-in strategies when set.
func strategyFor(t TypeSettings, custom ShardAllocationStrategy, maxMoves int) ShardAllocationStrategy {
	if custom != nil {
		return custom
	}
	if t.Allocation == AllocationPriority {
		return PriorityAllocationStrategy{Type: t.Name, MaxSimultaneousRebalance: maxMoves}
	}
	return LeastShardAllocationStrategy{MaxSimultaneousRebalance: maxMoves}
}
