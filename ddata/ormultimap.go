package ddata

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ORMultiMap is an observed-remove multi-map: string keys bound to sets of string
// elements, with ORSet semantics for each binding (Akka's ORMultiMap, "an ORMap with an
// ORSet for the map's value"). A binding added on one replica and concurrently removed
// on another stays (add wins), and a replica only removes the bindings it has seen. A
// key is in the map while it has at least one element: removing a key's last binding
// removes the key (as Akka's removeBinding does), and Put with no elements is Remove.
// (Akka's ORMultiMap can also hold a key bound to the empty set; this one cannot.)
//
// It is the OR-map of add-wins sets of Almeida, Shoker, Baquero, "Delta State
// Replicated Data Types" (2018), §7: one dot store mapping key → element → dots, with
// one CausalContext for the whole map, so that a key's set and the map's keys share
// their dots. Removing a key therefore removes exactly the bindings the remover has
// seen, and a key removed and bound again does not bring back old elements: the
// resurrection caveat of Akka's ORMap does not apply.
//
// Two flavours, as in Akka, differ in their deltas. NewORMultiMap's updates (and the
// zero value's) return a delta with the whole set of the touched key, which repairs a
// receiver that missed earlier deltas for that key. NewORMultiMapWithValueDeltas's
// (Akka's ORMultiMap.emptyWithValueDeltas) return only the change: the added binding's
// dot, or the removed bindings' dots, which is much smaller for large sets. Akka warns
// that the two are incompatible; here their states are of one lattice, but the flavour
// is part of the state (it is encoded), and Merge of a map of one flavour with a
// non-empty map of the other is an error wrapping ErrTypeMismatch, so that a key is
// not used with both by mistake. An empty map (no bindings and an empty context, such
// as the zero value) merges with either and takes the other's flavour.
//
// Deltas merge correctly in any order, any number of times (see ORSet);
// RequiresCausalDeliveryOfDeltas returns true, as Akka's does. Keys and elements are
// made valid UTF-8 as for ORSet. An ORMultiMap is immutable; an update copies the key
// map and the touched key's set. It implements RemovedNodePruning.
type ORMultiMap struct {
	valueDeltas bool
	// entries maps a key to its non-empty element store; every dot is in ctx. Never
	// written after construction; may be shared between values.
	entries map[string]map[string][]Dot
	ctx     CausalContext
}

var (
	_ DeltaReplicatedData = ORMultiMap{}
	_ DeltaReplicatedData = (*ORMultiMap)(nil)
	_ RemovedNodePruning  = ORMultiMap{}
	_ RemovedNodePruning  = (*ORMultiMap)(nil)
)

// NewORMultiMap returns the empty multi-map whose updates' deltas carry the touched
// key's whole set (Akka's ORMultiMap.empty); the zero value is the same.
func NewORMultiMap() ORMultiMap { return ORMultiMap{} }

// NewORMultiMapWithValueDeltas returns the empty multi-map whose updates' deltas carry
// only the change of the touched key's set (Akka's ORMultiMap.emptyWithValueDeltas).
// See ORMultiMap on mixing the two.
func NewORMultiMapWithValueDeltas() ORMultiMap { return ORMultiMap{valueDeltas: true} }

// WithValueDeltas reports whether the map is of the value-deltas flavour.
func (m ORMultiMap) WithValueDeltas() bool { return m.valueDeltas }

// AddBinding adds elem to key's set on behalf of node and returns the new map and its
// delta. As ORSet.Add, the binding gets a new dot of node replacing its older ones.
// AddBinding panics if node is empty or not valid UTF-8.
func (m ORMultiMap) AddBinding(node NodeID, key, elem string) (ORMultiMap, ORMultiMap) {
	mustNodeID("ORMultiMap.AddBinding", node)
	key, elem = validUTF8(key), validUTF8(elem)
	d := m.ctx.Next(node)
	oldSet := m.entries[key]
	set := cloneElems(oldSet, 1)
	set[elem] = []Dot{d}
	next := m.withKey(key, set, d)
	if m.valueDeltas {
		return next, ORMultiMap{valueDeltas: true,
			entries: map[string]map[string][]Dot{key: {elem: {d}}},
			ctx:     contextOf(oldSet[elem], []Dot{d})}
	}
	return next, ORMultiMap{entries: map[string]map[string][]Dot{key: set}, ctx: contextOf(allDots(oldSet), []Dot{d})}
}

// RemoveBinding removes elem from key's set on behalf of node and returns the new map
// and its delta; the key goes when its set becomes empty. Only the binding's dots this
// replica has seen are removed. Removing a binding that is not in the map returns m
// and the empty delta. RemoveBinding panics if node is empty or not valid UTF-8.
func (m ORMultiMap) RemoveBinding(node NodeID, key, elem string) (ORMultiMap, ORMultiMap) {
	mustNodeID("ORMultiMap.RemoveBinding", node)
	key, elem = validUTF8(key), validUTF8(elem)
	oldSet := m.entries[key]
	dots, ok := oldSet[elem]
	if !ok {
		return m, ORMultiMap{valueDeltas: m.valueDeltas}
	}
	set := cloneElems(oldSet, 0)
	delete(set, elem)
	next := m.withKey(key, set, Dot{})
	if m.valueDeltas {
		return next, ORMultiMap{valueDeltas: true, ctx: contextOf(dots)}
	}
	delta := ORMultiMap{ctx: contextOf(allDots(oldSet))}
	if len(set) > 0 {
		delta.entries = map[string]map[string][]Dot{key: set}
	}
	return next, delta
}

// Put binds key to exactly elems (made valid UTF-8, duplicates ignored) on behalf of
// node, replacing the set this replica has for it (Akka's put: clear, then add each
// element), and returns the new map and its delta: the key's new set, with the dots of
// the replaced one in its context, in both flavours. Bindings added concurrently on
// other replicas survive. Put with no elements is Remove. Put panics if node is empty
// or not valid UTF-8.
func (m ORMultiMap) Put(node NodeID, key string, elems []string) (ORMultiMap, ORMultiMap) {
	mustNodeID("ORMultiMap.Put", node)
	key = validUTF8(key)
	if len(elems) == 0 {
		return m.Remove(node, key)
	}
	sorted := make([]string, len(elems))
	for i, e := range elems {
		sorted[i] = validUTF8(e)
	}
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	ctx := m.ctx.clone()
	set := make(map[string][]Dot, len(sorted))
	newDots := make([]Dot, len(sorted))
	for i, e := range sorted {
		d := ctx.Next(node)
		ctx.add(d)
		set[e] = []Dot{d}
		newDots[i] = d
	}
	entries := cloneEntries(m.entries, 1)
	entries[key] = set
	return ORMultiMap{valueDeltas: m.valueDeltas, entries: entries, ctx: ctx},
		ORMultiMap{valueDeltas: m.valueDeltas, entries: map[string]map[string][]Dot{key: set},
			ctx: contextOf(allDots(m.entries[key]), newDots)}
}

// Remove removes key with all the bindings this replica has seen on behalf of node and
// returns the new map and its delta (no bindings, their dots as context). Bindings
// added concurrently elsewhere survive, and keep the key. Removing a key that is not
// in the map returns m and the empty delta. Remove panics if node is empty or not valid
// UTF-8 (no dot is minted).
func (m ORMultiMap) Remove(node NodeID, key string) (ORMultiMap, ORMultiMap) {
	mustNodeID("ORMultiMap.Remove", node)
	key = validUTF8(key)
	oldSet, ok := m.entries[key]
	if !ok {
		return m, ORMultiMap{valueDeltas: m.valueDeltas}
	}
	return m.withKey(key, nil, Dot{}), ORMultiMap{valueDeltas: m.valueDeltas, ctx: contextOf(allDots(oldSet))}
}

// Get returns key's elements (key made valid UTF-8) in ascending byte order, nil when
// the key is not in the map.
func (m ORMultiMap) Get(key string) []string {
	set, ok := m.entries[validUTF8(key)]
	if !ok {
		return nil
	}
	return sortedKeys(set)
}

// ContainsBinding reports whether key is bound to elem (both made valid UTF-8).
func (m ORMultiMap) ContainsBinding(key, elem string) bool {
	_, ok := m.entries[validUTF8(key)][validUTF8(elem)]
	return ok
}

// Keys returns the keys in ascending byte order, in a new slice (empty, not nil, for
// the empty map).
func (m ORMultiMap) Keys() []string { return sortedKeys(m.entries) }

// Len returns the number of keys.
func (m ORMultiMap) Len() int { return len(m.entries) }

// Entries returns every key with its elements in ascending byte order, in a new map.
func (m ORMultiMap) Entries() map[string][]string {
	out := make(map[string][]string, len(m.entries))
	for k, set := range m.entries {
		out[k] = sortedKeys(set)
	}
	return out
}

// Type returns TypeORMultiMap.
func (m ORMultiMap) Type() DataType { return TypeORMultiMap }

// Merge returns the join of the two maps: each binding's dots joined as ORSet joins
// them, within one context per map. other must be an ORMultiMap (or a non-nil
// *ORMultiMap) of the same flavour, or empty (see ORMultiMap); otherwise the error
// wraps ErrTypeMismatch.
func (m ORMultiMap) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[ORMultiMap, *ORMultiMap](TypeORMultiMap, other)
	if err != nil {
		return nil, err
	}
	switch {
	case o.isEmpty():
		m.valueDeltas = m.valueDeltas || m.isEmpty() && o.valueDeltas
		return m, nil
	case m.isEmpty():
		return o, nil
	case m.valueDeltas != o.valueDeltas:
		return nil, fmt.Errorf("%w: ORMultiMap with value deltas and ORMultiMap without", ErrTypeMismatch)
	}
	entries := make(map[string]map[string][]Dot, max(len(m.entries), len(o.entries)))
	for k, a := range m.entries {
		if set := joinElements(a, m.ctx, o.entries[k], o.ctx); len(set) > 0 {
			entries[k] = set
		}
	}
	for k, b := range o.entries {
		if _, done := m.entries[k]; done {
			continue
		}
		if set := joinElements(nil, m.ctx, b, o.ctx); len(set) > 0 {
			entries[k] = set
		}
	}
	if len(entries) == 0 {
		entries = nil
	}
	return ORMultiMap{valueDeltas: m.valueDeltas, entries: entries, ctx: m.ctx.Merge(o.ctx)}, nil
}

// Value returns the map as map[string]any, each key's elements as a sorted []string.
func (m ORMultiMap) Value() any {
	out := make(map[string]any, len(m.entries))
	for k, set := range m.entries {
		out[k] = sortedKeys(set)
	}
	return out
}

// RequiresCausalDeliveryOfDeltas returns true, as Akka's ORMultiMap, although this
// implementation's deltas merge in any order (see ORSet).
func (m ORMultiMap) RequiresCausalDeliveryOfDeltas() bool { return true }

// ModifiedByNodes returns the nodes with a dot in the context, sorted.
func (m ORMultiMap) ModifiedByNodes() []NodeID { return m.ctx.Nodes() }

// NeedPruningFrom reports whether removed has a dot in the context; as for ORSet, it
// stays true after Prune until PruningCleanup.
func (m ORMultiMap) NeedPruningFrom(removed NodeID) bool { return m.ctx.hasNode(removed) }

// Prune returns the map in which every binding whose dots are all removed's gets a new
// dot of collapseInto instead (in sorted key and element order), and other bindings
// lose removed's dots: the bindings are unchanged. As for ORSet.Prune, the context
// keeps removed's dots until PruningCleanup, and pruning again is a no-op. Prune
// panics if collapseInto is empty or not valid UTF-8.
func (m ORMultiMap) Prune(removed, collapseInto NodeID) ReplicatedData {
	mustNodeID("ORMultiMap.Prune", collapseInto)
	var entries map[string]map[string][]Dot
	ctx := m.ctx
	for _, k := range sortedKeys(m.entries) {
		if !elementsHaveNode(m.entries[k], removed) {
			continue
		}
		if entries == nil {
			entries = cloneEntries(m.entries, 0)
			ctx = m.ctx.clone()
		}
		entries[k] = pruneElements(m.entries[k], removed, collapseInto, &ctx)
	}
	if entries == nil {
		return m
	}
	return ORMultiMap{valueDeltas: m.valueDeltas, entries: entries, ctx: ctx}
}

// PruningCleanup returns the map without removed's dots, in the bindings (bindings and
// keys left without dots go) and in the context (see ORSet.PruningCleanup).
func (m ORMultiMap) PruningCleanup(removed NodeID) ReplicatedData {
	if !m.ctx.hasNode(removed) {
		return m
	}
	entries := make(map[string]map[string][]Dot, len(m.entries))
	for k, set := range m.entries {
		if set = cleanupElements(set, removed); len(set) > 0 {
			entries[k] = set
		}
	}
	if len(entries) == 0 {
		entries = nil
	}
	return ORMultiMap{valueDeltas: m.valueDeltas, entries: entries, ctx: m.ctx.withoutNode(removed)}
}

// MarshalCBOR encodes the map's state deterministically: {1: the context (see
// contextState), 2: true for the value-deltas flavour, 3: {key: {element: [node
// index, counter, ...]}}}, each omitted when empty or false. Encode calls it.
func (m ORMultiMap) MarshalCBOR() ([]byte, error) {
	ctx, enc := encodeContext(m.ctx)
	st := ormultimapState{Context: ctx, ValueDeltas: m.valueDeltas}
	if len(m.entries) > 0 {
		st.Entries = make(map[string]map[string][]uint64, len(m.entries))
	}
	for k, set := range m.entries {
		s := make(map[string][]uint64, len(set))
		for e, ds := range set {
			s[e] = enc.dots(ds)
		}
		st.Entries[k] = s
	}
	return encMode.Marshal(st)
}

// ormultimapState is ORMultiMap's encoded state.
type ormultimapState struct {
	Context     *contextState                  `cbor:"1,keyasint,omitempty"`
	ValueDeltas bool                           `cbor:"2,keyasint,omitempty"`
	Entries     map[string]map[string][]uint64 `cbor:"3,keyasint,omitempty"`
}

func init() { registerDecoder(TypeORMultiMap, decodeORMultiMap) }

// decodeORMultiMap decodes an ORMultiMap's state, refusing an invalid context (see
// decodeContext), keys or elements that are not valid UTF-8, keys without elements,
// and dot sets that are empty, unsorted, or not in the context.
func decodeORMultiMap(b []byte) (ReplicatedData, error) {
	var st *ormultimapState
	if err := decodeState(b, &st); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errNullState
	}
	ctx, dec, err := decodeContext(st.Context)
	if err != nil {
		return nil, err
	}
	m := ORMultiMap{valueDeltas: st.ValueDeltas, ctx: ctx}
	if len(st.Entries) > 0 {
		m.entries = make(map[string]map[string][]Dot, len(st.Entries))
	}
	for k, set := range st.Entries {
		if validUTF8(k) != k {
			return nil, errors.New("key is not valid UTF-8")
		}
		if len(set) == 0 {
			return nil, fmt.Errorf("key %q has no elements", k)
		}
		elems, err := decodeElements(set, dec)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		m.entries[k] = elems
	}
	return m, nil
}

// isEmpty reports whether the map has no bindings and an empty context.
func (m ORMultiMap) isEmpty() bool { return len(m.entries) == 0 && m.ctx.isEmpty() }

// withKey returns m with key's set replaced by set (the key removed when set is empty)
// and d, if it is a dot, added to the context.
func (m ORMultiMap) withKey(key string, set map[string][]Dot, d Dot) ORMultiMap {
	entries := cloneEntries(m.entries, 1)
	if len(set) > 0 {
		entries[key] = set
	} else {
		delete(entries, key)
	}
	if len(entries) == 0 {
		entries = nil
	}
	ctx := m.ctx
	if d.Counter > 0 {
		ctx = ctx.clone()
		ctx.add(d)
	}
	return ORMultiMap{valueDeltas: m.valueDeltas, entries: entries, ctx: ctx}
}

// cloneEntries returns a writable copy of a multi-map's key map (the sets are shared)
// with room for extra more keys.
func cloneEntries(m map[string]map[string][]Dot, extra int) map[string]map[string][]Dot {
	if m == nil {
		return make(map[string]map[string][]Dot, extra)
	}
	return maps.Clone(m)
}
