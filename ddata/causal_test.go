package ddata

import (
	"math/rand"
	"slices"
	"testing"
)

func TestCausalContextCompacts(t *testing.T) {
	a, b := nodes[0], nodes[1]
	var c CausalContext
	if c.Contains(Dot{a, 1}) || c.Next(a) != (Dot{a, 1}) || len(c.Nodes()) != 0 {
		t.Fatalf("zero context: %v %v", c.Next(a), c.Nodes())
	}
	c1 := c.Add(Dot{a, 3}).Add(Dot{a, 1})
	if !c1.Contains(Dot{a, 1}) || c1.Contains(Dot{a, 2}) || !c1.Contains(Dot{a, 3}) {
		t.Fatalf("context with a1, a3: %+v", c1)
	}
	if got := c1.Next(a); got != (Dot{a, 4}) {
		t.Fatalf("Next above the cloud = %v, want (a, 4)", got)
	}
	if c1.vv[a] != 1 || len(c1.cloud) != 1 {
		t.Fatalf("not compact: %+v", c1)
	}
	c2 := c1.Add(Dot{a, 2})
	if c2.vv[a] != 3 || c2.cloud != nil {
		t.Fatalf("a2 should fill the gap: %+v", c2)
	}
	if c1.Contains(Dot{a, 2}) {
		t.Fatal("Add changed its receiver")
	}
	m := c1.Merge(CausalContext{}.Add(Dot{a, 2}).Add(Dot{b, 2}))
	if m.vv[a] != 3 || !m.Contains(Dot{b, 2}) || m.Contains(Dot{b, 1}) || len(m.cloud) != 1 {
		t.Fatalf("merge: %+v", m)
	}
	if got := m.Nodes(); !slices.Equal(got, []NodeID{a, b}) {
		t.Fatalf("Nodes = %v", got)
	}
	if c.Add(Dot{a, 0}).Contains(Dot{a, 0}) {
		t.Fatal("a dot with counter 0 was added")
	}
	if w := m.withoutNode(a); w.hasNode(a) || !w.hasNode(b) || !m.hasNode(a) {
		t.Fatalf("withoutNode: %+v from %+v", w, m)
	}
}

// randContext returns a context of random dots of the test nodes.
func randContext(r *rand.Rand) CausalContext {
	var c CausalContext
	for range r.Intn(12) {
		c = c.Add(Dot{nodes[r.Intn(len(nodes))], uint64(1 + r.Intn(8))})
	}
	return c
}

// sameContext compares two contexts by their dots.
func sameContext(a, b CausalContext) bool {
	for _, node := range nodes {
		for i := uint64(1); i <= 10; i++ {
			if a.Contains(Dot{node, i}) != b.Contains(Dot{node, i}) {
				return false
			}
		}
	}
	sa, _ := encodeContext(a)
	sb, _ := encodeContext(b)
	ea, _ := encMode.Marshal(sa)
	eb, _ := encMode.Marshal(sb)
	return string(ea) == string(eb)
}

func TestCausalContextMergeLaws(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for range 500 {
		a, b, c := randContext(r), randContext(r), randContext(r)
		if !sameContext(a.Merge(b), b.Merge(a)) ||
			!sameContext(a.Merge(b).Merge(c), a.Merge(b.Merge(c))) ||
			!sameContext(a.Merge(a), a) {
			t.Fatalf("merge laws fail for %+v %+v %+v", a, b, c)
		}
		for _, node := range nodes {
			n := a.Next(node)
			if a.Contains(n) {
				t.Fatalf("Next(%s) = %v is in the context", node, n)
			}
			for d := range a.cloud {
				if d.Node == node && d.Counter >= n.Counter {
					t.Fatalf("Next(%s) = %v is not above cloud dot %v", node, n, d)
				}
			}
		}
		// Round trip of the encoded form.
		st, _ := encodeContext(a)
		back, _, err := decodeContext(st)
		if err != nil || !sameContext(back, a) {
			t.Fatalf("context round trip: %v %+v %+v", err, back, a)
		}
	}
}

func TestJoinDots(t *testing.T) {
	a, b := nodes[0], nodes[1]
	a1, a2, b1 := Dot{a, 1}, Dot{a, 2}, Dot{b, 1}
	ca := contextOf([]Dot{a1, a2})
	cb := contextOf([]Dot{a1, b1})
	// a1 is in both stores; a2 is unseen by cb; b1 was seen by ca? no: ca lacks b1.
	got := joinDots([]Dot{a1, a2}, ca, []Dot{a1, b1}, cb)
	if !slices.Equal(got, []Dot{a1, a2, b1}) {
		t.Fatalf("join = %v", got)
	}
	// b's store lacks a1 but its context has it: a1 was removed there.
	got = joinDots([]Dot{a1, a2}, ca, nil, cb)
	if !slices.Equal(got, []Dot{a2}) {
		t.Fatalf("join with a removal = %v", got)
	}
}

// checkORPruning checks Prune and PruningCleanup of v for removed (which must have data in
// v) into the last test node: the value is unchanged, pruning twice is pruning once,
// the pruned value keeps its value when merged with v (a replica that missed the
// pruning), and after the cleanup removed is gone from ModifiedByNodes.
func checkORPruning(t *testing.T, v RemovedNodePruning, removed NodeID) {
	t.Helper()
	into := nodes[len(nodes)-1]
	if !v.NeedPruningFrom(removed) || !slices.Contains(v.ModifiedByNodes(), removed) {
		t.Fatalf("%s: %s has no data to prune: %v", v.Type(), removed, v.ModifiedByNodes())
	}
	before := orValueBytes(t, v)
	pruned := v.Prune(removed, into).(RemovedNodePruning)
	if got := orValueBytes(t, pruned); got != before {
		t.Fatalf("%s: Prune changed the value: %v, was %v", v.Type(), pruned.Value(), v.Value())
	}
	if !equal(t, pruned.Prune(removed, into), pruned) {
		t.Fatalf("%s: pruning twice differs from pruning once", v.Type())
	}
	if m := mustMerge(t, pruned, v); orValueBytes(t, m) != before {
		t.Fatalf("%s: pruned merged with unpruned: %v, want %v", v.Type(), m.Value(), v.Value())
	}
	clean := pruned.PruningCleanup(removed).(RemovedNodePruning)
	if clean.NeedPruningFrom(removed) || slices.Contains(clean.ModifiedByNodes(), removed) {
		t.Fatalf("%s: %s still in %v after PruningCleanup", v.Type(), removed, clean.ModifiedByNodes())
	}
	if got := orValueBytes(t, clean); got != before {
		t.Fatalf("%s: PruningCleanup after Prune changed the value: %v, was %v", v.Type(), clean.Value(), v.Value())
	}
	if !slices.IsSorted(v.ModifiedByNodes()) {
		t.Fatalf("ModifiedByNodes not sorted: %v", v.ModifiedByNodes())
	}
	// The replicator cleans data from replicas that missed the pruning before merging.
	if m := mustMerge(t, clean, v.PruningCleanup(removed)); orValueBytes(t, m) != before {
		t.Fatalf("%s: cleaned value merged with cleaned unpruned: %v, want %v", v.Type(), m.Value(), v.Value())
	}
}

// orValueBytes returns the deterministic CBOR of d's Value, to compare values.
func orValueBytes(t testing.TB, d ReplicatedData) string {
	t.Helper()
	b, err := encMode.Marshal(d.Value())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
