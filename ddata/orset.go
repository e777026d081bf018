package ddata

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ORSet is an observed-remove set of strings with add-wins semantics (Akka's ORSet):
// elements are added and removed any number of times; when an element is added on one
// replica and concurrently removed on another, the add wins; and a replica can only
// remove what it has seen, so removing an element that is not (yet) in the local
// replica does nothing, whatever other replicas hold.
//
// It is the add-wins set of Almeida, Shoker, Baquero, "Delta State Replicated Data
// Types" (2018), §7 (a causal δ-CRDT): a dot store mapping each element to the dots
// of the adds that put it there (Akka's "birth dots"), and a CausalContext of every dot
// the replica has seen (Akka's "version vector"). Add mints a dot, Remove keeps the
// element's dots in the context but drops them from the store, and Merge keeps a dot
// that is in both stores or in one store and not in the other's context.
//
// Every update returns the new set and its delta, an ORSet holding exactly the dots
// the update added and, in its context, those it covered; merging it into a replica has
// the update's effect. Because a delta names the dots it covers, merging deltas in any
// order, any number of times, converges to the same state: this implementation
// tolerates out-of-order and duplicated deltas. RequiresCausalDeliveryOfDeltas still
// returns true, as Akka's does, and the replicator delivers each origin's deltas in
// order; a delta that arrives before an earlier one is not lost, but a reader may see
// the later update first.
//
// Elements are UTF-8 text (encoded as CBOR text strings): like GSet, the methods replace
// each run of bytes that are not valid UTF-8 with U+FFFD.
//
// An ORSet is immutable; the zero value is the empty set. An update copies the element
// map (O(n)); Contains is O(1). It implements RemovedNodePruning.
type ORSet struct {
	// elems maps an element to its non-empty dot set; every dot is in ctx. Never
	// written after construction; may be shared between values.
	elems map[string][]Dot
	ctx   CausalContext
}

var (
	_ DeltaReplicatedData = ORSet{}
	_ DeltaReplicatedData = (*ORSet)(nil)
	_ RemovedNodePruning  = ORSet{}
	_ RemovedNodePruning  = (*ORSet)(nil)
)

// validUTF8 makes s valid UTF-8 as GSet does.
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Add adds elem on behalf of node and returns the new set and its delta. The element
// gets a new dot of node, which replaces its older dots (an add observes them), so
// re-adding an element that is there also wins over concurrent removes of it. The
// delta holds the element with the new dot; its context is the new dot and the
// replaced ones. Add panics if node is empty or not valid UTF-8.
func (s ORSet) Add(node NodeID, elem string) (ORSet, ORSet) {
	mustNodeID("ORSet.Add", node)
	elem = validUTF8(elem)
	d := s.ctx.Next(node)
	old := s.elems[elem]
	elems := cloneElems(s.elems, 1)
	elems[elem] = []Dot{d}
	ctx := s.ctx.clone()
	ctx.add(d)
	delta := ORSet{elems: map[string][]Dot{elem: {d}}, ctx: contextOf(old, []Dot{d})}
	return ORSet{elems: elems, ctx: ctx}, delta
}

// Remove removes elem on behalf of node and returns the new set and its delta: the
// empty store with the element's dots as context, which removes from any replica the
// adds this replica has seen, and no concurrent one. Removing an element that is not
// in the set returns s and the empty set. Remove panics if node is empty or not valid
// UTF-8 (no dot is minted: node only names the replica, as in Akka).
func (s ORSet) Remove(node NodeID, elem string) (ORSet, ORSet) {
	mustNodeID("ORSet.Remove", node)
	elem = validUTF8(elem)
	old, ok := s.elems[elem]
	if !ok {
		return s, ORSet{}
	}
	elems := cloneElems(s.elems, 0)
	delete(elems, elem)
	if len(elems) == 0 {
		elems = nil
	}
	return ORSet{elems: elems, ctx: s.ctx}, ORSet{ctx: contextOf(old)}
}

// Clear removes every element on behalf of node and returns the empty set with s's
// context, and the delta: the empty store with every element's dots as context. As
// for Remove, elements added concurrently elsewhere survive. Clearing the empty set
// returns s and the empty set. Clear panics if node is empty or not valid UTF-8.
func (s ORSet) Clear(node NodeID) (ORSet, ORSet) {
	mustNodeID("ORSet.Clear", node)
	if len(s.elems) == 0 {
		return s, ORSet{}
	}
	return ORSet{ctx: s.ctx}, ORSet{ctx: contextOf(allDots(s.elems))}
}

// Contains reports whether elem (made valid UTF-8) is in the set.
func (s ORSet) Contains(elem string) bool {
	_, ok := s.elems[validUTF8(elem)]
	return ok
}

// Elements returns the elements in ascending byte order, in a new slice (empty, not
// nil, for the empty set).
func (s ORSet) Elements() []string {
	return sortedKeys(s.elems)
}

// Len returns the number of elements.
func (s ORSet) Len() int { return len(s.elems) }

// Type returns TypeORSet.
func (s ORSet) Type() DataType { return TypeORSet }

// Merge returns the join of the two sets: an element's dot survives if it is in both
// stores, or in one and not in the other's context; the contexts are united. So a
// concurrent add and remove of an element leave it in the set (add wins). other must be
// an ORSet (or a non-nil *ORSet); otherwise the error wraps ErrTypeMismatch.
func (s ORSet) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[ORSet, *ORSet](TypeORSet, other)
	if err != nil {
		return nil, err
	}
	return s.join(o), nil
}

// Value returns Elements(): a sorted []string.
func (s ORSet) Value() any { return s.Elements() }

// RequiresCausalDeliveryOfDeltas returns true, as Akka's ORSet, although this
// implementation's deltas merge in any order (see ORSet).
func (s ORSet) RequiresCausalDeliveryOfDeltas() bool { return true }

// ModifiedByNodes returns the nodes with a dot in the context (which holds every dot
// of the store), sorted.
func (s ORSet) ModifiedByNodes() []NodeID { return s.ctx.Nodes() }

// NeedPruningFrom reports whether removed has a dot in the context. It stays true
// after Prune, which keeps removed's dots in the context, until PruningCleanup.
func (s ORSet) NeedPruningFrom(removed NodeID) bool { return s.ctx.hasNode(removed) }

// Prune returns the set in which every element whose dots are all removed's gets a new
// dot of collapseInto instead (in sorted element order), and other elements lose
// removed's dots: the elements are unchanged. The context keeps removed's dots, so that
// a merge with a replica that has not seen the pruning drops removed's dots instead of
// bringing them back; PruningCleanup drops them once the replicator knows every replica
// has the pruned value. As in Akka (where pruning re-adds the elements), a removal of
// such an element that is concurrent with the pruning loses to it. Pruning again is a
// no-op. Prune panics if collapseInto is empty or not valid UTF-8.
func (s ORSet) Prune(removed, collapseInto NodeID) ReplicatedData {
	mustNodeID("ORSet.Prune", collapseInto)
	if !elementsHaveNode(s.elems, removed) {
		return s
	}
	ctx := s.ctx.clone()
	elems := pruneElements(s.elems, removed, collapseInto, &ctx)
	return ORSet{elems: elems, ctx: ctx}
}

// PruningCleanup returns the set without removed's dots, in the store and in the
// context. After Prune it leaves the elements unchanged; applied to a value that was
// not pruned (data from a replica that missed the pruning, as the replicator does) it
// drops the elements only removed had added, which the pruned value holds under
// collapseInto's dots.
func (s ORSet) PruningCleanup(removed NodeID) ReplicatedData {
	if !s.ctx.hasNode(removed) {
		return s
	}
	return ORSet{elems: cleanupElements(s.elems, removed), ctx: s.ctx.withoutNode(removed)}
}

// MarshalCBOR encodes the set's state deterministically: {1: the context (see
// contextState), 2: {element: [node index, counter, ...]}}, each omitted when empty.
// Encode calls it.
func (s ORSet) MarshalCBOR() ([]byte, error) {
	ctx, enc := encodeContext(s.ctx)
	st := orsetState{Context: ctx}
	if len(s.elems) > 0 {
		st.Elements = make(map[string][]uint64, len(s.elems))
		for e, ds := range s.elems {
			st.Elements[e] = enc.dots(ds)
		}
	}
	return encMode.Marshal(st)
}

// orsetState is ORSet's encoded state.
type orsetState struct {
	Context  *contextState       `cbor:"1,keyasint,omitempty"`
	Elements map[string][]uint64 `cbor:"2,keyasint,omitempty"`
}

func init() { registerDecoder(TypeORSet, decodeORSet) }

// decodeORSet decodes an ORSet's state, refusing an invalid context (see
// decodeContext), elements that are not valid UTF-8, and dot sets that are empty,
// unsorted, or not in the context.
func decodeORSet(b []byte) (ReplicatedData, error) {
	var st *orsetState
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
	elems, err := decodeElements(st.Elements, dec)
	if err != nil {
		return nil, err
	}
	return ORSet{elems: elems, ctx: ctx}, nil
}

// decodeElements decodes an element store against its context.
func decodeElements(m map[string][]uint64, dec dotDecoder) (map[string][]Dot, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string][]Dot, len(m))
	for e, flat := range m {
		if validUTF8(e) != e {
			return nil, errors.New("element is not valid UTF-8")
		}
		ds, err := dec.dots(flat)
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", e, err)
		}
		out[e] = ds
	}
	return out, nil
}

// join is Merge for two ORSets.
func (s ORSet) join(o ORSet) ORSet {
	switch {
	case len(o.elems) == 0 && o.ctx.isEmpty():
		return s
	case len(s.elems) == 0 && s.ctx.isEmpty():
		return o
	}
	return ORSet{elems: joinElements(s.elems, s.ctx, o.elems, o.ctx), ctx: s.ctx.Merge(o.ctx)}
}

// cloneElems returns a writable copy of an element store with room for extra more.
func cloneElems(m map[string][]Dot, extra int) map[string][]Dot {
	if m == nil {
		return make(map[string][]Dot, extra)
	}
	return maps.Clone(m) // much faster than copying into a new map
}

// sortedKeys returns a map's keys in ascending order, empty (not nil) for no keys.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
