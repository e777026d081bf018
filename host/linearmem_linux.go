package host

import "syscall"

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
