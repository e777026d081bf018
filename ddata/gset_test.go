package ddata

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"
)

// gsetElems are the elements random sets draw from; "\xff" is not UTF-8 and is the
// element "\uFFFD".
var gsetElems = []string{"", "a", "b", "é", "日本", "\xff", "\uFFFD", "zz"}

func gsetUpdate(r *rand.Rand, _ NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	return cur.(GSet).Add(gsetElems[r.Intn(len(gsetElems))])
}

func TestGSetLaws(t *testing.T) {
	checkLaws(t, genByUpdates(GSet{}, gsetUpdate))
}

func TestGSetDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(GSet{}, gsetUpdate), gsetUpdate)
}

func TestGSetConvergence(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		added := map[string]bool{}
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			e := fmt.Sprintf("%s/%d", node[:8], r.Intn(30))
			added[e] = true
			return cur.(GSet).Add(e)
		}
		final := checkConvergence(t, seed, 3+int(seed%2), GSet{}, update).(GSet)
		var want []string
		for e := range added {
			want = append(want, e)
		}
		sort.Strings(want)
		if got := final.Elements(); !slices.Equal(got, want) {
			t.Fatalf("seed %d: converged to %v, want %v", seed, got, want)
		}
		checkValueJSON(t, final)
	}
}

func TestGSetAdd(t *testing.T) {
	var zero GSet
	if zero.Len() != 0 || zero.Contains("") || zero.Elements() == nil || len(zero.Value().([]string)) != 0 {
		t.Fatal("zero GSet")
	}
	s1, d1 := zero.Add("b")
	s2, d2 := s1.Add("a")
	s3, d3 := s2.Add("c")
	s4, d4 := s3.Add("a") // already there
	if got := s4.Elements(); !slices.Equal(got, []string{"a", "b", "c"}) || s4.Len() != 3 {
		t.Fatalf("Elements = %v", got)
	}
	if !equal(t, s4, s3) {
		t.Fatal("adding an element that is there changed the set")
	}
	for i, d := range []GSet{d1, d2, d3, d4} {
		want := []string{"b", "a", "c", "a"}[i]
		if !slices.Equal(d.Elements(), []string{want}) {
			t.Errorf("delta %d = %v, want [%s]", i+1, d.Elements(), want)
		}
	}
	if zero.Len() != 0 || s1.Len() != 1 || s2.Len() != 2 || !s3.Contains("c") || s2.Contains("c") {
		t.Fatal("Add changed its receiver")
	}
	els := s4.Elements()
	els[0] = "mutated"
	if !s4.Contains("a") || s4.Contains("mutated") {
		t.Fatal("Elements shares memory with the set")
	}
	if s4.Type() != TypeGSet || s4.RequiresCausalDeliveryOfDeltas() {
		t.Fatal("type or causal delivery")
	}
	if v := s4.Value().([]string); !slices.Equal(v, []string{"a", "b", "c"}) {
		t.Fatalf("Value = %v", v)
	}
	// Not UTF-8: stored as U+FFFD, and found by either spelling.
	u, d := zero.Add("a\xff\xfe")
	if !u.Contains("a\uFFFD") || !u.Contains("a\xfe") || !slices.Equal(d.Elements(), []string{"a\uFFFD"}) {
		t.Fatalf("non-UTF-8 element: %q", u.Elements())
	}
	if back, err := Decode(mustEncode(t, u)); err != nil || !equal(t, back, u) {
		t.Fatalf("non-UTF-8 element does not round-trip: %v", err)
	}
	// Merge shares nothing that Add could change.
	m := mustMerge(t, s2, u).(GSet)
	m2, _ := m.Add("0")
	if m.Contains("0") || s2.Contains("0") || !m2.Contains("a\uFFFD") {
		t.Fatal("merge and add interfere")
	}
	for _, other := range []ReplicatedData{nil, Flag{}, (*GSet)(nil)} {
		if _, err := s4.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Errorf("Merge(%T) = %v", other, err)
		}
	}
	if got, err := s1.Merge(&s3); err != nil || !equal(t, got, s3) {
		t.Errorf("Merge(*GSet) = %v, %v", got, err)
	}
}

func TestGSetEncoding(t *testing.T) {
	x, _ := GSet{}.Add("b")
	x, _ = x.Add("a")
	y, _ := GSet{}.Add("a")
	y2, _ := GSet{}.Add("b")
	if !equal(t, x, mustMerge(t, y2, y)) {
		t.Fatal("the same set built two ways encodes differently")
	}
	// Golden bytes: {1: "gset", 2: {1: ["a", "b"]}}, and the empty set.
	if got, want := fmt.Sprintf("%x", mustEncode(t, x)), "a201646773657402a1018261616162"; got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
	if got, want := fmt.Sprintf("%x", mustEncode(t, GSet{})), "a201646773657402a0"; got != want {
		t.Errorf("empty encoding %s, want %s", got, want)
	}
	enc := mustEncode(t, x)
	for name, b := range map[string][]byte{
		"truncated":          enc[:len(enc)-1],
		"null state":         encodeRawState(t, TypeGSet, "f6"),
		"unsorted":           encodeRawState(t, TypeGSet, "a1018261626161"),
		"duplicate element":  encodeRawState(t, TypeGSet, "a1018261616161"),
		"non-UTF-8 element":  encodeRawState(t, TypeGSet, "a1018161ff"),
		"byte-string":        encodeRawState(t, TypeGSet, "a101814161"),
		"integer element":    encodeRawState(t, TypeGSet, "a1018101"),
		"map elements":       encodeRawState(t, TypeGSet, "a101a0"),
		"duplicate field":    encodeRawState(t, TypeGSet, "a201800180"),
		"counter's state":    encodeRawState(t, TypeGSet, "a101a1616101"),
		"wrong type in type": mustHex("a2010102a0"),
	} {
		checkDecodeFails(t, name, b)
	}
}
