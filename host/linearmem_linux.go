package host

import (
	"encoding/binary"
	"syscall"
	"unsafe"
)

// reserveMemory maps n bytes of address space, readable and writable, backed by memory
// only where touched (MAP_NORESERVE: not counted against the overcommit heuristic) and
// kept out of transparent huge pages, so that a touched page costs 4 KiB, not 2 MiB.
func reserveMemory(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	if err := syscall.Madvise(b, syscall.MADV_NOHUGEPAGE); err != nil {
		syscall.Munmap(b)
		return nil, err
	}
	return b, nil
}

// releaseMemory gives b's pages back to the operating system; they read as zero after.
// b starts on a page boundary (a slot does).
func releaseMemory(b []byte) error {
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}

// unreserveMemory unmaps what reserveMemory mapped.
func unreserveMemory(b []byte) { syscall.Munmap(b) }

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populateMemory backs b's pages, as a write to each would; b starts on a page boundary.
func populateMemory(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), madvPopulateWrite)
	if errno != 0 {
		return errno
	}
	return nil
}

// residentRuns returns the runs of b's pages that are backed, at most max pages in all;
// none when the system does not say. b starts on a page boundary.
func residentRuns(b []byte, max int) []pageRun {
	pages := (len(b) + pageSize - 1) / pageSize
	if pages == 0 {
		return []pageRun{}
	}
	vec := make([]byte, pages)
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return []pageRun{}
	}
	runs := []pageRun{}
	total := 0
	for p := 0; p < pages && total < max; p++ {
		if vec[p]&1 == 0 {
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k].off+runs[k].n*pageSize == p*pageSize {
			runs[k].n++
		} else {
			runs = append(runs, pageRun{off: p * pageSize, n: 1})
		}
		total++
	}
	return runs
}

// pageStates reports, for each 4 KiB page of b, what backs it
// (/proc/self/pagemap, Documentation/admin-guide/mm/pagemap.rst): nothing, memory of
// the mapping's own (anonymous, present or swapped out), or a page of the file it maps
// (bit 61); nil when the system does not say. b starts on a page boundary and is in
// one of a's slots, handed out.
func (a *memArena) pageStates(b []byte) []pageState {
	a.mu.Lock()
	if !a.pagemapOpen && !a.closed {
		a.pagemapOpen = true
		if fd, err := syscall.Open("/proc/self/pagemap", syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
			a.pagemap = fd
		}
	}
	fd := a.pagemap
	a.mu.Unlock()
	pages := len(b) / pageSize
	states := make([]pageState, pages)
	if fd < 0 {
		return nil
	}
	if pages == 0 {
		return states
	}
	const (
		present = 1 << 63
		swapped = 1 << 62
		file    = 1 << 61
		batch   = 512
	)
	var buf [batch * 8]byte
	first := int64(addrOf(b) / pageSize)
	for p := 0; p < pages; {
		n := min(batch, pages-p)
		got, err := syscall.Pread(fd, buf[:n*8], (first+int64(p))*8)
		if err != nil || got != n*8 {
			return nil
		}
		for k := 0; k < n; k++ {
			switch e := binary.LittleEndian.Uint64(buf[k*8:]); {
			case e&present != 0 && e&file != 0:
				states[p+k] = pageFile
			case e&(present|swapped) != 0:
				states[p+k] = pageOwn
			}
		}
		p += n
	}
	return states
}

func closePagemap(fd int) { syscall.Close(fd) }

// physicalMemory returns the machine's physical memory in bytes; 0 when unknown.
func physicalMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
