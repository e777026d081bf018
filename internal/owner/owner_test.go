package owner

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

func TestGoRunsUntilClosedAndWaitWaits(t *testing.T) {
	g := New()
	release := make(chan struct{})
	var ran atomic.Int32
	for range 3 {
		if !g.Go(func() { <-release; ran.Add(1) }) {
			t.Fatal("Go refused on an open group")
		}
	}
	if !g.Close() || g.Close() {
		t.Fatal("Close: want true once, then false")
	}
	if g.Go(func() { t.Error("ran after Close") }) {
		t.Fatal("Go accepted on a closed group")
	}
	if g.Enter() || g.Hold() {
		t.Fatal("Enter or Hold accepted on a closed group")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.WaitContext(ctx); err == nil {
		t.Fatal("WaitContext returned while goroutines were blocked")
	}
	close(release)
	g.Wait()
	if ran.Load() != 3 {
		t.Fatalf("ran %d goroutines, want 3", ran.Load())
	}
}

func TestCloseCancelsTheContext(t *testing.T) {
	g := New()
	stopped := make(chan struct{})
	g.Go(func() {
		<-g.Context().Done()
		close(stopped)
	})
	select {
	case <-g.Done():
		t.Fatal("Done closed before Close")
	default:
	}
	g.Close()
	<-stopped
	g.Wait()
}

func TestCloseWaitsForHolders(t *testing.T) {
	g := New()
	if !g.Hold() {
		t.Fatal("Hold refused on an open group")
	}
	closed := make(chan struct{})
	go func() {
		g.Close()
		close(closed)
	}()
	// A goroutine started while holding is waited for, even though Close is pending.
	var held atomic.Bool
	g.GoHeld(func() { held.Store(true) })
	// Close waits for the holder: its goroutine blocks taking the group's lock.
	testutil.Eventually(t, 10*time.Second, "Close waiting for the holder", func() bool {
		return blockedIn("owner.(*Group).Close", "sync.(*RWMutex).Lock")
	})
	select {
	case <-closed:
		t.Fatal("Close returned while the group was held")
	default:
	}
	g.Release()
	<-closed
	g.Wait()
	if !held.Load() {
		t.Fatal("Wait returned before the goroutine started while holding")
	}
	if !g.Closed() {
		t.Fatal("Closed: want true")
	}
}

func TestEnterIsWaitedFor(t *testing.T) {
	g := New()
	if !g.Enter() {
		t.Fatal("Enter refused on an open group")
	}
	g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if g.WaitContext(ctx) == nil {
		t.Fatal("Wait returned before Leave")
	}
	g.Leave()
	g.Wait()
}

func TestIdleGoroutinesAreReusedAndStopWithTheGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	g := New()
	var done sync.WaitGroup
	for range 50 {
		done.Add(1)
		g.Go(func() { done.Done() })
	}
	done.Wait()
	g.idleMu.Lock()
	idle := len(g.idle)
	g.idleMu.Unlock()
	if idle == 0 {
		// Parking follows the function's end: wait for at least one to park.
		testutil.Eventually(t, 5*time.Second, "an idle goroutine", func() bool {
			g.idleMu.Lock()
			defer g.idleMu.Unlock()
			return len(g.idle) > 0
		})
	}
	// More work reuses idle goroutines rather than starting new ones.
	g.idleMu.Lock()
	idle = len(g.idle)
	g.idleMu.Unlock()
	for range idle {
		done.Add(1)
		g.Go(func() { done.Done() })
	}
	done.Wait()
	if n := runtime.NumGoroutine(); n > before+50 {
		t.Fatalf("%d goroutines, %d before: the idle ones were not reused", n, before)
	}
	g.Close()
	g.Wait()
	// Wait has seen every goroutine of the group finish; the runtime counts one until
	// it has returned from its last deferred call.
	testutil.Eventually(t, 5*time.Second, "the goroutines of the group gone", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// grow uses about depth KiB of stack.
func grow(depth int) byte {
	var pad [1024]byte
	if depth == 0 {
		return pad[0]
	}
	pad[depth%1024] = byte(depth)
	return grow(depth-1) + pad[depth%1024]
}

var sink byte

// BenchmarkHop is one hop to a goroutine that needs a 16 KiB stack, as an entity's
// mailbox does for each message: on a group's goroutine (reused, its stack grown
// already) and, for comparison, on a new goroutine each time.
func BenchmarkHop(b *testing.B) {
	done := make(chan byte)
	work := func() { done <- grow(16) }
	b.Run("group", func(b *testing.B) {
		g := New()
		defer func() { g.Close(); g.Wait() }()
		for b.Loop() {
			g.Go(work)
			sink += <-done
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			go work()
			sink += <-done
		}
	})
}

// TestWorkThatEndsAfterCloseDoesNotStayIdle: goroutines whose functions end after the
// group closed exit rather than park, and Wait returns.
func TestWorkThatEndsAfterCloseDoesNotStayIdle(t *testing.T) {
	g := New()
	release := make(chan struct{})
	for range 20 {
		g.Go(func() { <-release })
	}
	g.Close()
	close(release)
	g.Wait()
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	if len(g.idle) != 0 {
		t.Fatalf("%d goroutines idle after Wait", len(g.idle))
	}
}

// blockedIn reports whether a goroutine's stack holds every one of fns (function names
// as a stack trace prints them), i.e. it is blocked in the last of them called from the
// first.
func blockedIn(fns ...string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		all := true
		for _, fn := range fns {
			all = all && strings.Contains(g, fn)
		}
		if all {
			return true
		}
	}
	return false
}
