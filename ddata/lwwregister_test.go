package ddata

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// lwwValues are few, so that equal timestamps with equal nodes and different values
// occur; "\xff" is not UTF-8.
var lwwValues = [][]byte{nil, []byte("x"), []byte("y"), []byte("\xff")}

// randClock returns a clock that gives small timestamps, often equal or going back, or
// DefaultClock or ReverseClock on a clock that is often stuck.
func randClock(r *rand.Rand) Clock {
	now := func() int64 { return int64(1000 + r.Intn(3)) }
	switch r.Intn(4) {
	case 0:
		return DefaultClock(now)
	case 1:
		return ReverseClock(now)
	default:
		return func(int64, []byte) int64 { return int64(r.Intn(4)) }
	}
}

func lwwUpdate(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	return cur.(LWWRegister).Set(node, lwwValues[r.Intn(len(lwwValues))], randClock(r))
}

func TestLWWRegisterLaws(t *testing.T) {
	checkLaws(t, genByUpdates(LWWRegister{}, lwwUpdate))
}

func TestLWWRegisterDeltas(t *testing.T) {
	checkDeltas(t, genByUpdates(LWWRegister{}, lwwUpdate), lwwUpdate)
}

func TestLWWRegisterConvergence(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		// The converged register is the greatest write made anywhere.
		var best LWWRegister
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			clock := randClock(r)
			value := lwwValues[r.Intn(len(lwwValues))]
			recording := func(ts int64, v []byte) int64 {
				w := clock(ts, v)
				best = best.join(LWWRegister{node: node, timestamp: w, value: cloneValue(v)})
				return w
			}
			return cur.(LWWRegister).Set(node, value, recording)
		}
		final := checkConvergence(t, seed, 3+int(seed%2), LWWRegister{}, update)
		if !equal(t, final, best) {
			t.Fatalf("seed %d: converged to %+v, want %+v", seed, final, best)
		}
		checkValueJSON(t, final)
	}
}

// fixedClock returns a clock that always gives ts.
func fixedClock(ts int64) Clock { return func(int64, []byte) int64 { return ts } }

func TestLWWRegisterMergeOrder(t *testing.T) {
	low, high := nodes[0], nodes[1] // nodes[0] < nodes[1]
	older := NewLWWRegister(low, []byte("older"), fixedClock(5))
	newer := NewLWWRegister(high, []byte("newer"), fixedClock(6))
	tieLow := NewLWWRegister(low, []byte("by low"), fixedClock(6))
	tieSame := NewLWWRegister(low, []byte("by low, again"), fixedClock(6)) // > "by low"
	for _, tc := range []struct {
		name     string
		a, b     LWWRegister
		want     LWWRegister
		wantText string
	}{
		{"higher timestamp wins", older, newer, newer, "newer"},
		{"equal timestamps: lower node wins", newer, tieLow, tieLow, "by low"},
		{"equal timestamps and node: greater value wins", tieLow, tieSame, tieSame, "by low, again"},
		{"unset loses", LWWRegister{}, older, older, "older"},
		{"unset loses to an empty value at timestamp 0", LWWRegister{}, NewLWWRegister(high, nil, fixedClock(0)), NewLWWRegister(high, nil, fixedClock(0)), ""},
		{"very negative timestamps still beat unset", LWWRegister{}, NewLWWRegister(high, []byte("v"), fixedClock(math.MinInt64)), NewLWWRegister(high, []byte("v"), fixedClock(math.MinInt64)), "v"},
	} {
		for _, m := range []ReplicatedData{mustMerge(t, tc.a, tc.b), mustMerge(t, tc.b, tc.a)} {
			if !equal(t, m, tc.want) || m.Value() != tc.wantText {
				t.Errorf("%s: merge = %+v, want %+v", tc.name, m, tc.want)
			}
		}
	}
	if m, err := older.Merge(&newer); err != nil || !equal(t, m, newer) {
		t.Errorf("Merge(*LWWRegister) = %v, %v", m, err)
	}
	for _, other := range []ReplicatedData{nil, Flag{}, (*LWWRegister)(nil)} {
		if _, err := older.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Errorf("Merge(%T) = %v, want ErrTypeMismatch", other, err)
		}
	}
}

func TestLWWRegisterDefaultClock(t *testing.T) {
	a, b := nodes[0], nodes[1]
	now := int64(1000)
	clock := DefaultClock(func() int64 { return now })

	r := NewLWWRegister(a, []byte("v1"), clock)
	if r.Timestamp() != 1000 || r.UpdatedBy() != a || string(r.Get()) != "v1" {
		t.Fatalf("new register %+v", r)
	}
	// The wall clock is stuck: every write still gets a higher timestamp and wins.
	r2, d := r.Set(a, []byte("v2"), clock)
	r3, _ := r2.Set(b, []byte("v3"), clock)
	if r2.Timestamp() != 1001 || r3.Timestamp() != 1002 || string(r3.Get()) != "v3" || r3.UpdatedBy() != b {
		t.Fatalf("stuck clock: %+v then %+v", r2, r3)
	}
	if !equal(t, d, r2) {
		t.Fatalf("delta %+v, want the new register %+v", d, r2)
	}
	// The clock goes back: still monotonic.
	now = 10
	r4, _ := r3.Set(a, []byte("v4"), clock)
	if r4.Timestamp() != 1003 || string(r4.Get()) != "v4" {
		t.Fatalf("clock behind: %+v", r4)
	}
	// The clock is ahead: its time.
	now = 5000
	if r5, _ := r4.Set(a, []byte("v5"), clock); r5.Timestamp() != 5000 {
		t.Fatalf("clock ahead: %+v", r5)
	}
	// Older values are unchanged.
	if string(r.Get()) != "v1" || string(r2.Get()) != "v2" {
		t.Fatal("Set changed its receiver")
	}
	// At the largest timestamp the clock saturates.
	if got := clock(math.MaxInt64, nil); got != math.MaxInt64 {
		t.Fatalf("DefaultClock(MaxInt64) = %d", got)
	}
	// An unset register starts at timestamp 0, as NewLWWRegister does.
	now = -50 // before 1970: still 1
	if got, _ := (LWWRegister{}).Set(a, []byte("x"), clock); got.Timestamp() != 1 || !equal(t, got, NewLWWRegister(a, []byte("x"), clock)) {
		t.Fatalf("Set on unset = %+v", got)
	}
}

func TestLWWRegisterReverseClock(t *testing.T) {
	a, b := nodes[0], nodes[1]
	now := int64(1000)
	clock := ReverseClock(func() int64 { return now })

	first := NewLWWRegister(b, []byte("first"), clock)
	if first.Timestamp() != -1000 {
		t.Fatalf("timestamp %d, want -1000", first.Timestamp())
	}
	now = 2000
	second := NewLWWRegister(a, []byte("second"), clock) // later, by the lower node
	if m := mustMerge(t, second, first); m.Value() != "first" {
		t.Fatalf("merge = %v, want the first write", m.Value())
	}
	// A write to a register that has a value loses, on the writing replica too; the
	// delta is the register as it is.
	again, d := first.Set(a, []byte("again"), clock)
	if !equal(t, again, first) || !equal(t, d, first) {
		t.Fatalf("second write on the replica: %+v (delta %+v)", again, d)
	}
	if got := clock(math.MinInt64, nil); got != math.MinInt64 {
		t.Fatalf("ReverseClock(MinInt64) = %d", got)
	}
	if got := ReverseClock(func() int64 { return math.MinInt64 })(0, nil); got != -1 {
		t.Fatalf("ReverseClock with now MinInt64 = %d", got)
	}
}

func TestLWWRegisterCustomClock(t *testing.T) {
	a, b := nodes[0], nodes[1]
	// Version numbers from the records the values come from.
	version := func(v int64) Clock { return func(int64, []byte) int64 { return v } }
	r := NewLWWRegister(b, []byte("v7"), version(7))
	onA, _ := r.Set(a, []byte("v9"), version(9))
	stale, d := onA.Set(b, []byte("v8"), version(8)) // an older record: loses
	if string(stale.Get()) != "v9" || stale.Timestamp() != 9 || !equal(t, d, onA) {
		t.Fatalf("stale write: %+v, delta %+v", stale, d)
	}
	// Merge of a replica that took v8 directly.
	onB, _ := r.Set(b, []byte("v8"), version(8))
	if m := mustMerge(t, onB, onA); m.Value() != "v9" {
		t.Fatalf("merge = %v", m.Value())
	}
	// The clock sees the current timestamp and the value.
	var gotTS int64
	var gotValue []byte
	_, _ = onA.Set(a, []byte("seen"), func(ts int64, v []byte) int64 {
		gotTS, gotValue = ts, v
		return ts + 1
	})
	if gotTS != 9 || string(gotValue) != "seen" {
		t.Fatalf("clock called with %d, %q", gotTS, gotValue)
	}
}

func TestLWWRegisterValues(t *testing.T) {
	a := nodes[0]
	var unset LWWRegister
	if unset.Value() != nil || unset.Get() != nil || unset.UpdatedBy() != "" || unset.Timestamp() != 0 {
		t.Fatalf("unset register %+v", unset)
	}
	if unset.Type() != TypeLWWRegister || unset.RequiresCausalDeliveryOfDeltas() {
		t.Fatal("type or causal delivery")
	}
	in := []byte("hello")
	r := NewLWWRegister(a, in, fixedClock(1))
	in[0] = 'j'
	out := r.Get()
	out[1] = 'a'
	if string(r.Get()) != "hello" || r.Value() != "hello" {
		t.Fatalf("the register shares memory with its callers: %q", r.Get())
	}
	if v := NewLWWRegister(a, []byte{}, fixedClock(1)); v.Value() != "" || v.Get() != nil || !equal(t, v, NewLWWRegister(a, nil, fixedClock(1))) {
		t.Fatalf("empty value: %+v", v)
	}
	bin := NewLWWRegister(a, []byte{0xff, 0x00}, fixedClock(1))
	if v, ok := bin.Value().([]byte); !ok || !bytes.Equal(v, []byte{0xff, 0}) {
		t.Fatalf("non-UTF-8 value: %#v", bin.Value())
	}
	checkValueJSON(t, bin)
	checkValueJSON(t, unset)
	for name, f := range map[string]func(){
		"empty node":     func() { NewLWWRegister("", nil, fixedClock(1)) },
		"non-UTF-8 node": func() { r.Set("\xff", nil, fixedClock(1)) },
		"nil clock":      func() { r.Set(a, nil, nil) },
		"nil clock, new": func() { NewLWWRegister(a, nil, nil) },
		"nil now":        func() { DefaultClock(nil) },
		"nil now, rev":   func() { ReverseClock(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestLWWRegisterEncoding(t *testing.T) {
	a, b := nodes[0], nodes[1]
	x := NewLWWRegister(a, []byte("v"), fixedClock(3))
	y, _ := NewLWWRegister(b, []byte("w"), fixedClock(1)).Set(a, []byte("v"), fixedClock(3))
	if !equal(t, x, y) {
		t.Fatalf("%x != %x", mustEncode(t, x), mustEncode(t, y))
	}
	// Golden bytes: {1: "lwwregister", 2: {1: "a", 2: -2, 3: h'7600'}}, and unset.
	g := NewLWWRegister("a", []byte("v\x00"), fixedClock(-2))
	if got, want := fmt.Sprintf("%x", mustEncode(t, g)), "a2016b6c7777726567697374657202a3016161022103427600"; got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
	if got, want := fmt.Sprintf("%x", mustEncode(t, LWWRegister{})), "a2016b6c7777726567697374657202a0"; got != want {
		t.Errorf("unset encoding %s, want %s", got, want)
	}
	// Timestamp 0 and an empty value round-trip.
	z := NewLWWRegister(a, nil, fixedClock(0))
	if back, err := Decode(mustEncode(t, z)); err != nil || !equal(t, back, z) || back.Value() != "" {
		t.Fatalf("register at 0 with an empty value: %v, %v", back, err)
	}
	enc := mustEncode(t, x)
	for name, b := range map[string][]byte{
		"truncated":              enc[:len(enc)-1],
		"null state":             encodeRawState(t, TypeLWWRegister, "f6"),
		"unset with timestamp":   encodeRawState(t, TypeLWWRegister, "a10205"),
		"unset with value":       encodeRawState(t, TypeLWWRegister, "a1034176"),
		"empty node with value":  encodeRawState(t, TypeLWWRegister, "a20160034176"),
		"non-UTF-8 node":         encodeRawState(t, TypeLWWRegister, "a10162ff61"),
		"node as integer":        encodeRawState(t, TypeLWWRegister, "a10101"),
		"timestamp as text":      encodeRawState(t, TypeLWWRegister, "a201616102616b"),
		"timestamp out of range": encodeRawState(t, TypeLWWRegister, "a2016161023bffffffffffffffff"),
		"duplicate node":         encodeRawState(t, TypeLWWRegister, "a2016161016161"),
		"gset state":             encodeRawState(t, TypeLWWRegister, "a101816161"),
	} {
		checkDecodeFails(t, name, b)
	}
}

// ExampleLWWRegister shows last-writer-wins with an injected wall clock, and
// first-writer-wins with the reverse clock.
func ExampleLWWRegister() {
	a, b := NodeID("10.0.0.1:7946#1"), NodeID("10.0.0.2:7946#2")
	now := int64(1_700_000_000_000) // milliseconds since the Unix epoch
	clock := DefaultClock(func() int64 { return now })

	onA := NewLWWRegister(a, []byte("red"), clock)
	now += 5
	onB, delta := onA.Set(b, []byte("blue"), clock) // b writes later
	merged, _ := onA.Merge(delta)
	fmt.Println(merged.Value(), merged.(LWWRegister).UpdatedBy() == b, onB.Timestamp()-onA.Timestamp())

	// Concurrent writes at the same millisecond: the lower node ID wins.
	x := NewLWWRegister(b, []byte("from b"), clock)
	y := NewLWWRegister(a, []byte("from a"), clock)
	merged, _ = x.Merge(y)
	fmt.Println(merged.Value())

	// First write wins.
	reverse := ReverseClock(func() int64 { return now })
	first := NewLWWRegister(b, []byte("first"), reverse)
	now += 1000
	second := NewLWWRegister(a, []byte("second"), reverse)
	merged, _ = second.Merge(first)
	fmt.Println(merged.Value())
	// Output:
	// blue true 5
	// from a
	// first
}
