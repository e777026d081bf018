package ddata

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"testing"
)

// Shared helpers for delta and convergence tests of the types whose deltas need no
// causal delivery, and FuzzDecode over every type's encodings.

// updateFunc applies one random update on behalf of node to cur and returns the new
// value and the update's delta.
type updateFunc func(r *rand.Rand, node NodeID, cur ReplicatedData) (next, delta ReplicatedData)

// genByUpdates returns a generator of random values: a few replicas start at zero, take
// random updates from random nodes and merge each other's states at random, and one of
// them is returned.
func genByUpdates(zero ReplicatedData, update updateFunc) func(r *rand.Rand) ReplicatedData {
	return func(r *rand.Rand) ReplicatedData {
		reps := []ReplicatedData{zero, zero, zero}
		for range r.Intn(12) {
			i := r.Intn(len(reps))
			if r.Intn(4) == 0 {
				m, err := reps[i].Merge(reps[r.Intn(len(reps))])
				if err != nil {
					panic(err)
				}
				reps[i] = m
				continue
			}
			reps[i], _ = update(r, nodes[r.Intn(len(nodes))], reps[i])
		}
		return reps[r.Intn(len(reps))]
	}
}

// checkDeltas checks that the deltas of a random sequence of updates, merged shuffled
// and with duplicates into the value the updates started from, or into any replica
// that has seen that value, give the value after the updates: the deltas of these
// types need no causal delivery. Each delta is also checked to be of the value's type.
func checkDeltas(t *testing.T, gen func(r *rand.Rand) ReplicatedData, update updateFunc) {
	t.Helper()
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 200; i++ {
		start := gen(r)
		cur := start
		var deltas []ReplicatedData
		for range 1 + r.Intn(8) {
			var d ReplicatedData
			cur, d = update(r, nodes[r.Intn(len(nodes))], cur)
			if d.Type() != start.Type() {
				t.Fatalf("delta of type %s for %s", d.Type(), start.Type())
			}
			deltas = append(deltas, d)
			if r.Intn(3) == 0 {
				deltas = append(deltas, d) // duplicated in transit
			}
		}
		r.Shuffle(len(deltas), func(i, j int) { deltas[i], deltas[j] = deltas[j], deltas[i] })
		other := mustMerge(t, gen(r), start) // another replica that has seen start
		got, gotOther := start, other
		for _, d := range deltas {
			got = mustMerge(t, got, d)
			gotOther = mustMerge(t, gotOther, d)
		}
		if !equal(t, got, cur) {
			t.Fatalf("deltas merged into the start value give %v, the updates gave %v", got.Value(), cur.Value())
		}
		if want := mustMerge(t, other, cur); !equal(t, gotOther, want) {
			t.Fatalf("deltas merged into another replica give %v, want %v", gotOther.Value(), want.Value())
		}
	}
}

// checkConvergence runs replicas (one per node) from zero through random steps:
// updates, whose deltas go to the other replicas over a channel that drops, duplicates
// and reorders messages, and full-state gossip over the same channel. After the last
// step the messages still in flight are delivered or dropped, and a full exchange
// (all states into one replica, then that state into all) must leave every replica
// equal. The converged value is returned for a model check.
func checkConvergence(t *testing.T, seed int64, replicas int, zero ReplicatedData, update updateFunc) ReplicatedData {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	type msg struct {
		to   int
		data ReplicatedData
	}
	reps := make([]ReplicatedData, replicas)
	for i := range reps {
		reps[i] = zero
	}
	var inFlight []msg
	send := func(from int, data ReplicatedData) {
		for to := range reps {
			if to == from || r.Intn(4) == 0 { // dropped
				continue
			}
			inFlight = append(inFlight, msg{to, data})
			if r.Intn(5) == 0 {
				inFlight = append(inFlight, msg{to, data}) // duplicated
			}
		}
	}
	deliver := func() {
		k := r.Intn(len(inFlight)) // out of order
		m := inFlight[k]
		inFlight = append(inFlight[:k], inFlight[k+1:]...)
		reps[m.to] = mustMerge(t, reps[m.to], m.data)
	}
	for range 300 {
		switch i := r.Intn(replicas); {
		case r.Intn(10) < 5:
			var d ReplicatedData
			reps[i], d = update(r, nodes[i], reps[i])
			send(i, d)
		case r.Intn(10) == 0:
			send(i, reps[i])
		case len(inFlight) > 0:
			deliver()
		}
	}
	for len(inFlight) > 0 {
		if r.Intn(3) == 0 {
			inFlight = inFlight[1:]
			continue
		}
		deliver()
	}
	for i := 1; i < replicas; i++ {
		reps[0] = mustMerge(t, reps[0], reps[i])
	}
	for i := 1; i < replicas; i++ {
		reps[i] = mustMerge(t, reps[i], reps[0])
		if !equal(t, reps[i], reps[0]) {
			t.Fatalf("replica %d did not converge: %v, replica 0: %v", i, reps[i].Value(), reps[0].Value())
		}
	}
	return reps[0]
}

// checkValueJSON checks that Value is plain data for encoding/json.
func checkValueJSON(t testing.TB, d ReplicatedData) {
	t.Helper()
	if _, err := json.Marshal(d.Value()); err != nil {
		t.Fatalf("Value of %s is not JSON-able: %v", d.Type(), err)
	}
}

// checkDecodeFails checks that Decode refuses b with an error wrapping ErrMalformed or
// ErrUnknownType (and does not panic).
func checkDecodeFails(t *testing.T, name string, b []byte) {
	t.Helper()
	d, err := Decode(b)
	if err == nil {
		t.Errorf("%s: Decode(%x) = %v, want an error", name, b, d.Value())
		return
	}
	if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) {
		t.Errorf("%s: Decode error %v wraps neither ErrMalformed nor ErrUnknownType", name, err)
	}
	t.Logf("%s: %v", name, err)
}

// encodeRaw returns the encoding of a type and an arbitrary state, for tests of
// invalid states.
func encodeRaw(t testing.TB, typ DataType, state any) []byte {
	t.Helper()
	s, err := encMode.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encMode.Marshal(encoded{Type: typ, State: s})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeRawState returns the encoding of a type and a state given in hex, which need
// not be valid for the type (duplicate keys, for instance).
func encodeRawState(t testing.TB, typ DataType, stateHex string) []byte {
	t.Helper()
	b, err := encMode.Marshal(encoded{Type: typ, State: mustHex(stateHex)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzSeedValues returns values of every type whose encodings seed FuzzDecode.
func fuzzSeedValues() []ReplicatedData {
	a, b := nodes[0], nodes[1]
	g, _ := GCounter{}.Increment(a, 3)
	g, _ = g.Increment(b, math.MaxUint64)
	p, _ := PNCounter{}.Add(a, 5)
	p, _ = p.Add(b, math.MinInt64)
	s, _ := GSet{}.Add("x")
	s, _ = s.Add("é")
	f, _ := Flag{}.SwitchOn()
	clock := func(int64, []byte) int64 { return 42 }
	reg := NewLWWRegister(a, []byte("v"), clock)
	bin := NewLWWRegister(b, []byte{0xff, 0}, func(int64, []byte) int64 { return -7 })
	em, _ := EpochMap{}.Put(1000, 1<<40, "10.0.0.1:7946")
	em, _ = em.Put(1001, 3, "")
	return []ReplicatedData{
		GCounter{}, g, PNCounter{}, p, GSet{}, s, Flag{}, f, LWWRegister{}, reg, bin, EpochMap{}, em,
		// Seeds of the other types go here.
	}
}

// FuzzDecode checks that Decode never panics, and that what it accepts encodes, decodes
// to the same bytes, merges with itself to itself and has a JSON-able Value.
func FuzzDecode(f *testing.F) {
	for _, v := range fuzzSeedValues() {
		b := mustEncode(f, v)
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	for _, s := range []string{
		"", "00", "f6", "a0", "a10100", "a201616702f6", "a20168676361756e746572",
		"a2016867636f756e74657202a101a16001",               // gcounter {1: {"": 1}}
		"a2016467736574", "a201646773657402a1018261626161", // gset unsorted
	} {
		f.Add(mustHex(s))
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
	})
}
