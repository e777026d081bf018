package host

import (
	"sync/atomic"

	"github.com/shardhost/shardhost/internal/owner"
)

// Slots with an activation's pages already backed (warm slots).
//
// A new instance's slot (linearmem.go) is backed by no memory: each page its activation
// touches (data segments, the top of the shadow stack, the first heap pages) is a page
// fault, and on a virtual machine a first touch costs 2.5-4 µs (a Rust counter touches
// 5 pages of its slot by the end of its first message: 15-20 µs of a 70 µs activation).
// So a module learns, from its first instance in a slot, which pages that instance had
// touched by the end of its first message (mincore), and the arena keeps a few slots
// per module with those pages backed (madvise MADV_POPULATE_WRITE), refilled by a
// goroutine when half are taken: the faults are taken off the activation's path, onto
// an idle core when there is one. The CPU time is the same; the latency of activations
// one at a time is what drops.
//
// A warm slot reads as zero as any other (populated pages are zero pages); an instance
// given one releases at least the populated pages when freed. An entity that touches
// fewer pages than the first costs those few pages more.
//
// A freed instance's slot goes straight back to its module's warm slots when they have
// room (recycle): the learned pages are zeroed where they are, and the rest of what the
// instance used is given back to the operating system. Zeroing a backed page costs
// about 0.3 µs here, against 1.3-1.9 µs for a page the kernel backs anew, so that
// entities passivated and activated again (or moved to compiled code) take no page
// fault for those pages, and no refill runs for them.

// maxHotPages caps the pages a module has backed per warm slot (256 KiB).
const maxHotPages = 64

// warmSlotsPerModule is how many warm slots the arena keeps per module; a refill starts
// when fewer than half are left.
const warmSlotsPerModule = 8

// pageRun is n pages of a slot from byte offset off.
type pageRun struct{ off, n int }

// moduleHotPages is a module's learned page runs. The zero value learns at the first
// call of learn.
type moduleHotPages struct {
	learning atomic.Bool               // an instance has taken the learning
	runs     atomic.Pointer[[]pageRun] // set once learned; empty when nothing to back
	// size is the bytes of memory the learning instance had by the end of its first
	// message (residentslots.go).
	size atomic.Int64
}

// learn records, once per module, the pages of m's slot that are backed now.
func (h *moduleHotPages) learn(m *linearMemory) {
	if m == nil || h.runs.Load() != nil || !h.learning.CompareAndSwap(false, true) {
		return
	}
	// Where the image is mapped (cowimage.go), the kernel counts the file's pages in
	// memory as backed whoever touched them: only the anonymous part is learned.
	from := min(m.cow, m.used)
	runs := residentRuns(m.slot[from:m.used], maxHotPages)
	for k := range runs {
		runs[k].off += from
	}
	h.size.Store(int64(m.used))
	h.runs.Store(&runs)
}

// warmPool is the arena's warm slots of one module.
type warmPool struct {
	runs    []pageRun
	extent  int // bytes from the slot's start to the end of the last run
	slots   [][]byte
	filling bool
	// recycling counts the slots being zeroed for the pool (recycle), so that recycling
	// does not fill it past warmSlotsPerModule (a refill under way may add one more).
	recycling int
}

// warmSlots is the arena's part in warm slots (a memArena field).
type warmSlots struct {
	// pools are the modules' warm slots, under memArena.mu; slots in a pool count as
	// live.
	pools map[*moduleHotPages]*warmPool
	// noPopulate is set when the system refused to populate a slot's pages: slots are
	// then handed out cold.
	noPopulate atomic.Bool
	// fillers owns the refills (fill); the arena's close closes it and waits.
	fillers *owner.Group
}

// getWarm returns a slot with h's learned pages backed, and the bytes backed, or nil
// when h has none ready (or has not learned yet); a refill starts when the pool is
// low.
func (a *memArena) getWarm(h *moduleHotPages) ([]byte, int) {
	runs := h.runs.Load()
	if runs == nil || len(*runs) == 0 || a.noPopulate.Load() {
		return nil, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.failed {
		return nil, 0
	}
	p := a.pools[h]
	if p == nil {
		last := (*runs)[len(*runs)-1]
		p = &warmPool{runs: *runs, extent: last.off + last.n*pageSize}
		if a.pools == nil {
			a.pools = map[*moduleHotPages]*warmPool{}
		}
		a.pools[h] = p
	}
	var slot []byte
	if n := len(p.slots); n > 0 {
		slot, p.slots = p.slots[n-1], p.slots[:n-1]
	}
	if !p.filling && len(p.slots) < warmSlotsPerModule/2 {
		// Open: close closes fillers after it marks the arena closed, under a.mu.
		p.filling = a.fillers.Go(func() { a.fill(h, p) })
	}
	return slot, p.extent
}

// fill backs p's pages in new slots until p is full, the pool is dropped or the arena
// closed.
func (a *memArena) fill(h *moduleHotPages, p *warmPool) {
	for {
		slot := a.get()
		if slot == nil {
			break
		}
		var err error
		for _, r := range p.runs {
			if err = populateMemory(slot[r.off : r.off+r.n*pageSize]); err != nil {
				a.noPopulate.Store(true)
				break
			}
		}
		a.mu.Lock()
		kept := err == nil && !a.closed && a.pools[h] == p
		more := false
		if kept {
			p.slots = append(p.slots, slot)
			more = len(p.slots) < warmSlotsPerModule
		}
		a.mu.Unlock()
		if !kept {
			a.put(slot, p.extent)
		}
		if !more {
			break
		}
	}
	a.mu.Lock()
	p.filling = false
	a.mu.Unlock()
}

// recycle takes the slot of a freed instance of h's module into h's warm slots, if h
// has a pool with room: it zeroes the pages of the pool's runs in place and gives the
// rest of the slot's first used bytes back to the operating system, so that the slot
// reads as zero as a filled one. It reports whether it took the slot; if not, the
// caller puts it back to the arena.
func (a *memArena) recycle(slot []byte, used int, h *moduleHotPages) bool {
	if h == nil || a.noPopulate.Load() {
		return false
	}
	a.mu.Lock()
	p := a.pools[h]
	ok := p != nil && !a.closed && len(p.slots)+p.recycling < warmSlotsPerModule
	if ok {
		p.recycling++
	}
	a.mu.Unlock()
	if !ok {
		return false
	}
	var err error
	off := 0 // bytes of the slot dealt with
	for _, r := range p.runs {
		if gap := min(r.off, used); off < gap && err == nil {
			err = releaseMemory(slot[off:gap])
		}
		clear(slot[r.off : r.off+r.n*pageSize])
		off = r.off + r.n*pageSize
	}
	if off < used && err == nil {
		err = releaseMemory(slot[off:used])
	}
	a.mu.Lock()
	p.recycling--
	kept := err == nil && !a.closed && a.pools[h] == p
	if kept {
		p.slots = append(p.slots, slot)
	}
	a.mu.Unlock()
	if !kept {
		a.put(slot, max(used, p.extent))
	}
	return true
}

// dropWarm gives h's warm slots back, their pages to the operating system.
func (a *memArena) dropWarm(h *moduleHotPages) {
	a.mu.Lock()
	p := a.pools[h]
	delete(a.pools, h)
	var slots [][]byte
	if p != nil {
		// A fill under way sees the pool dropped and puts its slot back itself.
		slots, p.slots = p.slots, nil
	}
	a.mu.Unlock()
	for _, s := range slots {
		a.put(s, p.extent)
	}
}

// closeWarm, under a.mu with a.closed set, forgets the warm slots: the chunks they
// are in are about to be unmapped.
func (a *memArena) closeWarm() {
	for h, p := range a.pools {
		a.live -= len(p.slots)
		p.slots = nil
		delete(a.pools, h)
	}
}

// pageSize is the operating system's page size the arena assumes (slots are multiples
// of wasm's 64 KiB pages, so any page size up to that divides them).
const pageSize = 4096
