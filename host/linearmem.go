package host

import (
	"sync"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/shardhost/shardhost/internal/owner"
)

// Linear memories outside the Go heap.
//
// wazero keeps an instance's linear memory in a Go slice by default: a new instance
// allocates and zeroes its initial pages on the Go heap, every memory.grow allocates a
// larger slice and copies the old one into it, and the garbage collector scans for
// and keeps around what it frees (a Rust entity grows from 128 to 192 KiB at its first
// message: 320 KiB allocated, 128 KiB copied, per activation). memArena instead
// reserves address space from the operating system in chunks of many slots, one slot
// per instance, each as large as the runtime's memory limit: a slot is mapped readable
// and writable but only the pages a guest touches are backed by memory, growing is
// handing out a longer slice of the same slot (no copy; the new pages read as zero),
// and closing an instance gives its pages back to the operating system (madvise
// MADV_DONTNEED) before the slot is handed out again, zeroed. An active entity so
// costs the pages it has touched, and a passivated one none.
//
// A slot is unmapped or handed to another instance only while no call of its own
// instance runs: wasmRuntime.Close stops the calls in flight and waits for them before it
// closes the modules (wasmRuntime.enter). Where the operating system refuses the reservation (a strict
// overcommit policy, an address-space limit), and on systems without mmap, memories
// stay on the Go heap as wazero makes them.

// arenaChunkBytes is the address space a chunk reserves when a slot is small enough for
// several: 64 GiB, 1,024 slots of the default 64 MiB memory limit. 100,000 active
// instances of 64 MiB slots take 98 chunks, 6.1 TiB of the 128 TiB a 64-bit Linux
// process may address.
const arenaChunkBytes = 64 << 30

// arenaMaxChunkSlots caps the slots of one chunk (small memory limits).
const arenaMaxChunkSlots = 1024

// memArena hands out linear-memory slots of one size. It is safe for concurrent use.
type memArena struct {
	slot int // bytes per slot: the memory limit
	// perChunk is how many slots a chunk reserves.
	perChunk int

	mu     sync.Mutex
	chunks [][]byte
	free   [][]byte // slots ready to be handed out: their pages are not backed
	live   int      // slots handed out and not yet released
	closed bool
	// failed is set when the operating system refused a reservation: from then on
	// memories stay on the Go heap.
	failed bool
	// wp is the kernel's write tracking of slots (dirtypages.go), opened at its first
	// use; wpErr says why there is none.
	wp    *writeProtect
	wpErr error
	// warmSlots are slots with a module's activation pages backed
	// (linearmem_prefault.go).
	warmSlots
	// resident are the closed instances' slots kept re-imaged (residentslots.go).
	resident residentState
	// pagemap is /proc/self/pagemap, opened at its first use (pageStates); -1 when
	// it cannot be.
	pagemap     int
	pagemapOpen bool
	// cowLive counts the slots with an image mapped over them (cowimage.go), handed
	// out or resident; at most cowMax at a time. cowImages are the modules' mapped
	// images, closed with the arena.
	cowLive   int
	cowMax    int
	cowImages map[*cowImage]struct{}
}

// writeProtection returns the arena's write tracking, opening it at the first call.
func (a *memArena) writeProtection() (*writeProtect, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wp == nil && a.wpErr == nil {
		a.wp, a.wpErr = openWriteProtect()
	}
	return a.wp, a.wpErr
}

// newMemArena returns an arena of slots of slotBytes whose resident slots
// (residentslots.go) keep up to poolBytes backed.
func newMemArena(slotBytes uint64, poolBytes int64) *memArena {
	per := int(arenaChunkBytes / slotBytes)
	per = min(max(per, 1), arenaMaxChunkSlots)
	return &memArena{slot: int(slotBytes), perChunk: per, warmSlots: warmSlots{fillers: owner.New()},
		resident: residentState{budget: max(poolBytes, 0), trimEvery: residentTrimEvery}, pagemap: -1,
		cowMax: maxMapCount() / 4}
}

// get returns a free slot, len and cap slot bytes, reserving a chunk when none is free;
// nil when the arena is closed or the operating system refused.
func (a *memArena) get() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.failed {
		return nil
	}
	if len(a.free) == 0 {
		chunk, err := reserveMemory(a.slot * a.perChunk)
		if err != nil {
			a.failed = true
			return nil
		}
		a.chunks = append(a.chunks, chunk)
		// Handed out from the lowest address up: the free list is a stack.
		for k := a.perChunk - 1; k >= 0; k-- {
			a.free = append(a.free, chunk[k*a.slot:(k+1)*a.slot:(k+1)*a.slot])
		}
	}
	s := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	a.live++
	return s
}

// put gives the first used bytes of slot back to the operating system and the slot back
// to the arena. After close, the last slot put unmaps every chunk.
func (a *memArena) put(slot []byte, used int) { a.putMapped(slot, used, 0) }

// putMapped is put for a slot whose first cow bytes map an image (cowimage.go; 0:
// none): anonymous memory is mapped back over them first.
func (a *memArena) putMapped(slot []byte, used, cow int) {
	ok := true
	if cow > 0 {
		// On failure the range may be left unmapped.
		ok = unmapCowFile(slot[:cow]) == nil
	}
	if ok && used > cow {
		// On failure the pages stay backed and would not read as zero.
		ok = releaseMemory(slot[cow:used]) == nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live--
	if cow > 0 {
		a.cowLive--
	}
	if ok { // else the slot is not reused
		a.free = append(a.free, slot)
	}
	a.unmapIfDone()
}

// getMapped returns a free slot with c mapped over its first c.size bytes
// (cowimage.go); nil when the arena has no slot, maps cowMax slots already, or the
// mapping failed.
func (a *memArena) getMapped(c *cowImage) []byte {
	a.mu.Lock()
	ok := a.cowLive < a.cowMax && !a.closed
	if ok {
		a.cowLive++
	}
	a.mu.Unlock()
	if !ok {
		return nil
	}
	slot := a.get()
	if slot == nil {
		a.mu.Lock()
		a.cowLive--
		a.mu.Unlock()
		return nil
	}
	if err := c.mapInto(slot); err != nil {
		a.putMapped(slot, 0, c.size)
		return nil
	}
	return slot
}

// addCowImage makes the arena close c when it closes; false if it is closed already.
func (a *memArena) addCowImage(c *cowImage) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.failed {
		return false
	}
	if a.cowImages == nil {
		a.cowImages = map[*cowImage]struct{}{}
	}
	a.cowImages[c] = struct{}{}
	return true
}

// dropCowImage closes c, its module closed; the slots mapping it keep their mapping
// until given back.
func (a *memArena) dropCowImage(c *cowImage) {
	a.mu.Lock()
	delete(a.cowImages, c)
	a.mu.Unlock()
	c.close()
}

// close unmaps the arena's chunks now if no slot is handed out, or else when the last
// one is put back. get returns nil from then on.
func (a *memArena) close() {
	a.mu.Lock()
	a.closed = true
	a.closeWarm()
	a.closeResident()
	for c := range a.cowImages {
		c.close()
	}
	a.cowImages = nil
	a.unmapIfDone()
	a.mu.Unlock()
	a.fillers.Close()
	a.fillers.Wait()
}

func (a *memArena) unmapIfDone() {
	if !a.closed || a.live > 0 {
		return
	}
	for _, c := range a.chunks {
		unreserveMemory(c)
	}
	a.chunks, a.free = nil, nil
	if a.wp != nil {
		a.wp.close()
		a.wp = nil
	}
	if a.pagemap >= 0 {
		closePagemap(a.pagemap)
		a.pagemap = -1
	}
}

// linearMemory is an instance's linear memory in an arena slot: wazero's
// experimental.LinearMemory. wazero calls Reallocate on the calling goroutine of the
// instance, and Free when the module is closed: by its owner between calls, by wazero
// itself on that goroutine after a call failed, or by wasmRuntime.Close once no call runs
// (wasmRuntime.enter), so the slot is never released under a running guest.
type linearMemory struct {
	arena *memArena
	slot  []byte
	used  int // the most bytes handed out, to release on Free
	// hot is the module's learned pages: Free gives the slot to the module's warm slots
	// when they have room (memArena.recycle).
	hot *moduleHotPages
	// track is the kernel's write tracking of the slot while it runs: stopped before
	// the slot goes back to the arena.
	track writeTracker
	// resident is the module's resident slots (residentslots.go), which Free re-images
	// the slot into when they have room; imaged is set when the slot came from them,
	// holding the module's image.
	resident *residentPool
	imaged   bool
	// cow is how many bytes from the slot's start map the module's image copy-on-write
	// (cowimage.go); 0: none.
	cow int
}

var _ experimental.LinearMemory = (*linearMemory)(nil)

// Reallocate returns the first size bytes of the slot; nil past it, which wazero turns
// into a failed memory.grow.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.slot)) {
		return nil
	}
	m.used = max(m.used, int(size))
	return m.slot[:size:size]
}

// Free gives the slot to the module's resident slots, re-imaged, or to its warm slots,
// or back to the arena. A slot whose writes were tracked goes back to the arena.
func (m *linearMemory) Free() {
	tracked := m.track != nil
	if tracked {
		m.track.stop()
	}
	if m.slot != nil {
		// A module with resident slots keeps no warm ones: the pool's budget bounds
		// what its closed instances keep.
		kept := !tracked && m.arena.keepResident(m.resident, m.slot, m.used, m.cow)
		if !kept && !tracked && m.resident == nil && m.cow == 0 {
			kept = m.arena.recycle(m.slot, m.used, m.hot)
		}
		if !kept {
			m.arena.putMapped(m.slot, m.used, m.cow)
		}
		m.slot = nil
	}
}

// heapMemory is a linear memory on the Go heap, for what no slot holds.
type heapMemory struct {
	buf []byte
	max uint64
}

func (h *heapMemory) Reallocate(size uint64) []byte {
	if size > h.max {
		return nil
	}
	if size > uint64(cap(h.buf)) {
		grown := make([]byte, size, min(max(size, 2*uint64(cap(h.buf))), h.max))
		copy(grown, h.buf)
		h.buf = grown
	}
	h.buf = h.buf[:size]
	return h.buf
}

func (h *heapMemory) Free() { h.buf = nil }

// memoryAllocator is an instance as wazero's experimental.MemoryAllocator of its own
// linear memory.
type memoryAllocator wasmInstance

var _ experimental.MemoryAllocator = (*memoryAllocator)(nil)

// Allocate gives the instance a slot of its runtime's arena; a memory on the Go heap when
// the arena has none or the module's maximum is over the slot.
func (a *memoryAllocator) Allocate(capacity, maxBytes uint64) experimental.LinearMemory {
	i := (*wasmInstance)(a)
	arena := i.m.rt.arena
	if arena != nil && maxBytes <= uint64(arena.slot) {
		// A resident slot holds the module's image already, for an instance made from
		// it, and so does a slot the image is mapped over; a warm slot has the pages
		// the module's activations touch backed. Their used bytes cover what is
		// backed, so that Free releases it.
		pool := i.m.resident.Load()
		imaged := false
		var slot []byte
		used, cow := 0, 0
		if i.fromImage {
			slot, used, cow = arena.getResident(pool)
			imaged = slot != nil
			if img := i.m.pre.image.Load(); slot == nil && img != nil && img.cow != nil {
				if slot = arena.getMapped(img.cow); slot != nil {
					imaged, cow = true, img.cow.size
				}
			}
		}
		if slot == nil && pool == nil {
			slot, used = arena.getWarm(&i.m.hot)
		}
		if slot == nil {
			slot, used = arena.get(), 0
		}
		if slot != nil {
			i.lm = &linearMemory{arena: arena, slot: slot, used: used, hot: &i.m.hot, resident: pool, imaged: imaged, cow: cow}
			return i.lm
		}
	}
	return &heapMemory{buf: make([]byte, 0, min(capacity, maxBytes)), max: maxBytes}
}

// pageState is what backs a page of a slot (memArena.pageStates).
type pageState uint8

const (
	// pageNone: nothing; the page reads as what the slot maps there (zero, or the
	// image's page: cowimage.go).
	pageNone pageState = iota
	// pageOwn: memory of the slot's own: written, copied from a mapped image at its
	// first write, or read where nothing is mapped (the zero page).
	pageOwn
	// pageFile: a page of the mapped image's file, shared with every slot mapping it.
	pageFile
)

// backedPages reports, for each 4 KiB page of b, whether memory backs it (of its own
// or the mapped image's); nil when the system does not say. b is as for pageStates.
func (a *memArena) backedPages(b []byte) []bool {
	states := a.pageStates(b)
	if states == nil {
		return nil
	}
	backed := make([]bool, len(states))
	for k, s := range states {
		backed[k] = s != pageNone
	}
	return backed
}
