package host

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The memfd of an image mapped copy-on-write (cowimage.go): memfd_create(2), written
// once with pwrite (the image's zero pages stay holes), then sealed against any change
// of its size or contents (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_SEAL:
// memfd_create(2), "File sealing"), so that every page a mapping reads is the image's.

// newCowFile returns a sealed memfd of size bytes holding img's runs; size covers them.
func newCowFile(img *preImage, size int) (int, error) {
	fd, err := unix.MemfdCreate("shardhost-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.3, which has no MFD_NOEXEC_SEAL
		fd, err = unix.MemfdCreate("shardhost-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, fmt.Errorf("host: memfd_create: %w", err)
	}
	if err := fillCowFile(fd, img, size); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func fillCowFile(fd int, img *preImage, size int) error {
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fmt.Errorf("host: sizing an image's memfd: %w", err)
	}
	for _, r := range img.runs {
		for done := 0; done < len(r.data); {
			n, err := unix.Pwrite(fd, r.data[done:], int64(r.off+done))
			if err != nil {
				return fmt.Errorf("host: writing an image's memfd: %w", err)
			}
			done += n
		}
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("host: sealing an image's memfd: %w", err)
	}
	return nil
}

func closeCowFile(fd int) { unix.Close(fd) }

// mapCowFile maps the first len(b) bytes of fd over b, private and writable: a write
// copies the page (MAP_PRIVATE), and the copy is the writer's alone. b starts on a page
// boundary, inside a reservation (reserveMemory), and is no longer than the file.
func mapCowFile(b []byte, fd int) error {
	_, err := unix.MmapPtr(fd, 0, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("host: mapping an image: %w", err)
	}
	return nil
}

// unmapCowFile puts anonymous memory back over b, as reserveMemory maps it: the
// file's mapping and the pages copied from it are dropped, and b reads as zero. An
// error means b may be left unmapped: it must not be used again.
func unmapCowFile(b []byte) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("host: unmapping an image: %w", err)
	}
	// The same flags as the reservation around it, which the new mapping merges back into.
	return syscall.Madvise(b, syscall.MADV_NOHUGEPAGE)
}

// maxMapCount returns vm.max_map_count, the mappings a process may have; 0 when
// unknown.
func maxMapCount() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// cowFileBytes returns the bytes of memory fd's pages hold (those written, and the
// holes a mapping has read, which the kernel fills once for all mappings).
func cowFileBytes(fd int) int64 {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}
