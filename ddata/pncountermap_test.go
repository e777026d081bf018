package ddata

import (
	"errors"
	"math"
	"math/big"
	"math/rand"
	"slices"
	"testing"
)

func pncountermapUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	m := cur.(PNCounterMap)
	k := orKeys[r.Intn(len(orKeys))]
	switch r.Intn(8) {
	case 0:
		return m.Remove(node, k)
	case 1:
		return m.Decrement(node, k, uint64(r.Intn(5)))
	case 2:
		return m.Add(node, k, int64(r.Intn(11)-5))
	default:
		return m.Increment(node, k, uint64(r.Intn(5)))
	}
}

func TestPNCounterMapLaws(t *testing.T) {
	checkLaws(t, genByUpdates(PNCounterMap{}, pncountermapUpdate))
}

func TestPNCounterMapDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(PNCounterMap{}, pncountermapUpdate), pncountermapUpdate)
}

func TestPNCounterMapConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		// Without removes, every increment is counted once converged.
		model := map[string]int64{}
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			k := orKeys[r.Intn(len(orKeys))]
			n := int64(r.Intn(11) - 5)
			model[k] += n
			return cur.(PNCounterMap).Add(node, k, n)
		}
		final := checkConvergence(t, seed, 3+int(seed%2), PNCounterMap{}, update).(PNCounterMap)
		for k, want := range model {
			if got, ok := final.Get(k); !ok || got.Int64() != want {
				t.Fatalf("seed %d: %s = %v, want %d", seed, k, got, want)
			}
		}
		checkValueJSON(t, final)
		checkValueJSON(t, checkConvergence(t, seed, 3, PNCounterMap{}, pncountermapUpdate))
	}
}

func TestPNCounterMapCounts(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	var zero PNCounterMap
	if zero.Len() != 0 || len(zero.Entries()) != 0 {
		t.Fatal("zero PNCounterMap is not empty")
	}
	if _, ok := zero.Get("k"); ok {
		t.Fatal("Get on the empty map")
	}
	m, _ := zero.Increment(a, "k", 5)
	m, _ = m.Decrement(a, "k", 2)
	m, d := m.Add(a, "j", math.MinInt64)
	if got, _ := m.Get("k"); got.Int64() != 3 {
		t.Fatalf("k = %v", got)
	}
	if got, _ := m.Get("j"); got.Cmp(big.NewInt(math.MinInt64)) != 0 {
		t.Fatalf("j = %v", got)
	}
	if got, _ := d.Get("j"); d.Len() != 1 || got.Cmp(big.NewInt(math.MinInt64)) != 0 {
		t.Fatalf("delta %v", d.Value())
	}
	if z, _ := zero.Increment(a, "z", 0); !z.Contains("z") {
		t.Fatal("Increment by 0 does not put the key, as in Akka")
	}
	// Concurrent increments of one key from two nodes both count.
	onA, dA := m.Increment(a, "k", 10)
	onB, dB := m.Increment(b, "k", 100)
	for _, x := range []ReplicatedData{mustMerge(t, onA, onB), mustMerge(t, mustMerge(t, m, dB), dA)} {
		if got, _ := x.(PNCounterMap).Get("k"); got.Int64() != 113 {
			t.Fatalf("concurrent increments: %v, want 113", got)
		}
	}
	// Remove and a concurrent increment: the key stays with the incrementer's counter.
	gone, dGone := m.Remove(c, "k")
	if gone.Contains("k") || !equal(t, mustMerge(t, m, dGone), gone) {
		t.Fatal("Remove")
	}
	x := mustMerge(t, gone, onA).(PNCounterMap)
	if got, ok := x.Get("k"); !ok || got.Int64() != 13 {
		t.Fatalf("remove and concurrent increment: %v %v", got, ok)
	}
	// After a remove that saw it, a new increment starts from 0.
	again, _ := gone.Increment(c, "k", 1)
	if got, _ := mustMerge(t, again, m).(PNCounterMap).Get("k"); got.Int64() != 1 {
		t.Fatalf("re-added key: %v, want 1", got)
	}
	if e := x.Entries(); e["k"].Int64() != 13 || e["j"].Cmp(big.NewInt(math.MinInt64)) != 0 {
		t.Fatalf("Entries = %v", e)
	}
	if v := x.Value().(map[string]any); v["k"].(*big.Int).Int64() != 13 {
		t.Fatalf("Value = %v", v)
	}
	if got := x.Keys(); !slices.Equal(got, []string{"j", "k"}) || x.Len() != 2 {
		t.Fatalf("Keys = %v", got)
	}
	if _, err := x.Merge(LWWMap{}); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Merge with an LWWMap: %v", err)
	}
	if !x.RequiresCausalDeliveryOfDeltas() || x.Type() != TypePNCounterMap {
		t.Fatal("PNCounterMap flags")
	}
}

func TestPNCounterMapPruning(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	m, _ := PNCounterMap{}.Increment(a, "k", 3)
	m, _ = m.Increment(b, "k", 4)
	m, _ = m.Decrement(a, "j", 2)
	m, _ = m.Increment(c, "gone", 1)
	m, _ = m.Remove(c, "gone")
	checkORPruning(t, m, a)
	checkORPruning(t, m, b)
	checkORPruning(t, m, c)
	r := rand.New(rand.NewSource(7))
	for range 20 {
		v := genByUpdates(PNCounterMap{}, pncountermapUpdate)(r).(PNCounterMap)
		for _, n := range v.ModifiedByNodes() {
			if n != nodes[3] {
				checkORPruning(t, v, n)
			}
		}
	}
}

func TestPNCounterMapEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	m, _ := PNCounterMap{}.Increment(a, "k", 1)
	m2, _ := PNCounterMap{}.Increment(b, "j", 1)
	if !equal(t, mustMerge(t, m, m2), mustMerge(t, m2, m)) {
		t.Fatal("not deterministic")
	}
	back, err := Decode(mustEncode(t, m))
	if err != nil || !equal(t, back, m) {
		t.Fatalf("round trip: %v", err)
	}
	ctx := map[int]any{1: []NodeID{a}, 2: []uint64{1}}
	reg := mustEncode(t, NewLWWRegister(a, nil, orClock(1)))
	checkDecodeFails(t, "register value", encodeRaw(t, TypePNCounterMap,
		map[int]any{1: ctx, 3: map[string][]any{"k": {[]any{0, 1, orRawCBOR(reg)}}}}))
	checkDecodeFails(t, "null", encodeRaw(t, TypePNCounterMap, nil))
}
