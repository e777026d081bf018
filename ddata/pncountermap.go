package ddata

import "math/big"

// PNCounterMap is an observed-remove map from string keys to PNCounters (Akka's
// PNCounterMap: "a specialized ORMap with PNCounter values"): a set of named counters
// replicated together, as one unit. Keys follow ORMap's semantics (an update concurrent
// with a removal wins, a replica only removes what it has seen), and concurrent
// increments of one key from several nodes all count.
//
// Caveat from ORMap: an increment concurrent with a Remove of its key brings the key
// back with the incrementing replica's whole counter, not only the increment.
//
// Deltas carry the touched key's whole counter (ORMap's deltas, as in Akka), and merge
// correctly in any order; RequiresCausalDeliveryOfDeltas returns true, as Akka's does.
// A PNCounterMap is immutable; the zero value is the empty map. It implements
// RemovedNodePruning, pruning the counters too.
type PNCounterMap struct {
	// m has value type TypePNCounter, or "" while empty.
	m ORMap
}

var (
	_ DeltaReplicatedData = PNCounterMap{}
	_ DeltaReplicatedData = (*PNCounterMap)(nil)
	_ RemovedNodePruning  = PNCounterMap{}
	_ RemovedNodePruning  = (*PNCounterMap)(nil)
)

// Increment adds n to key's counter (key made valid UTF-8; a new key starts at 0) on
// behalf of node and returns the new map and its delta. As in Akka, incrementing by 0
// still puts the key in the map. It panics if node is empty or not valid UTF-8.
func (m PNCounterMap) Increment(node NodeID, key string, n uint64) (PNCounterMap, PNCounterMap) {
	return m.update("PNCounterMap.Increment", node, key, func(c PNCounter) PNCounter {
		c, _ = c.Increment(node, n)
		return c
	})
}

// Decrement subtracts n from key's counter on behalf of node, as Increment adds.
func (m PNCounterMap) Decrement(node NodeID, key string, n uint64) (PNCounterMap, PNCounterMap) {
	return m.update("PNCounterMap.Decrement", node, key, func(c PNCounter) PNCounter {
		c, _ = c.Decrement(node, n)
		return c
	})
}

// Add adds delta (negative to subtract, see PNCounter.Add) to key's counter on behalf
// of node, as Increment does.
func (m PNCounterMap) Add(node NodeID, key string, delta int64) (PNCounterMap, PNCounterMap) {
	return m.update("PNCounterMap.Add", node, key, func(c PNCounter) PNCounter {
		c, _ = c.Add(node, delta)
		return c
	})
}

// Get returns key's count (key made valid UTF-8) as a new *big.Int, and whether the
// key is in the map.
func (m PNCounterMap) Get(key string) (*big.Int, bool) {
	c, ok := m.Counter(key)
	if !ok {
		return nil, false
	}
	return c.Count(), true
}

// Counter returns key's PNCounter (key made valid UTF-8), and whether the key is in
// the map.
func (m PNCounterMap) Counter(key string) (PNCounter, bool) {
	v, ok := m.m.Get(key)
	if !ok {
		return PNCounter{}, false
	}
	return v.(PNCounter), true
}

// Remove removes key (made valid UTF-8) on behalf of node and returns the new map and
// its delta (see ORMap.Remove). Removing a key that is not in the map returns m and
// the empty delta. Remove panics if node is empty or not valid UTF-8.
func (m PNCounterMap) Remove(node NodeID, key string) (PNCounterMap, PNCounterMap) {
	next, delta := m.m.Remove(node, key)
	return PNCounterMap{next}, PNCounterMap{delta}
}

// Contains reports whether key (made valid UTF-8) is in the map.
func (m PNCounterMap) Contains(key string) bool { return m.m.Contains(key) }

// Keys returns the keys in ascending byte order, in a new slice.
func (m PNCounterMap) Keys() []string { return m.m.Keys() }

// Len returns the number of keys.
func (m PNCounterMap) Len() int { return m.m.Len() }

// Entries returns every key with its count as a new *big.Int, in a new map.
func (m PNCounterMap) Entries() map[string]*big.Int {
	out := make(map[string]*big.Int, m.m.Len())
	for k, e := range m.m.entries {
		out[k] = e.value.(PNCounter).Count()
	}
	return out
}

// Type returns TypePNCounterMap.
func (m PNCounterMap) Type() DataType { return TypePNCounterMap }

// Merge returns the join of the two maps (see ORMap): a key's concurrent counters
// merge as PNCounters. other must be a PNCounterMap (or a non-nil *PNCounterMap);
// otherwise the error wraps ErrTypeMismatch.
func (m PNCounterMap) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[PNCounterMap, *PNCounterMap](TypePNCounterMap, other)
	if err != nil {
		return nil, err
	}
	j, err := m.m.join(o.m)
	if err != nil {
		return nil, err
	}
	return PNCounterMap{j}, nil
}

// Value returns the map as map[string]any, each count as a *big.Int.
func (m PNCounterMap) Value() any { return m.m.Value() }

// RequiresCausalDeliveryOfDeltas returns true, as Akka's PNCounterMap, although this
// implementation's deltas merge in any order (see ORMap).
func (m PNCounterMap) RequiresCausalDeliveryOfDeltas() bool { return true }

// ModifiedByNodes returns the nodes with a dot in the map's context or a count in a
// counter, sorted.
func (m PNCounterMap) ModifiedByNodes() []NodeID { return m.m.ModifiedByNodes() }

// NeedPruningFrom reports whether removed has a dot in the map's context or a count
// in a counter (see ORMap.NeedPruningFrom).
func (m PNCounterMap) NeedPruningFrom(removed NodeID) bool { return m.m.NeedPruningFrom(removed) }

// Prune returns the map with removed's dots and counts moved to collapseInto, the
// counts unchanged (see ORMap.Prune and PNCounter.Prune). It panics if collapseInto is
// empty or not valid UTF-8.
func (m PNCounterMap) Prune(removed, collapseInto NodeID) ReplicatedData {
	return PNCounterMap{m.m.Prune(removed, collapseInto).(ORMap)}
}

// PruningCleanup returns the map without removed's dots and counts (see
// ORMap.PruningCleanup).
func (m PNCounterMap) PruningCleanup(removed NodeID) ReplicatedData {
	return PNCounterMap{m.m.PruningCleanup(removed).(ORMap)}
}

// MarshalCBOR encodes the map's state deterministically: ORMap's state without the
// value type, which is always PNCounter. Encode calls it.
func (m PNCounterMap) MarshalCBOR() ([]byte, error) { return marshalFixedMap(m.m) }

func init() {
	registerDecoder(TypePNCounterMap, func(b []byte) (ReplicatedData, error) {
		m, err := decodeORMap(b, TypePNCounter)
		if err != nil {
			return nil, err
		}
		return PNCounterMap{m}, nil
	})
}

// update applies f to key's counter (PNCounter{} for a new key) on behalf of node.
func (m PNCounterMap) update(op string, node NodeID, key string, f func(PNCounter) PNCounter) (PNCounterMap, PNCounterMap) {
	mustNodeID(op, node)
	key = validUTF8(key)
	var c PNCounter
	if e, ok := m.m.entries[key]; ok {
		c = e.value.(PNCounter)
	}
	next, delta := m.m.set(node, key, f(c))
	return PNCounterMap{next}, PNCounterMap{delta}
}
