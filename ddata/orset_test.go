package ddata

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// orElems are the elements random ORSet updates use: few, so that adds and removes
// of one element meet.
var orElems = []string{"a", "b", "c", "d", "é"}

func orsetUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	s := cur.(ORSet)
	e := orElems[r.Intn(len(orElems))]
	switch r.Intn(10) {
	case 0:
		return s.Clear(node)
	case 1, 2, 3:
		if s.Len() > 0 && r.Intn(2) == 0 {
			e = s.Elements()[r.Intn(s.Len())]
		}
		return s.Remove(node, e)
	default:
		return s.Add(node, e)
	}
}

func TestORSetLaws(t *testing.T) {
	checkLaws(t, genByUpdates(ORSet{}, orsetUpdate))
}

func TestORSetDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(ORSet{}, orsetUpdate), orsetUpdate)
}

func TestORSetConvergence(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		final := checkConvergence(t, seed, 3+int(seed%2), ORSet{}, orsetUpdate)
		checkValueJSON(t, final)
	}
}

func TestORSetAddRemove(t *testing.T) {
	a := nodes[0]
	var zero ORSet
	if zero.Len() != 0 || zero.Contains("x") || len(zero.Elements()) != 0 || zero.Elements() == nil {
		t.Fatalf("zero ORSet: %v", zero.Elements())
	}
	s1, d1 := zero.Add(a, "x")
	s2, d2 := s1.Add(a, "y")
	s3, d3 := s2.Remove(a, "x")
	if got := s3.Elements(); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("elements = %v, want [y]", got)
	}
	if !slices.Equal(s1.Elements(), []string{"x"}) || !slices.Equal(s2.Elements(), []string{"x", "y"}) {
		t.Fatalf("an update changed its receiver: %v %v", s1.Elements(), s2.Elements())
	}
	// Deltas: the dots they add, and the dots they cover in their context.
	if want := (ORSet{elems: map[string][]Dot{"x": {{a, 1}}}, ctx: contextOf([]Dot{{a, 1}})}); !equal(t, d1, want) {
		t.Fatalf("add delta %+v", d1)
	}
	if !slices.Equal(d2.Elements(), []string{"y"}) || !d2.ctx.Contains(Dot{a, 2}) || d2.ctx.Contains(Dot{a, 1}) {
		t.Fatalf("second add delta %+v", d2)
	}
	if d3.Len() != 0 || !d3.ctx.Contains(Dot{a, 1}) || d3.ctx.Contains(Dot{a, 2}) {
		t.Fatalf("remove delta %+v", d3)
	}
	// Re-adding replaces the element's dot; the delta covers the old one.
	s4, d4 := s3.Add(a, "y")
	if got := s4.elems["y"]; !slices.Equal(got, []Dot{{a, 3}}) || !d4.ctx.Contains(Dot{a, 2}) {
		t.Fatalf("re-add: dots %v, delta %+v", got, d4)
	}
	// Removing what is not there, and clearing the empty set, change nothing.
	if s, d := s4.Remove(a, "nope"); !equal(t, s, s4) || !equal(t, d, ORSet{}) {
		t.Fatalf("remove of a missing element: %v %v", s.Value(), d.Value())
	}
	if s, d := zero.Clear(a); !equal(t, s, zero) || !equal(t, d, ORSet{}) {
		t.Fatal("clear of the empty set")
	}
	s5, d5 := s4.Clear(a)
	if s5.Len() != 0 || !equal(t, mustMerge(t, s4, d5), s5) {
		t.Fatalf("clear: %v, delta %+v", s5.Value(), d5)
	}
	// Invalid UTF-8 is replaced as in GSet.
	s6, _ := zero.Add(a, "a\xff")
	if !s6.Contains("a\xfe") || s6.Elements()[0] != "a\uFFFD" {
		t.Fatalf("invalid UTF-8 element: %q", s6.Elements())
	}
}

func TestORSetAddWins(t *testing.T) {
	a, b := nodes[0], nodes[1]
	base, _ := ORSet{}.Add(a, "e")
	// B has seen the add and removes e; A concurrently adds e again.
	onA, _ := base.Add(a, "e")
	onB, _ := base.Remove(b, "e")
	for _, m := range []ReplicatedData{mustMerge(t, onA, onB), mustMerge(t, onB, onA)} {
		if !m.(ORSet).Contains("e") {
			t.Fatalf("concurrent add and remove: %v, want e present", m.Value())
		}
	}
	// A concurrent add on another node wins too.
	onC, _ := base.Add(nodes[2], "e")
	if m := mustMerge(t, onB, onC).(ORSet); !m.Contains("e") {
		t.Fatalf("add on C and remove on B: %v", m.Value())
	}
	// The remove wins over the add it observed.
	if m := mustMerge(t, base, onB).(ORSet); m.Contains("e") {
		t.Fatalf("observed add not removed: %v", m.Value())
	}
	// Removing an element not yet seen locally does nothing to a concurrent add.
	added, _ := ORSet{}.Add(a, "f")
	notSeen, delta := ORSet{}.Remove(b, "f")
	if m := mustMerge(t, mustMerge(t, added, notSeen), delta).(ORSet); !m.Contains("f") {
		t.Fatalf("remove of an unseen element removed it: %v", m.Value())
	}
	// Deltas in either order: add delta, then a remove delta made after seeing it.
	s1, dAdd := ORSet{}.Add(a, "g")
	_, dRem := s1.Remove(b, "g")
	for _, order := range [][]ORSet{{dAdd, dRem}, {dRem, dAdd}} {
		got := ReplicatedData(ORSet{})
		for _, d := range order {
			got = mustMerge(t, got, d)
		}
		if got.(ORSet).Contains("g") {
			t.Fatalf("remove delta before its add delta resurrected the element: %v", got.Value())
		}
	}
}

func TestORSetMergeTypes(t *testing.T) {
	s, _ := ORSet{}.Add(nodes[0], "x")
	for _, other := range []ReplicatedData{nil, GSet{}, (*ORSet)(nil), PNCounter{}} {
		if _, err := s.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Fatalf("Merge(%T) error %v, want ErrTypeMismatch", other, err)
		}
	}
	if m, err := s.Merge(&s); err != nil || !equal(t, m, s) {
		t.Fatalf("Merge(*ORSet): %v %v", m, err)
	}
	if !s.RequiresCausalDeliveryOfDeltas() || s.Type() != TypeORSet {
		t.Fatal("ORSet flags")
	}
	for _, f := range []func(){
		func() { ORSet{}.Add("", "x") },
		func() { ORSet{}.Remove("", "x") },
		func() { ORSet{}.Clear("") },
		func() { s.Prune(nodes[0], "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic for an empty node ID")
				}
			}()
			f()
		}()
	}
}

func TestORSetPruning(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	s, _ := ORSet{}.Add(a, "only-a")
	s, _ = s.Add(b, "only-b")
	s, _ = s.Add(a, "both")
	other, _ := s.Add(b, "both") // replaces a's dot of "both" with b's
	s = mustMerge(t, s, other).(ORSet)
	s, _ = s.Add(c, "c")
	s, _ = s.Remove(c, "c") // a dot of c only in the context
	checkORPruning(t, s, a)
	checkORPruning(t, s, c)
	pruned := s.Prune(a, nodes[3]).(ORSet)
	if got := pruned.elems["only-a"]; len(got) != 1 || got[0].Node != nodes[3] {
		t.Fatalf("only-a's dots after pruning: %v", got)
	}
	if s.Prune(nodes[3], a) == nil || !equal(t, s.PruningCleanup(nodes[3]), s) {
		t.Fatal("pruning a node without data changed the set")
	}
	r := rand.New(rand.NewSource(4))
	for range 20 {
		v := genByUpdates(ORSet{}, orsetUpdate)(r).(ORSet)
		for _, n := range v.ModifiedByNodes() {
			if n != nodes[3] {
				checkORPruning(t, v, n)
			}
		}
	}
}

func TestORSetEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	s, _ := ORSet{}.Add(a, "x")
	s, _ = s.Add(b, "y")
	// Different histories with the same dots encode the same.
	s3, _ := ORSet{}.Add(a, "x")
	s3 = mustMerge(t, s3, func() ORSet { v, _ := ORSet{}.Add(b, "y"); return v }()).(ORSet)
	if !equal(t, s, s3) {
		t.Fatalf("equal states encode differently: %x %x", mustEncode(t, s), mustEncode(t, s3))
	}
	if got := fmt.Sprintf("%x", mustEncode(t, ORSet{})); got != "a201656f7273657402a0" {
		t.Fatalf("empty ORSet encodes as %s", got)
	}
	// {1: {1: [a, b], 2: [1, 1]}, 2: {"x": [0, 1], "y": [1, 1]}}
	want := encodeRaw(t, TypeORSet, map[int]any{
		1: map[int]any{1: []NodeID{a, b}, 2: []uint64{1, 1}},
		2: map[string][]uint64{"x": {0, 1}, "y": {1, 1}},
	})
	if got := mustEncode(t, s); string(got) != string(want) {
		t.Fatalf("encoding %x, want %x", got, want)
	}
	back, err := Decode(want)
	if err != nil || !equal(t, back, s) {
		t.Fatalf("Decode: %v %v", back, err)
	}
	// A non-compact context (cloud dots covered by or extending the version vector)
	// decodes to the compact one.
	loose := encodeRaw(t, TypeORSet, map[int]any{
		1: map[int]any{1: []NodeID{a}, 2: []uint64{1}, 3: []uint64{0, 1, 0, 2, 0, 4}},
		2: map[string][]uint64{"x": {0, 4}},
	})
	back, err = Decode(loose)
	if err != nil {
		t.Fatal(err)
	}
	if c := back.(ORSet).ctx; c.vv[a] != 2 || len(c.cloud) != 1 {
		t.Fatalf("decoded context not compact: %+v", c)
	}
	bad := map[string]any{
		"null state":         nil,
		"dot not in context": map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x": {0, 2}}},
		"index out of range": map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x": {1, 1}}},
		"counter 0":          map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x": {0, 0}}},
		"odd dots":           map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x": {0}}},
		"empty dots":         map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x": {}}},
		"unsorted dots":      map[int]any{1: map[int]any{1: []NodeID{a}, 2: []uint64{2}}, 2: map[string][]uint64{"x": {0, 2, 0, 1}}},
		"unsorted nodes":     map[int]any{1: map[int]any{1: []NodeID{b, a}, 2: []uint64{1, 1}}},
		"duplicate nodes":    map[int]any{1: map[int]any{1: []NodeID{a, a}, 2: []uint64{1, 1}}},
		"empty node":         map[int]any{1: map[int]any{1: []NodeID{""}, 2: []uint64{1}}},
		"unused node":        map[int]any{1: map[int]any{1: []NodeID{a, b}, 2: []uint64{1, 0}}},
		"vv length":          map[int]any{1: map[int]any{1: []NodeID{a, b}, 2: []uint64{1}}},
		"odd cloud":          map[int]any{1: map[int]any{1: []NodeID{a}, 3: []uint64{0}}},
		"unsorted cloud":     map[int]any{1: map[int]any{1: []NodeID{a}, 3: []uint64{0, 5, 0, 3}}},
		"cloud index":        map[int]any{1: map[int]any{1: []NodeID{a}, 3: []uint64{1, 3}}},
		"elements not map":   map[int]any{2: []string{"x"}},
	}
	for name, st := range bad {
		checkDecodeFails(t, name, encodeRaw(t, TypeORSet, st))
	}
	checkDecodeFails(t, "invalid UTF-8 element", encodeRaw(t, TypeORSet, map[int]any{
		1: map[int]any{1: []NodeID{a}, 2: []uint64{1}}, 2: map[string][]uint64{"x\xff": {0, 1}},
	}))
}

// ExampleORSet shows add-wins: a remove only removes the adds it has seen.
func ExampleORSet() {
	a := NodeID("10.0.0.1:7946#1")
	b := NodeID("10.0.0.2:7946#2")

	onA, _ := ORSet{}.Add(a, "apple")
	onB := onA // B has replicated A's set

	onA, _ = onA.Add(a, "apple") // A adds apple again
	onB, _ = onB.Remove(b, "apple")
	onB, _ = onB.Add(b, "pear")

	merged, _ := onA.Merge(onB)
	fmt.Println(merged.Value())

	// A remove after seeing every add removes the element.
	gone, _ := merged.(ORSet).Remove(b, "apple")
	merged, _ = gone.Merge(onA)
	fmt.Println(merged.Value())
	// Output:
	// [apple pear]
	// [pear]
}

// benchSets returns two replicas of a set of n elements that differ in a few.
func benchSets(n int) (ORSet, ORSet) {
	s := ORSet{elems: make(map[string][]Dot, n), ctx: CausalContext{vv: map[NodeID]uint64{}}}
	for i := range n { // as n Adds would build it, in O(n)
		d := s.ctx.Next(nodes[i%3])
		s.ctx.add(d)
		s.elems[fmt.Sprintf("element-%d", i)] = []Dot{d}
	}
	o := s
	for i := range 10 {
		o, _ = o.Add(nodes[3], fmt.Sprintf("new-%d", i))
		o, _ = o.Remove(nodes[3], fmt.Sprintf("element-%d", i))
	}
	return s, o
}

func BenchmarkORSetMerge10k(b *testing.B) {
	s, o := benchSets(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Merge(o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkORSetAdd10k(b *testing.B) {
	s, _ := benchSets(10_000)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(nodes[0], "x")
	}
}

func BenchmarkORSetEncode10k(b *testing.B) {
	s, _ := benchSets(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(s); err != nil {
			b.Fatal(err)
		}
	}
}
