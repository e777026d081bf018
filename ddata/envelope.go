package ddata

import (
	"crypto/sha256"
	"fmt"
	"sort"
)

// pruning is the state of the pruning of one removed node's data in an entry (Akka's
// PruningInitialized and PruningPerformed). Initialized: the owner (the leader that
// started it) waits until every member has seen the marker; then it prunes and the
// marker becomes Performed until ObsoleteAt, after which it is dropped. While a marker
// is Performed, data arriving from replicas that missed the pruning is cleaned of the
// removed node before it is merged, so the node's old counts cannot come back.
type pruning struct {
	Owner      NodeID   `cbor:"1,keyasint"`
	Seen       []NodeID `cbor:"2,keyasint,omitempty"` // sorted
	Performed  bool     `cbor:"3,keyasint,omitempty"`
	ObsoleteAt int64    `cbor:"4,keyasint,omitempty"` // Unix ms, for Performed
}

// merge joins two markers for one removed node: performed wins over initialized; two
// initialized markers unite their seen sets (the lower owner wins a tie of owners);
// two performed markers keep the later obsolete time.
func (p pruning) merge(o pruning) pruning {
	switch {
	case p.Performed && o.Performed:
		if o.ObsoleteAt > p.ObsoleteAt {
			return o
		}
		return p
	case p.Performed:
		return p
	case o.Performed:
		return o
	}
	owner := p.Owner
	if o.Owner < owner {
		owner = o.Owner
	}
	return pruning{Owner: owner, Seen: unionNodes(p.Seen, o.Seen)}
}

func unionNodes(a, b []NodeID) []NodeID {
	set := map[NodeID]bool{}
	for _, n := range a {
		set[n] = true
	}
	for _, n := range b {
		set[n] = true
	}
	out := make([]NodeID, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// envelope is one key's entry in a replicator: its data, or a tombstone after Delete,
// and the pruning markers of removed nodes. Envelopes are immutable values.
type envelope struct {
	data    ReplicatedData // nil for a tombstone
	deleted bool
	pruning map[NodeID]pruning
	// usedAt is the last update anywhere, Unix ms (merged by max): members expire an
	// inactive key at about the same time, and gossip of an expired key does not bring
	// it back.
	usedAt int64
}

// merge joins two envelopes of one key. A tombstone wins. Data from the other side is
// first cleaned of nodes this side has pruned (performed markers), then merged; an
// error means the data types differ, and the receiver keeps its own.
func (e envelope) merge(o envelope) (envelope, error) {
	out := envelope{pruning: map[NodeID]pruning{}, usedAt: max(e.usedAt, o.usedAt)}
	for n, p := range e.pruning {
		out.pruning[n] = p
	}
	for n, p := range o.pruning {
		if cur, ok := out.pruning[n]; ok {
			out.pruning[n] = cur.merge(p)
		} else {
			out.pruning[n] = p
		}
	}
	if e.deleted || o.deleted {
		out.deleted = true
		return out, nil
	}
	a, b := cleaned(e.data, out.pruning), cleaned(o.data, out.pruning)
	switch {
	case a == nil:
		out.data = b
	case b == nil:
		out.data = a
	default:
		m, err := a.Merge(b)
		if err != nil {
			return e, err
		}
		out.data = m
	}
	return out, nil
}

// cleaned drops from d the data of nodes whose pruning is performed.
func cleaned(d ReplicatedData, markers map[NodeID]pruning) ReplicatedData {
	p, ok := d.(RemovedNodePruning)
	if !ok {
		return d
	}
	for n, m := range markers {
		if m.Performed && p.NeedPruningFrom(n) {
			if c, ok := p.PruningCleanup(n).(RemovedNodePruning); ok {
				p = c
			}
		}
	}
	return p
}

// envelopeWire is an envelope's encoding: deterministic CBOR.
type envelopeWire struct {
	Data    []byte         `cbor:"1,keyasint,omitempty"` // Encode(data)
	Deleted bool           `cbor:"2,keyasint,omitempty"`
	Pruning []pruningEntry `cbor:"3,keyasint,omitempty"` // sorted by Removed
	UsedAt  int64          `cbor:"4,keyasint,omitempty"`
}

type pruningEntry struct {
	Removed NodeID  `cbor:"1,keyasint"`
	Marker  pruning `cbor:"2,keyasint"`
}

func (e envelope) encode() ([]byte, error) {
	var w envelopeWire
	if e.data != nil && !e.deleted {
		b, err := Encode(e.data)
		if err != nil {
			return nil, err
		}
		w.Data = b
	}
	w.Deleted, w.UsedAt = e.deleted, e.usedAt
	for n, p := range e.pruning {
		w.Pruning = append(w.Pruning, pruningEntry{n, p})
	}
	sort.Slice(w.Pruning, func(i, j int) bool { return w.Pruning[i].Removed < w.Pruning[j].Removed })
	return encMode.Marshal(w)
}

func decodeEnvelope(b []byte) (envelope, error) {
	var w envelopeWire
	if err := decMode.Unmarshal(b, &w); err != nil {
		return envelope{}, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
	}
	e := envelope{deleted: w.Deleted, pruning: map[NodeID]pruning{}, usedAt: w.UsedAt}
	if !w.Deleted {
		if len(w.Data) == 0 {
			return envelope{}, fmt.Errorf("%w: envelope without data or tombstone", ErrMalformed)
		}
		d, err := Decode(w.Data)
		if err != nil {
			return envelope{}, err
		}
		e.data = d
	}
	for _, p := range w.Pruning {
		if p.Removed == "" || p.Marker.Owner == "" {
			return envelope{}, fmt.Errorf("%w: pruning marker without node", ErrMalformed)
		}
		e.pruning[p.Removed] = p.Marker
	}
	return e, nil
}

// digest is the SHA-256 of an envelope's encoding: gossip compares digests.
func (e envelope) digest() ([32]byte, error) {
	b, err := e.encode()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}
