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

// randDelta returns an amount for Add: mostly small of either sign, sometimes 0 or an
// extreme.
func randDelta(r *rand.Rand) int64 {
	switch r.Intn(12) {
	case 0:
		return 0
	case 1:
		return math.MinInt64
	case 2:
		return math.MaxInt64
	default:
		return int64(r.Intn(201) - 100)
	}
}

func pncounterUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	c := cur.(PNCounter)
	switch r.Intn(3) {
	case 0:
		return c.Increment(node, randCount(r))
	case 1:
		return c.Decrement(node, randCount(r))
	default:
		return c.Add(node, randDelta(r))
	}
}

func TestPNCounterLaws(t *testing.T) {
	checkLaws(t, genByUpdates(PNCounter{}, pncounterUpdate))
}

func TestPNCounterDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(PNCounter{}, pncounterUpdate), pncounterUpdate)
}

func TestPNCounterConvergence(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		// A node's P and N counts are only changed by the node itself: the converged
		// value is the sum of the saturating sums of its increments and decrements.
		modelP, modelN := map[NodeID]uint64{}, map[NodeID]uint64{}
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			n := randDelta(r)
			if n >= 0 {
				modelP[node] = saturatingAdd(modelP[node], uint64(n))
			} else {
				modelN[node] = saturatingAdd(modelN[node], uint64(-(n+1))+1)
			}
			return cur.(PNCounter).Add(node, n)
		}
		final := checkConvergence(t, seed, 3+int(seed%2), PNCounter{}, update).(PNCounter)
		want := new(big.Int)
		for _, v := range modelP {
			want.Add(want, new(big.Int).SetUint64(v))
		}
		for _, v := range modelN {
			want.Sub(want, new(big.Int).SetUint64(v))
		}
		if final.Count().Cmp(want) != 0 {
			t.Fatalf("seed %d: converged to %v, want %v", seed, final.Count(), want)
		}
		checkValueJSON(t, final)
	}
}

func TestPNCounterUpdates(t *testing.T) {
	a, b := nodes[0], nodes[1]
	var zero PNCounter
	c1, d1 := zero.Increment(a, 10)
	c2, d2 := c1.Decrement(b, 4)
	c3, d3 := c2.Add(a, -7)
	c4, d4 := c3.Add(b, 2)
	if got := c4.Count().Int64(); got != 1 {
		t.Fatalf("Count = %d, want 1", got)
	}
	if zero.Count().Sign() != 0 || c1.Count().Int64() != 10 || c2.Count().Int64() != 6 || c3.Count().Int64() != -1 {
		t.Fatal("an update changed its receiver")
	}
	wants := []PNCounter{
		{p: GCounter{state: map[NodeID]uint64{a: 10}}},
		{n: GCounter{state: map[NodeID]uint64{b: 4}}},
		{n: GCounter{state: map[NodeID]uint64{a: 7}}},
		{p: GCounter{state: map[NodeID]uint64{b: 2}}},
	}
	for i, d := range []PNCounter{d1, d2, d3, d4} {
		if !equal(t, d, wants[i]) {
			t.Errorf("delta %d = %v, want %v", i+1, d, wants[i])
		}
	}
	for _, f := range []func() (PNCounter, PNCounter){
		func() (PNCounter, PNCounter) { return c4.Increment(a, 0) },
		func() (PNCounter, PNCounter) { return c4.Decrement(a, 0) },
		func() (PNCounter, PNCounter) { return c4.Add(a, 0) },
	} {
		same, empty := f()
		if !equal(t, same, c4) || !equal(t, empty, PNCounter{}) {
			t.Errorf("update by 0 = %v, %v", same, empty)
		}
	}
	if c4.Type() != TypePNCounter || c4.RequiresCausalDeliveryOfDeltas() || c4.Value().(*big.Int).Int64() != 1 {
		t.Error("PNCounter type, causal delivery or value")
	}
	if _, err := c4.Merge(GCounter{}); !errors.Is(err, ErrTypeMismatch) {
		t.Errorf("Merge(GCounter) = %v", err)
	}
	if _, err := c4.Merge((*PNCounter)(nil)); !errors.Is(err, ErrTypeMismatch) {
		t.Errorf("Merge(nil *PNCounter) = %v", err)
	}
	if m, err := c4.Merge(&c1); err != nil || !equal(t, m, c4) {
		t.Errorf("Merge(*PNCounter) = %v, %v", m, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Add with an empty node ID did not panic")
		}
	}()
	c4.Add("", 1)
}

func TestPNCounterExtremes(t *testing.T) {
	a, b := nodes[0], nodes[1]
	c, d := PNCounter{}.Add(a, math.MinInt64)
	if got := c.Count(); got.Cmp(big.NewInt(math.MinInt64)) != 0 || d.n.state[a] != 1<<63 {
		t.Fatalf("Add(MinInt64) = %v (delta %v)", got, d)
	}
	c, _ = c.Add(b, math.MinInt64)
	want := new(big.Int).Mul(big.NewInt(math.MinInt64), big.NewInt(2)) // -2^64: below the int64 range
	if got := c.Count(); got.Cmp(want) != 0 {
		t.Fatalf("Count = %v, want %v", got, want)
	}
	// a's N count would pass 2^64-1 and saturates there.
	c, _ = c.Add(a, math.MinInt64)
	want = new(big.Int).Sub(big.NewInt(math.MinInt64), new(big.Int).SetUint64(math.MaxUint64))
	if got := c.Count(); got.Cmp(want) != 0 || c.n.state[a] != math.MaxUint64 {
		t.Fatalf("Count = %v, want %v (N of a %d)", got, want, c.n.state[a])
	}
	c, _ = c.Add(b, math.MaxInt64)
	want.Add(want, big.NewInt(math.MaxInt64))
	if got := c.Count(); got.Cmp(want) != 0 {
		t.Fatalf("Count = %v, want %v", got, want)
	}
	back, err := Decode(mustEncode(t, c))
	if err != nil || back.(PNCounter).Count().Cmp(want) != 0 {
		t.Fatalf("decoded %v, %v", back, err)
	}
}

func TestPNCounterPruning(t *testing.T) {
	removed, into, other := nodes[0], nodes[1], nodes[2]
	c, _ := PNCounter{}.Add(removed, 5)
	c, _ = c.Add(removed, -2)
	c, _ = c.Add(into, 3)
	c, _ = c.Add(other, -9) // other has only an N count
	old := c

	if got := c.ModifiedByNodes(); !slices.Equal(got, []NodeID{removed, into, other}) {
		t.Fatalf("ModifiedByNodes = %v", got)
	}
	if !c.NeedPruningFrom(removed) || !c.NeedPruningFrom(other) || c.NeedPruningFrom(nodes[3]) {
		t.Fatal("NeedPruningFrom")
	}
	pruned := c.Prune(removed, into).(PNCounter)
	if got := pruned.Count().Int64(); got != -3 {
		t.Fatalf("Prune changed the value: %d", got)
	}
	if pruned.NeedPruningFrom(removed) || pruned.p.state[into] != 8 || pruned.n.state[into] != 2 {
		t.Fatalf("pruned %v", pruned)
	}
	if !c.NeedPruningFrom(removed) {
		t.Fatal("Prune changed its receiver")
	}
	cleaned := pruned.PruningCleanup(removed).(PNCounter)
	if !equal(t, cleaned, pruned) || slices.Contains(cleaned.ModifiedByNodes(), removed) {
		t.Fatalf("PruningCleanup after Prune: %v", cleaned)
	}
	// An N-only node prunes into P and N correctly.
	if got := c.Prune(other, into).(PNCounter); got.Count().Int64() != -3 || got.NeedPruningFrom(other) {
		t.Fatalf("prune of an N-only node: %v", got)
	}
	// As for GCounter: an unpruned replica's data would count removed twice (3 more);
	// the replicator cleans it up first.
	if got := mustMerge(t, pruned, old).(PNCounter).Count().Int64(); got != 0 {
		t.Fatalf("pruned ⊔ unpruned = %d; this test documents the double count (0)", got)
	}
	later, _ := old.Add(other, 1)
	merged := mustMerge(t, pruned, later.PruningCleanup(removed)).(PNCounter)
	if merged.Count().Int64() != -2 || merged.NeedPruningFrom(removed) {
		t.Fatalf("pruned ⊔ cleaned old replica = %v", merged.Count())
	}
}

func TestPNCounterEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	x, _ := PNCounter{}.Add(a, 4)
	x, _ = x.Add(b, -2)
	x, _ = x.Add(a, -1)
	y1, _ := PNCounter{}.Decrement(a, 1)
	y2, _ := PNCounter{}.Decrement(b, 2)
	y3, _ := PNCounter{}.Increment(a, 4)
	y := mustMerge(t, mustMerge(t, y1, y2), y3)
	if !equal(t, x, y) {
		t.Fatalf("%x != %x", mustEncode(t, x), mustEncode(t, y))
	}
	// Golden bytes: {1: "pncounter", 2: {1: {"a": 2}, 2: {"b": 1}}}.
	g, _ := PNCounter{}.Add("a", 2)
	g, _ = g.Add("b", -1)
	if got, want := fmt.Sprintf("%x", mustEncode(t, g)), "a20169706e636f756e74657202a201a161610202a1616201"; got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
	enc := mustEncode(t, x)
	for name, b := range map[string][]byte{
		"garbage":        []byte{0xff, 0x00},
		"truncated":      enc[:len(enc)-2],
		"null state":     encodeRawState(t, TypePNCounter, "f6"),
		"int state":      encodeRawState(t, TypePNCounter, "01"),
		"empty node P":   encodeRawState(t, TypePNCounter, "a101a16001"),
		"empty node N":   encodeRawState(t, TypePNCounter, "a102a16001"),
		"zero count N":   encodeRawState(t, TypePNCounter, "a102a1616100"),
		"negative count": encodeRawState(t, TypePNCounter, "a101a1616120"),
		"duplicate node": encodeRawState(t, TypePNCounter, "a102a2616101616102"),
		"P not a map":    encodeRawState(t, TypePNCounter, "a1018101"),
	} {
		checkDecodeFails(t, name, b)
	}
}
