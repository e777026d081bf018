package ddata

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"
)

// orFamilySeeds returns values of the causal types (ORSet, ORMap, ORMultiMap, LWWMap,
// PNCounterMap) whose encodings seed FuzzDecodeORFamily: random values, and values
// with context clouds, nested maps and both ORMultiMap flavours.
func orFamilySeeds() []ReplicatedData {
	a, b := nodes[0], nodes[1]
	r := rand.New(rand.NewSource(8))
	out := []ReplicatedData{ORSet{}, ORMap{}, NewORMultiMap(), NewORMultiMapWithValueDeltas(), LWWMap{}, PNCounterMap{}}
	for range 3 {
		out = append(out,
			genByUpdates(ORSet{}, orsetUpdate)(r),
			genByUpdates(ORMap{}, ormapUpdate)(r),
			genByUpdates(ORMap{}, ormapSetUpdate)(r),
			genByUpdates(NewORMultiMap(), ormultimapUpdate)(r),
			genByUpdates(NewORMultiMapWithValueDeltas(), ormultimapUpdate)(r),
			genByUpdates(LWWMap{}, lwwmapUpdate)(r),
			genByUpdates(PNCounterMap{}, pncountermapUpdate)(r))
	}
	// A delta alone has a context cloud.
	s, _ := ORSet{}.Add(a, "x")
	s, _ = s.Add(a, "y")
	_, cloud := s.Add(a, "x")
	out = append(out, cloud)
	pm, _ := PNCounterMap{}.Increment(b, "k", 1)
	nested, _, _ := ORMap{}.Put(a, "inner", pm.m)
	lm, _ := LWWMap{}.Put(a, "k", []byte{0xff}, orClock(-3))
	return append(out, nested, lm)
}

// FuzzDecodeORFamily checks Decode on inputs near the causal types' encodings: it
// never panics, and what it accepts encodes, decodes to the same bytes, merges with
// itself to itself, has a JSON-able Value, merges with the seeds without panicking,
// and can be pruned and cleaned.
func FuzzDecodeORFamily(f *testing.F) {
	seeds := orFamilySeeds()
	for _, v := range seeds {
		b := mustEncode(f, v)
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) {
				t.Fatalf("Decode error %v wraps neither ErrMalformed nor ErrUnknownType", err)
			}
			return
		}
		enc, err := Encode(d)
		if err != nil {
			t.Fatalf("Encode of a decoded %s: %v", d.Type(), err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode of a re-encoded %s: %v", d.Type(), err)
		}
		if enc2 := mustEncode(t, back); !bytes.Equal(enc, enc2) {
			t.Fatalf("%s does not round-trip: %x then %x", d.Type(), enc, enc2)
		}
		if !equal(t, mustMerge(t, d, d), d) {
			t.Fatalf("merge of a decoded %s with itself changed it", d.Type())
		}
		checkValueJSON(t, d)
		for _, s := range seeds {
			if s.Type() != d.Type() {
				continue
			}
			m1, err1 := d.Merge(s)
			m2, err2 := s.Merge(d)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("merge with a seed fails one way only: %v, %v", err1, err2)
			}
			if err1 == nil && !equal(t, m1, m2) {
				t.Fatalf("merge of a decoded %s with a seed is not commutative", d.Type())
			}
		}
		if p, ok := d.(RemovedNodePruning); ok {
			for _, n := range p.ModifiedByNodes() {
				mustEncode(t, p.Prune(n, nodes[0]))
				mustEncode(t, p.PruningCleanup(n))
			}
		}
	})
}
