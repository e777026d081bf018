package ddata

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// GSet is a grow-only set of strings (G-Set): Shapiro et al., "A comprehensive study of
// Convergent and Commutative Replicated Data Types" (INRIA RR-7506, 2011),
// specification 11; Akka's GSet. Elements are only added, and merge is set union.
//
// Elements are UTF-8 text (they are encoded as CBOR text strings): Add and Contains
// replace each run of bytes that are not valid UTF-8 with U+FFFD, as
// strings.ToValidUTF8 does, so "a\xff" and "a\xfe" are the same element "a\uFFFD".
//
// A GSet is immutable; the zero value is the empty set. Adding copies the element
// list (O(n)); Contains is O(log n). Its deltas need no causal delivery, and it keeps
// no per-node data.
type GSet struct {
	// elems is sorted, without duplicates, never written after construction and may
	// be shared between values.
	elems []string
}

var (
	_ DeltaReplicatedData = GSet{}
	_ DeltaReplicatedData = (*GSet)(nil)
)

// Add returns the set with elem (made valid UTF-8, see GSet) and its delta: the set of
// just elem. Adding an element that is already there returns s unchanged, and the delta
// is still {elem}, as in Akka, so that a write with a consistency level above local
// spreads it.
func (s GSet) Add(elem string) (GSet, GSet) {
	elem = strings.ToValidUTF8(elem, "\uFFFD")
	delta := GSet{elems: []string{elem}}
	i, found := slices.BinarySearch(s.elems, elem)
	if found {
		return s, delta
	}
	out := make([]string, 0, len(s.elems)+1)
	out = append(out, s.elems[:i]...)
	out = append(out, elem)
	out = append(out, s.elems[i:]...)
	return GSet{elems: out}, delta
}

// Contains reports whether elem (made valid UTF-8, see GSet) is in the set.
func (s GSet) Contains(elem string) bool {
	_, found := slices.BinarySearch(s.elems, strings.ToValidUTF8(elem, "\uFFFD"))
	return found
}

// Elements returns the elements in ascending byte order, in a new slice (empty, not
// nil, for the empty set).
func (s GSet) Elements() []string {
	return append(make([]string, 0, len(s.elems)), s.elems...)
}

// Len returns the number of elements.
func (s GSet) Len() int { return len(s.elems) }

// Type returns TypeGSet.
func (s GSet) Type() DataType { return TypeGSet }

// Merge returns the union of the two sets. other must be a GSet (or a non-nil *GSet);
// otherwise the error wraps ErrTypeMismatch.
func (s GSet) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[GSet, *GSet](TypeGSet, other)
	if err != nil {
		return nil, err
	}
	return s.join(o), nil
}

// Value returns Elements(): a sorted []string.
func (s GSet) Value() any { return s.Elements() }

// RequiresCausalDeliveryOfDeltas returns false: deltas are sets joined by union, in any
// order (Akka: GSet "doesn't require causal delivery of deltas").
func (s GSet) RequiresCausalDeliveryOfDeltas() bool { return false }

// MarshalCBOR encodes the set's state deterministically: {1: [elements in ascending
// byte order]}, the array omitted when empty. Encode calls it.
func (s GSet) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(gsetState{Elements: s.elems})
}

// gsetState is GSet's encoded state.
type gsetState struct {
	Elements []string `cbor:"1,keyasint,omitempty"`
}

func init() { registerDecoder(TypeGSet, decodeGSet) }

// decodeGSet decodes a GSet's state, refusing elements that are not valid UTF-8 or not
// in strictly ascending order (so duplicates too).
func decodeGSet(b []byte) (ReplicatedData, error) {
	var st *gsetState
	if err := decodeState(b, &st); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errNullState
	}
	for i, e := range st.Elements {
		if !utf8.ValidString(e) {
			return nil, fmt.Errorf("element %d is not valid UTF-8", i)
		}
		if i > 0 && st.Elements[i-1] >= e {
			return nil, fmt.Errorf("element %d is not above element %d: unsorted or duplicated", i, i-1)
		}
	}
	if len(st.Elements) == 0 {
		return GSet{}, nil
	}
	return GSet{elems: st.Elements}, nil
}

// join is Merge for two GSets: a merge of the sorted lists. It returns an operand
// when the other adds nothing.
func (s GSet) join(o GSet) GSet {
	a, b := s.elems, o.elems
	switch {
	case len(b) == 0:
		return s
	case len(a) == 0:
		return o
	}
	out := make([]string, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	out = append(out, b[j:]...)
	switch len(out) {
	case len(a):
		return s
	case len(b):
		return o
	}
	return GSet{elems: out}
}
