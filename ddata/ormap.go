package ddata

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/fxamacker/cbor/v2"
)

// ORMap is an observed-remove map from string keys to replicated values, all of one
// data type (Akka's ORMap). Keys are added, updated and removed any number of times
// with the ORSet's semantics: an update of a key concurrent with its removal wins, and
// a replica only removes what it has seen. Concurrent updates of one key merge the
// values with the value type's Merge, hence values are ReplicatedData.
//
// The first value put fixes the value type (ValueType); putting a value of another
// type, or merging with a map of another value type, is an error wrapping
// ErrTypeMismatch, as Akka requires that "the types of ORMap values must never change
// for a given key". The zero ORMap is the empty map with no value type yet.
//
// It is the OR-map over a dot store of Almeida, Shoker, Baquero, "Delta State
// Replicated Data Types" (2018), §7, with values that need not be dot stores: each
// key maps to one or more (dot, value) pairs (a DotFun), sharing the map's
// CausalContext. An update by a node mints a dot, and stores the key's whole new value
// under it, replacing the key's older pairs (it has observed them); concurrent updates
// leave one pair each, and the key's value is their merge. Remove keeps the key's dots
// in the context and drops its pairs. Merge joins the pairs as ORSet joins dots (a pair
// survives if it is in both maps, the values then merged, or in one map and not in the
// other's context), and drops keys left without pairs, with their values. Tying values
// to dots is what makes Merge associative: a value cannot outlive the update that
// wrote it, whatever order replicas merge in.
//
// Caveats (from the reference, and what remains of them here). Put replaces the value
// locally, but a concurrent update of the key on another replica merges its value with
// the new one. A removal only removes the values it has seen: an update concurrent with
// a Remove brings back the updater's whole value of the key (it is stored under the
// update's dot), not just the update's change; so a PNCounter removed on one replica
// while another increments it comes back with the incrementer's full count. A value
// written by a replica that has seen the Remove cannot bring the old value back, since
// its dots are in the remover's context (Akka's ORMap, which keeps one value per key,
// can resurrect it then). Values that are themselves causal (ORSet, ORMap) have their
// own contexts, and a key removed and added again starts from the initial value, whose
// new dots may repeat dots of the removed value; if a replica that updated the key
// concurrently with the removal still holds that value, a merge can drop elements of
// both (Akka's ORMap has the same flaw). ORMultiMap, whose sets share the map's
// context, has not: prefer it for a map of sets.
//
// Deltas: Put and Update return a delta holding the key's new dot with the whole new
// value, and the dots it replaced in its context (Akka's ORMap without value deltas;
// NewORMultiMapWithValueDeltas makes the variant whose deltas carry only a change).
// As for ORSet, deltas merge correctly in any order, any number of times;
// RequiresCausalDeliveryOfDeltas returns true as Akka's does.
//
// An ORMap is immutable (values must not be changed after they are put). An update
// copies the key map (O(n)). Values are encoded with Encode, nested in the map's
// encoding; the decoder's nesting limit allows an ORMap of ORMaps of counters, sets,
// multi-maps or registers, or of LWWMaps or PNCounterMaps, but no deeper nesting of
// maps, which Put and Update refuse. It implements RemovedNodePruning, pruning the
// values that implement it.
type ORMap struct {
	valueType DataType
	// entries maps a key to its pairs; every dot is in ctx. Never written after
	// construction; may be shared between values.
	entries map[string]ormapEntry
	ctx     CausalContext
}

// ormapEntry is a key's (dot, value) pairs, sorted by dot and never empty, and their
// merged value.
type ormapEntry struct {
	pairs []dotValue
	value ReplicatedData
}

// dotValue is a value stored under the dot of the update that wrote it.
type dotValue struct {
	dot   Dot
	value ReplicatedData
}

var (
	_ DeltaReplicatedData = ORMap{}
	_ DeltaReplicatedData = (*ORMap)(nil)
	_ RemovedNodePruning  = ORMap{}
	_ RemovedNodePruning  = (*ORMap)(nil)
)

// ValueType returns the data type of the map's values, "" while it has none.
func (m ORMap) ValueType() DataType { return m.valueType }

// Put sets key (made valid UTF-8, as for ORSet) to value on behalf of node, replacing
// the value the replica has for it, and returns the new map and its delta (see ORMap
// for what a concurrent update does). The error wraps ErrTypeMismatch if value is nil
// or not of the map's value type, or if value is an ORMap holding maps (ORMap, LWWMap,
// PNCounterMap), as maps of maps of maps would not decode; or ErrUnknownType if
// value's type has no decoder. The map is then returned unchanged, with the empty
// delta. Put panics if node is empty or not valid UTF-8.
func (m ORMap) Put(node NodeID, key string, value ReplicatedData) (ORMap, ORMap, error) {
	mustNodeID("ORMap.Put", node)
	if err := checkValue(m.valueType, "value", value); err != nil {
		return m, ORMap{}, err
	}
	next, delta := m.set(node, validUTF8(key), value)
	return next, delta, nil
}

// Update applies modify to key's value (key made valid UTF-8), or to initial if the
// key is not in the map, on behalf of node: modify returns the new value and the
// update's delta of the value (as the CRDT updates do: PNCounter.Increment, ORSet.Add,
// ...), or an error. The new value replaces the key's value, and the returned delta of
// the map holds the key's new dot with the whole new value (Akka's ORMap.updated; the
// value's delta is not used). initial may be nil when the key is in the map. Errors:
// the one modify returns, wrapped; ErrTypeMismatch if initial is nil and the key is
// not in the map, or if initial or the new value is not of the map's value type (or,
// for a map without one, the new value not of initial's type) or nests maps too deeply
// (as for Put); ErrUnknownType as for Put. The map is then returned unchanged, with the empty delta. Update panics if node
// is empty or not valid UTF-8.
func (m ORMap) Update(node NodeID, key string, initial ReplicatedData,
	modify func(ReplicatedData) (ReplicatedData, ReplicatedData, error)) (ORMap, ORMap, error) {
	mustNodeID("ORMap.Update", node)
	key = validUTF8(key)
	vt := m.valueType
	if initial != nil {
		if err := checkValue(vt, "initial value", initial); err != nil {
			return m, ORMap{}, err
		}
		vt = initial.Type()
	}
	e, ok := m.entries[key]
	cur := e.value
	if !ok {
		if initial == nil {
			return m, ORMap{}, checkValue(vt, "initial value", nil)
		}
		cur = initial
	}
	next, _, err := modify(cur)
	if err != nil {
		return m, ORMap{}, fmt.Errorf("ddata: ORMap.Update of %q: %w", key, err)
	}
	if vt == "" {
		vt = cur.Type()
	}
	if err := checkValue(vt, "updated value", next); err != nil {
		return m, ORMap{}, err
	}
	n, delta := m.set(node, key, next)
	return n, delta, nil
}

// Remove removes key (made valid UTF-8) on behalf of node and returns the new map and
// its delta: no pairs, and the key's dots as context, which removes from any replica
// the values this replica has seen and no concurrent update. Removing a key that is not
// in the map returns m and the empty delta. Remove panics if node is empty or not
// valid UTF-8 (no dot is minted).
func (m ORMap) Remove(node NodeID, key string) (ORMap, ORMap) {
	mustNodeID("ORMap.Remove", node)
	return m.remove(validUTF8(key))
}

// Get returns key's value (made valid UTF-8): the merge of its concurrent values.
func (m ORMap) Get(key string) (ReplicatedData, bool) {
	e, ok := m.entries[validUTF8(key)]
	return e.value, ok
}

// Contains reports whether key (made valid UTF-8) is in the map.
func (m ORMap) Contains(key string) bool {
	_, ok := m.entries[validUTF8(key)]
	return ok
}

// Keys returns the keys in ascending byte order, in a new slice (empty, not nil, for
// the empty map).
func (m ORMap) Keys() []string { return sortedKeys(m.entries) }

// Len returns the number of keys.
func (m ORMap) Len() int { return len(m.entries) }

// Type returns TypeORMap.
func (m ORMap) Type() DataType { return TypeORMap }

// Merge returns the join of the two maps (see ORMap). other must be an ORMap (or a
// non-nil *ORMap) whose value type is the same or not yet fixed; otherwise the error
// wraps ErrTypeMismatch. An error of a value's Merge is returned too.
func (m ORMap) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[ORMap, *ORMap](TypeORMap, other)
	if err != nil {
		return nil, err
	}
	j, err := m.join(o)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// Value returns the map as map[string]any, each key's value as its Value().
func (m ORMap) Value() any {
	out := make(map[string]any, len(m.entries))
	for k, e := range m.entries {
		out[k] = e.value.Value()
	}
	return out
}

// RequiresCausalDeliveryOfDeltas returns true, as Akka's ORMap, although this
// implementation's deltas merge in any order (see ORMap).
func (m ORMap) RequiresCausalDeliveryOfDeltas() bool { return true }

// ModifiedByNodes returns the nodes with a dot in the context and the nodes values
// that implement RemovedNodePruning list, sorted.
func (m ORMap) ModifiedByNodes() []NodeID {
	set := map[NodeID]struct{}{}
	for _, n := range m.ctx.Nodes() {
		set[n] = struct{}{}
	}
	for _, e := range m.entries {
		for _, p := range e.pairs {
			if v, ok := p.value.(RemovedNodePruning); ok {
				for _, n := range v.ModifiedByNodes() {
					set[n] = struct{}{}
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// NeedPruningFrom reports whether removed has a dot in the context or data in a value.
// As for ORSet, it stays true after Prune until PruningCleanup.
func (m ORMap) NeedPruningFrom(removed NodeID) bool {
	if m.ctx.hasNode(removed) {
		return true
	}
	for _, e := range m.entries {
		if entryNeedsPruning(e, removed) {
			return true
		}
	}
	return false
}

// Prune returns the map in which every key with a dot of removed, or a value with
// data of removed, is rewritten by collapseInto (in sorted key order): its merged value,
// pruned if it implements RemovedNodePruning, under a new dot of collapseInto. Values
// are unchanged. The context keeps the replaced dots, so a merge with a replica that has
// not seen the pruning keeps the pruned values (unless that replica updated the key
// concurrently: the replicator cleans such data with PruningCleanup). Pruning again is
// a no-op. Prune panics if collapseInto is empty or not valid UTF-8.
func (m ORMap) Prune(removed, collapseInto NodeID) ReplicatedData {
	mustNodeID("ORMap.Prune", collapseInto)
	var entries map[string]ormapEntry
	ctx := m.ctx
	for _, k := range sortedKeys(m.entries) {
		e := m.entries[k]
		rewrite := slices.ContainsFunc(e.pairs, func(p dotValue) bool { return p.dot.Node == removed })
		v := e.value
		if p, ok := v.(RemovedNodePruning); ok && p.NeedPruningFrom(removed) {
			// A causal value (ORSet) needs pruning from removed until PruningCleanup
			// even when Prune has nothing left to do: rewrite only real changes.
			if pv := p.Prune(removed, collapseInto); !sameEncoding(pv, v) {
				v, rewrite = pv, true
			}
		}
		if !rewrite {
			continue
		}
		if entries == nil {
			entries = maps.Clone(m.entries)
			ctx = m.ctx.clone()
		}
		d := ctx.Next(collapseInto)
		ctx.add(d)
		entries[k] = ormapEntry{pairs: []dotValue{{d, v}}, value: v}
	}
	if entries == nil {
		return m
	}
	return ORMap{valueType: m.valueType, entries: entries, ctx: ctx}
}

// PruningCleanup returns the map without removed's dots (keys left without dots are
// dropped, with their values) and with removed's data cleaned from the values that
// implement RemovedNodePruning.
func (m ORMap) PruningCleanup(removed NodeID) ReplicatedData {
	if !m.NeedPruningFrom(removed) {
		return m
	}
	entries := make(map[string]ormapEntry, len(m.entries))
	for k, e := range m.entries {
		if !entryNeedsPruning(e, removed) {
			entries[k] = e
			continue
		}
		var pairs []dotValue
		for _, p := range e.pairs {
			if p.dot.Node == removed {
				continue
			}
			if v, ok := p.value.(RemovedNodePruning); ok {
				p.value = v.PruningCleanup(removed)
			}
			pairs = append(pairs, p)
		}
		if len(pairs) == 0 {
			continue
		}
		v, err := mergePairs(pairs)
		if err != nil {
			entries[k] = e // cannot happen for values of one type; keep the key as it was
			continue
		}
		entries[k] = ormapEntry{pairs: pairs, value: v}
	}
	if len(entries) == 0 {
		entries = nil
	}
	return ORMap{valueType: m.valueType, entries: entries, ctx: m.ctx.withoutNode(removed)}
}

// MarshalCBOR encodes the map's state deterministically: {1: the context (see
// contextState), 2: value type, 3: {key: [[node index, counter, value], ...]}} with
// the pairs sorted by dot, each value encoded with Encode, and each field omitted when
// empty. Encode calls it.
func (m ORMap) MarshalCBOR() ([]byte, error) {
	st, err := m.state()
	if err != nil {
		return nil, err
	}
	return encMode.Marshal(st)
}

// ormapState is ORMap's encoded state; LWWMap and PNCounterMap encode their maps in it
// without the value type.
type ormapState struct {
	Context   *contextState              `cbor:"1,keyasint,omitempty"`
	ValueType DataType                   `cbor:"2,keyasint,omitempty"`
	Entries   map[string][]dotValueState `cbor:"3,keyasint,omitempty"`
}

// dotValueState is an encoded (dot, value) pair.
type dotValueState struct {
	_       struct{} `cbor:",toarray"`
	Node    uint64
	Counter uint64
	Value   cbor.RawMessage
}

// state returns the map's encoded state.
func (m ORMap) state() (ormapState, error) {
	ctx, enc := encodeContext(m.ctx)
	st := ormapState{Context: ctx, ValueType: m.valueType}
	if len(m.entries) > 0 {
		st.Entries = make(map[string][]dotValueState, len(m.entries))
	}
	for k, e := range m.entries {
		ps := make([]dotValueState, len(e.pairs))
		for i, p := range e.pairs {
			b, err := Encode(p.value)
			if err != nil {
				return ormapState{}, err
			}
			ps[i] = dotValueState{Node: enc.index[p.dot.Node], Counter: p.dot.Counter, Value: b}
		}
		st.Entries[k] = ps
	}
	return st, nil
}

func init() {
	registerDecoder(TypeORMap, func(b []byte) (ReplicatedData, error) { return decodeORMap(b, "") })
}

// decodeORMap decodes an ORMap's state. With fixed set (LWWMap, PNCounterMap), the
// value type is fixed and must not be in the state. It refuses an invalid context (see
// decodeContext); keys that are not valid UTF-8; a value type without decoder; pairs
// that are empty, unsorted, not in the context, or whose values do not decode, are not
// of the value type, or do not merge.
func decodeORMap(b []byte, fixed DataType) (ORMap, error) {
	var st *ormapState
	if err := decodeState(b, &st); err != nil {
		return ORMap{}, err
	}
	if st == nil {
		return ORMap{}, errNullState
	}
	ctx, dec, err := decodeContext(st.Context)
	if err != nil {
		return ORMap{}, err
	}
	vt := st.ValueType
	switch {
	case fixed != "" && vt != "":
		return ORMap{}, fmt.Errorf("value type %q in a map of %s", vt, fixed)
	case fixed != "":
		vt = fixed
	case vt != "":
		if _, ok := decoders[vt]; !ok {
			return ORMap{}, fmt.Errorf("value type %q: %w", vt, ErrUnknownType)
		}
	case len(st.Entries) > 0:
		return ORMap{}, errors.New("entries without a value type")
	}
	m := ORMap{valueType: vt, ctx: ctx}
	if len(st.Entries) > 0 {
		m.entries = make(map[string]ormapEntry, len(st.Entries))
	}
	for k, ps := range st.Entries {
		if validUTF8(k) != k {
			return ORMap{}, errors.New("key is not valid UTF-8")
		}
		if len(ps) == 0 {
			return ORMap{}, fmt.Errorf("key %q has no value", k)
		}
		pairs := make([]dotValue, len(ps))
		for i, p := range ps {
			d, err := dec.dot(p.Node, p.Counter)
			if err != nil {
				return ORMap{}, fmt.Errorf("key %q: %w", k, err)
			}
			if i > 0 && compareDots(pairs[i-1].dot, d) >= 0 {
				return ORMap{}, fmt.Errorf("key %q: dots not in strictly ascending order", k)
			}
			if !ctx.Contains(d) {
				return ORMap{}, fmt.Errorf("key %q: dot %v is not in the context", k, d)
			}
			v, err := Decode(p.Value)
			if err != nil {
				return ORMap{}, fmt.Errorf("key %q: %w", k, err)
			}
			if v.Type() != vt {
				return ORMap{}, fmt.Errorf("key %q: value of type %s in a map of %s", k, v.Type(), vt)
			}
			pairs[i] = dotValue{dot: d, value: v}
		}
		v, err := mergePairs(pairs)
		if err != nil {
			return ORMap{}, fmt.Errorf("key %q: %w", k, err)
		}
		m.entries[k] = ormapEntry{pairs: pairs, value: v}
	}
	return m, nil
}

// checkValue returns an error if v, described by what, cannot be a value of a map
// whose value type is vt ("" for any), see Put.
func checkValue(vt DataType, what string, v ReplicatedData) error {
	if v == nil || isNilPointer(v) {
		return fmt.Errorf("%w: nil %s in an ORMap", ErrTypeMismatch, what)
	}
	if vt != "" && v.Type() != vt {
		return fmt.Errorf("%w: %s of type %s in an ORMap of %s", ErrTypeMismatch, what, v.Type(), vt)
	}
	if _, ok := decoders[v.Type()]; !ok {
		return fmt.Errorf("%w: %s of type %q in an ORMap", ErrUnknownType, what, v.Type())
	}
	if mapLevels(v) > 1 {
		return fmt.Errorf("%w: %s nests maps in maps, more than the decoder accepts in an ORMap", ErrTypeMismatch, what)
	}
	return nil
}

// mapLevels returns how many levels of maps with nested values v has: 0 for a value
// that is not a map, 1 for an LWWMap, a PNCounterMap, or an ORMap of such values, and
// one more for each ORMap around an ORMap. The decoder's nesting limit (16 CBOR levels)
// allows an ORMap to hold values of at most one level.
func mapLevels(v ReplicatedData) int {
	switch m := v.(type) {
	case ORMap:
		n := 0
		for _, e := range m.entries {
			for _, p := range e.pairs {
				n = max(n, mapLevels(p.value))
			}
		}
		return 1 + n
	case *ORMap:
		if m == nil {
			return 0
		}
		return mapLevels(*m)
	case LWWMap, *LWWMap, PNCounterMap, *PNCounterMap:
		return 1
	}
	return 0
}

// isNilPointer reports whether v is a typed nil pointer.
func isNilPointer(v ReplicatedData) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// set stores value as key's only pair under a new dot of node, and returns the map and
// the delta: that pair, with the dots it replaced in the context. The caller checked
// node, key and value.
func (m ORMap) set(node NodeID, key string, value ReplicatedData) (ORMap, ORMap) {
	d := m.ctx.Next(node)
	var old []Dot
	for _, p := range m.entries[key].pairs {
		old = append(old, p.dot)
	}
	e := ormapEntry{pairs: []dotValue{{d, value}}, value: value}
	entries := maps.Clone(m.entries)
	if entries == nil {
		entries = make(map[string]ormapEntry, 1)
	}
	entries[key] = e
	ctx := m.ctx.clone()
	ctx.add(d)
	vt := value.Type()
	return ORMap{valueType: vt, entries: entries, ctx: ctx},
		ORMap{valueType: vt, entries: map[string]ormapEntry{key: e}, ctx: contextOf(old, []Dot{d})}
}

// remove is Remove after the checks.
func (m ORMap) remove(key string) (ORMap, ORMap) {
	e, ok := m.entries[key]
	if !ok {
		return m, ORMap{valueType: m.valueType}
	}
	entries := maps.Clone(m.entries)
	delete(entries, key)
	if len(entries) == 0 {
		entries = nil
	}
	old := make([]Dot, len(e.pairs))
	for i, p := range e.pairs {
		old[i] = p.dot
	}
	return ORMap{valueType: m.valueType, entries: entries, ctx: m.ctx},
		ORMap{valueType: m.valueType, ctx: contextOf(old)}
}

// join is Merge for two ORMaps.
func (m ORMap) join(o ORMap) (ORMap, error) {
	vt := m.valueType
	switch {
	case vt == "":
		vt = o.valueType
	case o.valueType != "" && o.valueType != vt:
		return ORMap{}, fmt.Errorf("%w: ORMap of %s with ORMap of %s", ErrTypeMismatch, vt, o.valueType)
	}
	switch {
	case len(o.entries) == 0 && o.ctx.isEmpty():
		m.valueType = vt
		return m, nil
	case len(m.entries) == 0 && m.ctx.isEmpty():
		o.valueType = vt
		return o, nil
	}
	entries := make(map[string]ormapEntry, max(len(m.entries), len(o.entries)))
	for k, a := range m.entries {
		e, ok, err := joinEntries(a, m.ctx, o.entries[k], o.ctx)
		if err != nil {
			return ORMap{}, fmt.Errorf("key %q: %w", k, err)
		}
		if ok {
			entries[k] = e
		}
	}
	for k, b := range o.entries {
		if _, done := m.entries[k]; done {
			continue
		}
		e, ok, err := joinEntries(ormapEntry{}, m.ctx, b, o.ctx)
		if err != nil {
			return ORMap{}, fmt.Errorf("key %q: %w", k, err)
		}
		if ok {
			entries[k] = e
		}
	}
	if len(entries) == 0 {
		entries = nil
	}
	return ORMap{valueType: vt, entries: entries, ctx: m.ctx.Merge(o.ctx)}, nil
}

// joinEntries joins a key's pairs as joinDots joins dots, merging the values of a dot
// in both. It reports false when no pair survives.
func joinEntries(a ormapEntry, ca CausalContext, b ormapEntry, cb CausalContext) (ormapEntry, bool, error) {
	var pairs []dotValue
	i, j := 0, 0
	fromA, fromB := 0, 0
	for i < len(a.pairs) || j < len(b.pairs) {
		var c int
		switch {
		case i == len(a.pairs):
			c = 1
		case j == len(b.pairs):
			c = -1
		default:
			c = compareDots(a.pairs[i].dot, b.pairs[j].dot)
		}
		switch {
		case c == 0:
			v, err := a.pairs[i].value.Merge(b.pairs[j].value)
			if err != nil {
				return ormapEntry{}, false, err
			}
			pairs = append(pairs, dotValue{a.pairs[i].dot, v})
			i++
			j++
		case c < 0:
			if !cb.Contains(a.pairs[i].dot) {
				pairs = append(pairs, a.pairs[i])
				fromA++
			}
			i++
		default:
			if !ca.Contains(b.pairs[j].dot) {
				pairs = append(pairs, b.pairs[j])
				fromB++
			}
			j++
		}
	}
	switch {
	case len(pairs) == 0:
		return ormapEntry{}, false, nil
	case len(b.pairs) == 0 && fromA == len(a.pairs):
		return a, true, nil
	case len(a.pairs) == 0 && fromB == len(b.pairs):
		return b, true, nil
	}
	v, err := mergePairs(pairs)
	if err != nil {
		return ormapEntry{}, false, err
	}
	return ormapEntry{pairs: pairs, value: v}, true, nil
}

// mergePairs returns the merge of the values of non-empty pairs.
func mergePairs(pairs []dotValue) (ReplicatedData, error) {
	v := pairs[0].value
	for _, p := range pairs[1:] {
		var err error
		if v, err = v.Merge(p.value); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// entryNeedsPruning reports whether a key has a dot of removed or a value with data of
// removed.
func entryNeedsPruning(e ormapEntry, removed NodeID) bool {
	for _, p := range e.pairs {
		if p.dot.Node == removed {
			return true
		}
		if v, ok := p.value.(RemovedNodePruning); ok && v.NeedPruningFrom(removed) {
			return true
		}
	}
	return false
}

// sameEncoding reports whether a and b encode the same (and without error).
func sameEncoding(a, b ReplicatedData) bool {
	ea, err := Encode(a)
	if err != nil {
		return false
	}
	eb, err := Encode(b)
	return err == nil && bytes.Equal(ea, eb)
}
