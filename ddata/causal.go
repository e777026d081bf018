package ddata

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The dot kernel of the causal CRDTs (ORSet, ORMap, ORMultiMap, LWWMap, PNCounterMap):
// Almeida, Shoker, Baquero, "Delta State Replicated Data Types" (J. Parallel Distrib.
// Comput., 2018), §7 "Causal δ-CRDTs". A value is a dot store (what is there, each part
// tagged with the dot of the update that made it) and a causal context (every dot the
// value has seen). A dot that the context has seen but the store lacks was removed, so
// the join of two values keeps a dot that is in both stores, or in one store and not in
// the other's context; the contexts join by union.

// Dot identifies one update: the Counter-th dot that Node minted. Counters start at 1.
// Akka calls the dot of an ORSet element its "birth dot".
type Dot struct {
	Node    NodeID
	Counter uint64
}

// String returns "(node, counter)".
func (d Dot) String() string { return fmt.Sprintf("(%s, %d)", d.Node, d.Counter) }

// compareDots orders dots by node, then counter.
func compareDots(a, b Dot) int {
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.Counter, b.Counter)
}

// CausalContext is a set of dots, kept compact as a version vector (for each node, the
// highest counter c such that the dots 1..c of the node are all in the set) and a "dot
// cloud" of the other dots, which lie above the version vector with a gap. Akka's ORSet
// keeps the same as its "version vector" and "birth dots".
//
// A CausalContext is immutable: Add and Merge return new contexts. The zero value is
// the empty context. Sizes: one entry per node in the version vector, plus the cloud,
// which is empty once every dot of a node up to its highest has been seen (a full-state
// merge fills the gaps that lost deltas leave).
type CausalContext struct {
	// vv maps a node to its contiguous maximum, > 0; a node without entry has 0.
	vv map[NodeID]uint64
	// cloud holds the dots above vv[node]+1: none is covered by vv or extends it.
	// Neither map is written after construction; both may be shared between values.
	cloud map[Dot]struct{}
}

// Contains reports whether d is in the context. A dot with counter 0 is in no context.
func (c CausalContext) Contains(d Dot) bool {
	if d.Counter == 0 {
		return false
	}
	if d.Counter <= c.vv[d.Node] {
		return true
	}
	_, ok := c.cloud[d]
	return ok
}

// Next returns the next dot of node: one above every dot of node in the context (its
// version-vector entry and its cloud dots). A replica mints its updates' dots with
// Next on its own node ID, so its dots are unique as long as its context holds every
// dot it minted before (2^64-1 dots per node).
func (c CausalContext) Next(node NodeID) Dot {
	top := c.vv[node]
	for d := range c.cloud {
		if d.Node == node && d.Counter > top {
			top = d.Counter
		}
	}
	return Dot{Node: node, Counter: top + 1}
}

// Add returns the context with d, compacted. Adding a dot with counter 0 returns c.
func (c CausalContext) Add(d Dot) CausalContext {
	if c.Contains(d) || d.Counter == 0 {
		return c
	}
	out := c.clone()
	out.add(d)
	return out
}

// Merge returns the union of the two contexts, compacted: cloud dots that extend the
// version vector contiguously move into it.
func (c CausalContext) Merge(o CausalContext) CausalContext {
	switch {
	case o.isEmpty():
		return c
	case c.isEmpty():
		return o
	}
	out := c.clone()
	for node, v := range o.vv {
		if v > out.vv[node] {
			out.vv[node] = v
		}
	}
	for d := range o.cloud {
		if out.cloud == nil {
			out.cloud = map[Dot]struct{}{}
		}
		out.cloud[d] = struct{}{}
	}
	out.compact()
	return out
}

// Nodes returns the nodes that have a dot in the context, sorted.
func (c CausalContext) Nodes() []NodeID {
	set := make(map[NodeID]struct{}, len(c.vv))
	for node := range c.vv {
		set[node] = struct{}{}
	}
	for d := range c.cloud {
		set[d.Node] = struct{}{}
	}
	return slices.Sorted(maps.Keys(set))
}

// hasNode reports whether node has a dot in the context.
func (c CausalContext) hasNode(node NodeID) bool {
	if c.vv[node] > 0 {
		return true
	}
	for d := range c.cloud {
		if d.Node == node {
			return true
		}
	}
	return false
}

// isEmpty reports whether the context has no dot.
func (c CausalContext) isEmpty() bool { return len(c.vv) == 0 && len(c.cloud) == 0 }

// clone returns a copy whose maps the caller may write (vv is never nil).
func (c CausalContext) clone() CausalContext {
	out := CausalContext{vv: maps.Clone(c.vv), cloud: maps.Clone(c.cloud)}
	if out.vv == nil {
		out.vv = map[NodeID]uint64{}
	}
	return out
}

// add adds d to a context from clone, keeping it compact.
func (c *CausalContext) add(d Dot) {
	v := c.vv[d.Node]
	switch {
	case d.Counter == 0 || d.Counter <= v:
		return
	case d.Counter == v+1:
		v++
		for {
			next := Dot{Node: d.Node, Counter: v + 1}
			if _, ok := c.cloud[next]; !ok {
				break
			}
			delete(c.cloud, next)
			v++
		}
		c.vv[d.Node] = v
		if len(c.cloud) == 0 {
			c.cloud = nil
		}
	default:
		if c.cloud == nil {
			c.cloud = map[Dot]struct{}{}
		}
		c.cloud[d] = struct{}{}
	}
}

// compact moves the cloud dots of a context from clone that are covered by or extend
// the version vector into it.
func (c *CausalContext) compact() {
	if len(c.cloud) == 0 {
		c.cloud = nil
		return
	}
	byNode := map[NodeID][]uint64{}
	for d := range c.cloud {
		byNode[d.Node] = append(byNode[d.Node], d.Counter)
	}
	for node, counters := range byNode {
		slices.Sort(counters)
		v := c.vv[node]
		for _, x := range counters {
			if x > v+1 {
				break
			}
			delete(c.cloud, Dot{Node: node, Counter: x})
			v = max(v, x)
		}
		if v > 0 {
			c.vv[node] = v
		}
	}
	if len(c.cloud) == 0 {
		c.cloud = nil
	}
}

// withoutNode returns the context without node's dots (PruningCleanup).
func (c CausalContext) withoutNode(node NodeID) CausalContext {
	if !c.hasNode(node) {
		return c
	}
	out := c.clone()
	delete(out.vv, node)
	for d := range out.cloud {
		if d.Node == node {
			delete(out.cloud, d)
		}
	}
	if len(out.cloud) == 0 {
		out.cloud = nil
	}
	return out
}

// contextOf returns the context of exactly the given dots.
func contextOf(dots ...[]Dot) CausalContext {
	c := CausalContext{vv: map[NodeID]uint64{}}
	for _, ds := range dots {
		for _, d := range ds {
			c.add(d)
		}
	}
	c.compact()
	return c
}

// Dot sets and dot stores. A dot set is a []Dot sorted by compareDots, without
// duplicates, never written after construction. An element store maps an ORSet
// element (or an ORMultiMap key's element) to its non-empty dot set.

// joinDots is the join of two dot sets with their contexts: the dots in both, and the
// dots of one that the other context has not seen. It returns a or b when the result
// equals it.
func joinDots(a []Dot, ca CausalContext, b []Dot, cb CausalContext) []Dot {
	if slices.Equal(a, b) {
		return a // every dot is in both stores
	}
	out := make([]Dot, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = compareDots(a[i], b[j])
		}
		switch {
		case c == 0:
			out = append(out, a[i])
			i++
			j++
		case c < 0:
			if !cb.Contains(a[i]) {
				out = append(out, a[i])
			}
			i++
		default:
			if !ca.Contains(b[j]) {
				out = append(out, b[j])
			}
			j++
		}
	}
	switch {
	case slices.Equal(out, a):
		return a
	case slices.Equal(out, b):
		return b
	case len(out) == 0:
		return nil
	}
	return out
}

// joinElements is the join of two element stores with their contexts: each element's
// dot sets joined, elements whose join is empty dropped. It returns a when the result
// equals it, and nil when it is empty; otherwise a copy of a with the changes.
func joinElements(a map[string][]Dot, ca CausalContext, b map[string][]Dot, cb CausalContext) map[string][]Dot {
	var changes map[string][]Dot // element → its new dots, nil to drop it
	change := func(e string, ds []Dot) {
		if changes == nil {
			changes = map[string][]Dot{}
		}
		changes[e] = ds
	}
	for e, da := range a {
		if ds := joinDots(da, ca, b[e], cb); len(ds) != len(da) || len(ds) > 0 && &ds[0] != &da[0] {
			change(e, ds)
		}
	}
	for e, db := range b {
		if _, ok := a[e]; ok {
			continue
		}
		if ds := joinDots(nil, ca, db, cb); len(ds) > 0 {
			change(e, ds)
		}
	}
	if len(changes) == 0 {
		if len(a) == 0 {
			return nil
		}
		return a
	}
	out := cloneElems(a, len(changes))
	for e, ds := range changes {
		if len(ds) == 0 {
			delete(out, e)
		} else {
			out[e] = ds
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// allDots returns every dot of an element store.
func allDots(elems map[string][]Dot) []Dot {
	var out []Dot
	for _, ds := range elems {
		out = append(out, ds...)
	}
	return out
}

// elementsHaveNode reports whether an element store has a dot of node.
func elementsHaveNode(elems map[string][]Dot, node NodeID) bool {
	for _, ds := range elems {
		for _, d := range ds {
			if d.Node == node {
				return true
			}
		}
	}
	return false
}

// pruneElements returns the element store without removed's dots; an element left
// without dots gets a fresh dot of into, minted from ctx (a context from clone, which
// it updates). Elements are visited in sorted order, so the result is deterministic.
// The store is returned unchanged (same map) when it has no dot of removed.
func pruneElements(elems map[string][]Dot, removed, into NodeID, ctx *CausalContext) map[string][]Dot {
	if !elementsHaveNode(elems, removed) {
		return elems
	}
	out := make(map[string][]Dot, len(elems))
	for _, e := range slices.Sorted(maps.Keys(elems)) {
		ds := withoutNodeDots(elems[e], removed)
		if len(ds) == 0 {
			d := ctx.Next(into)
			ctx.add(d)
			ds = []Dot{d}
		}
		out[e] = ds
	}
	return out
}

// cleanupElements returns the element store without removed's dots, dropping elements
// left without dots.
func cleanupElements(elems map[string][]Dot, removed NodeID) map[string][]Dot {
	if !elementsHaveNode(elems, removed) {
		return elems
	}
	out := make(map[string][]Dot, len(elems))
	for e, ds := range elems {
		if ds = withoutNodeDots(ds, removed); len(ds) > 0 {
			out[e] = ds
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// withoutNodeDots returns the dot set without node's dots (ds itself when it has none).
func withoutNodeDots(ds []Dot, node NodeID) []Dot {
	if !slices.ContainsFunc(ds, func(d Dot) bool { return d.Node == node }) {
		return ds
	}
	return slices.DeleteFunc(slices.Clone(ds), func(d Dot) bool { return d.Node == node })
}

// Encoding. A causal type's state holds its context as a node table and compact dots:
//
//	{1: [node IDs, ascending], 2: [version-vector counter per node, 0 for none],
//	 3: [cloud dots flattened: node index, counter, node index, counter, ...]}
//
// with the cloud sorted by node index, then counter, and the three omitted when the
// context is empty. The table lists exactly the context's nodes; dots in the store refer
// to nodes by their index in it, so a node ID is written once however many dots it has.

// contextState is the encoded form of a CausalContext.
type contextState struct {
	Nodes []NodeID `cbor:"1,keyasint,omitempty"`
	VV    []uint64 `cbor:"2,keyasint,omitempty"`
	Cloud []uint64 `cbor:"3,keyasint,omitempty"`
}

// dotEncoder writes dots as node indexes into the table of a context's nodes.
type dotEncoder struct {
	index map[NodeID]uint64
}

// encodeContext returns the encoded context (nil when empty) and the dot encoder for
// the store's dots, which must all be in c.
func encodeContext(c CausalContext) (*contextState, dotEncoder) {
	if c.isEmpty() {
		return nil, dotEncoder{}
	}
	nodes := c.Nodes()
	enc := dotEncoder{index: make(map[NodeID]uint64, len(nodes))}
	s := &contextState{Nodes: nodes, VV: make([]uint64, len(nodes))}
	for i, node := range nodes {
		enc.index[node] = uint64(i)
		s.VV[i] = c.vv[node]
	}
	if allZero(s.VV) {
		s.VV = nil
	}
	cloud := slices.SortedFunc(maps.Keys(c.cloud), compareDots)
	for _, d := range cloud {
		s.Cloud = append(s.Cloud, enc.index[d.Node], d.Counter)
	}
	return s, enc
}

func allZero(xs []uint64) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// dots returns a sorted dot set flattened: node index, counter, ...
func (e dotEncoder) dots(ds []Dot) []uint64 {
	out := make([]uint64, 0, 2*len(ds))
	for _, d := range ds {
		out = append(out, e.index[d.Node], d.Counter)
	}
	return out
}

// dotDecoder resolves node indexes of a decoded state against its context.
type dotDecoder struct {
	nodes []NodeID
	ctx   CausalContext
}

// decodeContext validates an encoded context (node IDs valid and strictly ascending,
// one counter per node, cloud dots with valid indexes and counters above 0, each node
// of the table with a dot) and returns it compacted, with the decoder for the store.
func decodeContext(s *contextState) (CausalContext, dotDecoder, error) {
	if s == nil {
		return CausalContext{}, dotDecoder{}, nil
	}
	for i, node := range s.Nodes {
		if err := checkNodeID(node); err != nil {
			return CausalContext{}, dotDecoder{}, fmt.Errorf("context node %d: %w", i, err)
		}
		if i > 0 && s.Nodes[i-1] >= node {
			return CausalContext{}, dotDecoder{}, errors.New("context nodes not in strictly ascending order")
		}
	}
	if s.VV != nil && len(s.VV) != len(s.Nodes) {
		return CausalContext{}, dotDecoder{}, fmt.Errorf("context has %d nodes and %d counters", len(s.Nodes), len(s.VV))
	}
	if len(s.Cloud)%2 != 0 {
		return CausalContext{}, dotDecoder{}, errors.New("context cloud has an odd length")
	}
	c := CausalContext{vv: map[NodeID]uint64{}}
	used := make([]bool, len(s.Nodes))
	for i, v := range s.VV {
		if v > 0 {
			c.vv[s.Nodes[i]] = v
			used[i] = true
		}
	}
	dec := dotDecoder{nodes: s.Nodes}
	for i := 0; i < len(s.Cloud); i += 2 {
		d, err := dec.dot(s.Cloud[i], s.Cloud[i+1])
		if err != nil {
			return CausalContext{}, dotDecoder{}, fmt.Errorf("context cloud: %w", err)
		}
		if i > 0 && (s.Cloud[i-2] > s.Cloud[i] || s.Cloud[i-2] == s.Cloud[i] && s.Cloud[i-1] >= s.Cloud[i+1]) {
			return CausalContext{}, dotDecoder{}, errors.New("context cloud not in strictly ascending order")
		}
		used[s.Cloud[i]] = true
		if c.cloud == nil {
			c.cloud = map[Dot]struct{}{}
		}
		c.cloud[d] = struct{}{}
	}
	for i, u := range used {
		if !u {
			return CausalContext{}, dotDecoder{}, fmt.Errorf("context node %q has no dot", s.Nodes[i])
		}
	}
	c.compact()
	if len(c.vv) == 0 {
		c.vv = nil
	}
	dec.ctx = c
	return c, dec, nil
}

// dot resolves one encoded dot.
func (dec dotDecoder) dot(index, counter uint64) (Dot, error) {
	if index >= uint64(len(dec.nodes)) {
		return Dot{}, fmt.Errorf("node index %d out of range", index)
	}
	if counter == 0 {
		return Dot{}, errors.New("dot with counter 0")
	}
	return Dot{Node: dec.nodes[index], Counter: counter}, nil
}

// dots resolves an encoded, non-empty dot set, which must be in strictly ascending
// order and in the context.
func (dec dotDecoder) dots(flat []uint64) ([]Dot, error) {
	if len(flat) == 0 {
		return nil, errors.New("empty dot set")
	}
	if len(flat)%2 != 0 {
		return nil, errors.New("dot set has an odd length")
	}
	out := make([]Dot, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		d, err := dec.dot(flat[i], flat[i+1])
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && compareDots(out[len(out)-1], d) >= 0 {
			return nil, errors.New("dot set not in strictly ascending order")
		}
		if !dec.ctx.Contains(d) {
			return nil, fmt.Errorf("dot %v is not in the context", d)
		}
		out = append(out, d)
	}
	return out, nil
}
