package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// runRSS measures s's resident memory per active entity at each of o.rssSizes, each in
// a child process of its own (a process rarely gives memory back, so sizes measured one
// after another in one process would not be independent). A size whose estimate, from
// the figure of the largest smaller size, exceeds o.rssMemFrac of the machine's
// available memory is skipped, and a child that fails ends the sizes of s; both with a
// note.
func runRSS(o options, s system, cache string, res results, progress func(string, ...any)) []string {
	self, err := os.Executable()
	if err != nil {
		return []string{fmt.Sprintf("%s: RSS not measured: %v", s.name, err)}
	}
	var notes []string
	perEntity := 0.0
	for _, n := range o.rssSizes {
		if perEntity > 0 {
			need := perEntity * float64(n) * 1.1
			avail := float64(meminfo("MemAvailable"))
			if need > o.rssMemFrac*avail {
				notes = append(notes, fmt.Sprintf("%s at %s entities: skipped, it would need about %.1f GiB (%.0f KiB each), over %.0f%% of the %.1f GiB available",
					s.name, thousands(n), need/(1<<30), perEntity/1024, o.rssMemFrac*100, avail/(1<<30)))
				continue
			}
		}
		progress("%s: RSS at %d entities", s.name, n)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, self, "-child-rss", s.key, "-child-n", strconv.Itoa(n), "-child-wasm", s.wasmFile, "-child-cache", cache, "-recovery="+strconv.FormatBool(o.recovery), "-checkpoint="+o.checkpoint)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		cancel()
		var before, after int64
		if err == nil {
			_, err = fmt.Sscan(string(out), &before, &after)
		}
		if err != nil {
			return append(notes, fmt.Sprintf("%s at %s entities: the child process failed (%v); larger sizes not tried", s.name, thousands(n), err))
		}
		perEntity = float64(after-before) / float64(n)
		res.set(s.key, "rss-"+strconv.Itoa(n), perEntity)
	}
	return notes
}

// rssChild is the child of runRSS: it starts the system (one member for shardhost),
// homes every shard, reads its resident memory, activates o.childN counters with
// 16 askers, reads it again, and prints both (bytes).
func rssChild(o options) error {
	ctx := context.Background()
	var c counters
	if o.childRSS == "proto" {
		sys := quietActorSystem()
		defer sys.Shutdown()
		c = newProtoCounters(sys)
	} else {
		wasm, err := os.ReadFile(o.childWasm)
		if err != nil {
			return err
		}
		cl, err := startShardCluster(ctx, 1, wasm, o.childCache, o.recovery, o.checkpoint, false)
		if err != nil {
			return err
		}
		defer cl.stop()
		c = shardCounters{cl.nodes[0].Sharding(), counterType}
	}
	if err := homeAllShards(ctx, c); err != nil {
		return err
	}
	ids := make([]string, o.childN)
	for i := range ids {
		ids[i] = "m-" + strconv.Itoa(i)
	}
	before, err := residentBytes()
	if err != nil {
		return err
	}
	if err := activate(ctx, c, ids, 16); err != nil {
		return err
	}
	after, err := residentBytes()
	if err != nil {
		return err
	}
	// Every counter is still active: each answers "get" with its count, 1.
	for _, id := range ids[:min(len(ids), 100)] {
		if n, err := askCount(ctx, c, id); err != nil || n != 1 {
			return fmt.Errorf("counter %s: %d, %v (want 1)", id, n, err)
		}
	}
	fmt.Println(before, after)
	return nil
}

// residentBytes is the process's proportional set size (Pss, /proc/self/smaps_rollup)
// after a collection that returns what it can to the OS, or VmRSS (/proc/self/status)
// where the kernel has no smaps_rollup. Pss counts a page mapped many times in the
// process once (a Go-port module's pre-initialized image, mapped copy-on-write into
// each of its instances, is one file's pages); VmRSS counts it in every mapping.
func residentBytes() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	if v, err := procKB("/proc/self/smaps_rollup", "Pss:"); err == nil {
		return v, nil
	}
	return procKB("/proc/self/status", "VmRSS:")
}

// procKB reads the first line of file that starts with field, a figure in kB, in bytes.
func procKB(file, field string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			fields := strings.Fields(v)
			if len(fields) == 0 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, file)
}
