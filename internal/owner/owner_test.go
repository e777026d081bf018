package owner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
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
	select {
	case <-closed:
		t.Fatal("Close returned while the group was held")
	case <-time.After(20 * time.Millisecond):
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
