package host

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"time"
)

// Resident slots: closed instances' memories kept, re-imaged in place.
//
// An instance made from its module's pre-initialized image (preinit.go) in a slot the
// kernel has not backed takes a page fault for every page the image writes and every
// page its first message touches: the price of a fresh page, which on a virtual machine
// is what an activation costs (bench/pagecost). So when an instance of a module with an
// image is closed, its slot goes to the module's resident slots instead of back to the
// operating system: still backed, and re-imaged in place. The pages the image holds are
// compared with it and rewritten where they differ, the other backed pages are zeroed
// where they are not zero, and the backed pages past the module's usual extent (the
// image's memory, or what its first instance had grown to by the end of its first
// message, whichever is larger) are given back to the operating system: a tenant that
// grew its memory and wrote over all of it leaves no more behind than a usual one. The
// next instance of the module takes the slot with its memory already the image: no
// page is copied and none faults. A slot that maps the image copy-on-write
// (cowimage.go) keeps its mapping: only the pages of its own (those its instances
// wrote) are compared and rewritten, and only they are charged to the pool.
//
// Which pages to look at comes from the kernel (mincore: the backed pages), not from a
// record of writes, which would cost a fault per written page (dirtypages.go); pages
// never backed read as zero and are left alone. Re-imaging runs when the instance is
// closed, on the caller's goroutine: a passivation pays it, not the next activation.
//
// The slots of all modules are bounded together by RuntimeConfig.InstancePoolBytes
// (the backed bytes each slot keeps). A closed instance whose slot does not fit is
// given back as before (linearmem.go, linearmem_prefault.go), and a module one of whose
// instances is larger than the whole budget says so in its Activation. A goroutine the
// arena owns trims the pools every residentTrimEvery: the slots that stayed in a pool
// for a whole period (its low-water mark) are given back to the operating system, so
// an idle member returns the memory within two periods.
//
// BenchmarkPreInitActivation, one run on a 2-core machine under a load average of
// 40-70, with bench/pagecost at 15-26 µs a fresh page (fresh / image into a new slot /
// image in a resident slot): TinyGo's counter 1.05 / 2.06 / 1.56 page faults, p50
// 14.5 / 14.2 / 13.3 µs, 35 / 43 / 31 µs of CPU per activation; Go's port 404 / 328 /
// 3.9 page faults, p50 27,344 / 1,512 / 414 µs, 3,603 / 1,347 / 744 µs of CPU. A
// kept slot of Go's port holds 1,556 KiB (TinyGo's: 20 KiB), of which an activation
// writes 17 pages (TinyGo's: 4). With the image mapped copy-on-write (cowimage.go), a
// kept slot of Go's port holds 76 KiB, and its activations p50 123-132 µs.

// residentTrimEvery is how often the resident slots are trimmed.
const residentTrimEvery = 10 * time.Second

// DefaultInstancePoolFraction is the share of the machine's physical memory that
// RuntimeConfig.InstancePoolBytes defaults to: 1/16.
const DefaultInstancePoolFraction = 16

// DefaultInstancePoolBytes returns the default of RuntimeConfig.InstancePoolBytes: the
// machine's physical memory divided by DefaultInstancePoolFraction, in bytes; 0 where
// the system does not say (no pool).
func DefaultInstancePoolBytes() int64 {
	return int64(physicalMemory() / DefaultInstancePoolFraction)
}

// residentSlot is a closed instance's slot, holding its module's image.
type residentSlot struct {
	slot []byte
	// extent is how many bytes from the slot's start may be backed.
	extent int
	// charge is the backed bytes the slot keeps, counted against the budget.
	charge int64
	// cow is how many bytes from the slot's start map the image (cowimage.go); 0:
	// none.
	cow int
}

// residentPool is a module's resident slots. Its fields are under memArena.mu.
type residentPool struct {
	img   *preImage
	hot   *moduleHotPages
	slots []residentSlot
	// low is the fewest slots the pool held since the last trim.
	low int
	// dropped is set when the module is closed: slots freed later go back to the arena.
	dropped bool
}

// residentState is the arena's part in resident slots (a memArena field).
type residentState struct {
	// budget is the backed bytes all resident slots may keep; 0: none kept.
	budget int64
	// charged is what they keep now.
	charged int64
	// pools are the pools with slots or created since, for trimming.
	pools map[*residentPool]struct{}
	// trimming: the trim goroutine runs; trimEvery is its period (residentTrimEvery;
	// tests set it before the first pool).
	trimming  bool
	trimEvery time.Duration
	// rewritten counts the pages re-imaging has written (copied from the image or
	// zeroed): the pages the instances wrote, as the benchmarks report them.
	rewritten atomic.Int64
}

// newResidentPool returns the resident slots of a module with image img, registered
// with the arena; nil when the arena keeps none.
func (a *memArena) newResidentPool(img *preImage, hot *moduleHotPages) *residentPool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resident.budget <= 0 || a.closed || a.failed {
		return nil
	}
	p := &residentPool{img: img, hot: hot}
	if a.resident.pools == nil {
		a.resident.pools = map[*residentPool]struct{}{}
	}
	a.resident.pools[p] = struct{}{}
	if !a.resident.trimming {
		every := a.resident.trimEvery
		a.resident.trimming = a.fillers.Go(func() { a.trimLoop(every, a.fillers.Done()) })
	}
	return p
}

// getResident returns one of p's slots, holding p's image, its extent and how many
// bytes of it map the image (cowimage.go); nil when p has none.
func (a *memArena) getResident(p *residentPool) ([]byte, int, int) {
	if p == nil {
		return nil, 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(p.slots)
	if n == 0 || a.closed {
		return nil, 0, 0
	}
	s := p.slots[n-1]
	p.slots = p.slots[:n-1]
	p.low = min(p.low, len(p.slots))
	a.resident.charged -= s.charge
	return s.slot, s.extent, s.cow
}

// keepResident re-images the slot of a freed instance (its first used bytes handed
// out, its first cow bytes mapping the image) into p and keeps it, if the bytes it
// keeps backed of its own fit the budget. It reports whether it took the slot; if not,
// the slot is untouched and the caller gives it back.
func (a *memArena) keepResident(p *residentPool, slot []byte, used, cow int) bool {
	if p == nil {
		return false
	}
	// The extent covers the image even when the instance's memory did not (its
	// instantiation failed): the pages past what it used are not backed, and read as
	// zero (or the image's, where it is mapped).
	extent := max(int(p.img.pages)*wasmPageSize, int(p.hot.size.Load()), cow)
	extent = min((extent+pageSize-1)/pageSize*pageSize, len(slot))
	states := a.pageStates(slot[:extent])
	if states == nil {
		return false
	}
	// What the slot keeps of its own: where the image is mapped, the pages the
	// instance wrote (copied from the file) and no more, as the file's pages are
	// shared; elsewhere, the image's pages too once re-imaged.
	charge := int64(0)
	for _, st := range states {
		if st == pageOwn {
			charge += pageSize
		}
	}
	if cow == 0 {
		charge = max(charge, int64(p.img.bytes()))
	}
	charge = max(charge, pageSize)
	a.mu.Lock()
	ok := !p.dropped && !a.closed && a.resident.charged+charge <= a.resident.budget
	if ok {
		a.resident.charged += charge // reserved while re-imaging
	}
	a.mu.Unlock()
	if !ok {
		return false
	}
	n, err := reimage(slot, extent, used, cow, states, p.img)
	a.resident.rewritten.Add(int64(n))
	a.mu.Lock()
	kept := err == nil && !p.dropped && !a.closed
	if kept {
		p.slots = append(p.slots, residentSlot{slot: slot, extent: extent, charge: charge, cow: cow})
	} else {
		a.resident.charged -= charge
	}
	a.mu.Unlock()
	if !kept {
		a.putMapped(slot, used, cow)
	}
	return true
}

// reimage makes slot's first extent bytes img's memory, the first cow of them mapping
// img's file (cowimage.go): the image's pages are written where they differ, the other
// backed pages zeroed where they are not zero (states says what backs each page of the
// extent), and the bytes from extent to used are given back to the operating system.
// Where the file is mapped, only the pages of the slot's own are looked at: the
// others are the file's, which holds the image. It returns how many pages it wrote.
func reimage(slot []byte, extent, used, cow int, states []pageState, img *preImage) (written int, err error) {
	if used > extent {
		if err := releaseMemory(slot[extent:used]); err != nil {
			return 0, err
		}
	}
	run, k := 0, 0 // the image run at or after the page, and its page
	for p := 0; p < extent/pageSize; p++ {
		off := p * pageSize
		if off < cow && states[p] != pageOwn {
			continue
		}
		page := slot[off : off+pageSize]
		for run < len(img.runs) && img.runs[run].off+len(img.runs[run].data) <= off {
			run++
		}
		if run < len(img.runs) && img.runs[run].off <= off {
			k = off - img.runs[run].off
			want := img.runs[run].data[k : k+pageSize]
			if states[p] == pageNone || !bytes.Equal(page, want) {
				copy(page, want)
				written++
			}
			continue
		}
		if states[p] != pageNone && !isZeroPage4K(page) {
			clear(page)
			written++
		}
	}
	return written, nil
}

// dropResident gives p's slots back to the arena and keeps no more: the module is
// closed.
func (a *memArena) dropResident(p *residentPool) {
	if p == nil {
		return
	}
	a.mu.Lock()
	p.dropped = true
	slots := p.slots
	p.slots = nil
	for _, s := range slots {
		a.resident.charged -= s.charge
	}
	delete(a.resident.pools, p)
	a.mu.Unlock()
	for _, s := range slots {
		a.putMapped(s.slot, s.extent, s.cow)
	}
}

// trimLoop trims the pools every period until the arena is closed.
func (a *memArena) trimLoop(every time.Duration, done <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			a.trimResident()
		}
	}
}

// trimResident gives back the slots each pool held through the whole period since the
// last trim, the oldest first.
func (a *memArena) trimResident() (released int) {
	a.mu.Lock()
	var back []residentSlot
	for p := range a.resident.pools {
		n := min(p.low, len(p.slots))
		back = append(back, p.slots[:n]...)
		p.slots = append(p.slots[:0], p.slots[n:]...)
		p.low = len(p.slots)
		if len(p.slots) == 0 && p.dropped {
			delete(a.resident.pools, p)
		}
	}
	for _, s := range back {
		a.resident.charged -= s.charge
	}
	a.mu.Unlock()
	for _, s := range back {
		a.putMapped(s.slot, s.extent, s.cow)
	}
	return len(back)
}

// closeResident, under a.mu with a.closed set, forgets the resident slots: the chunks
// they are in are about to be unmapped.
func (a *memArena) closeResident() {
	for p := range a.resident.pools {
		a.live -= len(p.slots)
		for _, s := range p.slots {
			if s.cow > 0 {
				a.cowLive--
			}
		}
		p.slots = nil
		p.dropped = true
	}
	a.resident.pools = nil
	a.resident.charged = 0
}

// residentCounts returns the slots all pools hold and the bytes charged for them.
func (a *memArena) residentCounts() (slots int, charged int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.resident.pools {
		slots += len(p.slots)
	}
	return slots, a.resident.charged
}

// poolTooSmall returns why the arena keeps no resident slot for a module with image
// img, a sentence; "" when it may.
func (a *memArena) poolTooSmall(img *preImage) string {
	if a == nil || a.resident.budget <= 0 {
		return ""
	}
	need := int64(img.bytes())
	if img.cow != nil {
		need = pageSize // a slot mapping the image keeps what its instance wrote
	}
	if need > a.resident.budget {
		return fmt.Sprintf("the instance pool's %d bytes (--instance-pool-bytes) are under one instance's %d: closed instances' memory goes back to the operating system", a.resident.budget, need)
	}
	return ""
}
