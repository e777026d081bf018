// Command peers runs shardhost and Proto.Actor (github.com/asynkron/protoactor-go) side
// by side in one process and one run, doing the same counter work, and prints one
// markdown table of figures with each shardhost figure's ratio to Proto.Actor's and the
// physical floors measured in the same run (README.md here; the top-level README,
// "Figures").
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
	flag.IntVar(&o.serialMax, "serial-max", 100_000, "most asks in a serial workload (it also stops after -dur)")
	flag.IntVar(&o.activations, "activation-max", 2000, "most first messages in the serial activation workload (it also stops after -dur)")
	flag.IntVar(&o.rateMax, "activation-rate-max", 20_000, "most activations in the activation-rate workload (it also stops after -dur)")
	flag.BoolVar(&o.remote, "remote", true, "run the two-member workloads")
	flag.Float64Var(&o.rssMemFrac, "rss-mem-frac", 0.4, "skip an RSS size whose estimate (from the smaller sizes) exceeds this fraction of MemAvailable")
	flag.StringVar(&o.profileDir, "profile-dir", "", "write CPU and allocation profiles of the serial and concurrent workloads here (SYSTEM-WORKLOAD.*.pprof)")
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
	for _, s := range systems {
		if err := runLocal(ctx, o, s, cache, res, progress); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if o.remote && o.runs("remote") {
			if err := runRemote(ctx, o, s, cache, res, progress); err != nil {
				return fmt.Errorf("%s, remote: %w", s.name, err)
			}
		}
	}
	if o.runs("rss") {
		for _, s := range systems {
			rssNotes, err := runRSS(o, s, cache, res, progress)
			if err != nil {
				return fmt.Errorf("%s, rss: %w", s.name, err)
			}
			notes = append(notes, rssNotes...)
		}
	}
	m.loadEnd = loadAverage()
	printTable(os.Stdout, o, m, fl, systems, res, notes)
	return nil
}

// runLocal runs the one-member workloads of s.
func runLocal(ctx context.Context, o options, s system, cache string, res results, progress func(string, ...any)) error {
	var c counters
	if s.wasm == nil {
		sys := quietActorSystem()
		defer sys.Shutdown()
		c = newProtoCounters(sys)
	} else {
		cl, err := startShardCluster(ctx, 1, s.wasm, cache)
		if err != nil {
			return err
		}
		defer cl.stop()
		c = shardCounters{cl.nodes[0].Sharding()}
	}
	progress("%s: %d counters", s.name, o.entities)
	if err := homeAllShards(ctx, c); err != nil {
		return err
	}
	ids := make([]string, o.entities)
	for i := range ids {
		ids[i] = "e-" + strconv.Itoa(i)
	}
	if err := activate(ctx, c, ids, o.askers); err != nil {
		return err
	}
	if o.runs("serial") {
		progress("%s: serial asks", s.name)
		err := profiled(o.profileDir, s.key+"-serial", func() error {
			l, err := serialAsks(ctx, c, ids[0], o.dur, o.serialMax)
			if err == nil {
				res.set(s.key, "serial-p50", l.quantile(0.5).Seconds())
				res.set(s.key, "serial-p99", l.quantile(0.99).Seconds())
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if o.runs("concurrent") {
		progress("%s: concurrent asks", s.name)
		err := profiled(o.profileDir, s.key+"-concurrent", func() error {
			r, err := concurrentAsks(ctx, c, ids, o.askers, o.dur)
			res.set(s.key, "concurrent", r)
			return err
		})
		if err != nil {
			return err
		}
	}
	if o.runs("tells") {
		progress("%s: tells", s.name)
		r, err := tellLoad(ctx, c, ids, o.tellers, o.tells)
		if err != nil {
			return err
		}
		res.set(s.key, "tells", r)
	}
	if o.runs("activation") {
		progress("%s: activations", s.name)
		l, err := serialActivations(ctx, c, "a-", o.dur, o.activations)
		if err != nil {
			return err
		}
		res.set(s.key, "activation-p50", l.quantile(0.5).Seconds())
		res.set(s.key, "activation-p99", l.quantile(0.99).Seconds())
		r, _, err := activationRate(ctx, c, "b-", o.askers, o.dur, o.rateMax)
		if err != nil {
			return err
		}
		res.set(s.key, "activation-rate", r)
	}
	return nil
}

// runRemote runs the two-member workloads of s: counters on the second member, asked
// through the first.
func runRemote(ctx context.Context, o options, s system, cache string, res results, progress func(string, ...any)) error {
	var c counters
	var ids []string
	for i := 0; i < o.entities; i++ {
		ids = append(ids, "r-"+strconv.Itoa(i))
	}
	progress("%s: two members", s.name)
	if s.wasm == nil {
		p := startProtoPair()
		defer p.stop()
		if err := activate(ctx, p.local, ids, o.askers); err != nil { // spawned on the server
			return err
		}
		c = p.remote
	} else {
		cl, err := startShardCluster(ctx, 2, s.wasm, cache)
		if err != nil {
			return err
		}
		defer cl.stop()
		if ids, err = cl.remoteIDs(ctx, "r-", o.entities); err != nil {
			return err
		}
		c = shardCounters{cl.nodes[0].Sharding()}
		if err := activate(ctx, c, ids, o.askers); err != nil {
			return err
		}
		r, err := cl.nodes[0].Sharding().Ask(ctx, counterType, ids[0], msgGet)
		if err != nil {
			return err
		}
		if r.Node != cl.nodes[1].Self().Address {
			return fmt.Errorf("counter %s answered from %s, not member 1", ids[0], r.Node)
		}
	}
	progress("%s: remote asks", s.name)
	l, err := serialAsks(ctx, c, ids[0], o.dur, o.serialMax)
	if err != nil {
		return err
	}
	res.set(s.key, "remote-p50", l.quantile(0.5).Seconds())
	res.set(s.key, "remote-p99", l.quantile(0.99).Seconds())
	r, err := concurrentAsks(ctx, c, ids, o.askers, o.dur)
	if err != nil {
		return err
	}
	res.set(s.key, "remote-rate", r)
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
