package sharding

import (
	"errors"
	"fmt"
	"testing"
)

func TestLeastShardAllocatesToFewest(t *testing.T) {
	s := LeastShardAllocationStrategy{}
	current := map[string][]int{"a": {1, 2, 3}, "b": {4}, "c": {5, 6}}
	if got, _ := s.AllocateShard("a", 7, current); got != "b" {
		t.Fatalf("allocated to %s, want b", got)
	}
	// Ties go to the first address, whoever asks.
	current = map[string][]int{"c": {1}, "b": {2}, "a": {3}}
	for _, requester := range []string{"a", "b", "c"} {
		if got, _ := s.AllocateShard(requester, 9, current); got != "a" {
			t.Fatalf("tie allocated to %s", got)
		}
	}
	if _, err := s.AllocateShard("a", 1, nil); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("no regions: %v", err)
	}
}

func TestLeastShardBalancesOneHundredShards(t *testing.T) {
	s := LeastShardAllocationStrategy{}
	current := map[string][]int{"m1": nil, "m2": nil, "m3": nil}
	for shard := 0; shard < 100; shard++ {
		r, err := s.AllocateShard(fmt.Sprintf("m%d", shard%3+1), shard, current)
		if err != nil {
			t.Fatal(err)
		}
		current[r] = append(current[r], shard)
	}
	for r, shards := range current {
		if len(shards) < 33 || len(shards) > 34 {
			t.Fatalf("%s holds %d shards", r, len(shards))
		}
	}
	// A member that joins later gets every new shard until it catches up.
	current["m4"] = nil
	for shard := 100; shard < 110; shard++ {
		if r, _ := s.AllocateShard("m1", shard, current); r != "m4" {
			t.Fatalf("shard %d went to %s", shard, r)
		} else {
			current[r] = append(current[r], shard)
		}
	}
}
