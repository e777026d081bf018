package host

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/host/internal/wasmbin"
)

// Transparent snapshots: the whole state of an instance between two messages, taken
// without the guest's help, and a new instance of the same module started from it on
// any host. The state of an instance is its linear memory and its mutable globals
// (which the deploy-time rewrite, wasmbin.Rewrite, exports), plus the guest's virtual
// clocks, which the host keeps per instance. What a snapshot does not hold is listed on
// wasmInstance.Snapshot.

const (
	// snapshotVersion is the version of the snapshot format this host writes and reads.
	snapshotVersion = 1
	// wasmPageSize is the size of a page of linear memory: 64 KiB.
	wasmPageSize = 1 << 16
	// maxWasmPages is the most pages a wasm32 memory has (4 GiB).
	maxWasmPages = 1 << 16
	// fakeEpochNanos is where a guest's wall clock starts: wazero's default fake clock,
	// midnight UTC 2022-01-01.
	fakeEpochNanos = 1640995200 * int64(time.Second)
	// clockStep is how far a guest clock moves at each reading, as wazero's fakes do.
	clockStep = int64(time.Millisecond)
)

// instanceSnapshot is the complete state of an instance between two messages. Its
// fields are what a store persists; MarshalBinary and unmarshalSnapshot give it a
// compact, checksummed encoding. An instanceSnapshot is a value: it shares no memory
// with an instance.
type instanceSnapshot struct {
	// Version is snapshotVersion.
	Version uint32
	// ModuleDigest is the hex SHA-256 of the module it was taken from (wasmModule.Digest:
	// the module as uploaded, before the deploy-time rewrite). It restores only into
	// that module.
	ModuleDigest string
	// MemoryPages is the size of the linear memory in 64 KiB pages.
	MemoryPages uint32
	// Pages are the memory's pages that are not all zero, in ascending Index order,
	// each wasmPageSize bytes. Pages not listed are zero.
	Pages []snapshotPage
	// Globals are the values of every mutable global the module defines, in ascending
	// Index order.
	Globals []snapshotGlobal
	// Clock is where the guest's clocks stand.
	Clock snapshotClock
}

// snapshotPage is one non-zero page of linear memory.
type snapshotPage struct {
	// Index is the page number: the page covers bytes [Index*64 KiB, (Index+1)*64 KiB).
	Index uint32
	// Data is the page's wasmPageSize bytes.
	Data []byte
}

// snapshotGlobal is the value of one mutable global.
type snapshotGlobal struct {
	// Index is the global's index in the module's global index space (imported globals
	// first); the rewrite exports it as "shardhost_g<Index>" unless the module exported
	// it already.
	Index uint32
	// Type is api.ValueTypeI32, I64, F32 or F64.
	Type api.ValueType
	// Bits is the value as wazero encodes it (api.EncodeI32 etc.): 32-bit types use
	// the low 32 bits, the high ones are zero.
	Bits uint64
}

// snapshotClock is the state of a guest's clocks. A guest sees wazero's deterministic
// fake clocks (abi/SPEC.md), which move 1 ms at each reading; the host keeps them per
// instance so that time does not jump back when an entity moves.
type snapshotClock struct {
	// Monotonic is the next reading of the monotonic clock, in nanoseconds.
	Monotonic int64
	// Wall is the next reading of the wall clock, in nanoseconds since the Unix epoch.
	Wall int64
}

// SparseSize returns the bytes of memory the snapshot holds: its non-zero pages.
func (s *instanceSnapshot) SparseSize() int { return len(s.Pages) * wasmPageSize }

// guestClock is an instance's clocks, with the semantics of wazero's fake clocks: the
// first monotonic reading is 0 and the first wall reading fakeEpochNanos, and every
// reading adds 1 ms.
type guestClock struct {
	mono, wall atomic.Int64 // the next readings
}

func (c *guestClock) reset(s snapshotClock) {
	c.mono.Store(s.Monotonic)
	c.wall.Store(s.Wall)
}

func (c *guestClock) state() snapshotClock {
	return snapshotClock{Monotonic: c.mono.Load(), Wall: c.wall.Load()}
}

// nanotime implements sys.Nanotime.
func (c *guestClock) nanotime() int64 { return c.mono.Add(clockStep) - clockStep }

// walltime implements sys.Walltime.
func (c *guestClock) walltime() (sec int64, nsec int32) {
	t := c.wall.Add(clockStep) - clockStep
	return t / 1e9, int32(t % 1e9)
}

// moduleSnapshots is what a wasmModule knows for taking and restoring snapshots.
type moduleSnapshots struct {
	// globals are the module's mutable globals, in index order, each with the name of
	// an export that reaches it in the compiled (rewritten) module.
	globals []wasmbin.Global

	mu sync.Mutex
	// imageWasm is the restore image (see wasmbin.RestoreImage) until it is compiled; nil when
	// the image is unsound for this module.
	imageWasm []byte
	// sound: the module has a restore image (wasmbin.RestoreImage).
	sound     bool
	image     wazero.CompiledModule
	imageErr  error         // the image did not compile
	compiling chan struct{} // closed when the image's compilation ends
	closed    bool
}

// newModuleSnapshots prepares snapshots of a module; wasm is the rewritten module.
func newModuleSnapshots(wasm []byte, globals []wasmbin.Global) (*moduleSnapshots, error) {
	image, sound, err := wasmbin.RestoreImage(wasm)
	if err != nil {
		return nil, err
	}
	if !sound {
		image = nil
	}
	return &moduleSnapshots{globals: globals, imageWasm: image, sound: sound}, nil
}

// restoreImage returns the compiled restore image, compiling it (or waiting for the
// compilation under way) if needed; nil (and no error) when the module has no sound
// image.
func (ms *moduleSnapshots) restoreImage(ctx context.Context, rt *wasmRuntime) (wazero.CompiledModule, error) {
	done := ms.startImage(rt)
	if done == nil {
		ms.mu.Lock()
		defer ms.mu.Unlock()
		return ms.image, ms.imageErr
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.image, ms.imageErr
}

// readyImage returns the compiled restore image if it is ready, and nil otherwise; then
// it starts compiling it in the background, so that a restore never waits for a
// compilation (seconds for a Go guest without a cache): until the image is ready,
// restores take the path that runs the module's initialisation.
func (ms *moduleSnapshots) readyImage(rt *wasmRuntime) wazero.CompiledModule {
	ms.startImage(rt)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.image
}

// startImage starts compiling the restore image unless it is compiled, under way or
// unsound; it returns the channel closed when the compilation under way ends, nil when
// none is.
func (ms *moduleSnapshots) startImage(rt *wasmRuntime) <-chan struct{} {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.compiling != nil {
		select {
		case <-ms.compiling:
			return nil
		default:
			return ms.compiling
		}
	}
	if ms.image != nil || ms.imageWasm == nil || ms.closed {
		return nil
	}
	done := make(chan struct{})
	ms.compiling = done
	wasm := ms.imageWasm
	started := rt.bg.Go(func() {
		defer close(done)
		c, err := rt.r.CompileModule(context.Background(), wasm)
		ms.mu.Lock()
		defer ms.mu.Unlock()
		switch {
		case err != nil:
			ms.imageErr = fmt.Errorf("host: compiling the restore image: %w", err)
		case ms.closed:
			c.Close(context.Background())
		default:
			ms.image, ms.imageWasm = c, nil
		}
	})
	if !started { // the runtime is closing: no image, for good
		ms.imageErr = fmt.Errorf("%w: compiling the restore image", ErrRuntimeClosed)
		close(done)
	}
	return done
}

func (ms *moduleSnapshots) close(ctx context.Context) error {
	if ms == nil {
		return nil
	}
	ms.mu.Lock()
	ms.closed = true
	done := ms.compiling
	ms.mu.Unlock()
	if done != nil {
		<-done
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.image == nil {
		return nil
	}
	err := ms.image.Close(ctx)
	ms.image = nil
	return err
}

// PrepareRestore compiles the variant of the module that Restore instantiates, and
// waits for it (about as long as compiling the module; a Go guest takes 0.5–1.3 s
// without a compilation cache, 20–30 ms with one). The first Restore starts it in the
// background and restores by the slower path until it is ready. Compile errors wrap
// ErrInvalidModule.
func (m *wasmModule) PrepareRestore(ctx context.Context) error {
	if m.snap == nil {
		return nil
	}
	if _, err := m.snap.restoreImage(ctx, m.rt); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	return nil
}

// Snapshot captures the instance's complete state: the non-zero pages of its linear
// memory, every mutable global the module defines and the guest's clocks. It is taken
// between messages, on the goroutine that delivers them; it copies (a Go counter: about
// 1 ms for 2.1 MB of non-zero pages out of 2.9 MB; a Rust guest: 0.1 ms for 192 KiB)
// and the instance goes on unchanged.
//
// Errors: ErrInstanceClosed after Close or a failed message; ErrNotSnapshottable during
// a message (from a host function), or for a module with mutable reference or v128
// globals.
//
// Not in a snapshot, because it is not the guest's: the host-side state of the
// instance. WASI's file table (the host preopens nothing, so it is the same everywhere),
// the random source (wazero's deterministic default, which a restored instance reads
// again from its start), a partial line of stdout or stderr not yet logged, the
// entity's type and ID (the guest SDK caches them in memory: restore a snapshot under
// the entity it was taken from). Tables and the dropped state of passive segments are
// not captured either: Go, TinyGo and Rust guests do not change them after instantiation.
func (i *wasmInstance) Snapshot() (*instanceSnapshot, error) {
	if i.closed {
		return nil, ErrInstanceClosed
	}
	if i.inCall {
		return nil, fmt.Errorf("%w: %s is handling a message", ErrNotSnapshottable, i.name)
	}
	if i.m.snap == nil {
		return nil, fmt.Errorf("%w: module compiled without snapshot support", ErrNotSnapshottable)
	}
	if err := i.bindGlobals(); err != nil {
		return nil, err
	}
	if !i.m.rt.enter() {
		return nil, fmt.Errorf("%w: %s", ErrRuntimeClosed, i.name)
	}
	defer i.m.rt.exit()
	s := &instanceSnapshot{
		Version:      snapshotVersion,
		ModuleDigest: i.m.Digest,
		Clock:        i.clock.state(),
	}
	size := i.mem.Size()
	mem, ok := i.mem.Read(0, size)
	if !ok || size%wasmPageSize != 0 {
		return nil, fmt.Errorf("%w: memory of %d bytes is not whole pages", ErrNotSnapshottable, size)
	}
	s.MemoryPages = size / wasmPageSize
	var nonZero []uint32
	for p := uint32(0); p < s.MemoryPages; p++ {
		if !isZeroPage(pageOf(mem, p)) {
			nonZero = append(nonZero, p)
		}
	}
	slab := make([]byte, len(nonZero)*wasmPageSize)
	s.Pages = make([]snapshotPage, len(nonZero))
	for k, p := range nonZero {
		data := slab[k*wasmPageSize : (k+1)*wasmPageSize : (k+1)*wasmPageSize]
		copy(data, pageOf(mem, p))
		s.Pages[k] = snapshotPage{Index: p, Data: data}
	}
	s.Globals = make([]snapshotGlobal, len(i.m.snap.globals))
	for k, g := range i.m.snap.globals {
		s.Globals[k] = snapshotGlobal{Index: g.Index, Type: g.Type, Bits: canonicalBits(g.Type, i.snapGlobals[k].Get())}
	}
	return s, nil
}

// bindGlobals looks up the instance's mutable globals once.
func (i *wasmInstance) bindGlobals() error {
	if i.snapGlobals != nil || len(i.m.snap.globals) == 0 {
		return nil
	}
	globals := make([]api.MutableGlobal, len(i.m.snap.globals))
	for k, g := range i.m.snap.globals {
		switch g.Type {
		case api.ValueTypeI32, api.ValueTypeI64, api.ValueTypeF32, api.ValueTypeF64:
		default:
			return fmt.Errorf("%w: global %d is a mutable %s", ErrNotSnapshottable, g.Index, api.ValueTypeName(g.Type))
		}
		mg, ok := i.mod.ExportedGlobal(g.Export).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("%w: global %d is not exported as a mutable global %q", ErrNotSnapshottable, g.Index, g.Export)
		}
		globals[k] = mg
	}
	i.snapGlobals = globals
	return nil
}

func canonicalBits(t api.ValueType, v uint64) uint64 {
	if t == api.ValueTypeI32 || t == api.ValueTypeF32 {
		return uint64(uint32(v))
	}
	return v
}

// zeroPage is compared against; never written.
var zeroPage [wasmPageSize]byte

func isZeroPage(p []byte) bool { return bytes.Equal(p, zeroPage[:]) }

// pageOf returns page p of a memory.
func pageOf(mem []byte, p uint32) []byte {
	off := int(p) * wasmPageSize
	return mem[off : off+wasmPageSize : off+wasmPageSize]
}

// Pages are encoded in chunks of 1 KiB, and only the chunks that are not all zero.
const (
	chunkSize     = 1 << 10
	chunksPerPage = wasmPageSize / chunkSize // 64: one bit each in a uint64
)

// chunkMap returns the bitmap of a page's non-zero chunks.
func chunkMap(page []byte) uint64 { return nonZeroChunks(page[:wasmPageSize], chunkSize) }

// nonZeroChunks returns the bitmap of b's chunks of size bytes that are not all zero:
// bit c for chunk c. b holds at most 64 chunks, size at most a wasm page.
func nonZeroChunks(b []byte, size int) uint64 {
	var m uint64
	for c := 0; c*size < len(b); c++ {
		if !bytes.Equal(b[c*size:(c+1)*size], zeroPage[:size]) {
			m |= 1 << c
		}
	}
	return m
}

// Restore starts a new instance of the module for the entity entityType/entityID from a
// snapshot of an instance of the same module, taken on this host or any other: the new
// instance's memory, mutable globals and clocks are those of the snapshot, and the next
// message finds the entity as the last one left it. It runs none of the module's
// initialisation when the module's restore image is ready (a variant of the module
// without data segments or start function, compiled in the background from the first
// Restore on, or by PrepareRestore); until then, and for a module whose code could
// change state a snapshot does not hold, the instance is made as by Instantiate,
// running _initialize, and then overwritten.
//
// Errors: ErrBadSnapshot when the snapshot is of another module (digest), of another
// format version, malformed, or larger than the runtime's memory cap; otherwise those of
// Instantiate. The snapshot is not modified and may be restored again.
func (m *wasmModule) Restore(ctx context.Context, entityType, entityID string, s *instanceSnapshot) (*wasmInstance, error) {
	return m.restore(ctx, entityType, entityID, s, false)
}

// restorePlan is how instantiate makes a restored instance.
type restorePlan struct {
	snap  *instanceSnapshot
	code  *moduleCode
	start []wasmbin.Op
	// zeroed says the instance's memory is all zero after instantiation.
	zeroed bool
}

// restore is Restore; initialise forces the path that runs the module's initialisation.
func (m *wasmModule) restore(ctx context.Context, entityType, entityID string, s *instanceSnapshot, initialise bool) (*wasmInstance, error) {
	if err := m.checkSnapshot(s); err != nil {
		return nil, err
	}
	plan := &restorePlan{snap: s, code: m.code.Load(), start: m.start}
	// The restore image is compiled code: it is compiled once the module is, so that
	// the two compilations do not compete (a restore before that takes the slower path).
	if !initialise && !plan.code.interpreted {
		if image := m.snap.readyImage(m.rt); image != nil {
			plan.code, plan.start, plan.zeroed = &moduleCode{r: m.rt.r, compiled: image}, nil, true
		}
	}
	return m.instantiate(ctx, entityType, entityID, plan, true)
}

// checkSnapshot reports (as ErrBadSnapshot) a snapshot that cannot be restored into m.
func (m *wasmModule) checkSnapshot(s *instanceSnapshot) error {
	if s == nil {
		return fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	if err := s.validate(uint32(m.rt.cfg.MemoryLimit / wasmPageSize)); err != nil {
		return err
	}
	if s.ModuleDigest != m.Digest {
		return fmt.Errorf("%w: taken from module %.12s…, not %.12s…", ErrBadSnapshot, s.ModuleDigest, m.Digest)
	}
	if m.snap == nil {
		return fmt.Errorf("%w: module compiled without snapshot support", ErrBadSnapshot)
	}
	if len(s.Globals) != len(m.snap.globals) {
		return fmt.Errorf("%w: %d globals, the module has %d mutable globals", ErrBadSnapshot, len(s.Globals), len(m.snap.globals))
	}
	for k, g := range m.snap.globals {
		if sg := s.Globals[k]; sg.Index != g.Index || sg.Type != g.Type {
			return fmt.Errorf("%w: global %d of type %s where the module has global %d of type %s", ErrBadSnapshot,
				sg.Index, api.ValueTypeName(sg.Type), g.Index, api.ValueTypeName(g.Type))
		}
	}
	return nil
}

// load writes a snapshot into a new instance: grows its memory to the snapshot's size,
// writes the non-zero pages, zeroes the others, sets the mutable globals and the clocks.
func (i *wasmInstance) load(plan *restorePlan) error {
	s := plan.snap
	if err := i.bindGlobals(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	have := i.mem.Size() / wasmPageSize
	if s.MemoryPages < have {
		return fmt.Errorf("%w: %d pages of memory, a new instance already has %d", ErrBadSnapshot, s.MemoryPages, have)
	}
	if s.MemoryPages > have {
		if _, ok := i.mem.Grow(s.MemoryPages - have); !ok {
			return fmt.Errorf("%w: memory cannot grow to %d pages", ErrBadSnapshot, s.MemoryPages)
		}
	}
	mem, ok := i.mem.Read(0, i.mem.Size())
	if !ok || uint64(len(mem)) != uint64(s.MemoryPages)*wasmPageSize {
		return fmt.Errorf("%w: memory is %d bytes after growing to %d pages", ErrBadSnapshot, len(mem), s.MemoryPages)
	}
	next := 0
	for p := uint32(0); p < s.MemoryPages; p++ {
		page := pageOf(mem, p)
		if next < len(s.Pages) && s.Pages[next].Index == p {
			copy(page, s.Pages[next].Data)
			next++
		} else if !plan.zeroed && p < have {
			clear(page) // pages grown past the new instance's size are zero already
		}
	}
	for k, g := range s.Globals {
		i.snapGlobals[k].Set(g.Bits)
	}
	i.clock.reset(s.Clock)
	return nil
}

// validate checks a snapshot's shape; maxPages caps its memory.
func (s *instanceSnapshot) validate(maxPages uint32) error {
	switch {
	case s.Version != snapshotVersion:
		return fmt.Errorf("%w: format version %d, this host reads %d", ErrBadSnapshot, s.Version, snapshotVersion)
	case !validDigest(s.ModuleDigest):
		return fmt.Errorf("%w: module digest %q is not a hex SHA-256", ErrBadSnapshot, s.ModuleDigest)
	case s.MemoryPages > maxPages:
		return fmt.Errorf("%w: %d pages of memory, over the cap of %d", ErrBadSnapshot, s.MemoryPages, maxPages)
	case len(s.Pages) > int(s.MemoryPages):
		return fmt.Errorf("%w: %d non-zero pages in a memory of %d", ErrBadSnapshot, len(s.Pages), s.MemoryPages)
	}
	for k, p := range s.Pages {
		switch {
		case p.Index >= s.MemoryPages:
			return fmt.Errorf("%w: page %d beyond the memory's %d pages", ErrBadSnapshot, p.Index, s.MemoryPages)
		case k > 0 && p.Index <= s.Pages[k-1].Index:
			return fmt.Errorf("%w: page %d out of order", ErrBadSnapshot, p.Index)
		case len(p.Data) != wasmPageSize:
			return fmt.Errorf("%w: page %d has %d bytes", ErrBadSnapshot, p.Index, len(p.Data))
		}
	}
	for k, g := range s.Globals {
		switch {
		case k > 0 && g.Index <= s.Globals[k-1].Index:
			return fmt.Errorf("%w: global %d out of order", ErrBadSnapshot, g.Index)
		case g.Type != api.ValueTypeI32 && g.Type != api.ValueTypeI64 && g.Type != api.ValueTypeF32 && g.Type != api.ValueTypeF64:
			return fmt.Errorf("%w: global %d has type %#x", ErrBadSnapshot, g.Index, g.Type)
		case canonicalBits(g.Type, g.Bits) != g.Bits:
			return fmt.Errorf("%w: global %d (%s) has bits over 32", ErrBadSnapshot, g.Index, api.ValueTypeName(g.Type))
		}
	}
	return nil
}

// The encoding (all integers unsigned LEB128 unless said otherwise):
//
//	magic      "SHSN"
//	version    1
//	digest     32 bytes: the module's SHA-256
//	pages      memory size in 64 KiB pages
//	clock      monotonic, wall: zig-zag signed LEB128 nanoseconds
//	globals    count, then per global: index, type (1 byte), bits (8 bytes little endian)
//	page list  count, then per non-zero page: its index minus (previous index + 1), and
//	           a bitmap of its 64 chunks of 1 KiB (8 bytes little endian, bit k set when
//	           chunk k is not all zero)
//	data       length, then a raw DEFLATE stream (RFC 1951) of the non-zero chunks'
//	           bytes, in order
//	checksum   CRC-32C (Castagnoli) of all the bytes before it, 4 bytes little endian
//
// Leaving zero chunks out of the stream makes compression several times faster for a
// memory that is mostly zero inside its non-zero pages (a Rust guest's).
//
// The same snapshot always encodes to the same bytes with a given build (compress/flate
// is deterministic; another Go release may compress differently, and any encoding
// decodes).
const snapshotMagic = "SHSN"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshotCompression is the flate level: BestSpeed compresses a Go guest's 1.2 MB of
// non-zero pages in a few milliseconds to about a quarter.
const snapshotCompression = flate.BestSpeed

// flateWriters keeps compressors for reuse: a new one allocates and clears about 1 MiB,
// more than compressing a Rust guest's snapshot costs. (A cache, not state: any writer
// from it compresses alike.)
var flateWriters sync.Pool

// MarshalBinary encodes the snapshot (format above). A snapshot that fails validation
// (as unmarshalSnapshot would) is an error wrapping ErrBadSnapshot.
func (s *instanceSnapshot) MarshalBinary() ([]byte, error) {
	if err := s.validate(maxWasmPages); err != nil {
		return nil, err
	}
	return s.encode()
}

// encode is MarshalBinary without the validation.
func (s *instanceSnapshot) encode() ([]byte, error) {
	digest, _ := hex.DecodeString(s.ModuleDigest)
	digest = append(digest, make([]byte, 32)...)[:32]
	b := make([]byte, 0, 64+len(s.Globals)*16+len(s.Pages)*(4<<10))
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, uint64(s.Version))
	b = append(b, digest...)
	b = binary.AppendUvarint(b, uint64(s.MemoryPages))
	b = binary.AppendVarint(b, s.Clock.Monotonic)
	b = binary.AppendVarint(b, s.Clock.Wall)
	b = binary.AppendUvarint(b, uint64(len(s.Globals)))
	for _, g := range s.Globals {
		b = binary.AppendUvarint(b, uint64(g.Index))
		b = append(b, g.Type)
		b = binary.LittleEndian.AppendUint64(b, g.Bits)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Pages)))
	next := uint32(0)
	maps := make([]uint64, len(s.Pages))
	for k, p := range s.Pages {
		b = binary.AppendUvarint(b, uint64(p.Index)-uint64(next))
		next = p.Index + 1
		maps[k] = chunkMap(p.Data)
		b = binary.LittleEndian.AppendUint64(b, maps[k])
	}
	var data bytes.Buffer
	w, _ := flateWriters.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriter(&data, snapshotCompression); err != nil {
			return nil, err
		}
	} else {
		w.Reset(&data)
	}
	defer flateWriters.Put(w)
	for k, p := range s.Pages {
		for c := 0; c < chunksPerPage; c++ {
			if maps[k]&(1<<c) != 0 {
				w.Write(p.Data[c*chunkSize : (c+1)*chunkSize]) // a bytes.Buffer does not fail
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(b, uint64(data.Len()))
	b = append(b, data.Bytes()...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// unmarshalSnapshot decodes a snapshot MarshalBinary wrote and validates it: checksum,
// version, bounds, sizes and order, up to the 65,536 pages of wasm32 (wasmRuntime's
// unmarshalSnapshot applies the runtime's memory cap). It allocates no more than the
// data actually decompresses to. Every error wraps ErrBadSnapshot.
func unmarshalSnapshot(b []byte) (*instanceSnapshot, error) { return decodeSnapshot(b, maxWasmPages) }

// unmarshalSnapshot is the package's unmarshalSnapshot, refusing a snapshot whose memory
// is larger than this runtime's cap (RuntimeConfig.MemoryLimit).
func (rt *wasmRuntime) UnmarshalSnapshot(b []byte) (*instanceSnapshot, error) {
	return decodeSnapshot(b, uint32(rt.cfg.MemoryLimit/wasmPageSize))
}

// checkedBody returns b without its trailing CRC-32C (Castagnoli) once b starts with
// magic and the checksum matches; otherwise an error wrapping ErrBadSnapshot that names
// what b should be ("snapshot", "delta").
func checkedBody(b []byte, magic, what string) ([]byte, error) {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a %s (no %q header)", ErrBadSnapshot, what, magic)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: %s: checksum mismatch (truncated or corrupted)", ErrBadSnapshot, what)
	}
	return body, nil
}

func decodeSnapshot(b []byte, maxPages uint32) (*instanceSnapshot, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
	}
	body, err := checkedBody(b, snapshotMagic, "snapshot")
	if err != nil {
		return nil, err
	}
	d := decoder{b: body, off: len(snapshotMagic)}
	s := &instanceSnapshot{}
	version := d.uvarint(1 << 32)
	if d.err == nil && version != snapshotVersion {
		return nil, bad("format version %d, this host reads %d", version, snapshotVersion)
	}
	s.Version = uint32(version)
	s.ModuleDigest = hex.EncodeToString(d.bytes(32))
	s.MemoryPages = uint32(d.uvarint(uint64(maxPages) + 1))
	if d.err == nil && s.MemoryPages > maxPages {
		return nil, bad("%d pages of memory, over the cap of %d", s.MemoryPages, maxPages)
	}
	s.Clock.Monotonic = d.varint()
	s.Clock.Wall = d.varint()
	nGlobals := d.uvarint(uint64(len(body))) // each takes more than a byte
	if d.err == nil {
		s.Globals = make([]snapshotGlobal, 0, min(nGlobals, 1024))
	}
	for k := uint64(0); k < nGlobals && d.err == nil; k++ {
		g := snapshotGlobal{Index: uint32(d.uvarint(1<<32 - 1))}
		if t := d.bytes(1); t != nil {
			g.Type = t[0]
		}
		if v := d.bytes(8); v != nil {
			g.Bits = binary.LittleEndian.Uint64(v)
		}
		s.Globals = append(s.Globals, g)
	}
	nPages := d.uvarint(uint64(s.MemoryPages))
	if d.err == nil {
		s.Pages = make([]snapshotPage, 0, min(nPages, uint64(len(body)-d.off)/9)) // 9+ bytes each
	}
	next := uint64(0)
	var maps []uint64
	for k := uint64(0); k < nPages && d.err == nil; k++ {
		idx := next + d.uvarint(uint64(s.MemoryPages))
		if d.err == nil && idx >= uint64(s.MemoryPages) {
			return nil, bad("page %d beyond the memory's %d pages", idx, s.MemoryPages)
		}
		var chunks uint64
		if m := d.bytes(8); m != nil {
			chunks = binary.LittleEndian.Uint64(m)
		}
		if d.err == nil && chunks == 0 {
			return nil, bad("page %d is zero and listed", idx)
		}
		s.Pages = append(s.Pages, snapshotPage{Index: uint32(idx)})
		maps = append(maps, chunks)
		next = idx + 1
	}
	data := d.bytes(int(min(d.uvarint(uint64(len(body))), uint64(len(body)))))
	if d.err != nil {
		return nil, bad("%v", d.err)
	}
	if d.off != len(body) {
		return nil, bad("%d bytes after the page data", len(body)-d.off)
	}
	in := bytes.NewReader(data)
	fr := flate.NewReader(in)
	for k := range s.Pages {
		page := make([]byte, wasmPageSize)
		for c := 0; c < chunksPerPage; c++ {
			if maps[k]&(1<<c) == 0 {
				continue
			}
			chunk := page[c*chunkSize : (c+1)*chunkSize]
			if _, err := io.ReadFull(fr, chunk); err != nil {
				return nil, bad("page data: %v", err)
			}
			if bytes.Equal(chunk, zeroPage[:chunkSize]) {
				return nil, bad("chunk %d of page %d is zero and listed", c, s.Pages[k].Index)
			}
		}
		s.Pages[k].Data = page
	}
	if n, err := fr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return nil, bad("page data longer than %d pages", len(s.Pages))
	}
	if in.Len() != 0 {
		return nil, bad("%d bytes after the compressed page data", in.Len())
	}
	if err := s.validate(maxPages); err != nil {
		return nil, err
	}
	return s, nil
}

// decoder reads the snapshot encoding; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	off int
	err error
}

// uvarint reads an unsigned LEB128 value, which must be at most max.
func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n <= 0:
		d.err = errors.New("truncated or overlong integer")
		return 0
	case v > max:
		d.err = fmt.Errorf("value %d over its bound %d", v, max)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.err = errors.New("truncated or overlong integer")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = errors.New("truncated")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}
