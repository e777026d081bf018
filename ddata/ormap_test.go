package ddata

import (
	"errors"
	"math/big"
	"math/rand"
	"testing"
)

// orKeys are the keys random map updates use: few, so that updates meet.
var orKeys = []string{"k1", "k2", "k3", "ключ"}

// orIncrementBy returns an ORMap.Update modify function incrementing a PNCounter.
func orIncrementBy(node NodeID, n int64) func(ReplicatedData) (ReplicatedData, ReplicatedData, error) {
	return func(v ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		c, d := v.(PNCounter).Add(node, n)
		return c, d, nil
	}
}

func ormapUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	m := cur.(ORMap)
	k := orKeys[r.Intn(len(orKeys))]
	var next, delta ORMap
	var err error
	switch r.Intn(10) {
	case 0, 1:
		if m.Len() > 0 && r.Intn(2) == 0 {
			k = m.Keys()[r.Intn(m.Len())]
		}
		next, delta = m.Remove(node, k)
	case 2:
		c, _ := PNCounter{}.Add(node, int64(r.Intn(7)-3))
		next, delta, err = m.Put(node, k, c)
	default:
		next, delta, err = m.Update(node, k, PNCounter{}, orIncrementBy(node, int64(r.Intn(9)-2)))
	}
	if err != nil {
		panic(err)
	}
	return next, delta
}

// ormapSetUpdate updates an ORMap of ORSets.
func ormapSetUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	m := cur.(ORMap)
	k := orKeys[r.Intn(len(orKeys))]
	if r.Intn(5) == 0 {
		return m.Remove(node, k)
	}
	next, delta, err := m.Update(node, k, ORSet{}, func(v ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		s, d := orsetUpdate(r, node, v)
		return s, d, nil
	})
	if err != nil {
		panic(err)
	}
	return next, delta
}

func TestORMapLaws(t *testing.T) {
	checkLaws(t, genByUpdates(ORMap{}, ormapUpdate))
	checkLaws(t, genByUpdates(ORMap{}, ormapSetUpdate))
}

func TestORMapDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(ORMap{}, ormapUpdate), ormapUpdate)
	checkDeltas(t, genByUpdates(ORMap{}, ormapSetUpdate), ormapSetUpdate)
}

func TestORMapConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		checkValueJSON(t, checkConvergence(t, seed, 3+int(seed%2), ORMap{}, ormapUpdate))
		checkValueJSON(t, checkConvergence(t, seed, 3, ORMap{}, ormapSetUpdate))
	}
}

// orCounterOf returns key's count in a map of PNCounters, and whether the key is there.
func orCounterOf(t *testing.T, m ReplicatedData, key string) (int64, bool) {
	t.Helper()
	v, ok := m.(ORMap).Get(key)
	if !ok {
		return 0, false
	}
	return v.(PNCounter).Count().Int64(), true
}

func TestORMapUpdates(t *testing.T) {
	a, b := nodes[0], nodes[1]
	var zero ORMap
	if zero.ValueType() != "" || zero.Len() != 0 || len(zero.Keys()) != 0 || zero.Keys() == nil {
		t.Fatalf("zero ORMap: %q %v", zero.ValueType(), zero.Keys())
	}
	m1, d1, err := zero.Update(a, "k", PNCounter{}, orIncrementBy(a, 5))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := orCounterOf(t, m1, "k"); !ok || n != 5 || m1.ValueType() != TypePNCounter {
		t.Fatalf("after Update: %v %v", m1.Value(), m1.ValueType())
	}
	if zero.Len() != 0 {
		t.Fatal("Update changed its receiver")
	}
	if !equal(t, d1, m1) {
		t.Fatalf("first delta %v is not the whole map %v", d1.Value(), m1.Value())
	}
	m2, d2, _ := m1.Update(a, "k", PNCounter{}, orIncrementBy(a, 2))
	if n, _ := orCounterOf(t, m2, "k"); n != 7 {
		t.Fatalf("count %d, want 7", n)
	}
	// The delta carries the whole value, and covers the replaced dot.
	if n, _ := orCounterOf(t, d2, "k"); n != 7 || !d2.ctx.Contains(m1.entries["k"].pairs[0].dot) {
		t.Fatalf("delta %v %+v", d2.Value(), d2.ctx)
	}
	// Put replaces locally.
	c, _ := PNCounter{}.Increment(b, 1)
	m3, _, err := m2.Put(b, "k", c)
	if n, _ := orCounterOf(t, m3, "k"); err != nil || n != 1 {
		t.Fatalf("after Put: %v %v", m3.Value(), err)
	}
	m4, d4 := m3.Remove(a, "k")
	if m4.Contains("k") || m4.Len() != 0 || d4.Len() != 0 || m4.ValueType() != TypePNCounter {
		t.Fatalf("after Remove: %v", m4.Value())
	}
	if !equal(t, mustMerge(t, m3, d4), m4) {
		t.Fatal("remove delta")
	}
	if m, d := m4.Remove(a, "k"); !equal(t, m, m4) || d.Len() != 0 || !d.ctx.isEmpty() {
		t.Fatal("removing a missing key")
	}
	if got := m3.Value().(map[string]any)["k"].(*big.Int); got.Int64() != 1 {
		t.Fatalf("Value = %v", m3.Value())
	}
}

func TestORMapValueType(t *testing.T) {
	a := nodes[0]
	c, _ := PNCounter{}.Increment(a, 1)
	m, _, err := ORMap{}.Put(a, "k", c)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := GSet{}.Add("x")
	if got, _, err := m.Put(a, "j", s); !errors.Is(err, ErrTypeMismatch) || got.Contains("j") {
		t.Fatalf("Put of a GSet into an ORMap of PNCounter: %v", err)
	}
	if _, _, err := m.Update(a, "j", GSet{}, nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Update with a GSet initial value: %v", err)
	}
	if _, _, err := m.Update(a, "j", nil, orIncrementBy(a, 1)); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Update of a missing key without initial value: %v", err)
	}
	if got, _, err := m.Update(a, "k", nil, orIncrementBy(a, 1)); err != nil || !got.Contains("k") {
		t.Fatalf("Update of a present key without initial value: %v", err)
	}
	toGSet := func(ReplicatedData) (ReplicatedData, ReplicatedData, error) { return s, s, nil }
	if _, _, err := m.Update(a, "k", nil, toGSet); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Update to a GSet: %v", err)
	}
	if _, _, err := (ORMap{}).Update(a, "k", PNCounter{}, toGSet); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Update of an empty map from a PNCounter to a GSet: %v", err)
	}
	boom := errors.New("boom")
	fail := func(ReplicatedData) (ReplicatedData, ReplicatedData, error) { return nil, nil, boom }
	if _, _, err := m.Update(a, "k", nil, fail); !errors.Is(err, boom) {
		t.Fatalf("modify's error: %v", err)
	}
	for _, v := range []ReplicatedData{nil, (*PNCounter)(nil)} {
		if _, _, err := (ORMap{}).Put(a, "k", v); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Put(%T): %v", v, err)
		}
	}
	if _, _, err := (ORMap{}).Put(a, "k", orUnregistered{}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Put of a type without decoder: %v", err)
	}
	ms, _, _ := ORMap{}.Put(a, "k", s)
	if _, err := m.Merge(ms); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("merge of maps of different value types: %v", err)
	}
	for _, other := range []ReplicatedData{nil, (*ORMap)(nil), ORSet{}} {
		if _, err := m.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Merge(%T): %v", other, err)
		}
	}
	// The empty map takes the other's value type.
	if got := mustMerge(t, ORMap{}, m).(ORMap); got.ValueType() != TypePNCounter {
		t.Fatalf("merged value type %q", got.ValueType())
	}
	if !m.RequiresCausalDeliveryOfDeltas() || m.Type() != TypeORMap {
		t.Fatal("ORMap flags")
	}
}

func TestORMapConcurrentUpdates(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	base, _, _ := ORMap{}.Update(a, "k", PNCounter{}, orIncrementBy(a, 1))
	onA, dA, _ := base.Update(a, "k", PNCounter{}, orIncrementBy(a, 10))
	onB, dB, _ := base.Update(b, "k", PNCounter{}, orIncrementBy(b, 100))
	for _, m := range []ReplicatedData{mustMerge(t, onA, onB), mustMerge(t, mustMerge(t, base, dB), dA)} {
		if n, _ := orCounterOf(t, m, "k"); n != 111 {
			t.Fatalf("concurrent increments: %d, want 111", n)
		}
	}
	// Remove and a concurrent update: the key stays (add wins), with the updater's value.
	removed, dRem := base.Remove(c, "k")
	for _, m := range []ReplicatedData{mustMerge(t, removed, onA), mustMerge(t, onA, dRem)} {
		if n, ok := orCounterOf(t, m, "k"); !ok || n != 11 {
			t.Fatalf("remove and concurrent update: %v", m.Value())
		}
	}
	// A remove that has seen the update removes it.
	_, dRem2 := onA.Remove(c, "k")
	if m := mustMerge(t, onA, dRem2); m.(ORMap).Contains("k") {
		t.Fatalf("observed update not removed: %v", m.Value())
	}
	// Removing a key not seen locally does nothing to a concurrent update.
	notSeen, d := ORMap{}.Remove(c, "k")
	if m := mustMerge(t, mustMerge(t, onA, notSeen), d); !m.(ORMap).Contains("k") {
		t.Fatal("remove of an unseen key removed it")
	}
	// The case that makes values tied to dots: a has k from A, b from B, and c removes
	// what it saw of b. Whatever the merge order, A's value alone survives.
	onC, _ := onB.Remove(c, "k")
	x := mustMerge(t, mustMerge(t, onA, onB), onC)
	y := mustMerge(t, onA, mustMerge(t, onB, onC))
	if !equal(t, x, y) {
		t.Fatalf("merge order matters: %v vs %v", x.Value(), y.Value())
	}
	if n, _ := orCounterOf(t, x, "k"); n != 11 {
		t.Fatalf("after B's update was removed: %v, want 11", x.Value())
	}
}

func TestORMapPruning(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	m, _, _ := ORMap{}.Update(a, "k", PNCounter{}, orIncrementBy(a, 3))
	m, _, _ = m.Update(b, "k", PNCounter{}, orIncrementBy(b, 4)) // k's dot is b's, its value has a's count
	m, _, _ = m.Update(a, "j", PNCounter{}, orIncrementBy(a, -2))
	m, _, _ = m.Update(c, "gone", PNCounter{}, orIncrementBy(c, 1))
	m, _ = m.Remove(c, "gone")
	checkORPruning(t, m, a)
	checkORPruning(t, m, b)
	checkORPruning(t, m, c)
	pruned := m.Prune(a, nodes[3]).(ORMap)
	for _, k := range pruned.Keys() {
		if v, _ := pruned.Get(k); v.(PNCounter).NeedPruningFrom(a) {
			t.Fatalf("value of %s still has data of a", k)
		}
	}
	r := rand.New(rand.NewSource(5))
	for range 20 {
		v := genByUpdates(ORMap{}, ormapUpdate)(r).(ORMap)
		for _, n := range v.ModifiedByNodes() {
			if n != nodes[3] {
				checkORPruning(t, v, n)
			}
		}
		s := genByUpdates(ORMap{}, ormapSetUpdate)(r).(ORMap)
		for _, n := range s.ModifiedByNodes() {
			if n != nodes[3] {
				checkORPruning(t, s, n)
			}
		}
	}
}

func TestORMapEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	m, _, _ := ORMap{}.Update(a, "x", PNCounter{}, orIncrementBy(a, 1))
	m2, _, _ := ORMap{}.Update(b, "y", PNCounter{}, orIncrementBy(b, 2))
	x, y := mustMerge(t, m, m2), mustMerge(t, m2, m)
	if !equal(t, x, y) {
		t.Fatal("not deterministic")
	}
	back, err := Decode(mustEncode(t, x))
	if err != nil || !equal(t, back, x) {
		t.Fatalf("round trip: %v", err)
	}
	// Maps of maps of counters, and of sets, decode.
	inner := x.(ORMap)
	outer, _, err := ORMap{}.Put(a, "inner", inner)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := ORSet{}.Add(a, "e")
	innerSets, _, _ := ORMap{}.Put(a, "s", set)
	outerSets, _, _ := ORMap{}.Put(a, "inner", innerSets)
	for _, v := range []ORMap{outer, outerSets} {
		back, err := Decode(mustEncode(t, v))
		if err != nil || !equal(t, back, v) {
			t.Fatalf("nested map round trip: %v", err)
		}
	}
	c1 := mustEncode(t, orCounter(a, 1))
	ctx := map[int]any{1: []NodeID{a}, 2: []uint64{1}}
	bad := map[string]any{
		"null":               nil,
		"no value type":      map[int]any{1: ctx, 3: map[string][]any{"x": {[]any{0, 1, orRawCBOR(c1)}}}},
		"unknown value type": map[int]any{1: ctx, 2: "nope"},
		"value of another type": map[int]any{1: ctx, 2: TypeGSet,
			3: map[string][]any{"x": {[]any{0, 1, orRawCBOR(c1)}}}},
		"dot not in context": map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {[]any{0, 2, orRawCBOR(c1)}}}},
		"no pairs":           map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {}}},
		"bad value":          map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {[]any{0, 1, orRawCBOR([]byte{0xa0})}}}},
		"duplicate dot": map[int]any{1: ctx, 2: TypePNCounter,
			3: map[string][]any{"x": {[]any{0, 1, orRawCBOR(c1)}, []any{0, 1, orRawCBOR(c1)}}}},
		"short pair": map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {[]any{0, 1}}}},
		"index":      map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {[]any{1, 1, orRawCBOR(c1)}}}},
	}
	for name, st := range bad {
		checkDecodeFails(t, name, encodeRaw(t, TypeORMap, st))
	}
	ok := map[int]any{1: ctx, 2: TypePNCounter, 3: map[string][]any{"x": {[]any{0, 1, orRawCBOR(c1)}}}}
	if _, err := Decode(encodeRaw(t, TypeORMap, ok)); err != nil {
		t.Fatalf("valid raw map: %v", err)
	}
}

// orRawCBOR embeds already encoded CBOR in a value given to encodeRaw.
type orRawCBOR []byte

func (r orRawCBOR) MarshalCBOR() ([]byte, error) { return r, nil }

func orCounter(node NodeID, n int64) PNCounter {
	c, _ := PNCounter{}.Add(node, n)
	return c
}

// orUnregistered is a ReplicatedData type without a decoder.
type orUnregistered struct{}

func (orUnregistered) Type() DataType                                 { return "orUnregistered" }
func (u orUnregistered) Merge(ReplicatedData) (ReplicatedData, error) { return u, nil }
func (orUnregistered) Value() any                                     { return nil }

func TestORMapNesting(t *testing.T) {
	a := nodes[0]
	c, _ := PNCounter{}.Increment(a, 1)
	pm, _ := PNCounterMap{}.Increment(a, "c", 1)
	lm, _ := LWWMap{}.Put(a, "r", []byte("v"), orClock(1))
	mm, _ := NewORMultiMap().AddBinding(a, "k", "x")
	ofCounters, _, _ := ORMap{}.Put(a, "k", c)
	ofMultiMaps, _, _ := ORMap{}.Put(a, "k", mm)
	// The deepest values that decode: maps with values that are not maps.
	for _, v := range []ReplicatedData{ofCounters, ofMultiMaps, pm, lm} {
		outer, _, err := ORMap{}.Put(a, "k", v)
		if err != nil {
			t.Fatalf("Put of a %s: %v", v.Type(), err)
		}
		back, err := Decode(mustEncode(t, outer))
		if err != nil || !equal(t, back, outer) {
			t.Fatalf("ORMap of %s: round trip: %v", v.Type(), err)
		}
	}
	// Maps of maps of maps do not: Put and Update refuse them.
	for _, inner := range []ReplicatedData{ofCounters, pm, lm} {
		tooDeep, _, _ := ORMap{}.Put(a, "k", inner)
		if _, _, err := (ORMap{}).Put(a, "k", tooDeep); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Put of an ORMap of %s: %v", inner.Type(), err)
		}
		toDeep := func(ReplicatedData) (ReplicatedData, ReplicatedData, error) { return tooDeep, tooDeep, nil }
		if _, _, err := (ORMap{}).Update(a, "k", ORMap{}, toDeep); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Update to an ORMap of %s: %v", inner.Type(), err)
		}
	}
}
