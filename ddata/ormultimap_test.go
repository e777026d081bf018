package ddata

import (
	"errors"
	"maps"
	"math/rand"
	"slices"
	"testing"
)

func ormultimapUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	m := cur.(ORMultiMap)
	k := orKeys[r.Intn(len(orKeys))]
	e := orElems[r.Intn(len(orElems))]
	switch r.Intn(10) {
	case 0:
		return m.Remove(node, k)
	case 1:
		var elems []string
		for range r.Intn(3) {
			elems = append(elems, orElems[r.Intn(len(orElems))])
		}
		return m.Put(node, k, elems)
	case 2, 3:
		if got := m.Get(k); len(got) > 0 && r.Intn(2) == 0 {
			e = got[r.Intn(len(got))]
		}
		return m.RemoveBinding(node, k, e)
	default:
		return m.AddBinding(node, k, e)
	}
}

func TestORMultiMapLaws(t *testing.T) {
	checkLaws(t, genByUpdates(NewORMultiMap(), ormultimapUpdate))
	checkLaws(t, genByUpdates(NewORMultiMapWithValueDeltas(), ormultimapUpdate))
}

func TestORMultiMapDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(NewORMultiMap(), ormultimapUpdate), ormultimapUpdate)
	checkDeltas(t, genByUpdates(NewORMultiMapWithValueDeltas(), ormultimapUpdate), ormultimapUpdate)
}

func TestORMultiMapConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		checkValueJSON(t, checkConvergence(t, seed, 3+int(seed%2), NewORMultiMap(), ormultimapUpdate))
		checkValueJSON(t, checkConvergence(t, seed, 3+int(seed%2), NewORMultiMapWithValueDeltas(), ormultimapUpdate))
	}
}

func TestORMultiMapBindings(t *testing.T) {
	a := nodes[0]
	for _, zero := range []ORMultiMap{NewORMultiMap(), NewORMultiMapWithValueDeltas()} {
		if zero.Len() != 0 || zero.Get("k") != nil || len(zero.Entries()) != 0 || zero.Keys() == nil {
			t.Fatalf("empty ORMultiMap: %v", zero.Entries())
		}
		m1, d1 := zero.AddBinding(a, "k", "x")
		m2, d2 := m1.AddBinding(a, "k", "y")
		m3, d3 := m2.AddBinding(a, "j", "z")
		m4, d4 := m3.RemoveBinding(a, "k", "x")
		if got := m4.Entries(); !maps.EqualFunc(got, map[string][]string{"k": {"y"}, "j": {"z"}}, slices.Equal) {
			t.Fatalf("entries %v", got)
		}
		if !m4.ContainsBinding("k", "y") || m4.ContainsBinding("k", "x") || !slices.Equal(m4.Keys(), []string{"j", "k"}) {
			t.Fatalf("bindings of %v", m4.Entries())
		}
		if m2.Len() != 1 || !slices.Equal(m2.Get("k"), []string{"x", "y"}) {
			t.Fatalf("an update changed its receiver: %v", m2.Entries())
		}
		// The flavours' deltas: the whole set of the key, or the change only.
		if zero.WithValueDeltas() {
			if !slices.Equal(d2.Get("k"), []string{"y"}) || d4.Len() != 0 {
				t.Fatalf("value deltas: %v %v", d2.Entries(), d4.Entries())
			}
		} else if !slices.Equal(d2.Get("k"), []string{"x", "y"}) || !slices.Equal(d4.Get("k"), []string{"y"}) {
			t.Fatalf("full deltas: %v %v", d2.Entries(), d4.Entries())
		}
		for _, d := range []ORMultiMap{d1, d2, d3, d4} {
			if d.WithValueDeltas() != zero.WithValueDeltas() {
				t.Fatal("a delta of another flavour")
			}
		}
		// Removing the last binding removes the key.
		m5, d5 := m4.RemoveBinding(a, "j", "z")
		if m5.Get("j") != nil || m5.Len() != 1 || !equal(t, mustMerge(t, m4, d5), m5) {
			t.Fatalf("key without bindings: %v", m5.Entries())
		}
		// Put replaces the set; with no elements, it removes the key.
		m6, d6 := m5.Put(a, "k", []string{"q", "p", "q", "a\xff"})
		if got := m6.Get("k"); !slices.Equal(got, []string{"a\uFFFD", "p", "q"}) || !equal(t, mustMerge(t, m5, d6), m6) {
			t.Fatalf("Put: %v", got)
		}
		m7, _ := m6.Put(a, "k", nil)
		if m7.Len() != 0 {
			t.Fatalf("Put of no elements: %v", m7.Entries())
		}
		if m, d := m7.Remove(a, "k"); !equal(t, m, m7) || !d.isEmpty() {
			t.Fatal("removing a missing key")
		}
		if m, d := m6.RemoveBinding(a, "k", "nope"); !equal(t, m, m6) || !d.isEmpty() {
			t.Fatal("removing a missing binding")
		}
		if v := m6.Value().(map[string]any); !slices.Equal(v["k"].([]string), []string{"a\uFFFD", "p", "q"}) {
			t.Fatalf("Value = %v", v)
		}
	}
}

func TestORMultiMapAddWins(t *testing.T) {
	a, b := nodes[0], nodes[1]
	for _, zero := range []ORMultiMap{NewORMultiMap(), NewORMultiMapWithValueDeltas()} {
		base, _ := zero.AddBinding(a, "k", "x")
		// Concurrent Remove(k) on B and AddBinding(k, y) on A: k stays, bound to y only.
		onA, dA := base.AddBinding(a, "k", "y")
		onB, dB := base.Remove(b, "k")
		for _, m := range []ReplicatedData{mustMerge(t, onA, onB), mustMerge(t, mustMerge(t, base, dB), dA), mustMerge(t, mustMerge(t, base, dA), dB)} {
			if got := m.(ORMultiMap).Get("k"); !slices.Equal(got, []string{"y"}) {
				t.Fatalf("remove and concurrent add: %v, want [y]", got)
			}
		}
		// Concurrent re-add of x and its removal: x stays.
		reAdd, _ := base.AddBinding(a, "k", "x")
		rem, _ := base.RemoveBinding(b, "k", "x")
		if m := mustMerge(t, rem, reAdd).(ORMultiMap); !m.ContainsBinding("k", "x") {
			t.Fatalf("concurrent add and remove of a binding: %v", m.Entries())
		}
		// A key removed and bound again does not bring back its old elements.
		gone, _ := base.Remove(a, "k")
		again, _ := gone.AddBinding(a, "k", "z")
		if m := mustMerge(t, again, base).(ORMultiMap); !slices.Equal(m.Get("k"), []string{"z"}) {
			t.Fatalf("re-bound key: %v", m.Entries())
		}
		// Removing a binding not seen locally does nothing to a concurrent add.
		notSeen, d := zero.RemoveBinding(b, "k", "x")
		if m := mustMerge(t, mustMerge(t, base, notSeen), d).(ORMultiMap); !m.ContainsBinding("k", "x") {
			t.Fatal("remove of an unseen binding removed it")
		}
	}
}

func TestORMultiMapFlavours(t *testing.T) {
	a := nodes[0]
	plain, _ := NewORMultiMap().AddBinding(a, "k", "x")
	withDeltas, _ := NewORMultiMapWithValueDeltas().AddBinding(a, "k", "x")
	if _, err := plain.Merge(withDeltas); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("merging the two flavours: %v", err)
	}
	if _, err := withDeltas.Merge(plain); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("merging the two flavours: %v", err)
	}
	if equal(t, plain, withDeltas) {
		t.Fatal("the flavours encode the same")
	}
	// An empty map takes the other's flavour, in either order.
	for _, m := range []ReplicatedData{mustMerge(t, NewORMultiMap(), withDeltas), mustMerge(t, withDeltas, NewORMultiMap())} {
		if !m.(ORMultiMap).WithValueDeltas() || !equal(t, m, withDeltas) {
			t.Fatal("empty map merged with a value-deltas map")
		}
	}
	if !mustMerge(t, NewORMultiMap(), NewORMultiMapWithValueDeltas()).(ORMultiMap).WithValueDeltas() ||
		!mustMerge(t, NewORMultiMapWithValueDeltas(), NewORMultiMap()).(ORMultiMap).WithValueDeltas() {
		t.Fatal("the two empty maps")
	}
	back, err := Decode(mustEncode(t, withDeltas))
	if err != nil || !back.(ORMultiMap).WithValueDeltas() {
		t.Fatalf("flavour lost in encoding: %v", err)
	}
	for _, other := range []ReplicatedData{nil, (*ORMultiMap)(nil), ORSet{}} {
		if _, err := plain.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Merge(%T): %v", other, err)
		}
	}
	if !plain.RequiresCausalDeliveryOfDeltas() || plain.Type() != TypeORMultiMap {
		t.Fatal("ORMultiMap flags")
	}
}

func TestORMultiMapPruning(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	m, _ := NewORMultiMap().AddBinding(a, "k", "x")
	m, _ = m.AddBinding(b, "k", "y")
	m, _ = m.AddBinding(a, "j", "z")
	m, _ = m.AddBinding(c, "gone", "z")
	m, _ = m.Remove(c, "gone")
	checkORPruning(t, m, a)
	checkORPruning(t, m, c)
	r := rand.New(rand.NewSource(6))
	for range 20 {
		v := genByUpdates(NewORMultiMapWithValueDeltas(), ormultimapUpdate)(r).(ORMultiMap)
		for _, n := range v.ModifiedByNodes() {
			if n != nodes[3] {
				checkORPruning(t, v, n)
			}
		}
	}
}

func TestORMultiMapEncoding(t *testing.T) {
	a := nodes[0]
	m, _ := NewORMultiMapWithValueDeltas().AddBinding(a, "k", "x")
	want := encodeRaw(t, TypeORMultiMap, map[int]any{
		1: map[int]any{1: []NodeID{a}, 2: []uint64{1}},
		2: true,
		3: map[string]map[string][]uint64{"k": {"x": {0, 1}}},
	})
	if got := mustEncode(t, m); string(got) != string(want) {
		t.Fatalf("encoding %x, want %x", got, want)
	}
	ctx := map[int]any{1: []NodeID{a}, 2: []uint64{1}}
	bad := map[string]any{
		"null":               nil,
		"key without set":    map[int]any{1: ctx, 3: map[string]map[string][]uint64{"k": {}}},
		"dot not in context": map[int]any{1: ctx, 3: map[string]map[string][]uint64{"k": {"x": {0, 2}}}},
		"empty dots":         map[int]any{1: ctx, 3: map[string]map[string][]uint64{"k": {"x": {}}}},
		"flag not bool":      map[int]any{2: 1},
		"invalid UTF-8 key":  map[int]any{1: ctx, 3: map[string]map[string][]uint64{"k\xff": {"x": {0, 1}}}},
	}
	for name, st := range bad {
		checkDecodeFails(t, name, encodeRaw(t, TypeORMultiMap, st))
	}
}
