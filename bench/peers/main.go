// Command peers runs shardhost and Proto.Actor (github.com/asynkron/protoactor-go) side
// by side in one process and one run, doing the same counter work, and prints one
// markdown table of figures with each shardhost figure's ratio to Proto.Actor's and the
// physical floors measured in the same run (README.md here; bench/README.md, "Beside Proto.Actor").
//
//	make bench-peers                      # builds the examples, then runs this
//	cd bench/peers && go run . -wasm ../../bin/wasm -dur 2s -rss-sizes 1000,10000,50000
//
// shardhost's entities are the counter example built in Rust (counter-rust.wasm), by
// TinyGo (counter.wasm when bin/wasm/.go-compiler says tinygo) and by Go's wasip1 port
// (go/counter.wasm, or counter.wasm when Go's port built it). Proto.Actor's are native
// Go actors with the same messages, spawned by name at their first message.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

type options struct {
	wasmDir     string
	guests      []string
	dur         time.Duration
	askers      int
	entities    int
	tells       int
	tellers     int
	serialMax   int
	activations int
	rateMax     int
	remote      bool
	recovery    bool
	checkpoint  string
	memory      bool
	rounds      int
	rssSizes    []int
	rssMemFrac  float64
	profileDir  string
	only        map[string]bool
	childRSS    string
	childN      int
	childWasm   string
	childCache  string
}

func main() {
	var o options
	guests := flag.String("guests", "rust,tinygo,go", "shardhost guests to run, of rust, tinygo and go (those not built are left out)")
	sizes := flag.String("rss-sizes", "1000,10000,50000", "active entities at which RSS per entity is measured (each in a child process)")
	only := flag.String("only", "", "workloads to run, comma-separated, of serial, concurrent, tells, activation, remote, rss (empty: all)")
	flag.StringVar(&o.wasmDir, "wasm", "../../bin/wasm", "the directory make examples writes the counter modules to")
	flag.DurationVar(&o.dur, "dur", 2*time.Second, "how long each timed workload runs, per system")
	flag.IntVar(&o.askers, "askers", 64, "concurrent askers in the concurrent, remote and activation-rate workloads")
	flag.IntVar(&o.entities, "entities", 1000, "counters the concurrent asks, the tells and the remote asks spread over")
	flag.IntVar(&o.tells, "tells", 200_000, "tells sent in the tells workload")
	flag.IntVar(&o.tellers, "tellers", 8, "goroutines sending the tells")
	flag.IntVar(&o.serialMax, "serial-max", 100_000, "most asks in a serial workload per system (it also stops after -dur)")
	flag.IntVar(&o.rounds, "rounds", 4, "rounds each workload is split into, the systems taking turns in each, so that a shared machine's load weighs on all alike")
	flag.IntVar(&o.activations, "activation-max", 2000, "most first messages in the serial activation workload (it also stops after -dur)")
	flag.IntVar(&o.rateMax, "activation-rate-max", 20_000, "most activations in the activation-rate workload (it also stops after -dur)")
	flag.BoolVar(&o.remote, "remote", true, "run the two-member workloads")
	flag.BoolVar(&o.recovery, "recovery", true, "shardhost members keep in-memory recovery on (host.Config.Recovery, on by default)")
	flag.StringVar(&o.checkpoint, "checkpoint", "", "the counter type's checkpoint policy (deploy --checkpoint: journal, passivation, every-message, every-N; empty: the default, journal)")
	flag.BoolVar(&o.memory, "memory-rows", true, "also measure the tells and remote asks of shardhost counters that keep their state in memory (checkpoint at passivation), like Proto.Actor's, in rows of their own (left out when -checkpoint is passivation)")
	flag.Float64Var(&o.rssMemFrac, "rss-mem-frac", 0.5, "skip an RSS size whose estimate (from the smaller sizes) exceeds this fraction of MemAvailable")
	flag.StringVar(&o.profileDir, "profile-dir", "", "write CPU and allocation profiles of the serial, concurrent, tells, activation and remote workloads here (SYSTEM-WORKLOAD-rROUND.*.pprof)")
	flag.StringVar(&o.childRSS, "child-rss", "", "internal: measure RSS per entity of this system in this process")
	flag.IntVar(&o.childN, "child-n", 0, "internal: entities for -child-rss")
	flag.StringVar(&o.childWasm, "child-wasm", "", "internal: module for -child-rss")
	flag.StringVar(&o.childCache, "child-cache", "", "internal: compilation cache for -child-rss")
	flag.Parse()
	o.guests = strings.Split(*guests, ",")
	for _, s := range strings.Split(*sizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "peers: -rss-sizes: %q is not a positive number\n", s)
			os.Exit(2)
		}
		o.rssSizes = append(o.rssSizes, n)
	}
	if *only != "" {
		o.only = map[string]bool{}
		for _, w := range strings.Split(*only, ",") {
			o.only[strings.TrimSpace(w)] = true
		}
	}
	if o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "peers: -rounds must be at least 1")
		os.Exit(2)
	}
	if o.childRSS != "" {
		if err := rssChild(o); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func (o options) runs(w string) bool { return o.only == nil || o.only[w] }

// memRows reports whether the run measures the in-memory rows (-memory-rows): only
// when the counter type's own policy writes something per message.
func (o options) memRows() bool { return o.memory && o.checkpoint != "passivation" }

// system is one column of the table.
type system struct {
	key, name string
	wasmFile  string // empty for Proto.Actor
	wasm      []byte
}

// findGuests returns the counter modules built in dir, and notes on those missing.
func findGuests(dir string, want []string) ([]system, []string, error) {
	compiler, _ := os.ReadFile(filepath.Join(dir, ".go-compiler"))
	goCompiler := strings.TrimSpace(string(compiler))
	var out []system
	var notes []string
	for _, g := range want {
		var s system
		switch strings.TrimSpace(g) {
		case "rust":
			s = system{key: "rust", name: "shardhost Rust", wasmFile: filepath.Join(dir, "counter-rust.wasm")}
		case "tinygo":
			if goCompiler != "tinygo" {
				notes = append(notes, "TinyGo guest: not measured (bin/wasm/counter.wasm was not built by TinyGo: put tinygo on PATH and make examples)")
				continue
			}
			s = system{key: "tinygo", name: "shardhost TinyGo", wasmFile: filepath.Join(dir, "counter.wasm")}
		case "go":
			f := filepath.Join(dir, "go", "counter.wasm")
			if goCompiler == "go" {
				f = filepath.Join(dir, "counter.wasm")
			}
			s = system{key: "go", name: "shardhost Go (wasip1)", wasmFile: f}
		case "":
			continue
		default:
			return nil, nil, fmt.Errorf("-guests: unknown guest %q (want rust, tinygo or go)", g)
		}
		b, err := os.ReadFile(s.wasmFile)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: not measured (%v; make examples builds it)", s.name, err))
			continue
		}
		s.wasm = b
		out = append(out, s)
	}
	return out, notes, nil
}

// results holds each system's figures by row key.
type results map[string]map[string]float64

func (r results) set(sys, row string, v float64) {
	if r[sys] == nil {
		r[sys] = map[string]float64{}
	}
	r[sys][row] = v
}

func run(o options) error {
	ctx := context.Background()
	guests, notes, err := findGuests(o.wasmDir, o.guests)
	if err != nil {
		return err
	}
	systems := append([]system{{key: "proto", name: "Proto.Actor"}}, guests...)
	cache, err := os.MkdirTemp("", "peers-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	m := readMachine()
	res := results{}
	progress := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "peers: "+format+"\n", a...) }

	progress("floors")
	fl, err := measureFloors(ctx)
	if err != nil {
		return fmt.Errorf("floors: %w", err)
	}
	// Memory first, while this process is small: each size runs in a child process, and
	// the Go guest's children need gigabytes.
	if o.runs("rss") {
		for _, s := range systems {
			notes = append(notes, runRSS(o, s, cache, res, progress)...)
		}
	}
	if err := localPhase(ctx, o, systems, cache, res, progress); err != nil {
		return err
	}
	debug.FreeOSMemory() // the local phase's instances, before the remote one's
	if o.remote && o.runs("remote") {
		if err := remotePhase(ctx, o, systems, cache, res, progress); err != nil {
			return err
		}
	}
	m.loadEnd = loadAverage()
	printTable(os.Stdout, o, m, fl, systems, res, notes)
	return nil
}

// machine describes where the run happened.
type machine struct {
	date, cpu, kernel  string
	cores, gomaxprocs  int
	memTotal           int64
	loadStart, loadEnd string
}

func readMachine() machine {
	m := machine{date: time.Now().UTC().Format("2006-01-02 15:04 MST"), cores: runtime.NumCPU(), gomaxprocs: runtime.GOMAXPROCS(0),
		loadStart: loadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if m.cpu == "" {
		m.cpu = runtime.GOARCH
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.memTotal = meminfo("MemTotal")
	return m
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// meminfo returns a /proc/meminfo field in bytes, or 0.
func meminfo(field string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(k) != field {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(string(f[0]), 10, 64)
		return n << 10 // kB
	}
	return 0
}
