package ddata

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/bits"
	"reflect"
	"slices"
	"unicode/utf8"
)

// GCounter is a grow-only counter (G-Counter): Shapiro, Preguiça, Baquero, Zawirski, "A
// comprehensive study of Convergent and Commutative Replicated Data Types" (INRIA RR-7506,
// 2011), specification 6; Akka's GCounter.
//
// It keeps one count per node, like a vector clock. A node only increments its own
// count, merge takes the maximum count of each node, and the value is the sum of the
// counts. Each node's count is a uint64 that saturates at 2^64-1 (math.MaxUint64): an
// increment past it leaves the count at 2^64-1 instead of wrapping, so that the count
// stays monotonic and merge stays correct. The sum is a *big.Int and may exceed 2^64.
//
// A GCounter is immutable; the zero value is the counter 0. Its deltas need no causal
// delivery, and it implements RemovedNodePruning.
type GCounter struct {
	// state maps a node to its count; a node with no entry has count 0, and no entry is
	// 0. It is never written after construction and may be shared between values.
	state map[NodeID]uint64
}

var (
	_ DeltaReplicatedData = GCounter{}
	_ DeltaReplicatedData = (*GCounter)(nil)
	_ RemovedNodePruning  = GCounter{}
	_ RemovedNodePruning  = (*GCounter)(nil)
)

// Increment adds n to node's count and returns the new counter and its delta: the
// counter holding only node's new count. Incrementing by 0 returns c and the empty
// counter. A count that would pass 2^64-1 stays at 2^64-1 (see GCounter).
//
// Increment panics if node is empty or not valid UTF-8: a node ID is a member's
// address, never user input.
func (c GCounter) Increment(node NodeID, n uint64) (GCounter, GCounter) {
	mustNodeID("GCounter.Increment", node)
	if n == 0 {
		return c, GCounter{}
	}
	next := saturatingAdd(c.state[node], n)
	s := maps.Clone(c.state)
	if s == nil {
		s = make(map[NodeID]uint64, 1)
	}
	s[node] = next
	return GCounter{state: s}, GCounter{state: map[NodeID]uint64{node: next}}
}

// Count returns the counter's value: the sum of all nodes' counts, which may exceed
// 2^64. The result is a new *big.Int owned by the caller.
func (c GCounter) Count() *big.Int {
	hi, lo := c.sum()
	return uint128(hi, lo)
}

// Type returns TypeGCounter.
func (c GCounter) Type() DataType { return TypeGCounter }

// Merge returns the counter with, for every node, the larger of the two counts. other
// must be a GCounter (or a non-nil *GCounter); otherwise the error wraps ErrTypeMismatch.
func (c GCounter) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[GCounter, *GCounter](TypeGCounter, other)
	if err != nil {
		return nil, err
	}
	return c.join(o), nil
}

// Value returns Count(): a *big.Int.
func (c GCounter) Value() any { return c.Count() }

// RequiresCausalDeliveryOfDeltas returns false: a delta holds absolute counts, so
// deltas merge in any order, any number of times (Akka: "GCounter and PNCounter have
// support for delta-CRDT and don't need causal delivery of deltas").
func (c GCounter) RequiresCausalDeliveryOfDeltas() bool { return false }

// ModifiedByNodes returns the nodes with a count, sorted.
func (c GCounter) ModifiedByNodes() []NodeID { return slices.Sorted(maps.Keys(c.state)) }

// NeedPruningFrom reports whether removed has a count.
func (c GCounter) NeedPruningFrom(removed NodeID) bool {
	_, ok := c.state[removed]
	return ok
}

// Prune returns a GCounter in which removed's count is added to collapseInto's and
// removed has no entry, as Akka's GCounter.prune: the value is unchanged (unless
// collapseInto's count saturates at 2^64-1, which takes 2^64 increments). The
// replicator prunes on one node (collapsing into its own ID) and spreads the result
// with pruning markers; merging the pruned value with a replica that still has
// removed's count would count it twice, which is why the replicator applies
// PruningCleanup to data from replicas that have not seen the pruning.
//
// Prune panics if collapseInto is empty or not valid UTF-8.
func (c GCounter) Prune(removed, collapseInto NodeID) ReplicatedData {
	return c.prune(removed, collapseInto)
}

// PruningCleanup returns a GCounter without removed's count, which it drops (Akka's
// GCounter.pruningCleanup). The replicator applies it to values that arrive after a
// pruning, so that an old replica's count for removed does not come back.
func (c GCounter) PruningCleanup(removed NodeID) ReplicatedData {
	return c.pruningCleanup(removed)
}

// MarshalCBOR encodes the counter's state deterministically: {1: {node: count}}, the
// map omitted when empty. Encode calls it.
func (c GCounter) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(gcounterState{Counts: c.state})
}

// gcounterState is GCounter's encoded state.
type gcounterState struct {
	Counts map[NodeID]uint64 `cbor:"1,keyasint,omitempty"`
}

func init() { registerDecoder(TypeGCounter, decodeGCounter) }

// decodeGCounter decodes a GCounter's state, refusing empty or non-UTF-8 node IDs and
// zero counts (which Increment never writes, so that equal values have equal bytes).
func decodeGCounter(b []byte) (ReplicatedData, error) {
	var s *gcounterState
	if err := decodeState(b, &s); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errNullState
	}
	counts, err := checkCounts(s.Counts)
	if err != nil {
		return nil, err
	}
	return GCounter{state: counts}, nil
}

// join is Merge for two GCounters. It shares maps with its operands.
func (c GCounter) join(o GCounter) GCounter {
	if len(o.state) == 0 {
		return c
	}
	if len(c.state) == 0 {
		return o
	}
	var out map[NodeID]uint64
	for node, v := range o.state {
		if v > c.state[node] {
			if out == nil {
				out = maps.Clone(c.state)
			}
			out[node] = v
		}
	}
	if out == nil {
		return c
	}
	return GCounter{state: out}
}

// prune is Prune returning a GCounter.
func (c GCounter) prune(removed, collapseInto NodeID) GCounter {
	mustNodeID("GCounter.Prune", collapseInto)
	v, ok := c.state[removed]
	if !ok {
		return c
	}
	s := maps.Clone(c.state)
	delete(s, removed)
	s[collapseInto] = saturatingAdd(s[collapseInto], v)
	return GCounter{state: s}
}

// pruningCleanup is PruningCleanup returning a GCounter.
func (c GCounter) pruningCleanup(removed NodeID) GCounter {
	if _, ok := c.state[removed]; !ok {
		return c
	}
	s := maps.Clone(c.state)
	delete(s, removed)
	if len(s) == 0 {
		s = nil
	}
	return GCounter{state: s}
}

// sum returns the sum of the counts as a 128-bit number: there are fewer than 2^64
// nodes, so the high word cannot overflow.
func (c GCounter) sum() (hi, lo uint64) {
	for _, v := range c.state {
		var carry uint64
		lo, carry = bits.Add64(lo, v, 0)
		hi += carry
	}
	return hi, lo
}

// uint128 returns hi·2^64 + lo.
func uint128(hi, lo uint64) *big.Int {
	z := new(big.Int).SetUint64(hi)
	z.Lsh(z, 64)
	return z.Or(z, new(big.Int).SetUint64(lo))
}

// saturatingAdd returns a+b, or math.MaxUint64 if that overflows.
func saturatingAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// checkCounts validates a decoded per-node count map (GCounter, and PNCounter's P and
// N) and returns it, nil when empty.
func checkCounts(m map[NodeID]uint64) (map[NodeID]uint64, error) {
	for node, v := range m {
		if err := checkNodeID(node); err != nil {
			return nil, err
		}
		if v == 0 {
			return nil, fmt.Errorf("zero count for node %q", node)
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// errNullState is returned by decoders for a state that is CBOR null or undefined.
var errNullState = errors.New("null state")

// checkNodeID reports why n cannot be a node ID in a value: it must be non-empty valid
// UTF-8, since it is encoded as CBOR text.
func checkNodeID(n NodeID) error {
	if n == "" {
		return errors.New("empty node ID")
	}
	if !utf8.ValidString(string(n)) {
		return fmt.Errorf("node ID %q is not valid UTF-8", string(n))
	}
	return nil
}

// mustNodeID panics if n cannot be a node ID: updates take the local member's ID, so a
// bad one is a programming error (Akka's require).
func mustNodeID(op string, n NodeID) {
	if err := checkNodeID(n); err != nil {
		panic("ddata: " + op + ": " + err.Error())
	}
}

// mergeOperand returns other as a T for T's Merge, accepting T and a non-nil *T, or an
// error wrapping ErrTypeMismatch (without calling a nil pointer's Type method).
func mergeOperand[T ReplicatedData, PT interface {
	*T
	ReplicatedData
}](want DataType, other ReplicatedData) (T, error) {
	switch o := other.(type) {
	case T:
		return o, nil
	case PT:
		if o == nil {
			var zero T
			return zero, fmt.Errorf("%w: %s with nil %T", ErrTypeMismatch, want, other)
		}
		return *o, nil
	}
	var zero T
	if v := reflect.ValueOf(other); v.Kind() == reflect.Pointer && v.IsNil() {
		// A nil pointer of another type: its Type method may dereference it.
		return zero, fmt.Errorf("%w: %s with nil %T", ErrTypeMismatch, want, other)
	}
	return zero, mismatch(want, other)
}
