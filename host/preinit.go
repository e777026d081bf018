package host

import (
	"bytes"
	"fmt"
	"sync/atomic"

	"github.com/shardhost/shardhost/abi"
)

// Pre-initialized instance images.
//
// A new instance used to run the module's whole initialisation at every activation:
// wazero applies the data segments (Go's port: 770 KB), then the host calls the start
// function and _initialize (a Go guest starts its runtime there: milliseconds; TinyGo
// initialises its heap and packages). Load already makes one instance of every module,
// the probe that shows it links and initialises; its state once _initialize has
// returned is the image: the linear memory's non-zero 4 KiB pages, every mutable
// global, the guest's clocks and how far it read its random stream. A new instance is
// then made from the module's restore image (wasmbin.RestoreImage: the module without
// data segments and start function, compiled once and shared with the restores of
// snapshots), and the image is written over it: the non-zero pages copied into the
// slot, which reads as zero, the globals set and the clocks and random stream moved to
// where the probe left them. No guest code runs and no data segment is applied.
//
// The result is the instance a fresh instantiation makes, because everything the
// initialisation reads is the same for every instance: the module's bytes, WASI's
// clocks and random source (deterministic fakes here, kept per instance and carried
// over: abi/SPEC.md), and no preopened file or environment. What would differ is kept
// out: a module whose initialisation calls a host function of the shardhost module
// (its entity's ID or type, the host's clock or random source, a log line), or writes
// to stdout or stderr (which every activation would log), keeps the path that runs the
// initialisation, and so does a module whose code could change what memory and globals
// do not hold (tables, data segments: RestoreImage's scan). Module.PreInitialized says
// which path a module takes and why (deploy's log and `shardhost modules`).
//
// The image gets into a new instance's slot one of two ways: copied (the non-zero
// pages written into the slot), or, on Linux for an image of cowMinImageBytes or more,
// mapped copy-on-write from a sealed memfd (cowimage.go), so that an instance keeps of
// its own only the pages it writes. Either way the pages an activation writes are
// fresh pages the first time (bench/pagecost: 1.3 to 13 µs a page on this kind of
// machine) unless the slot is a resident one (residentslots.go), which holds them
// backed already. BenchmarkPreInitActivation and BenchmarkMemberActivation measure
// activations with and without the image in one run, BenchmarkActiveEntityMemory the
// memory an active entity keeps.

// imageRun is a run of an image's non-zero 4 KiB pages: its bytes from off.
type imageRun struct {
	off  int
	data []byte
}

// preImage is a module's state after its initialisation, which new instances start
// from.
type preImage struct {
	// pages is the memory's size in wasm pages.
	pages uint32
	// runs are the non-zero 4 KiB pages of memory, in ascending order.
	runs    []imageRun
	globals []snapshotGlobal
	clock   snapshotClock
	// randOff is how many bytes of WASI's random stream the initialisation read.
	randOff int
	// cow is the image in a sealed memfd, which new instances map copy-on-write
	// (cowimage.go); nil: it is copied into them.
	cow *cowImage
}

// bytes returns how many bytes of memory the image writes.
func (p *preImage) bytes() int {
	n := 0
	for _, r := range p.runs {
		n += len(r.data)
	}
	return n
}

// moduleImage is what a wasmModule knows of its pre-initialized image: the image, or
// why it has none.
type moduleImage struct {
	image  atomic.Pointer[preImage]
	reason atomic.Pointer[string]
	// off, set by tests, makes new instances run the initialisation.
	off atomic.Bool
	// noPool says why closed instances keep no resident slot (residentslots.go), when
	// the pool is too small for one.
	noPool atomic.Pointer[string]
}

// PreInitialized reports whether new instances of the module start from its
// pre-initialized image; if not, why (a sentence), or "" before Load has made the
// probe instance.
func (m *wasmModule) PreInitialized() (bool, string) {
	if m.pre.image.Load() != nil {
		return true, ""
	}
	if r := m.pre.reason.Load(); r != nil {
		return false, *r
	}
	return false, ""
}

// Activation names how the module's new instances are made: "pre-initialized image"
// or "initialised at each activation (REASON)".
func (m *wasmModule) Activation() string {
	ok, why := m.PreInitialized()
	switch {
	case ok:
		s := "pre-initialized image"
		if m.pre.image.Load().cow != nil {
			s += ", mapped copy-on-write"
		}
		if np := m.pre.noPool.Load(); np != nil {
			return s + "; " + *np
		}
		return s
	case why == "":
		return ""
	}
	return "initialised at each activation (" + why + ")"
}

// capturePreImage makes the module's image from inst, its probe instance, whose start
// functions have just returned; or records why there is none.
func (m *wasmModule) capturePreImage(inst *wasmInstance) {
	img, why := m.preImageOf(inst)
	if img == nil {
		m.pre.reason.Store(&why)
		return
	}
	if a := m.rt.arena; a != nil && img.bytes() >= int(m.rt.cowMinBytes.Load()) {
		if c, err := newCowImage(img); err != nil {
			m.rt.log.Debug("module image copied into each instance, not mapped", "digest", m.Digest[:min(12, len(m.Digest))], "err", err)
		} else if a.addCowImage(c) {
			img.cow = c
		} else {
			c.close()
		}
	}
	m.pre.image.Store(img)
	if why := m.rt.arena.poolTooSmall(img); why != "" {
		m.pre.noPool.Store(&why)
		m.rt.log.Warn("instance pool too small for one instance of a module", "digest", m.Digest[:min(12, len(m.Digest))], "reason", why)
	} else if m.rt.arena != nil {
		if p := m.rt.arena.newResidentPool(img, &m.hot); p != nil {
			m.resident.Store(p)
		}
	}
}

func (m *wasmModule) preImageOf(inst *wasmInstance) (*preImage, string) {
	switch {
	case len(m.start) == 0:
		// Nothing runs at instantiation but the data segments, which wazero applies
		// as fast as an image is written (a Rust cdylib: BenchmarkPreInitActivation).
		return nil, "it has no start function or _initialize to run ahead"
	case m.snap == nil || !m.snap.sound:
		return nil, "its code may change tables or data segments, which an image does not hold"
	case inst.calls > 0:
		return nil, fmt.Sprintf("its initialisation calls host functions of the %s module (%d calls)", abi.ImportModule, inst.calls)
	case inst.stdout.wrote || inst.stderrOut.wrote:
		return nil, "its initialisation writes to stdout or stderr"
	}
	s, err := inst.Snapshot()
	if err != nil {
		return nil, "its state cannot be captured: " + err.Error()
	}
	img := &preImage{pages: s.MemoryPages, globals: s.Globals, clock: s.Clock, randOff: inst.wasiRand.off}
	for _, p := range s.Pages {
		base := int(p.Index) * wasmPageSize
		for off := 0; off < wasmPageSize; off += pageSize {
			b := p.Data[off : off+pageSize]
			if isZeroPage4K(b) {
				continue
			}
			if k := len(img.runs) - 1; k >= 0 && img.runs[k].off+len(img.runs[k].data) == base+off {
				img.runs[k].data = append(img.runs[k].data, b...)
			} else {
				img.runs = append(img.runs, imageRun{off: base + off, data: append([]byte(nil), b...)})
			}
		}
	}
	return img, ""
}

func isZeroPage4K(b []byte) bool { return bytes.Equal(b, zeroPage[:pageSize]) }

// loadImage writes the image into a new instance of the restore image, whose memory
// reads as zero: grows the memory, copies the non-zero pages, sets the globals, the
// clocks and the random stream's position.
func (i *wasmInstance) loadImage(img *preImage) error {
	if err := i.bindGlobals(); err != nil {
		return err
	}
	have := i.mem.Size() / wasmPageSize
	if img.pages > have {
		if _, ok := i.mem.Grow(img.pages - have); !ok {
			return fmt.Errorf("host: memory cannot grow to the image's %d pages", img.pages)
		}
	}
	mem, ok := i.mem.Read(0, i.mem.Size())
	if !ok {
		return fmt.Errorf("host: memory of %d bytes cannot be read", i.mem.Size())
	}
	if i.lm == nil || !i.lm.imaged { // a resident slot holds the image already
		for _, r := range img.runs {
			copy(mem[r.off:], r.data)
		}
	}
	for k, g := range img.globals {
		i.snapGlobals[k].Set(g.Bits)
	}
	i.clock.reset(img.clock)
	i.wasiRand.off = img.randOff
	return nil
}
