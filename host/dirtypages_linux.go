package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// The kernel's write tracking (dirtypages.go): a userfaultfd in asynchronous
// write-protect mode (Linux 6.7, UFFD_FEATURE_WP_ASYNC, with WP_UNPOPULATED so that
// pages never touched are protected too) and the PAGEMAP_SCAN ioctl of
// /proc/self/pagemap (Documentation/admin-guide/mm/pagemap.rst, "PAGEMAP_SCAN"), as
// CRIU uses them. The userfaultfd is opened with UFFD_USER_MODE_ONLY, which an
// unprivileged process may use whatever vm.unprivileged_userfaultfd says.

const (
	sysUserfaultfd = 323 // amd64; see userfaultfdSyscall

	uffdUserModeOnly         = 1
	uffdAPI                  = 0xAA
	uffdFeatureWPUnpopulated = 1 << 13
	uffdFeatureWPAsync       = 1 << 15
	uffdioAPI                = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister           = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdioUnregister         = 0x8010aa01 // _IOR(0xAA, 0x01, struct uffdio_range)
	uffdioWriteprotect       = 0xc018aa06 // _IOWR(0xAA, 0x06, struct uffdio_writeprotect)
	uffdioRegisterModeWP     = 1 << 1
	uffdioWriteprotectModeWP = 1 << 0
	pagemapScan              = 0xc0606610 // _IOWR('f', 16, struct pm_scan_arg)
	pmScanWPMatching         = 1 << 0
	pmScanCheckWPAsync       = 1 << 1
	pageIsWritten            = 1 << 1
	pmScanRegions            = 64 // page_region entries per PAGEMAP_SCAN call
	pagemapScanArgSize       = 96
	writeTrackingPageSize    = deltaBlockSize // a block is a page
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRange struct{ start, len uint64 }

type uffdioRegisterArg struct {
	rng    uffdioRange
	mode   uint64
	ioctls uint64
}

type uffdioWriteprotectArg struct {
	rng  uffdioRange
	mode uint64
}

type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages       uint64
	categoryInverted, categoryMask, categoryAnyofMask, returnMask uint64
}

type pageRegion struct{ start, end, categories uint64 }

// writeProtect is an arena's userfaultfd and /proc/self/pagemap.
type writeProtect struct {
	uffd, pagemap int
}

// openWriteProtect opens them; an error when the system lacks either.
func openWriteProtect() (*writeProtect, error) {
	if runtime.GOARCH != "amd64" || os.Getpagesize() != writeTrackingPageSize {
		return nil, errors.New("host: write tracking is implemented for amd64 with 4 KiB pages")
	}
	fd, _, errno := syscall.Syscall(sysUserfaultfd, uffdUserModeOnly|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("host: userfaultfd: %w", errno)
	}
	w := &writeProtect{uffd: int(fd), pagemap: -1}
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPUnpopulated | uffdFeatureWPAsync}
	if err := ioctlPtr(w.uffd, uffdioAPI, unsafe.Pointer(&api)); err != nil {
		w.close()
		return nil, fmt.Errorf("host: userfaultfd without asynchronous write protection: %w", err)
	}
	pm, err := syscall.Open("/proc/self/pagemap", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("host: %w", err)
	}
	w.pagemap = pm
	return w, nil
}

func (w *writeProtect) close() {
	syscall.Close(w.uffd)
	if w.pagemap >= 0 {
		syscall.Close(w.pagemap)
	}
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func (w *writeProtect) register(b []byte) error {
	arg := uffdioRegisterArg{rng: uffdioRange{addrOf(b), uint64(len(b))}, mode: uffdioRegisterModeWP}
	return ioctlPtr(w.uffd, uffdioRegister, unsafe.Pointer(&arg))
}

func (w *writeProtect) unregister(b []byte) error {
	arg := uffdioRange{addrOf(b), uint64(len(b))}
	return ioctlPtr(w.uffd, uffdioUnregister, unsafe.Pointer(&arg))
}

// protect write-protects b (protect) or lifts the protection (!protect).
func (w *writeProtect) protect(b []byte, protect bool) error {
	if len(b) == 0 {
		return nil
	}
	arg := uffdioWriteprotectArg{rng: uffdioRange{addrOf(b), uint64(len(b))}}
	if protect {
		arg.mode = uffdioWriteprotectModeWP
	}
	return ioctlPtr(w.uffd, uffdioWriteprotect, unsafe.Pointer(&arg))
}

// scan appends to dst the blocks of b (numbered from b's start) written since b was
// last protected or scanned, and protects them again.
func (w *writeProtect) scan(b []byte, regions *[pmScanRegions]pageRegion, dst []uint32) ([]uint32, error) {
	start, end := addrOf(b), addrOf(b)+uint64(len(b))
	for start < end {
		arg := pmScanArg{size: pagemapScanArgSize, flags: pmScanWPMatching | pmScanCheckWPAsync, start: start, end: end,
			vec: uint64(uintptr(unsafe.Pointer(regions))), vecLen: pmScanRegions,
			categoryMask: pageIsWritten, returnMask: pageIsWritten}
		n, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(w.pagemap), pagemapScan, uintptr(unsafe.Pointer(&arg)))
		runtime.KeepAlive(regions)
		if errno != 0 {
			return dst, fmt.Errorf("host: PAGEMAP_SCAN: %w", errno)
		}
		for _, r := range regions[:n] {
			for p := r.start; p < r.end; p += deltaBlockSize {
				dst = append(dst, uint32((p-addrOf(b))/deltaBlockSize))
			}
		}
		if arg.walkEnd <= start {
			return dst, errors.New("host: PAGEMAP_SCAN made no progress")
		}
		start = arg.walkEnd
	}
	return dst, nil
}

// slotTracker is the kernel's writeTracker for an arena slot.
type slotTracker struct {
	wp        *writeProtect
	m         *linearMemory
	protected int // bytes of the slot under protection: the memory's size at the last report
	regions   [pmScanRegions]pageRegion
	stopped   bool
}

// startWriteTracking registers the slot with the arena's userfaultfd and protects its
// first size bytes.
func (m *linearMemory) startWriteTracking(size int) (writeTracker, error) {
	if m.track != nil {
		m.track.stop()
	}
	wp, err := m.arena.writeProtection()
	if err != nil {
		return nil, err
	}
	if err := wp.register(m.slot); err != nil {
		return nil, fmt.Errorf("host: registering a memory for write tracking: %w", err)
	}
	t := &slotTracker{wp: wp, m: m}
	if err := wp.protect(m.slot[:size], true); err != nil {
		wp.unregister(m.slot)
		return nil, fmt.Errorf("host: write-protecting a memory: %w", err)
	}
	t.protected = size
	m.track = t
	return t, nil
}

func (t *slotTracker) written(mem []byte, dst []uint32) ([]uint32, error) {
	if t.stopped {
		return dst, errors.New("host: write tracking stopped")
	}
	if len(mem) > len(t.m.slot) || (len(mem) > 0 && addrOf(mem) != addrOf(t.m.slot)) {
		return dst, errors.New("host: the memory is no longer its slot")
	}
	dst, err := t.wp.scan(t.m.slot[:t.protected], &t.regions, dst)
	if err != nil {
		return dst, err
	}
	if len(mem) > t.protected {
		for k := t.protected / deltaBlockSize; k < len(mem)/deltaBlockSize; k++ {
			if !bytes.Equal(mem[k*deltaBlockSize:(k+1)*deltaBlockSize], zeroPage[:deltaBlockSize]) {
				dst = append(dst, uint32(k))
			}
		}
		if err := t.wp.protect(t.m.slot[t.protected:len(mem)], true); err != nil {
			return dst, err
		}
		t.protected = len(mem)
	}
	return dst, nil
}

// stop lifts the protection and unregisters the slot, before the slot goes back to the
// arena.
func (t *slotTracker) stop() {
	if t.stopped {
		return
	}
	t.stopped = true
	t.wp.protect(t.m.slot[:t.protected], false)
	t.wp.unregister(t.m.slot)
	if t.m.track == writeTracker(t) {
		t.m.track = nil
	}
}
