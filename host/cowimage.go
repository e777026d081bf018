package host

import (
	"errors"
	"sync"
)

// Images mapped copy-on-write.
//
// A module's pre-initialized image (preinit.go) is copied into each new instance's
// slot: every page it holds becomes the instance's own, backed and written, whether the
// instance writes it afterwards or not. Go's port holds 1.2 MB of image of which an
// activation writes 17 pages, so an active entity of it cost about 1.9 MiB. On Linux,
// an image of at least cowMinImageBytes is also kept in a sealed memfd
// (cowimage_linux.go), and a new instance's slot, an anonymous reservation as large as
// the memory limit (linearmem.go), gets the memfd mapped over its first part with
// MAP_PRIVATE and MAP_FIXED: the instance reads the image's pages where they are, in
// the page cache, shared by every instance of the module (a read fault maps up to 16 of
// them at once), and a page it writes is copied for it alone at its first write. An
// active entity so keeps of its own the pages it wrote, and the image is in memory
// once per module. memory.grow hands out more of the same slot, past the mapping:
// anonymous pages that read as zero, as before. When the instance is closed, anonymous
// memory is mapped back over the file's part (unmapCowFile), which drops the copied
// pages, unless the slot is kept by the module's resident slots.
//
// With resident slots (residentslots.go), a kept slot keeps its mapping: the pages the
// instance copied (which /proc/self/pagemap tells from the file's: pageStates) are
// rewritten from the image where they differ, and the file's pages are left alone,
// since nothing can have changed them. The next instance starts with every page it
// touched last time already mapped, and takes no fault for them, and a kept slot
// charges the pool only its copied pages (Go's port: 17 pages, not 1.5 MiB).
//
// The file holds the image up to its last non-zero page; the rest of the memory is
// anonymous. A hole in the file (a zero page below the last non-zero one) that an
// instance reads is filled by the kernel once, for all instances.
//
// Each mapped slot splits its chunk's mapping in three: two more of the process's
// mappings, which vm.max_map_count bounds (65,530 by default). The arena maps at most a
// quarter of that many slots (cowMaxSlots) at a time; past it, and where the system has
// no memfd, instances get the image copied as before, with the same result. Images
// smaller than cowMinImageBytes are copied too: a mapping and its unmapping cost about
// what copying a few pages does, and TinyGo's images are 5 pages.

// cowMinImageBytes is the default of wasmRuntime.cowMinBytes: an image that writes
// fewer bytes is copied into each slot, not mapped.
const cowMinImageBytes = 64 << 10

// cowImage is a module's image in a sealed memfd. It is safe for concurrent use.
type cowImage struct {
	// size is the bytes the file holds and a slot maps: up to the end of the image's
	// last non-zero page.
	size int
	mu   sync.RWMutex
	fd   int // -1 once closed
}

var errCowClosed = errors.New("host: the image's file is closed")

// newCowImage returns img in a sealed memfd, or an error where the system has none or
// img holds nothing.
func newCowImage(img *preImage) (*cowImage, error) {
	if len(img.runs) == 0 {
		return nil, errors.New("host: an image of zero pages is not mapped")
	}
	last := img.runs[len(img.runs)-1]
	size := last.off + len(last.data)
	fd, err := newCowFile(img, size)
	if err != nil {
		return nil, err
	}
	return &cowImage{size: size, fd: fd}, nil
}

// mapInto maps the image over slot's first c.size bytes, copy-on-write.
func (c *cowImage) mapInto(slot []byte) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.fd < 0 {
		return errCowClosed
	}
	return mapCowFile(slot[:c.size], c.fd)
}

// fileBytes returns the bytes of memory the file's pages hold: the image's non-zero
// pages, and the holes mappings have read.
func (c *cowImage) fileBytes() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.fd < 0 {
		return 0
	}
	return cowFileBytes(c.fd)
}

// close closes the file; mappings made from it stay valid. Idempotent.
func (c *cowImage) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd >= 0 {
		closeCowFile(c.fd)
		c.fd = -1
	}
}
