//go:build linux

// Command pagecost measures what a page of fresh anonymous memory costs this machine:
// it maps -size bytes, writes one byte per 4 KiB page (each write a page fault that
// the kernel backs with a zeroed page), unmaps them, and does it again at once and
// after -wait idle. An activation's fresh linear memory and Go heap pay that cost
// (bench/peers/README.md, "Pages").
//
// On a virtual machine the figure depends on the hypervisor too. On the 2-core virtual
// machine of bench/README.md's figures (a virtio balloon with free page reporting), one
// morning (2026-11-27 10:40 UTC) it was 8.9 µs a page at the first touch, 0.2 µs again
// at once and 7.9 µs after 8 s idle: memory the kernel had freed and left for seconds
// cost 40 times more to touch again. Half an hour later, after a test had touched
// 22 GiB, it was 1.3-1.5 µs every time.
//
//	go run ./bench/pagecost -size 1073741824 -wait 8s
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	size := flag.Int("size", 1<<30, "bytes mapped and touched each time")
	wait := flag.Duration("wait", 8*time.Second, "idle time before the last measurements")
	flag.Parse()
	if *size < 4096 {
		fmt.Fprintln(os.Stderr, "pagecost: -size must be at least one page")
		os.Exit(2)
	}
	measure := func(what string) {
		d, err := touch(*size)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pagecost:", err)
			os.Exit(1)
		}
		fmt.Printf("%-28s %6.2f µs a page\n", what, float64(d.Nanoseconds())/1e3/float64(*size/4096))
	}
	measure("first touch")
	measure("again at once")
	measure("again at once")
	time.Sleep(*wait)
	measure(fmt.Sprintf("again after %v idle", *wait))
	measure("again at once")
}

// touch maps n bytes of anonymous memory without transparent huge pages, writes a byte
// to each 4 KiB page and unmaps them, and returns how long the writes took.
func touch(n int) (time.Duration, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 0, err
	}
	defer syscall.Munmap(b)
	_ = syscall.Madvise(b, syscall.MADV_NOHUGEPAGE) // 4 KiB pages, as the arena's slots have
	start := time.Now()
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return time.Since(start), nil
}
