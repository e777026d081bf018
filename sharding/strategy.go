package sharding

import (
	"errors"
	"sort"
)

// ShardAllocationStrategy decides where the coordinator puts a shard (Akka's
// ShardAllocationStrategy). Implementations are pure: no I/O, no clock, and safe to call
// from the coordinator's goroutine only.
type ShardAllocationStrategy interface {
	// AllocateShard returns the region (member address) that should host shard.
	// requester is the region that asked for the shard's home; current maps every region
	// that can host the type to the shards it holds now (possibly none). It returns an
	// error if there is no region at all.
	AllocateShard(requester string, shard int, current map[string][]int) (string, error)
}

// ErrNoRegion is returned by an allocation strategy that has no region to choose from.
var ErrNoRegion = errors.New("sharding: no region to allocate the shard to")

// LeastShardAllocationStrategy allocates a new shard to the region with the fewest shards
// of the type, as Akka's LeastShardAllocationStrategy does. Ties go to the region whose
// address sorts first, so every coordinator decides the same way for the same state.
type LeastShardAllocationStrategy struct{}

var _ ShardAllocationStrategy = LeastShardAllocationStrategy{}

// AllocateShard implements ShardAllocationStrategy.
func (LeastShardAllocationStrategy) AllocateShard(requester string, shard int, current map[string][]int) (string, error) {
	if len(current) == 0 {
		return "", ErrNoRegion
	}
	regions := make([]string, 0, len(current))
	for r := range current {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	best := regions[0]
	for _, r := range regions[1:] {
		if len(current[r]) < len(current[best]) {
			best = r
		}
	}
	return best, nil
}
