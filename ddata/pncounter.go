package ddata

import (
	"maps"
	"math/big"
	"slices"
)

// PNCounter is a counter that is incremented and decremented (PN-Counter): Shapiro et
// al., "A comprehensive study of Convergent and Commutative Replicated Data Types" (INRIA
// RR-7506, 2011), specification 7; Akka's PNCounter.
//
// It tracks increments (P) and decrements (N) in two GCounters; merge merges P with P
// and N with N, and the value is P's sum minus N's. As in GCounter, each node's P and N
// counts saturate at 2^64-1 (2^64 increments or decrements by one node), and the value
// is a *big.Int, which may lie outside the int64 and uint64 ranges.
//
// A PNCounter is immutable; the zero value is the counter 0. Its deltas need no causal
// delivery, and it implements RemovedNodePruning.
type PNCounter struct {
	p, n GCounter
}

var (
	_ DeltaReplicatedData = PNCounter{}
	_ DeltaReplicatedData = (*PNCounter)(nil)
	_ RemovedNodePruning  = PNCounter{}
	_ RemovedNodePruning  = (*PNCounter)(nil)
)

// Increment adds n to the counter on behalf of node and returns the new counter and
// its delta: the counter holding only node's new P count. Incrementing by 0 returns c
// and the empty counter. It panics if node is empty or not valid UTF-8.
func (c PNCounter) Increment(node NodeID, n uint64) (PNCounter, PNCounter) {
	p, d := c.p.Increment(node, n)
	if n == 0 {
		return c, PNCounter{}
	}
	return PNCounter{p: p, n: c.n}, PNCounter{p: d}
}

// Decrement subtracts n from the counter on behalf of node and returns the new counter
// and its delta: the counter holding only node's new N count. Decrementing by 0 returns
// c and the empty counter. It panics if node is empty or not valid UTF-8.
func (c PNCounter) Decrement(node NodeID, n uint64) (PNCounter, PNCounter) {
	nn, d := c.n.Increment(node, n)
	if n == 0 {
		return c, PNCounter{}
	}
	return PNCounter{p: c.p, n: nn}, PNCounter{n: d}
}

// Add adds delta to the counter on behalf of node: Increment for a positive delta,
// Decrement by its magnitude for a negative one (including math.MinInt64, whose
// magnitude is 2^63), and (c, empty counter) for 0. It panics if node is empty or not
// valid UTF-8.
func (c PNCounter) Add(node NodeID, delta int64) (PNCounter, PNCounter) {
	if delta >= 0 {
		return c.Increment(node, uint64(delta))
	}
	// -(delta+1) cannot overflow; adding 1 back in uint64 gives |delta| up to 2^63.
	return c.Decrement(node, uint64(-(delta+1))+1)
}

// Count returns the counter's value, P minus N, as a new *big.Int owned by the caller.
func (c PNCounter) Count() *big.Int {
	return new(big.Int).Sub(c.p.Count(), c.n.Count())
}

// Type returns TypePNCounter.
func (c PNCounter) Type() DataType { return TypePNCounter }

// Merge returns the counter whose P and N are the merges of the two P and N counters.
// other must be a PNCounter (or a non-nil *PNCounter); otherwise the error wraps
// ErrTypeMismatch.
func (c PNCounter) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[PNCounter, *PNCounter](TypePNCounter, other)
	if err != nil {
		return nil, err
	}
	return c.join(o), nil
}

// Value returns Count(): a *big.Int.
func (c PNCounter) Value() any { return c.Count() }

// RequiresCausalDeliveryOfDeltas returns false, as for GCounter.
func (c PNCounter) RequiresCausalDeliveryOfDeltas() bool { return false }

// ModifiedByNodes returns the nodes with a P or N count, sorted.
func (c PNCounter) ModifiedByNodes() []NodeID {
	s := maps.Clone(c.p.state)
	if s == nil {
		s = map[NodeID]uint64{}
	}
	for node := range c.n.state {
		s[node] = 0
	}
	return slices.Sorted(maps.Keys(s))
}

// NeedPruningFrom reports whether removed has a P or N count.
func (c PNCounter) NeedPruningFrom(removed NodeID) bool {
	return c.p.NeedPruningFrom(removed) || c.n.NeedPruningFrom(removed)
}

// Prune returns a PNCounter in which removed's P and N counts are added to
// collapseInto's and removed has no entry (Akka's PNCounter.prune); the value is
// unchanged unless a count saturates. See GCounter.Prune for what the replicator does
// around it. It panics if collapseInto is empty or not valid UTF-8.
func (c PNCounter) Prune(removed, collapseInto NodeID) ReplicatedData {
	return PNCounter{p: c.p.prune(removed, collapseInto), n: c.n.prune(removed, collapseInto)}
}

// PruningCleanup returns a PNCounter without removed's P and N counts (Akka's
// PNCounter.pruningCleanup).
func (c PNCounter) PruningCleanup(removed NodeID) ReplicatedData {
	return PNCounter{p: c.p.pruningCleanup(removed), n: c.n.pruningCleanup(removed)}
}

// MarshalCBOR encodes the counter's state deterministically: {1: P's {node: count},
// 2: N's {node: count}}, each map omitted when empty. Encode calls it.
func (c PNCounter) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(pncounterState{P: c.p.state, N: c.n.state})
}

// pncounterState is PNCounter's encoded state.
type pncounterState struct {
	P map[NodeID]uint64 `cbor:"1,keyasint,omitempty"`
	N map[NodeID]uint64 `cbor:"2,keyasint,omitempty"`
}

func init() { registerDecoder(TypePNCounter, decodePNCounter) }

// decodePNCounter decodes a PNCounter's state with GCounter's checks on P and N.
func decodePNCounter(b []byte) (ReplicatedData, error) {
	var s *pncounterState
	if err := decodeState(b, &s); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errNullState
	}
	p, err := checkCounts(s.P)
	if err != nil {
		return nil, err
	}
	n, err := checkCounts(s.N)
	if err != nil {
		return nil, err
	}
	return PNCounter{p: GCounter{state: p}, n: GCounter{state: n}}, nil
}

// join is Merge for two PNCounters.
func (c PNCounter) join(o PNCounter) PNCounter {
	return PNCounter{p: c.p.join(o.p), n: c.n.join(o.n)}
}
