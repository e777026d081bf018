package shardhost

import (
	"encoding"
	"encoding/binary"
	"errors"
)

// StatePointer is the constraint of Stateful's second type parameter: a pointer to the
// state value that encodes and decodes it.
type StatePointer[T any] interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// Stateful makes an entity a Snapshotter for one state value: embed it, keep the entity's
// state in its State field, and snapshots and restores happen through the value's
// MarshalBinary and UnmarshalBinary, without reflection.
//
//	type roomState struct{ members []string; topic string }
//
//	func (s *roomState) MarshalBinary() ([]byte, error) {
//		var w shardhost.StateWriter
//		w.Strings(s.members)
//		w.String(s.topic)
//		return w.Bytes(), nil
//	}
//
//	func (s *roomState) UnmarshalBinary(b []byte) error {
//		r := shardhost.NewStateReader(b)
//		s.members, s.topic = r.Strings(), r.String()
//		return r.Err()
//	}
//
//	type room struct {
//		shardhost.Stateful[roomState, *roomState]
//	}
//
//	func (r *room) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
//		r.State.topic = string(msg) // saved with the next snapshot
//		...
//	}
//
// For simple shapes the SDK has state types ready: StringMap, Strings, Int64 and
// Bytes, as in shardhost.Stateful[shardhost.StringMap, *shardhost.StringMap].
type Stateful[T any, P StatePointer[T]] struct {
	State T
}

var _ Snapshotter = (*Stateful[Int64, *Int64])(nil)

// Snapshot encodes State with its MarshalBinary.
func (s *Stateful[T, P]) Snapshot() ([]byte, error) { return P(&s.State).MarshalBinary() }

// Restore decodes state into State with its UnmarshalBinary.
func (s *Stateful[T, P]) Restore(state []byte) error { return P(&s.State).UnmarshalBinary(state) }

// StringMap is a state of strings by strings, for Stateful.
type StringMap map[string]string

// MarshalBinary encodes the map (its keys sorted, so equal maps give equal bytes).
func (m *StringMap) MarshalBinary() ([]byte, error) {
	var w StateWriter
	w.StringMap(*m)
	return w.Bytes(), nil
}

// UnmarshalBinary decodes a map MarshalBinary gave.
func (m *StringMap) UnmarshalBinary(b []byte) error {
	r := NewStateReader(b)
	*m = r.StringMap()
	return r.Done()
}

// Strings is a state of a list of strings, for Stateful.
type Strings []string

// MarshalBinary encodes the list.
func (s *Strings) MarshalBinary() ([]byte, error) {
	var w StateWriter
	w.Strings(*s)
	return w.Bytes(), nil
}

// UnmarshalBinary decodes a list MarshalBinary gave.
func (s *Strings) UnmarshalBinary(b []byte) error {
	r := NewStateReader(b)
	*s = r.Strings()
	return r.Done()
}

// Int64 is a state of one integer, for Stateful.
type Int64 int64

// MarshalBinary encodes the integer.
func (n *Int64) MarshalBinary() ([]byte, error) {
	var w StateWriter
	w.Int64(int64(*n))
	return w.Bytes(), nil
}

// UnmarshalBinary decodes an integer MarshalBinary gave.
func (n *Int64) UnmarshalBinary(b []byte) error {
	r := NewStateReader(b)
	*n = Int64(r.Int64())
	return r.Done()
}

// Bytes is a state of bytes kept as they are, for Stateful.
type Bytes []byte

// MarshalBinary returns the bytes.
func (b *Bytes) MarshalBinary() ([]byte, error) { return *b, nil }

// UnmarshalBinary keeps a copy of data.
func (b *Bytes) UnmarshalBinary(data []byte) error {
	*b = append(Bytes(nil), data...)
	return nil
}

// StateWriter encodes a state field by field, in a compact binary form that
// StateReader reads back in the same order: integers as varints, strings and bytes with
// their length before them, lists and maps with their count. The zero value is ready.
type StateWriter struct{ b []byte }

// Bytes returns the encoded state.
func (w *StateWriter) Bytes() []byte { return w.b }

// Int64 writes n.
func (w *StateWriter) Int64(n int64) { w.b = binary.AppendVarint(w.b, n) }

// Uint64 writes n.
func (w *StateWriter) Uint64(n uint64) { w.b = binary.AppendUvarint(w.b, n) }

// Bool writes v.
func (w *StateWriter) Bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

// String writes s.
func (w *StateWriter) String(s string) {
	w.Uint64(uint64(len(s)))
	w.b = append(w.b, s...)
}

// ByteSlice writes b.
func (w *StateWriter) ByteSlice(b []byte) {
	w.Uint64(uint64(len(b)))
	w.b = append(w.b, b...)
}

// Strings writes ss.
func (w *StateWriter) Strings(ss []string) {
	w.Uint64(uint64(len(ss)))
	for _, s := range ss {
		w.String(s)
	}
}

// StringMap writes m, its keys sorted.
func (w *StateWriter) StringMap(m map[string]string) {
	w.Uint64(uint64(len(m)))
	for _, k := range sortedKeys(m) {
		w.String(k)
		w.String(m[k])
	}
}

// Int64Map writes m, its keys sorted.
func (w *StateWriter) Int64Map(m map[string]int64) {
	w.Uint64(uint64(len(m)))
	for _, k := range sortedKeys(m) {
		w.String(k)
		w.Int64(m[k])
	}
}

// ErrBadState is the error of a StateReader that ran out of bytes or found a bad
// encoding.
var ErrBadState = errors.New("shardhost: bad state encoding")

// StateReader decodes what a StateWriter wrote, in the same order. After the first
// error every read returns the zero value; Err or Done reports it. A reader that reaches
// the end reads zero values with an error, so a state version that adds fields at the
// end can test More before reading them.
type StateReader struct {
	b   []byte
	err error
}

// NewStateReader returns a reader of b.
func NewStateReader(b []byte) *StateReader { return &StateReader{b: b} }

// Err returns the first error, nil if none.
func (r *StateReader) Err() error { return r.err }

// Done returns the first error, or ErrBadState if bytes are left over.
func (r *StateReader) Done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = ErrBadState
	}
	return r.err
}

// More reports whether bytes are left to read.
func (r *StateReader) More() bool { return r.err == nil && len(r.b) > 0 }

// Int64 reads an integer.
func (r *StateReader) Int64() int64 {
	if r.err != nil {
		return 0
	}
	n, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = ErrBadState
		return 0
	}
	r.b = r.b[k:]
	return n
}

// Uint64 reads an unsigned integer.
func (r *StateReader) Uint64() uint64 {
	if r.err != nil {
		return 0
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = ErrBadState
		return 0
	}
	r.b = r.b[k:]
	return n
}

// Bool reads a boolean.
func (r *StateReader) Bool() bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.err = ErrBadState
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// ByteSlice reads bytes (a copy).
func (r *StateReader) ByteSlice() []byte {
	n := r.length(1)
	if r.err != nil {
		return nil
	}
	out := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return out
}

// String reads a string.
func (r *StateReader) String() string {
	n := r.length(1)
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// Strings reads a list of strings.
func (r *StateReader) Strings() []string {
	n := r.length(1)
	if r.err != nil {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.String())
	}
	if r.err != nil {
		return nil
	}
	return out
}

// StringMap reads a map of strings.
func (r *StateReader) StringMap() map[string]string {
	n := r.length(2)
	if r.err != nil {
		return nil
	}
	out := make(map[string]string, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.String()
		out[k] = r.String()
	}
	if r.err != nil {
		return nil
	}
	return out
}

// Int64Map reads a map of integers.
func (r *StateReader) Int64Map() map[string]int64 {
	n := r.length(2)
	if r.err != nil {
		return nil
	}
	out := make(map[string]int64, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.String()
		out[k] = r.Int64()
	}
	if r.err != nil {
		return nil
	}
	return out
}

// length reads a count of items of at least min bytes each, checked against the bytes
// left so that a bad state cannot make a reader allocate without bound.
func (r *StateReader) length(min int) int {
	n := r.Uint64()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.err = ErrBadState
	}
	return int(n)
}
