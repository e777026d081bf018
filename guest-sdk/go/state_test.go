package shardhost

import (
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
)

type note struct {
	seen  int64
	lines []string
	tags  map[string]string
	on    bool
}

func (n *note) MarshalBinary() ([]byte, error) {
	var w StateWriter
	w.Int64(n.seen)
	w.Strings(n.lines)
	w.StringMap(n.tags)
	w.Bool(n.on)
	return w.Bytes(), nil
}

func (n *note) UnmarshalBinary(b []byte) error {
	r := NewStateReader(b)
	n.seen, n.lines, n.tags, n.on = r.Int64(), r.Strings(), r.StringMap(), r.Bool()
	return r.Done()
}

// notes keeps its state in a Stateful: Snapshot and Restore come with it.
type notes struct {
	Stateful[note, *note]
}

func (n *notes) Receive(ctx *Context, msg []byte) ([]byte, error) {
	n.State.seen++
	n.State.lines = append(n.State.lines, string(msg))
	if n.State.tags == nil {
		n.State.tags = map[string]string{}
	}
	n.State.tags[string(msg)] = strconv.FormatInt(n.State.seen, 10)
	n.State.on = !n.State.on
	return []byte(strconv.FormatInt(n.State.seen, 10)), nil
}

func TestStatefulSnapshotsAutomatically(t *testing.T) {
	var _ Snapshotter = (*notes)(nil)
	newNotes := func(string) Entity { return &notes{} }
	h := NewHarness("notes", "n", newNotes)
	send(t, h, "a", "1")
	send(t, h, "b", "2")
	send(t, h, "c", "3")
	state, ok, err := h.Snapshot()
	if !ok || err != nil {
		t.Fatalf("snapshot: %v %v", ok, err)
	}
	next := NewHarness("notes", "n", newNotes)
	if err := next.Restore(state); err != nil {
		t.Fatal(err)
	}
	send(t, next, "d", "4")
	got := next.d.entity.(*notes).State
	want := note{seen: 4, lines: []string{"a", "b", "c", "d"}, tags: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}, on: false}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	// A state is encoded deterministically: map keys sorted.
	again, _, _ := h.Snapshot()
	if string(again) != string(state) {
		t.Fatal("two snapshots of one state differ")
	}
	if err := NewHarness("notes", "n", newNotes).Restore(state[:len(state)-2]); !errors.Is(err, ErrBadState) {
		t.Fatalf("truncated state: %v", err)
	}
	if err := NewHarness("notes", "n", newNotes).Restore(append(state, 0)); !errors.Is(err, ErrBadState) {
		t.Fatalf("trailing bytes: %v", err)
	}
}

func TestReadyStateTypes(t *testing.T) {
	m := StringMap{"k": "v", "": "empty"}
	b, _ := m.MarshalBinary()
	var m2 StringMap
	if err := m2.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(m, m2) {
		t.Errorf("StringMap: %v %v", m2, err)
	}
	s := Strings{"a", "", "c"}
	b, _ = s.MarshalBinary()
	var s2 Strings
	if err := s2.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(s, s2) {
		t.Errorf("Strings: %v %v", s2, err)
	}
	n := Int64(-1 << 62)
	b, _ = n.MarshalBinary()
	var n2 Int64
	if err := n2.UnmarshalBinary(b); err != nil || n2 != n {
		t.Errorf("Int64: %v %v", n2, err)
	}
	raw := Bytes("raw")
	b, _ = raw.MarshalBinary()
	var raw2 Bytes
	if err := raw2.UnmarshalBinary(b); err != nil || string(raw2) != "raw" {
		t.Errorf("Bytes: %q %v", raw2, err)
	}
	// A huge count in a short state is an error, not an allocation.
	var w StateWriter
	w.Uint64(1 << 40)
	if got := NewStateReader(w.Bytes()).Strings(); got != nil {
		t.Errorf("huge count: %v", got)
	}
	r := NewStateReader(nil)
	if r.More() || r.Int64() != 0 || !errors.Is(r.Err(), ErrBadState) {
		t.Errorf("empty reader: %v", r.Err())
	}
	w = StateWriter{}
	w.Uint64(7)
	w.ByteSlice([]byte{1, 2})
	w.Int64Map(map[string]int64{"x": -3})
	r = NewStateReader(w.Bytes())
	if r.Uint64() != 7 || string(r.ByteSlice()) != "\x01\x02" || !reflect.DeepEqual(r.Int64Map(), map[string]int64{"x": -3}) || r.Done() != nil {
		t.Errorf("mixed fields: %v", r.Err())
	}
}

// counterState is an entity whose whole state is one ready type.
type counterState struct {
	Stateful[Int64, *Int64]
}

func (c *counterState) Receive(ctx *Context, msg []byte) ([]byte, error) {
	c.State++
	return []byte(strconv.FormatInt(int64(c.State), 10)), nil
}

func TestStatefulReadyType(t *testing.T) {
	f := func(string) Entity { return &counterState{} }
	h := NewHarness("c", "1", f)
	send(t, h, "", "1")
	send(t, h, "", "2")
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	send(t, h, "", "3")
}

// TestStateEncodingVector: StateWriter's bytes for one value of each kind, the same
// vector as the Rust SDK's state tests (guest-sdk/rust/src/state.rs), so that a state
// saved by one SDK reads in the other.
func TestStateEncodingVector(t *testing.T) {
	const vector = "0105d804010668c3a96c6c6f0201610002016101310162013201017801ffffffffffffffffff01ffffffffffffffffff01"
	var w StateWriter
	w.Uint64(1)
	w.Int64(-3)
	w.Int64(300)
	w.Bool(true)
	w.String("héllo")
	w.Strings([]string{"a", ""})
	w.StringMap(map[string]string{"b": "2", "a": "1"})
	w.Int64Map(map[string]int64{"x": -1})
	w.Int64(math.MinInt64)
	w.Uint64(math.MaxUint64)
	if got := hex.EncodeToString(w.Bytes()); got != vector {
		t.Fatalf("encoded %s, want %s", got, vector)
	}
	b, _ := hex.DecodeString(vector)
	r := NewStateReader(b)
	if r.Uint64() != 1 || r.Int64() != -3 || r.Int64() != 300 || !r.Bool() || r.String() != "héllo" {
		t.Fatalf("scalars: %v", r.Err())
	}
	if l := r.Strings(); len(l) != 2 || l[0] != "a" || l[1] != "" {
		t.Fatalf("strings %q", l)
	}
	if m := r.StringMap(); len(m) != 2 || m["a"] != "1" || m["b"] != "2" {
		t.Fatalf("string map %v", m)
	}
	if m := r.Int64Map(); len(m) != 1 || m["x"] != -1 {
		t.Fatalf("int64 map %v", m)
	}
	if r.Int64() != math.MinInt64 || r.Uint64() != math.MaxUint64 {
		t.Fatal("extremes")
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
}
