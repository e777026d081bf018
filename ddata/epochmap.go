package ddata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
)

// EpochMap is a map from integer keys to string values, each written with an epoch:
// a map of registers that keep, per key, the write with the higher epoch, and at equal
// epochs the lesser value (strings.Compare), so the empty value (a key cleared at an
// epoch) stands over every value written at that epoch. Each register's order is
// total, so merge (the per-key join) is commutative, associative and idempotent;
// concurrent writes of different keys are all kept. Keys are never removed.
//
// It is the shard coordinator's record of allocations (shard → region at a fencing
// epoch, the region empty after a handoff; docs/scale.md), made to be small and cheap
// to read back: its encoding (EpochMap.MarshalCBOR) holds each distinct value once and
// about 10 bytes an entry, and decoding allocates the entries' slice and the distinct
// values only. A Put copies the entries (O(n)): keep a map to a few thousand entries
// and split larger key spaces over several keys.
//
// An EpochMap is immutable; the zero value is the empty map. Its deltas (the entries
// written) need no causal delivery, and it keeps no per-node data.
type EpochMap struct {
	// entries is sorted by Key, without duplicates, never written after construction
	// and may be shared between values.
	entries []EpochEntry
}

// EpochEntry is one key of an EpochMap with its standing write.
type EpochEntry struct {
	Key   uint64
	Epoch uint64
	Value string
}

var (
	_ DeltaReplicatedData = EpochMap{}
	_ DeltaReplicatedData = (*EpochMap)(nil)
)

// wins reports whether e stands over o, an entry of the same key (see EpochMap).
func (e EpochEntry) wins(o EpochEntry) bool {
	if e.Epoch != o.Epoch {
		return e.Epoch > o.Epoch
	}
	return e.Value < o.Value
}

// Put writes value at epoch for key and returns the new map and its delta (the map of
// that one entry). The new map is the merge of m and the write: a write that does not
// stand over the key's current entry (a lower epoch, or at the same epoch a greater
// value) leaves m unchanged, and the delta still carries the write. O(Len()).
func (m EpochMap) Put(key, epoch uint64, value string) (EpochMap, EpochMap) {
	e := EpochEntry{Key: key, Epoch: epoch, Value: value}
	delta := EpochMap{entries: []EpochEntry{e}}
	i, found := slices.BinarySearchFunc(m.entries, key, func(x EpochEntry, k uint64) int {
		switch {
		case x.Key < k:
			return -1
		case x.Key > k:
			return 1
		}
		return 0
	})
	if found && !e.wins(m.entries[i]) {
		return m, delta
	}
	out := make([]EpochEntry, 0, len(m.entries)+1)
	out = append(out, m.entries[:i]...)
	out = append(out, e)
	if found {
		i++
	}
	out = append(out, m.entries[i:]...)
	return EpochMap{entries: out}, delta
}

// Get returns key's standing entry, and false when the map has none.
func (m EpochMap) Get(key uint64) (EpochEntry, bool) {
	i, found := slices.BinarySearchFunc(m.entries, key, func(x EpochEntry, k uint64) int {
		switch {
		case x.Key < k:
			return -1
		case x.Key > k:
			return 1
		}
		return 0
	})
	if !found {
		return EpochEntry{}, false
	}
	return m.entries[i], true
}

// All yields the entries in ascending key order, without copying them.
func (m EpochMap) All() iter.Seq[EpochEntry] {
	return func(yield func(EpochEntry) bool) {
		for _, e := range m.entries {
			if !yield(e) {
				return
			}
		}
	}
}

// Len returns the number of keys.
func (m EpochMap) Len() int { return len(m.entries) }

// Type returns TypeEpochMap.
func (m EpochMap) Type() DataType { return TypeEpochMap }

// Merge returns the per-key join of the two maps (see EpochMap), in O(n + m). other
// must be an EpochMap (or a non-nil *EpochMap); otherwise the error wraps
// ErrTypeMismatch.
func (m EpochMap) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[EpochMap, *EpochMap](TypeEpochMap, other)
	if err != nil {
		return nil, err
	}
	return m.join(o), nil
}

// join is Merge for two EpochMaps: one pass over both sorted lists.
func (m EpochMap) join(o EpochMap) EpochMap {
	switch {
	case len(o.entries) == 0:
		return m
	case len(m.entries) == 0:
		return o
	}
	out := make([]EpochEntry, 0, max(len(m.entries), len(o.entries)))
	a, b := m.entries, o.entries
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].Key < b[0].Key:
			out, a = append(out, a[0]), a[1:]
		case a[0].Key > b[0].Key:
			out, b = append(out, b[0]), b[1:]
		default:
			w := a[0]
			if b[0].wins(w) {
				w = b[0]
			}
			out, a, b = append(out, w), a[1:], b[1:]
		}
	}
	out = append(out, a...)
	return EpochMap{entries: append(out, b...)}
}

// Value returns the map for JSON: map[string]any from each key in decimal to
// {"epoch": uint64, "value": string}.
func (m EpochMap) Value() any {
	out := make(map[string]any, len(m.entries))
	for _, e := range m.entries {
		out[strconv.FormatUint(e.Key, 10)] = map[string]any{"epoch": e.Epoch, "value": e.Value}
	}
	return out
}

// RequiresCausalDeliveryOfDeltas returns false: a delta is a set of entries, each
// merged by its own order whatever the order of delivery.
func (m EpochMap) RequiresCausalDeliveryOfDeltas() bool { return false }

// epochMapFormat is the first byte of an EpochMap's compact encoding.
const epochMapFormat = 1

// MarshalCBOR encodes the map's state as a CBOR byte string holding its compact
// encoding (appendCompact). Encode calls it; Decode reads it, refusing (ErrMalformed)
// anything but the canonical form of that encoding.
func (m EpochMap) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(m.appendCompact(nil))
}

// appendCompact appends the map's compact encoding to b and returns it. The encoding
// is deterministic (equal maps, equal bytes), with unsigned varints
// (encoding/binary, minimal): the format byte 1; the count of distinct values, then
// each value (its length, its bytes) in ascending order; the count of entries, then
// for each entry in ascending key order its key (the first as it is, each next one as
// its distance to the previous key minus one), the index of its value in the table,
// and its epoch. decodeCompact reads it.
func (m EpochMap) appendCompact(b []byte) []byte {
	values := make([]string, 0, 8) // distinct, sorted as they come
	last := ""
	for i, e := range m.entries {
		if i > 0 && e.Value == last { // runs of one value are common
			continue
		}
		last = e.Value
		if j, found := slices.BinarySearch(values, e.Value); !found {
			values = slices.Insert(values, j, e.Value)
		}
	}
	size := 1 + 3*binary.MaxVarintLen64 + len(m.entries)*12
	for _, v := range values {
		size += binary.MaxVarintLen64 + len(v)
	}
	b = slices.Grow(b, size)
	b = append(b, epochMapFormat)
	b = binary.AppendUvarint(b, uint64(len(values)))
	for _, v := range values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	b = binary.AppendUvarint(b, uint64(len(m.entries)))
	at := -1
	var prev uint64
	for i, e := range m.entries {
		gap := e.Key
		if i > 0 {
			gap = e.Key - prev - 1
		}
		prev = e.Key
		b = binary.AppendUvarint(b, gap)
		if at < 0 || values[at] != e.Value {
			at, _ = slices.BinarySearch(values, e.Value)
		}
		b = binary.AppendUvarint(b, uint64(at))
		b = binary.AppendUvarint(b, e.Epoch)
	}
	return b
}

// errCompact is the error of a compact encoding that does not parse.
var errCompact = errors.New("bad compact encoding")

// decodeCompact reads the encoding appendCompact writes. It accepts only that
// encoding's canonical form (minimal varints, values ascending and each used, no
// trailing bytes), so what it accepts re-encodes to the same bytes; anything else
// gives an error (never a panic). It allocates the entries' slice and one string per
// distinct value, at most len(b) of each.
func decodeCompact(b []byte) (EpochMap, error) {
	r := compactReader{b: b}
	if format := r.byte(); r.err == nil && format != epochMapFormat {
		return EpochMap{}, fmt.Errorf("%w: format %d", errCompact, format)
	}
	nv := r.count(1)
	values := make([]string, nv)
	for i := range values {
		values[i] = string(r.bytes(r.count(1)))
		if i > 0 && r.err == nil && values[i] <= values[i-1] {
			return EpochMap{}, fmt.Errorf("%w: value %d not above value %d", errCompact, i, i-1)
		}
	}
	n := r.count(3)
	if r.err != nil {
		return EpochMap{}, r.err
	}
	var entries []EpochEntry
	if n > 0 {
		entries = make([]EpochEntry, n)
	}
	used := make([]bool, nv)
	var prev uint64
	for i := range entries {
		key := r.uvarint()
		if i > 0 {
			if prev == math.MaxUint64 || key > math.MaxUint64-prev-1 {
				return EpochMap{}, fmt.Errorf("%w: key %d out of range", errCompact, i)
			}
			key += prev + 1
		}
		prev = key
		v := r.uvarint()
		epoch := r.uvarint()
		if r.err != nil {
			return EpochMap{}, r.err
		}
		if v >= uint64(nv) {
			return EpochMap{}, fmt.Errorf("%w: entry %d: value %d of %d", errCompact, i, v, nv)
		}
		used[v] = true
		entries[i] = EpochEntry{Key: key, Epoch: epoch, Value: values[v]}
	}
	if r.err != nil {
		return EpochMap{}, r.err
	}
	if len(r.b) != 0 {
		return EpochMap{}, fmt.Errorf("%w: %d bytes after the entries", errCompact, len(r.b))
	}
	if i := slices.Index(used, false); i >= 0 {
		return EpochMap{}, fmt.Errorf("%w: value %d unused", errCompact, i)
	}
	return EpochMap{entries: entries}, nil
}

// compactReader reads a compact encoding; its first error sticks and later reads
// return zero values.
type compactReader struct {
	b   []byte
	err error
}

func (r *compactReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = fmt.Errorf("%w: truncated", errCompact)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// uvarint reads a minimal unsigned varint.
func (r *compactReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.err = fmt.Errorf("%w: truncated", errCompact)
		return 0
	case n < 0:
		r.err = fmt.Errorf("%w: varint overflows", errCompact)
		return 0
	case n > 1 && r.b[n-1] == 0:
		r.err = fmt.Errorf("%w: varint not minimal", errCompact)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least minSize bytes each, refusing one that the
// bytes left cannot hold (so that a count never makes the decoder allocate more than
// the input's size).
func (r *compactReader) count(minSize int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(len(r.b)/minSize) {
		r.err = fmt.Errorf("%w: %d items in %d bytes", errCompact, v, len(r.b))
		return 0
	}
	return int(v)
}

func (r *compactReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = fmt.Errorf("%w: truncated", errCompact)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func init() { registerDecoder(TypeEpochMap, decodeEpochMap) }

// decodeEpochMap decodes an EpochMap's state: a CBOR byte string holding the compact
// encoding.
func decodeEpochMap(b []byte) (ReplicatedData, error) {
	var compact []byte
	if err := decodeState(b, &compact); err != nil {
		return nil, err
	}
	if compact == nil {
		return nil, errNullState
	}
	return decodeCompact(compact)
}

// String returns the entries as key:epoch=value, for test failures and logs.
func (m EpochMap) String() string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, e := range m.entries {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d:%d=%q", e.Key, e.Epoch, e.Value)
	}
	sb.WriteByte('}')
	return sb.String()
}
