package host

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPreInitActivation is an entity's activation in the runtime, from the
// module's pre-initialized image into a resident slot of a closed instance ("slots",
// residentslots.go) or into a slot the kernel backs anew ("image", no instance pool),
// both again with the image mapped copy-on-write ("mapped-slots", "mapped":
// cowimage.go) rather than copied, and by running its initialisation ("fresh", no
// pool), in one run so that the load and the price of a page weigh on all alike:
// a new instance of the counter example (TinyGo, Go's port, Rust) and its first "inc",
// then its close, as an entity passivated and activated again. It reports the
// activation's p50/p99 (instance and first message), the process's CPU time and minor
// page faults (/proc/self/stat) per activation, close included.
func BenchmarkPreInitActivation(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, rustCounter, goCounter} {
		for _, path := range []string{"fresh", "image", "mapped", "slots", "mapped-slots"} {
			b.Run(mod.name+"/"+path, func(b *testing.B) {
				slots, mapped := strings.HasSuffix(path, "slots"), strings.HasPrefix(path, "mapped")
				rt, _ := newTestRuntime(b, func(c *RuntimeConfig) {
					if !slots {
						c.InstancePoolBytes = -1
					}
				})
				setImageMode(rt, mapped)
				ctx := context.Background()
				m, err := rt.Compile(ctx, mod.wasm(b))
				if err != nil {
					b.Fatal(err)
				}
				if err := m.PrepareRestore(ctx); err != nil {
					b.Fatal(err)
				}
				if ok, why := m.PreInitialized(); !ok && path != "fresh" {
					b.Skip("not pre-initialized: " + why)
				}
				m.pre.off.Store(path == "fresh")
				if img := m.pre.image.Load(); mapped && (img == nil || img.cow == nil) {
					b.Skip("the image is not mapped copy-on-write here")
				}
				msg := []byte("inc")
				activate := func() time.Duration {
					start := time.Now()
					inst, err := m.Instantiate(ctx, "counter", "c")
					if err != nil {
						b.Fatal(err)
					}
					if _, err := inst.Receive(ctx, msg); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					inst.Close(ctx)
					return d
				}
				for i := 0; i < 20; i++ { // the warm slots learn and fill
					activate()
				}
				samples := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				faults, rewritten := minorFaults(), rt.arena.resident.rewritten.Load()
				done := reportCPU(b)
				for i := 0; i < b.N; i++ {
					samples = append(samples, activate())
				}
				b.StopTimer()
				done()
				if f := minorFaults(); f >= 0 && faults >= 0 {
					b.ReportMetric(float64(f-faults)/float64(b.N), "minflt/op")
				}
				if slots {
					// The pages an activation wrote: what it would keep of its own were
					// the image mapped copy-on-write.
					b.ReportMetric(float64(rt.arena.resident.rewritten.Load()-rewritten)/float64(b.N), "written-pages/op")
					// The backed memory a closed instance keeps: an active entity's.
					if n, charged := rt.arena.residentCounts(); n > 0 {
						b.ReportMetric(float64(charged)/float64(n)/1024, "slot-KiB")
					}
				}
				reportLatency(b, samples)
			})
		}
	}
}

// minorFaults returns the process's minor page faults so far (/proc/self/stat's tenth
// field), -1 where there is none.
func minorFaults() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		b = b[i+2:]
	}
	f := bytes.Fields(b)
	if len(f) < 8 {
		return -1
	}
	n, err := strconv.ParseInt(string(f[7]), 10, 64) // field 10: minflt
	if err != nil {
		return -1
	}
	return n
}

// BenchmarkActiveEntityMemory is the memory an active entity costs: each op makes an
// instance of the counter example (TinyGo, Go's port) from its module's image, copied
// into its slot ("image") or mapped copy-on-write ("mapped", cowimage.go), and sends it
// one "inc"; the instances stay open until the end. Reported per entity, from
// /proc/self/smaps_rollup before and after (after a garbage collection that gives back
// what it can): Pss (each page shared with others counted in part: the image's file
// once in all, not once per entity), Rss (the kernel's resident set, which counts a
// shared page in every mapping of it), Anonymous (the pages of the process's own) and
// VmPTE (page tables), in KiB, and the image's file once (image-KiB). Run it with a fixed count, for
// instance -benchtime=300x.
func BenchmarkActiveEntityMemory(b *testing.B) {
	for _, mod := range []counterBuild{tinygoCounter, goCounter} {
		for _, path := range []string{"image", "mapped"} {
			b.Run(mod.name+"/"+path, func(b *testing.B) {
				rt, _ := newTestRuntime(b, func(c *RuntimeConfig) { c.InstancePoolBytes = -1 })
				mapped := path == "mapped"
				setImageMode(rt, mapped)
				ctx := context.Background()
				m, err := rt.Compile(ctx, mod.wasm(b))
				if err != nil {
					b.Fatal(err)
				}
				if err := m.PrepareRestore(ctx); err != nil {
					b.Fatal(err)
				}
				img := m.pre.image.Load()
				if img == nil || mapped != (img.cow != nil) {
					b.Skip("the image is not " + path + " here")
				}
				insts := make([]*wasmInstance, 0, b.N)
				defer func() {
					for _, inst := range insts {
						inst.Close(ctx)
					}
				}()
				before, ok := smapsRollup()
				if !ok {
					b.Skip("no /proc/self/smaps_rollup")
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					inst, err := m.Instantiate(ctx, "counter", "c"+strconv.Itoa(i))
					if err != nil {
						b.Fatal(err)
					}
					insts = append(insts, inst)
					if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after, _ := smapsRollup()
				for _, f := range []string{"Pss", "Rss", "Anonymous", "VmPTE"} {
					b.ReportMetric(float64(after[f]-before[f])/float64(b.N), strings.ToLower(f)+"-KiB/entity")
				}
				if img.cow != nil {
					b.ReportMetric(float64(img.cow.fileBytes())/1024, "image-KiB")
				}
			})
		}
	}
}

// smapsRollup returns the fields of /proc/self/smaps_rollup and VmPTE of
// /proc/self/status (the page tables) in KiB, after a garbage collection that gives
// back to the operating system what it can.
func smapsRollup() (map[string]int64, bool) {
	runtime.GC()
	debug.FreeOSMemory()
	fields := map[string]int64{}
	for _, name := range []string{"/proc/self/smaps_rollup", "/proc/self/status"} {
		f, err := os.Open(name)
		if err != nil {
			return nil, false
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			field, rest, ok := strings.Cut(sc.Text(), ":")
			v := strings.Fields(rest)
			if !ok || len(v) != 2 || v[1] != "kB" {
				continue
			}
			if n, err := strconv.ParseInt(v[0], 10, 64); err == nil {
				fields[field] = n
			}
		}
		f.Close()
	}
	return fields, fields["Pss"] > 0
}
