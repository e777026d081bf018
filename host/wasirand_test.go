package host

import (
	"bytes"
	mathrand "math/rand"
	"testing"
)

// The guest's random_get gives wazero's deterministic stream (math/rand seeded with 42)
// however the guest splits its reads, before, across and after the part computed once
// per process.
func TestWASIRandomIsTheSeededStreamHoweverItIsRead(t *testing.T) {
	const total = 3 * fakeRandPrefixBytes
	want := make([]byte, total)
	mathrand.New(mathrand.NewSource(42)).Read(want)
	for _, sizes := range [][]int{
		{8, 8, 16},
		{fakeRandPrefixBytes},
		{fakeRandPrefixBytes - 3, 7, 100},
		{1, fakeRandPrefixBytes, 5, 9},
		{total},
		{13, 2 * fakeRandPrefixBytes, 1, 1, 1},
	} {
		var f fakeRand
		var got []byte
		for _, n := range sizes {
			p := make([]byte, n)
			if k, err := f.Read(p); k != n || err != nil {
				t.Fatalf("reads %v: Read(%d) = %d, %v", sizes, n, k, err)
			}
			got = append(got, p...)
		}
		if !bytes.Equal(got, want[:len(got)]) {
			t.Fatalf("reads %v: not the seeded stream", sizes)
		}
	}
	// What a TinyGo guest reads at its start allocates nothing.
	p := make([]byte, 16)
	if n := testing.AllocsPerRun(100, func() {
		var f fakeRand
		f.Read(p)
	}); n != 0 {
		t.Fatalf("%v allocations to read 16 bytes", n)
	}
}
