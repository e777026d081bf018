package ddata

import (
	"bytes"
	"math/rand"
	"testing"
)

// Shared helpers for the property tests of every type.

// nodes are the replica IDs random values use.
var nodes = []NodeID{"10.0.0.1:7946#0000000000000001", "10.0.0.2:7946#0000000000000002", "10.0.0.3:7946#0000000000000003", "10.0.0.4:7946#0000000000000004"}

// mustEncode returns the deterministic encoding, failing the test on error.
func mustEncode(t testing.TB, d ReplicatedData) []byte {
	t.Helper()
	b, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// equal compares two values by their deterministic encodings.
func equal(t testing.TB, a, b ReplicatedData) bool {
	t.Helper()
	return bytes.Equal(mustEncode(t, a), mustEncode(t, b))
}

func mustMerge(t testing.TB, a, b ReplicatedData) ReplicatedData {
	t.Helper()
	m, err := a.Merge(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkLaws checks on many random values from gen that merge is commutative,
// associative and idempotent, and that encoding round-trips.
func checkLaws(t *testing.T, gen func(r *rand.Rand) ReplicatedData) {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		a, b, c := gen(r), gen(r), gen(r)
		if !equal(t, mustMerge(t, a, b), mustMerge(t, b, a)) {
			t.Fatalf("merge not commutative:\na=%v\nb=%v", a.Value(), b.Value())
		}
		if !equal(t, mustMerge(t, mustMerge(t, a, b), c), mustMerge(t, a, mustMerge(t, b, c))) {
			t.Fatalf("merge not associative:\na=%v\nb=%v\nc=%v", a.Value(), b.Value(), c.Value())
		}
		if !equal(t, mustMerge(t, a, a), a) {
			t.Fatalf("merge not idempotent: %v", a.Value())
		}
		back, err := Decode(mustEncode(t, a))
		if err != nil {
			t.Fatal(err)
		}
		if !equal(t, back, a) {
			t.Fatalf("encoding does not round-trip: %v", a.Value())
		}
	}
}
