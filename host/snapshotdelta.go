package host

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"

	"github.com/tetratelabs/wazero/api"
)

// Delta snapshots: what changed in an instance since a base snapshot that the state
// store holds, so that an every-message checkpoint saves a few 4 KiB blocks instead of
// the whole memory (host/checkpoint.go chooses between a base and a delta; docs/design.md,
// "Checkpoints"). A delta is cumulative: it holds every block that differs from its
// base, not only those written since the previous delta, so the store keeps one base
// and one delta per entity, and restoring is the base with the delta's blocks laid over
// it.

// deltaBlockSize is the unit of a delta: 4 KiB, the operating system's page, the unit
// in which writes are tracked (dirtypages.go).
const deltaBlockSize = 4 << 10

// blocksPerPage is the number of delta blocks in a wasm page.
const blocksPerPage = wasmPageSize / deltaBlockSize

// snapshotBase names a base snapshot in the store: a delta applies only to the base it
// names.
type snapshotBase struct {
	// Gen is the base's generation: one more than the base its writer restored from
	// (1 for a first one).
	Gen uint64
	// Nonce is random: it tells apart two bases of one generation, written by two
	// incarnations (a stale one fenced off later).
	Nonce [16]byte
}

func (b snapshotBase) String() string { return fmt.Sprintf("%d/%x", b.Gen, b.Nonce[:4]) }

// snapshotDelta is an instance's state as the blocks of memory that differ from a base
// snapshot, with the instance's memory size, globals and clocks (which it holds
// whole).
type snapshotDelta struct {
	ModuleDigest string
	Base         snapshotBase
	// Seq numbers the deltas of a base from 1.
	Seq         uint64
	MemoryPages uint32
	// Blocks are the blocks that differ from the base, in ascending Index order, each
	// deltaBlockSize bytes. Block Index covers bytes [Index*4 KiB, (Index+1)*4 KiB).
	Blocks  []deltaBlock
	Globals []snapshotGlobal
	Clock   snapshotClock
}

// deltaBlock is one 4 KiB block of memory.
type deltaBlock struct {
	Index uint32
	Data  []byte
}

// size is the bytes of memory the delta holds.
func (d *snapshotDelta) size() int { return len(d.Blocks) * deltaBlockSize }

// validate checks a delta's shape; maxPages caps its memory.
func (d *snapshotDelta) validate(maxPages uint32) error {
	switch {
	case !validDigest(d.ModuleDigest):
		return fmt.Errorf("%w: delta: module digest %q is not a hex SHA-256", ErrBadSnapshot, d.ModuleDigest)
	case d.MemoryPages > maxPages:
		return fmt.Errorf("%w: delta: %d pages of memory, over the cap of %d", ErrBadSnapshot, d.MemoryPages, maxPages)
	case d.Seq == 0:
		return fmt.Errorf("%w: delta: sequence number 0", ErrBadSnapshot)
	case d.Base.Gen == 0:
		return fmt.Errorf("%w: delta: base generation 0", ErrBadSnapshot)
	}
	blocks := uint64(d.MemoryPages) * blocksPerPage
	for k, b := range d.Blocks {
		switch {
		case uint64(b.Index) >= blocks:
			return fmt.Errorf("%w: delta: block %d beyond the memory's %d blocks", ErrBadSnapshot, b.Index, blocks)
		case k > 0 && b.Index <= d.Blocks[k-1].Index:
			return fmt.Errorf("%w: delta: block %d out of order", ErrBadSnapshot, b.Index)
		case len(b.Data) != deltaBlockSize:
			return fmt.Errorf("%w: delta: block %d has %d bytes", ErrBadSnapshot, b.Index, len(b.Data))
		}
	}
	return validGlobals(d.Globals)
}

// validGlobals checks globals as instanceSnapshot.validate does.
func validGlobals(globals []snapshotGlobal) error {
	for k, g := range globals {
		switch {
		case k > 0 && g.Index <= globals[k-1].Index:
			return fmt.Errorf("%w: global %d out of order", ErrBadSnapshot, g.Index)
		case g.Type != api.ValueTypeI32 && g.Type != api.ValueTypeI64 && g.Type != api.ValueTypeF32 && g.Type != api.ValueTypeF64:
			return fmt.Errorf("%w: global %d has type %#x", ErrBadSnapshot, g.Index, g.Type)
		case canonicalBits(g.Type, g.Bits) != g.Bits:
			return fmt.Errorf("%w: global %d (%s) has bits over 32", ErrBadSnapshot, g.Index, api.ValueTypeName(g.Type))
		}
	}
	return nil
}

// applyDelta returns the snapshot that base with d laid over it is: d's memory size,
// globals and clocks, base's pages with d's blocks written into them. base is not
// modified. Errors (ErrBadSnapshot): d is of another module, of a smaller memory than
// the base (wasm memories do not shrink), or has another number of globals.
func applyDelta(base *instanceSnapshot, d *snapshotDelta) (*instanceSnapshot, error) {
	switch {
	case d.ModuleDigest != base.ModuleDigest:
		return nil, fmt.Errorf("%w: delta of module %.12s…, base of %.12s…", ErrBadSnapshot, d.ModuleDigest, base.ModuleDigest)
	case d.MemoryPages < base.MemoryPages:
		return nil, fmt.Errorf("%w: delta of %d pages, its base has %d", ErrBadSnapshot, d.MemoryPages, base.MemoryPages)
	case len(d.Globals) != len(base.Globals):
		return nil, fmt.Errorf("%w: delta with %d globals, its base has %d", ErrBadSnapshot, len(d.Globals), len(base.Globals))
	}
	s := &instanceSnapshot{Version: base.Version, ModuleDigest: base.ModuleDigest, MemoryPages: d.MemoryPages,
		Globals: slices.Clone(d.Globals), Clock: d.Clock, Pages: make([]snapshotPage, 0, len(base.Pages)+len(d.Blocks))}
	next := 0 // in base.Pages
	for k := 0; k < len(d.Blocks); {
		p := d.Blocks[k].Index / blocksPerPage
		for next < len(base.Pages) && base.Pages[next].Index < p {
			s.Pages = append(s.Pages, base.Pages[next])
			next++
		}
		page := make([]byte, wasmPageSize)
		if next < len(base.Pages) && base.Pages[next].Index == p {
			copy(page, base.Pages[next].Data)
			next++
		}
		for ; k < len(d.Blocks) && d.Blocks[k].Index/blocksPerPage == p; k++ {
			off := int(d.Blocks[k].Index%blocksPerPage) * deltaBlockSize
			copy(page[off:off+deltaBlockSize], d.Blocks[k].Data)
		}
		if !isZeroPage(page) {
			s.Pages = append(s.Pages, snapshotPage{Index: p, Data: page})
		}
	}
	s.Pages = append(s.Pages, base.Pages[next:]...)
	return s, nil
}

// The encoding of a delta (integers unsigned LEB128 unless said otherwise):
//
//	magic      "SHSD"
//	version    1
//	digest     32 bytes: the module's SHA-256
//	base       generation, then the 16-byte nonce
//	seq        the delta's number among its base's
//	pages      memory size in 64 KiB pages
//	clock      monotonic, wall: zig-zag signed LEB128 nanoseconds
//	globals    count, then per global: index, type (1 byte), bits (8 bytes little endian)
//	block list count, then per block: its index minus (previous index + 1), and a
//	           bitmap of its 16 chunks of 256 bytes (2 bytes little endian, bit k set
//	           when chunk k is not all zero)
//	data       length, then the non-zero chunks' bytes, in order, uncompressed
//	checksum   CRC-32C (Castagnoli) of all the bytes before it, 4 bytes little endian
//
// The data is not compressed: DEFLATE took 90% of a Go counter's delta checkpoint
// (BenchmarkEveryMessageCheckpoint's CPU profile: about 400 µs for 6 blocks), leaving
// out zero chunks costs a comparison, and a delta is a few blocks.
const (
	deltaMagic   = "SHSD"
	deltaVersion = 1
	// deltaChunk is the unit of the zero chunks left out of a delta's data.
	deltaChunk          = 256
	deltaChunksPerBlock = deltaBlockSize / deltaChunk // 16: one bit each in a uint16
)

// deltaChunkMap returns the bitmap of a block's non-zero chunks.
func deltaChunkMap(block []byte) uint16 {
	return uint16(nonZeroChunks(block[:deltaBlockSize], deltaChunk))
}

// marshal encodes the delta; it validates it first (an error wrapping ErrBadSnapshot).
func (d *snapshotDelta) marshal() ([]byte, error) {
	if err := d.validate(maxWasmPages); err != nil {
		return nil, err
	}
	digest, _ := hex.DecodeString(d.ModuleDigest)
	b := make([]byte, 0, 96+len(d.Globals)*16+len(d.Blocks)*(1<<10))
	b = append(b, deltaMagic...)
	b = binary.AppendUvarint(b, deltaVersion)
	b = append(b, digest...)
	b = binary.AppendUvarint(b, d.Base.Gen)
	b = append(b, d.Base.Nonce[:]...)
	b = binary.AppendUvarint(b, d.Seq)
	b = binary.AppendUvarint(b, uint64(d.MemoryPages))
	b = binary.AppendVarint(b, d.Clock.Monotonic)
	b = binary.AppendVarint(b, d.Clock.Wall)
	b = appendGlobals(b, d.Globals)
	b = binary.AppendUvarint(b, uint64(len(d.Blocks)))
	next := uint32(0)
	data := 0
	maps := make([]uint16, len(d.Blocks))
	for k, blk := range d.Blocks {
		b = binary.AppendUvarint(b, uint64(blk.Index-next))
		next = blk.Index + 1
		maps[k] = deltaChunkMap(blk.Data)
		b = binary.LittleEndian.AppendUint16(b, maps[k])
		data += bits.OnesCount16(maps[k]) * deltaChunk
	}
	b = binary.AppendUvarint(b, uint64(data))
	b = slices.Grow(b, data+4)
	for k, blk := range d.Blocks {
		for c := 0; c < deltaChunksPerBlock; c++ {
			if maps[k]&(1<<c) != 0 {
				b = append(b, blk.Data[c*deltaChunk:(c+1)*deltaChunk]...)
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func appendGlobals(b []byte, globals []snapshotGlobal) []byte {
	b = binary.AppendUvarint(b, uint64(len(globals)))
	for _, g := range globals {
		b = binary.AppendUvarint(b, uint64(g.Index))
		b = append(b, g.Type)
		b = binary.LittleEndian.AppendUint64(b, g.Bits)
	}
	return b
}

func (d *decoder) globals() []snapshotGlobal {
	n := d.uvarint(uint64(len(d.b))) // each takes more than a byte
	if d.err != nil {
		return nil
	}
	out := make([]snapshotGlobal, 0, min(n, 1024))
	for k := uint64(0); k < n && d.err == nil; k++ {
		g := snapshotGlobal{Index: uint32(d.uvarint(1<<32 - 1))}
		if t := d.bytes(1); t != nil {
			g.Type = t[0]
		}
		if v := d.bytes(8); v != nil {
			g.Bits = binary.LittleEndian.Uint64(v)
		}
		out = append(out, g)
	}
	return out
}

// unmarshalDelta decodes and validates a delta marshal wrote; maxPages caps its memory.
// It allocates no more than the data decompresses to. Every error wraps ErrBadSnapshot.
func unmarshalDelta(b []byte, maxPages uint32) (*snapshotDelta, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: delta: "+format, append([]any{ErrBadSnapshot}, args...)...)
	}
	body, err := checkedBody(b, deltaMagic, "delta")
	if err != nil {
		return nil, err
	}
	dec := decoder{b: body, off: len(deltaMagic)}
	if v := dec.uvarint(1 << 32); dec.err == nil && v != deltaVersion {
		return nil, bad("format version %d, this host reads %d", v, deltaVersion)
	}
	d := &snapshotDelta{ModuleDigest: hex.EncodeToString(dec.bytes(32))}
	d.Base.Gen = dec.uvarint(1<<64 - 1)
	copy(d.Base.Nonce[:], dec.bytes(16))
	d.Seq = dec.uvarint(1<<64 - 1)
	d.MemoryPages = uint32(dec.uvarint(uint64(maxPages)))
	d.Clock.Monotonic = dec.varint()
	d.Clock.Wall = dec.varint()
	d.Globals = dec.globals()
	blocks := uint64(d.MemoryPages) * blocksPerPage
	n := dec.uvarint(blocks)
	if dec.err == nil {
		d.Blocks = make([]deltaBlock, 0, min(n, uint64(len(body)-dec.off)))
	}
	next := uint64(0)
	var maps []uint16
	size := uint64(0)
	for k := uint64(0); k < n && dec.err == nil; k++ {
		idx := next + dec.uvarint(blocks)
		if dec.err == nil && idx >= blocks {
			return nil, bad("block %d beyond the memory's %d blocks", idx, blocks)
		}
		var m uint16
		if v := dec.bytes(2); v != nil {
			m = binary.LittleEndian.Uint16(v)
		}
		d.Blocks = append(d.Blocks, deltaBlock{Index: uint32(idx)})
		maps = append(maps, m)
		size += uint64(bits.OnesCount16(m)) * deltaChunk
		next = idx + 1
	}
	length := dec.uvarint(uint64(len(body)))
	if dec.err == nil && length != size {
		return nil, bad("%d bytes of block data, the bitmaps say %d", length, size)
	}
	data := dec.bytes(int(length))
	if dec.err != nil {
		return nil, bad("%v", dec.err)
	}
	if dec.off != len(body) {
		return nil, bad("%d bytes after the block data", len(body)-dec.off)
	}
	// Allocated: the non-zero blocks, each at least a chunk of the data. Zero blocks
	// (written back to zero since the base) share the read-only zeroPage.
	nonZero := 0
	for _, m := range maps {
		if m != 0 {
			nonZero++
		}
	}
	slab := make([]byte, nonZero*deltaBlockSize)
	for k := range d.Blocks {
		if maps[k] == 0 {
			d.Blocks[k].Data = zeroPage[:deltaBlockSize:deltaBlockSize]
			continue
		}
		blk := slab[:deltaBlockSize:deltaBlockSize]
		slab = slab[deltaBlockSize:]
		for c := 0; c < deltaChunksPerBlock; c++ {
			if maps[k]&(1<<c) == 0 {
				continue
			}
			chunk := data[:deltaChunk]
			data = data[deltaChunk:]
			if bytes.Equal(chunk, zeroPage[:deltaChunk]) {
				return nil, bad("chunk %d of block %d is zero and listed", c, d.Blocks[k].Index)
			}
			copy(blk[c*deltaChunk:], chunk)
		}
		d.Blocks[k].Data = blk
	}
	if err := d.validate(maxPages); err != nil {
		return nil, err
	}
	return d, nil
}
