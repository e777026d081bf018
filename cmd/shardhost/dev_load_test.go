package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// watchedOutput collects what dev prints (and its logs), for many writers at once, and
// wakes the test at each write.
type watchedOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // one pending wake-up at most
}

func newWatchedOutput() *watchedOutput { return &watchedOutput{wrote: make(chan struct{}, 1)} }

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// busyLoops spins a goroutine on every core until the returned function is called.
func busyLoops(t *testing.T) (stop func()) {
	t.Helper()
	g := owner.New()
	var sink atomic.Uint64
	for range runtime.NumCPU() {
		g.Go(func() {
			x := uint64(1)
			for {
				select {
				case <-g.Done():
					sink.Add(x)
					return
				default:
				}
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { g.Close(); g.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// demoLine is one counter's line of dev's demo.
var demoLine = regexp.MustCompile(`counter/\w+\s+created on \S+\s+"inc \d+" via \S+ -> -?\d+\s+"get" via \S+ -> -?\d+`)

// TestDevDemoUnderCPULoad: dev, run as the command runs it (its members on the dev
// profile, then the deploy, the demo and serving), completes its demo while a busy loop
// spins on every core of the machine, as a newcomer's laptop compiling something does.
// The waits are on dev's output, with deadlines of minutes, for a loaded machine
// running the race detector.
//
// The test does not ask that "get" answer what "inc" did: the counter is deployed with
// the default checkpoint policy (on passivation and handoff), under which an entity
// stopped by a lapsed hosting lease loses what it did since its last save.
func TestDevDemoUnderCPULoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member cluster under CPU load (a minute or more)")
	}
	t.Cleanup(testwasm.Cleanup)
	modules := t.TempDir()
	wasm, err := os.ReadFile(testwasm.Path(t, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "counter.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}

	var nf nodeFlags
	flags := &cobra.Command{Use: "dev"}
	nf.add(flags, profileDev)
	if err := flags.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	out, logs := newWatchedOutput(), newWatchedOutput()
	free := devNode{bind: "127.0.0.1:0", transport: "127.0.0.1:0", api: "127.0.0.1:0"}
	d := devRun{
		nodes:   []devNode{free, free, free},
		modules: []string{filepath.Join(modules, "counter.wasm")},
		dataDir: t.TempDir(),
		demo:    true,
		retry:   demoRetry,
		flags:   &nf,
		log:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		out:     out,
	}

	stopLoad := busyLoops(t)
	g := owner.New()
	defer func() { g.Close(); g.Wait() }() // closed too: Wait alone leaves the group's idle goroutine
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // before g.Close: it ends dev's run
	done := make(chan error, 1)
	g.Go(func() { done <- d.run(ctx) })

	deadline := time.After(5 * time.Minute)
	for !strings.Contains(out.String(), "serving until interrupted") {
		select {
		case err := <-done:
			t.Fatalf("dev returned before its demo completed: %v\noutput:\n%s\nlogs:\n%s", err, out, logs)
		case <-deadline:
			t.Fatalf("dev's demo did not complete within 5 minutes under load\noutput:\n%s\nlogs:\n%s", out, logs)
		case <-out.wrote:
		}
	}
	stopLoad()
	printed := out.String()
	t.Logf("dev under load:\n%s", printed)
	if lines := demoLine.FindAllString(printed, -1); len(lines) != 6 {
		t.Errorf("want a line with the replies of each of the demo's six counters, got %d", len(lines))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dev, interrupted: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("dev did not stop within 3 minutes of its interruption\nlogs:\n%s", logs)
	}
}
