package ddata

import (
	"bytes"
	"errors"
	"math"
	"unicode/utf8"
)

// LWWRegister is a last-writer-wins register holding a []byte (LWW-Register): Shapiro
// et al., "A comprehensive study of Convergent and Commutative Replicated Data Types"
// (INRIA RR-7506, 2011), specification 8; Akka's LWWRegister.
//
// Each write carries a timestamp from a Clock and the writer's node ID. Merge keeps
// the write with the higher timestamp; on equal timestamps, the write by the lower node
// ID (Akka: "the register updated by the node with lowest address"); on equal
// timestamps and node IDs with different values (one node writing twice at one
// timestamp, which DefaultClock and ReverseClock never do but a custom clock may), the
// lexicographically greater value (bytes.Compare). This order is total, so merge is a
// join.
//
// With DefaultClock the timestamps are wall-clock milliseconds, so the register
// relies on synchronized clocks: use it only where the choice between concurrent
// writes within the clock skew does not matter, or with one writer (for example a
// cluster singleton that reads with ReadMajority before it writes with WriteMajority).
//
// A LWWRegister is immutable. The zero value is the unset register: it has no writer,
// Value() is nil, and it loses every merge. The values of an empty and a nil []byte are
// the same (Get returns nil for both). Its deltas need no causal delivery. It keeps its
// writer's node ID but needs no pruning: the ID goes when another node writes (as in
// Akka, where LWWRegister is not RemovedNodePruning).
type LWWRegister struct {
	node      NodeID // "" when unset
	timestamp int64
	value     []byte // nil when empty; never written after construction
}

var (
	_ DeltaReplicatedData = LWWRegister{}
	_ DeltaReplicatedData = (*LWWRegister)(nil)
)

// Clock returns the timestamp of a write of value to a register whose current
// timestamp is currentTimestamp (0 for a new or unset register), as Akka's
// LWWRegister.Clock. A write wins over the current value only if the timestamp it gets
// is higher (see LWWRegister). A clock must not modify value.
//
// A custom clock can, for example, return an increasing version number from the
// record the value comes from, for optimistic concurrency control.
type Clock func(currentTimestamp int64, value []byte) int64

// DefaultClock returns Akka's default clock: max(now(), currentTimestamp+1), where now
// returns milliseconds since the Unix epoch (time.Now().UnixMilli() in production, a
// fake in tests; the core never reads the time itself). A write therefore always wins
// over the value it replaces, even with a clock that is stuck or behind. At
// currentTimestamp math.MaxInt64 the timestamp stays math.MaxInt64. DefaultClock
// panics if now is nil.
func DefaultClock(now func() int64) Clock {
	if now == nil {
		panic("ddata: DefaultClock: nil now")
	}
	return func(currentTimestamp int64, _ []byte) int64 {
		next := currentTimestamp
		if next < math.MaxInt64 {
			next++
		}
		return max(now(), next)
	}
}

// ReverseClock returns Akka's clock for first-write-wins semantics: min(-now(),
// currentTimestamp-1), counting backwards, with now as for DefaultClock. The earliest
// write has the highest timestamp and wins every merge; a write to a register that
// already holds a value gets a lower timestamp and is therefore lost, on the writing
// replica too (Set returns the register unchanged). At currentTimestamp math.MinInt64
// the timestamp stays math.MinInt64. ReverseClock panics if now is nil.
func ReverseClock(now func() int64) Clock {
	if now == nil {
		panic("ddata: ReverseClock: nil now")
	}
	return func(currentTimestamp int64, _ []byte) int64 {
		prev := currentTimestamp
		if prev > math.MinInt64 {
			prev--
		}
		t := now()
		if t == math.MinInt64 {
			t++ // -math.MinInt64 overflows
		}
		return min(-t, prev)
	}
}

// NewLWWRegister returns a register holding a copy of value, written by node with the
// timestamp clock(0, value) (as Akka's LWWRegister.apply). It equals
// LWWRegister{}.Set(node, value, clock). It panics if node is empty or not valid UTF-8,
// or if clock is nil.
func NewLWWRegister(node NodeID, value []byte, clock Clock) LWWRegister {
	mustNodeID("NewLWWRegister", node)
	if clock == nil {
		panic("ddata: NewLWWRegister: nil clock")
	}
	v := cloneValue(value)
	return LWWRegister{node: node, timestamp: clock(0, v), value: v}
}

// Set writes a copy of value on behalf of node with the timestamp
// clock(r.Timestamp(), value) and returns the new register and its delta, which are
// the same: the whole register. The new register is the merge of r and the write, so
// a write whose timestamp loses to r's (with ReverseClock, or a custom clock that went
// back) leaves r unchanged; with DefaultClock the write always wins. (Akka's withValue
// replaces the value even then, which a merge with r would undo; here every update is
// an inflation, as delta-state CRDTs require.) Set panics if node is empty or not valid
// UTF-8, or if clock is nil.
func (r LWWRegister) Set(node NodeID, value []byte, clock Clock) (LWWRegister, LWWRegister) {
	mustNodeID("LWWRegister.Set", node)
	if clock == nil {
		panic("ddata: LWWRegister.Set: nil clock")
	}
	v := cloneValue(value)
	w := r.join(LWWRegister{node: node, timestamp: clock(r.timestamp, v), value: v})
	return w, w
}

// Get returns a copy of the register's value: nil when it is unset or empty.
func (r LWWRegister) Get() []byte { return cloneValue(r.value) }

// Timestamp returns the timestamp of the current value, 0 when unset.
func (r LWWRegister) Timestamp() int64 { return r.timestamp }

// UpdatedBy returns the node that wrote the current value, "" when unset.
func (r LWWRegister) UpdatedBy() NodeID { return r.node }

// Type returns TypeLWWRegister.
func (r LWWRegister) Type() DataType { return TypeLWWRegister }

// Merge returns the winning register of the two (see LWWRegister). other must be a
// LWWRegister (or a non-nil *LWWRegister); otherwise the error wraps ErrTypeMismatch.
func (r LWWRegister) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[LWWRegister, *LWWRegister](TypeLWWRegister, other)
	if err != nil {
		return nil, err
	}
	return r.join(o), nil
}

// Value returns the value for JSON: nil when the register is unset, the value as a
// string when it is valid UTF-8 (so "" when empty), and otherwise a copy of the []byte
// (which encoding/json writes as base64).
func (r LWWRegister) Value() any {
	if r.node == "" {
		return nil
	}
	if utf8.Valid(r.value) {
		return string(r.value)
	}
	return cloneValue(r.value)
}

// RequiresCausalDeliveryOfDeltas returns false: a delta is a whole register, and
// merge keeps the winner whatever the order.
func (r LWWRegister) RequiresCausalDeliveryOfDeltas() bool { return false }

// MarshalCBOR encodes the register's state deterministically: {1: node, 2: timestamp,
// 3: value}, each omitted when empty or 0 (the unset register is {}). Encode calls it.
func (r LWWRegister) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(lwwregisterState{Node: r.node, Timestamp: r.timestamp, Value: r.value})
}

// lwwregisterState is LWWRegister's encoded state.
type lwwregisterState struct {
	Node      NodeID `cbor:"1,keyasint,omitempty"`
	Timestamp int64  `cbor:"2,keyasint,omitempty"`
	Value     []byte `cbor:"3,keyasint,omitempty"`
}

func init() { registerDecoder(TypeLWWRegister, decodeLWWRegister) }

// decodeLWWRegister decodes a LWWRegister's state, refusing a non-UTF-8 node ID and a
// register without a writer that has a timestamp or a value.
func decodeLWWRegister(b []byte) (ReplicatedData, error) {
	var s *lwwregisterState
	if err := decodeState(b, &s); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errNullState
	}
	if s.Node == "" {
		if s.Timestamp != 0 || len(s.Value) != 0 {
			return nil, errors.New("register without a writer has a timestamp or value")
		}
		return LWWRegister{}, nil
	}
	if err := checkNodeID(s.Node); err != nil {
		return nil, err
	}
	v := s.Value // decoded into a new slice: no copy needed
	if len(v) == 0 {
		v = nil
	}
	return LWWRegister{node: s.Node, timestamp: s.Timestamp, value: v}, nil
}

// join is Merge for two LWWRegisters: the greater in the order described on
// LWWRegister, with the unset register below every other.
func (r LWWRegister) join(o LWWRegister) LWWRegister {
	if o.wins(r) {
		return o
	}
	return r
}

// wins reports whether r is strictly greater than o in the register order.
func (r LWWRegister) wins(o LWWRegister) bool {
	switch {
	case r.node == "":
		return false
	case o.node == "":
		return true
	case r.timestamp != o.timestamp:
		return r.timestamp > o.timestamp
	case r.node != o.node:
		return r.node < o.node
	default:
		return bytes.Compare(r.value, o.value) > 0
	}
}

// cloneValue returns a copy of v, nil when v is empty.
func cloneValue(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return bytes.Clone(v)
}
