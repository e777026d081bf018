package ddata

import (
	"bytes"
	"errors"
	"maps"
	"math/rand"
	"slices"
	"testing"
)

// orClock returns a clock that always gives t.
func orClock(t int64) Clock { return func(int64, []byte) int64 { return t } }

func lwwmapUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	m := cur.(LWWMap)
	k := orKeys[r.Intn(len(orKeys))]
	if r.Intn(4) == 0 {
		return m.Remove(node, k)
	}
	// Few distinct timestamps, so that ties between nodes happen.
	return m.Put(node, k, []byte{byte(r.Intn(4))}, orClock(int64(r.Intn(5))))
}

func TestLWWMapLaws(t *testing.T) {
	checkLaws(t, genByUpdates(LWWMap{}, lwwmapUpdate))
}

func TestLWWMapDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(LWWMap{}, lwwmapUpdate), lwwmapUpdate)
}

func TestLWWMapConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		checkValueJSON(t, checkConvergence(t, seed, 3+int(seed%2), LWWMap{}, lwwmapUpdate))
	}
}

func TestLWWMapPutGetRemove(t *testing.T) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	now := int64(1000)
	clock := DefaultClock(func() int64 { return now })
	var zero LWWMap
	if zero.Len() != 0 || len(zero.Entries()) != 0 || zero.Contains("k") {
		t.Fatal("zero LWWMap is not empty")
	}
	if _, ok := zero.Get("k"); ok {
		t.Fatal("Get on the empty map")
	}
	val := []byte("v1")
	m1, d1 := zero.Put(a, "k", val, clock)
	val[0] = 'X' // Put copied the value
	if got, ok := m1.Get("k"); !ok || string(got) != "v1" || !equal(t, d1, m1) {
		t.Fatalf("after Put: %q %v", got, ok)
	}
	m2, d2 := m1.Put(a, "k", []byte("v2"), clock) // same wall clock: the timestamp still grows
	if got, _ := m2.Get("k"); string(got) != "v2" {
		t.Fatalf("second Put: %q", got)
	}
	if r, _ := m2.Register("k"); r.Timestamp() != 1001 || r.UpdatedBy() != a {
		t.Fatalf("register %d %s", r.Timestamp(), r.UpdatedBy())
	}
	if got, _ := d2.Get("k"); string(got) != "v2" || d2.Len() != 1 {
		t.Fatalf("delta %v", d2.Value())
	}
	// Concurrent Puts: the later timestamp wins, whatever the merge order.
	now = 5000
	onB, _ := m2.Put(b, "k", []byte("from b"), clock)
	now = 6000
	onC, _ := m2.Put(c, "k", []byte{0xff}, clock)
	for _, m := range []ReplicatedData{mustMerge(t, onB, onC), mustMerge(t, onC, onB)} {
		if got, _ := m.(LWWMap).Get("k"); !bytes.Equal(got, []byte{0xff}) {
			t.Fatalf("concurrent puts: %q", got)
		}
		checkValueJSON(t, m)
	}
	if v := mustMerge(t, onB, m2).Value().(map[string]any); v["k"] != "from b" {
		t.Fatalf("Value = %#v", v)
	}
	// Remove, and a concurrent Put wins.
	gone, dGone := m2.Remove(b, "k")
	if gone.Contains("k") || !equal(t, mustMerge(t, m2, dGone), gone) {
		t.Fatal("Remove")
	}
	if m := mustMerge(t, gone, onC).(LWWMap); !m.Contains("k") {
		t.Fatal("remove and concurrent put: the key is gone")
	}
	m3, _ := m2.Put(b, "j", nil, clock)
	if got := m3.Entries(); !maps.EqualFunc(got, map[string][]byte{"k": []byte("v2"), "j": nil}, bytes.Equal) {
		t.Fatalf("Entries = %q", got)
	}
	if got := m3.Keys(); !slices.Equal(got, []string{"j", "k"}) || m3.Len() != 2 {
		t.Fatalf("Keys = %v", got)
	}
	if _, err := m3.Merge(PNCounterMap{}); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Merge with a PNCounterMap: %v", err)
	}
	if _, err := m3.Merge((*LWWMap)(nil)); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Merge with nil: %v", err)
	}
	if !m3.RequiresCausalDeliveryOfDeltas() || m3.Type() != TypeLWWMap {
		t.Fatal("LWWMap flags")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic for a nil clock")
			}
		}()
		zero.Put(a, "k", nil, nil)
	}()
}

func TestLWWMapPruning(t *testing.T) {
	a, b := nodes[0], nodes[1]
	m, _ := LWWMap{}.Put(a, "k", []byte("x"), orClock(1))
	m, _ = m.Put(b, "j", []byte("y"), orClock(1))
	checkORPruning(t, m, a)
	checkORPruning(t, m, b)
}

func TestLWWMapEncoding(t *testing.T) {
	a := nodes[0]
	m, _ := LWWMap{}.Put(a, "k", []byte("x"), orClock(7))
	back, err := Decode(mustEncode(t, m))
	if err != nil || !equal(t, back, m) {
		t.Fatalf("round trip: %v", err)
	}
	// The empty map and a map whose keys were removed are different states, but the
	// zero value and a decoded empty map are the same.
	if back, err := Decode(mustEncode(t, LWWMap{})); err != nil || !equal(t, back, LWWMap{}) {
		t.Fatalf("empty round trip: %v", err)
	}
	reg := mustEncode(t, NewLWWRegister(a, []byte("x"), orClock(7)))
	ctx := map[int]any{1: []NodeID{a}, 2: []uint64{1}}
	for name, st := range map[string]any{
		"value type given": map[int]any{1: ctx, 2: TypeLWWRegister, 3: map[string][]any{"k": {[]any{0, 1, orRawCBOR(reg)}}}},
		"counter value":    map[int]any{1: ctx, 3: map[string][]any{"k": {[]any{0, 1, orRawCBOR(mustEncode(t, orCounter(a, 1)))}}}},
	} {
		checkDecodeFails(t, name, encodeRaw(t, TypeLWWMap, st))
	}
	ok := map[int]any{1: ctx, 3: map[string][]any{"k": {[]any{0, 1, orRawCBOR(reg)}}}}
	if back, err := Decode(encodeRaw(t, TypeLWWMap, ok)); err != nil || !equal(t, back, m) {
		t.Fatalf("raw LWWMap: %v", err)
	}
}
