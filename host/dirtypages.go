package host

import (
	"hash/maphash"
	"math/bits"
)

// Which 4 KiB blocks of an instance's memory were written since the last checkpoint
// (checkpoint.go). Two ways:
//
//   - the kernel's: on Linux 6.7 and later, a memory in the arena (linearmem.go) is
//     write-protected through a userfaultfd in asynchronous mode (no handler: the first
//     write to a protected page only marks it written and lifts the protection), and
//     PAGEMAP_SCAN lists the written pages and protects them again in one system call
//     (dirtypages_linux.go). A checkpoint then costs a scan of the page table and one
//     minor fault per page written since the last; nothing reads the memory. Each
//     tracked slot is a mapping of its own while tracked (vm.max_map_count, 65,530 by
//     default, bounds them; past it registering fails and the instance is hashed).
//   - hashing, everywhere else: a 64-bit hash (hash/maphash, seeded per instance) of
//     each block, compared with the hash it had at the last call. It reads the whole
//     memory each time: about 1 ms for a Go guest's 3 MiB on a loaded 2-core machine.

// writeTracker reports the blocks of an instance's memory written since its last
// report. It is used on the instance's goroutine, between calls, under wasmRuntime.enter.
type writeTracker interface {
	// written appends to dst the index of every block of mem written since the last
	// call (or since the tracker started), mem being the instance's memory now (it
	// only grows), and returns dst. Blocks that memory.grow added are reported when
	// they are not zero. An error means the tracker no longer knows: the caller stops
	// it and saves a whole snapshot.
	written(mem []byte, dst []uint32) ([]uint32, error)
	// stop releases the tracker. Idempotent.
	stop()
}

// newWriteTracker starts tracking the writes to an instance's memory from now on: the
// kernel's way when the memory is in an arena slot and the system has it, hashing
// otherwise.
func (i *wasmInstance) newWriteTracker(mem []byte) writeTracker {
	if i.lm != nil && i.lm.arena != nil {
		if t, err := i.lm.startWriteTracking(len(mem)); err == nil {
			return t
		}
	}
	return newHashTracker(mem)
}

// hashTracker is the portable writeTracker: a hash of each block.
type hashTracker struct {
	seed   maphash.Seed
	hashes []uint64
	zero   uint64 // the hash of a zero block
}

func newHashTracker(mem []byte) *hashTracker {
	t := &hashTracker{seed: maphash.MakeSeed()}
	t.zero = maphash.Bytes(t.seed, zeroPage[:deltaBlockSize])
	t.hashes = make([]uint64, len(mem)/deltaBlockSize)
	for k := range t.hashes {
		t.hashes[k] = maphash.Bytes(t.seed, mem[k*deltaBlockSize:(k+1)*deltaBlockSize])
	}
	return t
}

func (t *hashTracker) written(mem []byte, dst []uint32) ([]uint32, error) {
	n := len(mem) / deltaBlockSize
	for k := 0; k < n; k++ {
		h := maphash.Bytes(t.seed, mem[k*deltaBlockSize:(k+1)*deltaBlockSize])
		if k >= len(t.hashes) {
			if h != t.zero {
				dst = append(dst, uint32(k))
			}
			t.hashes = append(t.hashes, h)
			continue
		}
		if h != t.hashes[k] {
			dst = append(dst, uint32(k))
			t.hashes[k] = h
		}
	}
	return dst, nil
}

func (t *hashTracker) stop() { t.hashes = nil }

// blockSet is a set of block indices.
type blockSet struct {
	bits []uint64
	n    int
}

func (s *blockSet) add(k uint32) {
	w := int(k / 64)
	if w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits))...)
	}
	if s.bits[w]&(1<<(k%64)) == 0 {
		s.bits[w] |= 1 << (k % 64)
		s.n++
	}
}

func (s *blockSet) clear() {
	clear(s.bits)
	s.n = 0
}

// appendTo appends the set's blocks to dst in ascending order.
func (s *blockSet) appendTo(dst []uint32) []uint32 {
	for w, word := range s.bits {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			dst = append(dst, uint32(w*64+b))
			word &^= 1 << b
		}
	}
	return dst
}
