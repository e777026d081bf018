// Package binread reads the hand-written binary encodings of shardhost's journal (a
// record's fields, a wasm entity's effects, a base's idempotency keys): bytes,
// varints and length-prefixed fields, from a slice, with the first failure kept.
package binread

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Reader reads from B. After a failure every read returns the zero value and Err
// returns the first failure. Byte slices it returns alias B.
type Reader struct {
	B   []byte
	err error
}

// New returns a reader of b.
func New(b []byte) *Reader { return &Reader{B: b} }

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records a failure (the first one stands) and stops the reads.
func (r *Reader) Fail(what string) {
	if r.err == nil {
		r.err = errors.New(what)
	}
	r.B = nil
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.B) < 1 {
		r.Fail("truncated")
		return 0
	}
	v := r.B[0]
	r.B = r.B[1:]
	return v
}

// Uvarint reads an unsigned varint (encoding/binary's).
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed varint (encoding/binary's).
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Fixed reads n bytes; after a failure it returns n zero bytes.
func (r *Reader) Fixed(n int) []byte {
	if len(r.B) < n {
		r.Fail("truncated")
		return make([]byte, n)
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// Bytes reads a field written as its length (a uvarint) then its bytes, refusing one
// longer than limit bytes.
func (r *Reader) Bytes(limit int) []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(limit) || n > uint64(len(r.B)) {
		r.Fail(fmt.Sprintf("a field of %d bytes", n))
		return nil
	}
	return r.Fixed(int(n))
}

// Done returns Err, or a failure if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && len(r.B) != 0 {
		return fmt.Errorf("%d bytes left over", len(r.B))
	}
	return r.err
}
