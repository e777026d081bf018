package sharding

import (
	"errors"
	"fmt"
	"slices"
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

// allocateAll allocates shards 0..n-1 one by one with s and returns the allocation.
func allocateAll(t *testing.T, s ShardAllocationStrategy, regions []string, n int) map[string][]int {
	t.Helper()
	current := map[string][]int{}
	for _, r := range regions {
		current[r] = nil
	}
	for shard := 0; shard < n; shard++ {
		r, err := s.AllocateShard(regions[0], shard, current)
		if err != nil {
			t.Fatal(err)
		}
		current[r] = append(current[r], shard)
	}
	return current
}

// rebalanceFully runs rounds of Rebalance, reallocating each moved shard with the
// strategy, until nothing moves; it checks the per-round cap and returns the moves.
func rebalanceFully(t *testing.T, s ShardAllocationStrategy, current map[string][]int, perRound int) int {
	t.Helper()
	moves := 0
	for round := 0; round < 1000; round++ {
		moving := s.Rebalance(current, nil)
		if len(moving) == 0 {
			return moves
		}
		if len(moving) > perRound {
			t.Fatalf("round %d moves %d shards, the cap is %d", round, len(moving), perRound)
		}
		for _, sh := range moving {
			for r, shards := range current {
				for i, x := range shards {
					if x == sh {
						current[r] = append(shards[:i:i], shards[i+1:]...)
					}
				}
			}
			r, _ := s.AllocateShard("", sh, current)
			current[r] = append(current[r], sh)
			moves++
		}
	}
	t.Fatal("rebalancing never settles")
	return moves
}

func spread(current map[string][]int) (lo, hi int) {
	lo = 1 << 30
	for _, shards := range current {
		lo, hi = min(lo, len(shards)), max(hi, len(shards))
	}
	return lo, hi
}

func TestLeastShardRebalancesAJoinedRegion(t *testing.T) {
	s := LeastShardAllocationStrategy{MaxSimultaneousRebalance: 3}
	current := allocateAll(t, s, []string{"a", "b", "c"}, 100)
	current["d"] = nil
	moves := rebalanceFully(t, s, current, 3)
	if lo, hi := spread(current); hi-lo > 1 {
		t.Fatalf("after rebalancing the spread is %d..%d", lo, hi)
	}
	if moves != 25 {
		t.Fatalf("%d moves to give the new region its 25 shards", moves)
	}
	// In progress handoffs count against the cap.
	current["e"] = nil
	if got := s.Rebalance(current, map[int]bool{1: true, 2: true}); len(got) != 1 {
		t.Fatalf("with 2 in progress and a cap of 3, %d more move", len(got))
	}
}

func TestLeastShardAfterAFailure(t *testing.T) {
	s := LeastShardAllocationStrategy{}
	current := allocateAll(t, s, []string{"a", "b", "c", "d"}, 100)
	lost := current["b"]
	delete(current, "b")
	for _, sh := range lost {
		r, _ := s.AllocateShard("", sh, current)
		current[r] = append(current[r], sh)
	}
	if lo, hi := spread(current); hi-lo > 1 {
		t.Fatalf("after a failure the spread is %d..%d", lo, hi)
	}
}

func TestPrioritySpreadsAFailedRegionsShardsEvenly(t *testing.T) {
	regions := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
	s := PriorityAllocationStrategy{Type: "counter"}
	const n = 6000
	current := allocateAll(t, s, regions, n)
	if lo, hi := spread(current); lo < 850 || hi > 1150 {
		t.Fatalf("priority allocation of %d shards over 6 regions: %d..%d", n, lo, hi)
	}
	// m3 fails: its shards go to each shard's next region, spread over the 5 survivors.
	lost := current["m3"]
	delete(current, "m3")
	got := map[string]int{}
	for _, sh := range lost {
		r, _ := s.AllocateShard("", sh, current)
		got[r]++
	}
	per := len(lost) / 5
	for _, r := range []string{"m1", "m2", "m4", "m5", "m6"} {
		if got[r] < per*7/10 || got[r] > per*13/10 {
			t.Fatalf("the failed region's %d shards went %v: not even", len(lost), got)
		}
	}
	// A survivor's own shards do not move.
	if moving := s.Rebalance(current, nil); len(moving) != 0 {
		t.Fatalf("after a failure, %d shards rebalance", len(moving))
	}
}

func TestPriorityJoinMovesAboutOneNth(t *testing.T) {
	s := PriorityAllocationStrategy{Type: "counter", MaxSimultaneousRebalance: 50}
	current := allocateAll(t, s, []string{"m1", "m2", "m3", "m4"}, 1000)
	current["m5"] = nil
	moves := rebalanceFully(t, s, current, 50)
	// About 1000/5 = 200 move, all to the new region.
	if moves < 150 || moves > 250 || len(current["m5"]) != moves {
		t.Fatalf("a fifth region took %d shards in %d moves", len(current["m5"]), moves)
	}
}

func TestPriorityIsTheSameEverywhere(t *testing.T) {
	a := PriorityAllocationStrategy{Type: "t"}.Order(7, []string{"x", "y", "z"})
	b := PriorityAllocationStrategy{Type: "t"}.Order(7, []string{"z", "x", "y"})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("orders differ: %v %v", a, b)
	}
	c := PriorityAllocationStrategy{Type: "other"}
	same := 0
	for sh := 0; sh < 100; sh++ {
		if c.Order(sh, []string{"x", "y", "z"})[0] == (PriorityAllocationStrategy{Type: "t"}).Order(sh, []string{"x", "y", "z"})[0] {
			same++
		}
	}
	if same > 60 {
		t.Fatalf("two types place %d of 100 shards alike", same)
	}
}

// TestSpreadAfterAFailureForEachStrategy: 100 shards on four regions, one fails; the
// spread of shards per surviving region, for each strategy (the figures it logs:
// go test -v -run SpreadAfter ./sharding).
func TestSpreadAfterAFailureForEachStrategy(t *testing.T) {
	for _, s := range []ShardAllocationStrategy{LeastShardAllocationStrategy{}, PriorityAllocationStrategy{Type: "counter"}} {
		current := allocateAll(t, s, []string{"a", "b", "c", "d"}, 100)
		before := map[string]int{}
		for r, shards := range current {
			before[r] = len(shards)
		}
		lost := current["b"]
		delete(current, "b")
		for _, sh := range lost {
			r, err := s.AllocateShard("", sh, current)
			if err != nil {
				t.Fatal(err)
			}
			current[r] = append(current[r], sh)
		}
		after := map[string]int{}
		total := 0
		for r, shards := range current {
			after[r] = len(shards)
			total += len(shards)
		}
		if total != 100 {
			t.Fatalf("%T: %d shards allocated after the failure", s, total)
		}
		lo, hi := spread(current)
		t.Logf("%T: before %v; after b fails %v (spread %d..%d)", s, before, after, lo, hi)
		if _, least := s.(LeastShardAllocationStrategy); least && hi-lo > 1 {
			t.Fatalf("least-shard spread %d..%d", lo, hi)
		}
	}
}

// first, which AllocateShard and Rebalance use, picks the region Order puts first, for
// shards and region sets of every size, ties included (a region named twice).
func TestPriorityFirstIsTheHeadOfTheOrder(t *testing.T) {
	s := PriorityAllocationStrategy{Type: "t"}
	for n := 1; n <= 40; n += 3 {
		regions := tiedRegions(n)
		for shard := range 200 {
			if got, want := s.first(shard, regions), s.Order(shard, regions)[0]; got != want {
				t.Fatalf("shard %d over %d regions: first %s, Order starts with %s", shard, n, got, want)
			}
		}
	}
}

// TestPriorityTopIsTheHeadOfTheOrder: Top(shard, regions, k) is Order(shard,
// regions)[:k] for every k, duplicates (equal priorities) included.
func TestPriorityTopIsTheHeadOfTheOrder(t *testing.T) {
	s := PriorityAllocationStrategy{Type: "t"}
	for n := 1; n <= 40; n += 3 {
		regions := tiedRegions(n)
		for shard := range 100 {
			order := s.Order(shard, regions)
			for k := 0; k <= n+1; k++ {
				got, want := s.Top(shard, regions, k), order[:min(max(k, 0), n)]
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("shard %d over %d regions, k %d: Top %v, Order starts with %v", shard, n, k, got, want)
				}
			}
		}
	}
}

// tiedRegions returns n region addresses in a shuffled order, the last one naming the
// first again when n > 2: equal priorities, which Order breaks by the lower name.
func tiedRegions(n int) []string {
	regions := make([]string, n)
	for i := range regions {
		regions[i] = fmt.Sprintf("10.0.0.%d:7946", (i*7)%n)
	}
	if n > 2 {
		regions[n-1] = regions[0]
	}
	return regions
}
