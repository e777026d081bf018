package ddata

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"slices"
	"testing"
)

// randCount returns an increment: mostly small, sometimes 0, sometimes near 2^64.
func randCount(r *rand.Rand) uint64 {
	switch r.Intn(10) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64 - uint64(r.Intn(3))
	default:
		return uint64(1 + r.Intn(100))
	}
}

func gcounterUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	return cur.(GCounter).Increment(node, randCount(r))
}

func TestGCounterLaws(t *testing.T) {
	checkLaws(t, genByUpdates(GCounter{}, gcounterUpdate))
}

func TestGCounterDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(GCounter{}, gcounterUpdate), gcounterUpdate)
}

func TestGCounterConvergence(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		// A node's count is only incremented by the node itself, so the converged
		// count of a node is the saturating sum of its increments.
		model := map[NodeID]uint64{}
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			n := randCount(r)
			model[node] = saturatingAdd(model[node], n)
			return cur.(GCounter).Increment(node, n)
		}
		final := checkConvergence(t, seed, 3+int(seed%2), GCounter{}, update).(GCounter)
		want := new(big.Int)
		for _, v := range model {
			want.Add(want, new(big.Int).SetUint64(v))
		}
		if final.Count().Cmp(want) != 0 {
			t.Fatalf("seed %d: converged to %v, want %v", seed, final.Count(), want)
		}
		checkValueJSON(t, final)
	}
}

func TestGCounterIncrement(t *testing.T) {
	a, b := nodes[0], nodes[1]
	var zero GCounter
	if zero.Count().Sign() != 0 || len(zero.ModifiedByNodes()) != 0 {
		t.Fatalf("zero GCounter: %v %v", zero.Count(), zero.ModifiedByNodes())
	}
	c1, d1 := zero.Increment(a, 2)
	c2, d2 := c1.Increment(a, 3)
	c3, d3 := c2.Increment(b, 1)
	if got := c3.Count(); got.Cmp(big.NewInt(6)) != 0 {
		t.Fatalf("Count = %v, want 6", got)
	}
	// Immutable: the earlier values are unchanged.
	if c1.Count().Int64() != 2 || c2.Count().Int64() != 5 || zero.Count().Sign() != 0 {
		t.Fatalf("an update changed its receiver: %v %v %v", zero.Count(), c1.Count(), c2.Count())
	}
	// A delta holds only the node's new count.
	for _, tc := range []struct {
		d    GCounter
		want map[NodeID]uint64
	}{{d1, map[NodeID]uint64{a: 2}}, {d2, map[NodeID]uint64{a: 5}}, {d3, map[NodeID]uint64{b: 1}}} {
		if !equal(t, tc.d, GCounter{state: tc.want}) {
			t.Errorf("delta %v, want %v", tc.d.state, tc.want)
		}
	}
	same, empty := c3.Increment(a, 0)
	if !equal(t, same, c3) || !equal(t, empty, GCounter{}) {
		t.Errorf("Increment by 0 = %v, %v; want the counter and an empty delta", same.state, empty.state)
	}
	if c3.Type() != TypeGCounter || c3.RequiresCausalDeliveryOfDeltas() {
		t.Error("GCounter type or causal delivery")
	}
	if got := c3.Value().(*big.Int); got.Int64() != 6 {
		t.Errorf("Value = %v", got)
	}
	for _, bad := range []NodeID{"", "a\xff"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Increment(%q) did not panic", bad)
				}
			}()
			c3.Increment(bad, 1)
		}()
	}
}

func TestGCounterSaturation(t *testing.T) {
	a, b := nodes[0], nodes[1]
	c, _ := GCounter{}.Increment(a, math.MaxUint64-1)
	c, d := c.Increment(a, 5)
	if c.state[a] != math.MaxUint64 || d.state[a] != math.MaxUint64 {
		t.Fatalf("count %d, delta %d; want saturation at 2^64-1", c.state[a], d.state[a])
	}
	c, _ = c.Increment(a, 1)
	if c.state[a] != math.MaxUint64 {
		t.Fatalf("count after saturation %d", c.state[a])
	}
	c, _ = c.Increment(b, math.MaxUint64)
	c, _ = c.Increment(nodes[2], 2)
	want, _ := new(big.Int).SetString("36893488147419103232", 10) // 2·(2^64-1) + 2 = 2^65
	if got := c.Count(); got.Cmp(want) != 0 {
		t.Fatalf("Count = %v, want %v", got, want)
	}
	back, err := Decode(mustEncode(t, c))
	if err != nil || back.(GCounter).Count().Cmp(want) != 0 {
		t.Fatalf("decoded %v, %v", back, err)
	}
}

func TestGCounterMergeTypes(t *testing.T) {
	c, _ := GCounter{}.Increment(nodes[0], 1)
	for _, other := range []ReplicatedData{nil, Flag{}, PNCounter{}, (*GCounter)(nil), (*Flag)(nil), (*LWWRegister)(nil)} {
		if m, err := c.Merge(other); !errors.Is(err, ErrTypeMismatch) || m != nil {
			t.Errorf("Merge(%T) = %v, %v; want ErrTypeMismatch", other, m, err)
		}
	}
	o, _ := GCounter{}.Increment(nodes[1], 2)
	m, err := c.Merge(&o)
	if err != nil || m.(GCounter).Count().Int64() != 3 {
		t.Errorf("Merge(*GCounter) = %v, %v", m, err)
	}
}

func TestGCounterPruning(t *testing.T) {
	removed, into, other := nodes[0], nodes[1], nodes[2]
	c, _ := GCounter{}.Increment(removed, 5)
	c, _ = c.Increment(into, 3)
	c, _ = c.Increment(other, 2)
	old := c // a replica that does not take part in the pruning

	if !c.NeedPruningFrom(removed) || c.NeedPruningFrom(nodes[3]) {
		t.Fatal("NeedPruningFrom")
	}
	if got := c.ModifiedByNodes(); !slices.Equal(got, []NodeID{removed, into, other}) {
		t.Fatalf("ModifiedByNodes = %v", got)
	}
	pruned := c.Prune(removed, into).(GCounter)
	if pruned.Count().Int64() != 10 {
		t.Fatalf("Prune changed the value: %v", pruned.Count())
	}
	if pruned.NeedPruningFrom(removed) || pruned.state[into] != 8 {
		t.Fatalf("pruned state %v", pruned.state)
	}
	if c.Count().Int64() != 10 || !c.NeedPruningFrom(removed) {
		t.Fatal("Prune changed its receiver")
	}
	cleaned := pruned.PruningCleanup(removed).(GCounter)
	if !equal(t, cleaned, pruned) || slices.Contains(cleaned.ModifiedByNodes(), removed) {
		t.Fatalf("PruningCleanup after Prune: %v", cleaned.state)
	}
	if !equal(t, c.Prune(nodes[3], into), c) {
		t.Fatal("Prune of a node without data changed the value")
	}

	// The type only provides the operations. Merging the pruned value with an old
	// replica that still has removed's count counts it twice: Akka's replicator keeps
	// pruning markers (PruningPerformed) with the data and, while they live, applies
	// PruningCleanup to every value that arrives, so the old count never comes back.
	if got := mustMerge(t, pruned, old).(GCounter).Count().Int64(); got != 15 {
		t.Fatalf("pruned ⊔ unpruned = %d; this test documents the double count (15)", got)
	}
	later, _ := old.Increment(other, 1) // the old replica goes on
	merged := mustMerge(t, pruned, later.PruningCleanup(removed)).(GCounter)
	if merged.Count().Int64() != 11 || merged.NeedPruningFrom(removed) {
		t.Fatalf("pruned ⊔ cleaned old replica = %v %v, want 11 without the removed node", merged.Count(), merged.state)
	}
	// PruningCleanup alone drops the data (the value changes).
	if got := old.PruningCleanup(removed).(GCounter).Count().Int64(); got != 5 {
		t.Fatalf("PruningCleanup of an unpruned value = %d, want 5", got)
	}

	// Collapsing into a saturated count saturates: the only case where Prune changes
	// the value.
	s, _ := GCounter{}.Increment(removed, 1)
	s, _ = s.Increment(into, math.MaxUint64)
	if got := s.Prune(removed, into).(GCounter); got.state[into] != math.MaxUint64 || got.NeedPruningFrom(removed) {
		t.Fatalf("saturated prune %v", got.state)
	}
	defer func() {
		if recover() == nil {
			t.Error("Prune into an empty node ID did not panic")
		}
	}()
	c.Prune(removed, "")
}

func TestGCounterEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	// The same value built two ways encodes to the same bytes.
	x, _ := GCounter{}.Increment(a, 1)
	x, _ = x.Increment(b, 7)
	x, _ = x.Increment(a, 2)
	y1, _ := GCounter{}.Increment(b, 7)
	y2, _ := GCounter{}.Increment(a, 3)
	y := mustMerge(t, y1, y2)
	if !equal(t, x, y) {
		t.Fatalf("%x != %x", mustEncode(t, x), mustEncode(t, y))
	}
	// Golden bytes: {1: "gcounter", 2: {1: {"a": 1}}}, and the empty counter.
	g, _ := GCounter{}.Increment("a", 1)
	if got, want := fmt.Sprintf("%x", mustEncode(t, g)), "a2016867636f756e74657202a101a1616101"; got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
	if got, want := fmt.Sprintf("%x", mustEncode(t, GCounter{})), "a2016867636f756e74657202a0"; got != want {
		t.Errorf("empty encoding %s, want %s", got, want)
	}

	enc := mustEncode(t, x)
	for name, b := range map[string][]byte{
		"empty input":      nil,
		"garbage":          []byte("not cbor at all"),
		"truncated":        enc[:len(enc)-1],
		"no state":         mustHex("a1016867636f756e746572"),
		"null state":       encodeRawState(t, TypeGCounter, "f6"),
		"undefined state":  encodeRawState(t, TypeGCounter, "f7"),
		"flag state":       encodeRawState(t, TypeGCounter, "a101f5"),
		"array state":      encodeRawState(t, TypeGCounter, "80"),
		"empty node":       encodeRawState(t, TypeGCounter, "a101a16001"),
		"zero count":       encodeRawState(t, TypeGCounter, "a101a1616100"),
		"negative count":   encodeRawState(t, TypeGCounter, "a101a1616120"),
		"count too large":  encodeRawState(t, TypeGCounter, "a101a16161c249010000000000000000"),
		"non-UTF-8 node":   encodeRawState(t, TypeGCounter, "a101a16261ff01"),
		"byte-string node": encodeRawState(t, TypeGCounter, "a101a1416101"),
		"duplicate node":   encodeRawState(t, TypeGCounter, "a101a2616101616102"),
		"duplicate field":  encodeRawState(t, TypeGCounter, "a201a001a0"),
		"unknown type":     encodeRawState(t, DataType("gcounter2"), "a0"),
	} {
		checkDecodeFails(t, name, b)
	}
	// A map with unknown keys decodes, ignoring them (forward compatibility); a
	// present but empty count map is the empty counter.
	for _, h := range []string{"a102a1616101", "a101a0", "a0"} {
		d, err := Decode(encodeRawState(t, TypeGCounter, h))
		if err != nil || !equal(t, d, GCounter{}) {
			t.Errorf("state %s: %v, %v; want the empty counter", h, d, err)
		}
	}
}

// ExampleGCounter shows two replicas counting on their own and converging through a
// delta.
func ExampleGCounter() {
	a, b := NodeID("10.0.0.1:7946#1"), NodeID("10.0.0.2:7946#2")

	onA, _ := GCounter{}.Increment(a, 2)
	onB, _ := GCounter{}.Increment(b, 1)
	onB, delta := onB.Increment(b, 3) // the delta holds b's count, 4

	merged, err := onA.Merge(delta) // what a does when b's delta arrives
	if err != nil {
		panic(err)
	}
	fmt.Println(onA.Count(), onB.Count(), merged.(GCounter).Count())
	fmt.Println(merged.(GCounter).ModifiedByNodes())
	// Output:
	// 2 4 6
	// [10.0.0.1:7946#1 10.0.0.2:7946#2]
}
