// Package wirecbor writes and reads, without reflection, the few CBOR (RFC 8949) shapes
// of shardhost's per-message wire formats: maps with small unsigned-integer keys whose
// values are unsigned integers, booleans, byte strings, text strings, arrays and maps.
//
// The writer produces the core deterministic encoding (RFC 8949 §4.2.1: shortest heads,
// definite lengths) that github.com/fxamacker/cbor's CoreDetEncOptions produces for the
// same values, so that a hand-written encoder stays byte-for-byte compatible with the
// reflective one it replaces (its callers test that). The reader is strict: it reports
// !ok for anything outside those shapes (indefinite lengths, tags, floats, negative
// integers, invalid UTF-8, truncation), and its callers then decode with the reflective
// decoder, which accepts or refuses the input as before. So the fast path changes how
// fast a message decodes, never whether it does.
package wirecbor

import "unicode/utf8"

// Major types of CBOR (RFC 8949 §3.1) that this package handles.
const (
	MajorUint  = 0
	MajorBytes = 2
	MajorText  = 3
	MajorArray = 4
	MajorMap   = 5
	// MajorSimple is the major type of false, true and null (RFC 8949 §3.3).
	MajorSimple = 7
)

// The simple values this package writes and reads.
const (
	simpleFalse = 20
	simpleTrue  = 21
	simpleNull  = 22
)

// AppendBool appends false or true.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, MajorSimple<<5|simpleTrue)
	}
	return append(b, MajorSimple<<5|simpleFalse)
}

// AppendNull appends null (how CoreDetEncOptions writes a nil slice).
func AppendNull(b []byte) []byte { return append(b, MajorSimple<<5|simpleNull) }

// AppendHead appends the head of a data item of major type major with argument n in its
// shortest form.
func AppendHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return append(b, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(b, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		return append(b, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// AppendUint appends the unsigned integer n.
func AppendUint(b []byte, n uint64) []byte { return AppendHead(b, MajorUint, n) }

// AppendText appends s as a text string. s should be valid UTF-8 (the reader refuses
// anything else, as the reflective decoder does).
func AppendText(b []byte, s string) []byte {
	b = AppendHead(b, MajorText, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends p as a byte string.
func AppendBytes(b []byte, p []byte) []byte {
	b = AppendHead(b, MajorBytes, uint64(len(p)))
	return append(b, p...)
}

// Reader reads data items from an encoding, front to back. Each method returns ok =
// false (and leaves the Reader unusable) when the next item is not what it reads.
type Reader struct {
	b   []byte
	off int
}

// NewReader returns a Reader of b. The Reader never modifies b, and what it returns
// does not alias b, but for TextBytes and BytesShared.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Done reports whether every byte has been read.
func (r *Reader) Done() bool { return r.off == len(r.b) }

// Head reads the head of the next data item: its major type and argument. It refuses
// indefinite lengths, the reserved additional information 28 to 30, and truncation.
func (r *Reader) Head() (major byte, n uint64, ok bool) {
	if r.off >= len(r.b) {
		return 0, 0, false
	}
	ib := r.b[r.off]
	major, ai := ib>>5, ib&0x1f
	r.off++
	if ai < 24 {
		return major, uint64(ai), true
	}
	var size int
	switch ai {
	case 24:
		size = 1
	case 25:
		size = 2
	case 26:
		size = 4
	case 27:
		size = 8
	default:
		return 0, 0, false
	}
	if len(r.b)-r.off < size {
		return 0, 0, false
	}
	for _, c := range r.b[r.off : r.off+size] {
		n = n<<8 | uint64(c)
	}
	r.off += size
	return major, n, true
}

// Bool reads false or true.
func (r *Reader) Bool() (v, ok bool) {
	if r.off >= len(r.b) {
		return false, false
	}
	switch r.b[r.off] {
	case MajorSimple<<5 | simpleFalse:
		v = false
	case MajorSimple<<5 | simpleTrue:
		v = true
	default:
		return false, false
	}
	r.off++
	return v, true
}

// Null reads a null if it is the next item, and reports whether it was; it reads
// nothing otherwise.
func (r *Reader) Null() bool {
	if r.off < len(r.b) && r.b[r.off] == MajorSimple<<5|simpleNull {
		r.off++
		return true
	}
	return false
}

// Uint reads an unsigned integer.
func (r *Reader) Uint() (uint64, bool) {
	major, n, ok := r.Head()
	if !ok || major != MajorUint {
		return 0, false
	}
	return n, true
}

// MapHead reads the head of a map and returns its number of pairs.
func (r *Reader) MapHead() (int, bool) { return r.countHead(MajorMap) }

// Fields reads a map whose keys are unsigned integers in ascending order, each at most
// max, and calls field with each key to read its value; field reports whether it
// could. Fields reports false on a key out of order or over max, a map of more than
// max pairs, or a field that failed. It reads a struct as fxamacker/cbor encodes one
// with integer keys (keyasint), in field order.
func (r *Reader) Fields(max uint64, field func(key uint64) bool) bool {
	n, ok := r.MapHead()
	if !ok || uint64(n) > max {
		return false
	}
	var last uint64
	for range n {
		k, ok := r.Uint()
		if !ok || k <= last || k > max || !field(k) {
			return false
		}
		last = k
	}
	return true
}

// ArrayHead reads the head of an array and returns its number of elements.
func (r *Reader) ArrayHead() (int, bool) { return r.countHead(MajorArray) }

// countHead reads a head of major type m whose count could fit in the rest of the
// input (every element takes at least one byte).
func (r *Reader) countHead(m byte) (int, bool) {
	major, n, ok := r.Head()
	if !ok || major != m || n > uint64(len(r.b)-r.off) {
		return 0, false
	}
	return int(n), true
}

// content reads the head of a string of major type m and returns its bytes, aliasing
// the input.
func (r *Reader) content(m byte) ([]byte, bool) {
	major, n, ok := r.Head()
	if !ok || major != m || n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, true
}

// Text reads a text string; invalid UTF-8 is refused.
func (r *Reader) Text() (string, bool) {
	p, ok := r.content(MajorText)
	if !ok || !utf8.Valid(p) {
		return "", false
	}
	return string(p), true
}

// TextCached is Text returning *last instead of a new string when the text equals it,
// and remembering the text in *last otherwise: repeated texts (a peer's address, a
// topic) cost no allocation.
func (r *Reader) TextCached(last *string) (string, bool) {
	p, ok := r.content(MajorText)
	if !ok {
		return "", false
	}
	if string(p) == *last { // no allocation: the compiler compares in place
		return *last, true
	}
	if !utf8.Valid(p) {
		return "", false
	}
	*last = string(p)
	return *last, true
}

// TextBytes reads a text string and returns its bytes, aliasing the input, so that the
// caller chooses how to make a string of them; invalid UTF-8 is refused.
func (r *Reader) TextBytes() ([]byte, bool) {
	p, ok := r.content(MajorText)
	if !ok || !utf8.Valid(p) {
		return nil, false
	}
	return p, true
}

// BytesShared reads a byte string and returns it aliasing the input (non-nil, even when
// empty): for a caller that owns the input and keeps it unchanged.
func (r *Reader) BytesShared() ([]byte, bool) {
	p, ok := r.content(MajorBytes)
	if !ok {
		return nil, false
	}
	return p[:len(p):len(p)], true
}

// Bytes reads a byte string into a new slice (non-nil, even when empty).
func (r *Reader) Bytes() ([]byte, bool) {
	p, ok := r.content(MajorBytes)
	if !ok {
		return nil, false
	}
	out := make([]byte, len(p))
	copy(out, p)
	return out, true
}
