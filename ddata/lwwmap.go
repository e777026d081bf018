package ddata

// LWWMap is an observed-remove map from string keys to []byte values, each a
// last-writer-wins register (Akka's LWWMap: "a specialized ORMap with LWWRegister
// values"). Keys follow ORMap's semantics (an update concurrent with a removal wins,
// a replica only removes what it has seen); concurrent Puts of one key keep the write
// with the highest timestamp, as LWWRegister decides.
//
// As LWWRegister, it relies on synchronized clocks with DefaultClock: use it only where
// the choice between concurrent writes within the clock skew does not matter. Caveat
// from ORMap: a Put concurrent with a Remove of its key brings the key back with the
// Put's register.
//
// Deltas carry the touched key's whole register (ORMap's deltas), and merge correctly
// in any order; RequiresCausalDeliveryOfDeltas returns true, as Akka's does. An LWWMap
// is immutable; the zero value is the empty map. It implements RemovedNodePruning
// (for its keys' dots: registers keep their writer only as a tie-breaker and need no
// pruning).
type LWWMap struct {
	// m has value type TypeLWWRegister, or "" while empty.
	m ORMap
}

var (
	_ DeltaReplicatedData = LWWMap{}
	_ DeltaReplicatedData = (*LWWMap)(nil)
	_ RemovedNodePruning  = LWWMap{}
	_ RemovedNodePruning  = (*LWWMap)(nil)
)

// Put writes a copy of value to key (made valid UTF-8) on behalf of node with a
// timestamp from clock (see LWWRegister.Set; a new key's register starts unset, so the
// timestamp is clock(0, value)), and returns the new map and its delta. Put panics if
// node is empty or not valid UTF-8, or if clock is nil.
func (m LWWMap) Put(node NodeID, key string, value []byte, clock Clock) (LWWMap, LWWMap) {
	mustNodeID("LWWMap.Put", node)
	if clock == nil {
		panic("ddata: LWWMap.Put: nil clock")
	}
	key = validUTF8(key)
	var reg LWWRegister
	if v, ok := m.m.entries[key]; ok {
		reg = v.value.(LWWRegister)
	}
	reg, _ = reg.Set(node, value, clock)
	next, delta := m.m.set(node, key, reg)
	return LWWMap{next}, LWWMap{delta}
}

// Get returns a copy of key's value (key made valid UTF-8), and whether the key is in
// the map.
func (m LWWMap) Get(key string) ([]byte, bool) {
	r, ok := m.Register(key)
	return r.Get(), ok
}

// Register returns key's register (key made valid UTF-8), with its timestamp and
// writer, and whether the key is in the map.
func (m LWWMap) Register(key string) (LWWRegister, bool) {
	v, ok := m.m.Get(key)
	if !ok {
		return LWWRegister{}, false
	}
	return v.(LWWRegister), true
}

// Remove removes key (made valid UTF-8) on behalf of node and returns the new map and
// its delta (see ORMap.Remove). Removing a key that is not in the map returns m and
// the empty delta. Remove panics if node is empty or not valid UTF-8.
func (m LWWMap) Remove(node NodeID, key string) (LWWMap, LWWMap) {
	next, delta := m.m.Remove(node, key)
	return LWWMap{next}, LWWMap{delta}
}

// Contains reports whether key (made valid UTF-8) is in the map.
func (m LWWMap) Contains(key string) bool { return m.m.Contains(key) }

// Keys returns the keys in ascending byte order, in a new slice.
func (m LWWMap) Keys() []string { return m.m.Keys() }

// Len returns the number of keys.
func (m LWWMap) Len() int { return m.m.Len() }

// Entries returns every key with a copy of its value, in a new map.
func (m LWWMap) Entries() map[string][]byte {
	out := make(map[string][]byte, m.m.Len())
	for k, e := range m.m.entries {
		out[k] = e.value.(LWWRegister).Get()
	}
	return out
}

// Type returns TypeLWWMap.
func (m LWWMap) Type() DataType { return TypeLWWMap }

// Merge returns the join of the two maps (see ORMap). other must be an LWWMap (or a
// non-nil *LWWMap); otherwise the error wraps ErrTypeMismatch.
func (m LWWMap) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[LWWMap, *LWWMap](TypeLWWMap, other)
	if err != nil {
		return nil, err
	}
	j, err := m.m.join(o.m)
	if err != nil {
		return nil, err
	}
	return LWWMap{j}, nil
}

// Value returns the map as map[string]any, each value as LWWRegister.Value gives it: a
// string when it is valid UTF-8, otherwise a []byte.
func (m LWWMap) Value() any { return m.m.Value() }

// RequiresCausalDeliveryOfDeltas returns true, as Akka's LWWMap, although this
// implementation's deltas merge in any order (see ORMap).
func (m LWWMap) RequiresCausalDeliveryOfDeltas() bool { return true }

// ModifiedByNodes returns the nodes with a dot in the map's context, sorted.
func (m LWWMap) ModifiedByNodes() []NodeID { return m.m.ModifiedByNodes() }

// NeedPruningFrom reports whether removed has a dot in the map's context (see
// ORMap.NeedPruningFrom).
func (m LWWMap) NeedPruningFrom(removed NodeID) bool { return m.m.NeedPruningFrom(removed) }

// Prune returns the map with removed's dots replaced by dots of collapseInto, the
// values unchanged (see ORMap.Prune). It panics if collapseInto is empty or not valid
// UTF-8.
func (m LWWMap) Prune(removed, collapseInto NodeID) ReplicatedData {
	return LWWMap{m.m.Prune(removed, collapseInto).(ORMap)}
}

// PruningCleanup returns the map without removed's dots (see ORMap.PruningCleanup).
func (m LWWMap) PruningCleanup(removed NodeID) ReplicatedData {
	return LWWMap{m.m.PruningCleanup(removed).(ORMap)}
}

// MarshalCBOR encodes the map's state deterministically: ORMap's state without the
// value type, which is always LWWRegister. Encode calls it.
func (m LWWMap) MarshalCBOR() ([]byte, error) { return marshalFixedMap(m.m) }

func init() {
	registerDecoder(TypeLWWMap, func(b []byte) (ReplicatedData, error) {
		m, err := decodeORMap(b, TypeLWWRegister)
		if err != nil {
			return nil, err
		}
		return LWWMap{m}, nil
	})
}

// marshalFixedMap encodes the ORMap of an LWWMap or PNCounterMap: its state without
// the value type.
func marshalFixedMap(m ORMap) ([]byte, error) {
	st, err := m.state()
	if err != nil {
		return nil, err
	}
	st.ValueType = ""
	return encMode.Marshal(st)
}
