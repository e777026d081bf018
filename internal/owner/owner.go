// Package owner gives background goroutines an owner: a Group starts them until it is
// closed, hands them a context that its closing cancels, and waits for them. Every
// long-lived component (the node, sharding, the replicated state store) owns its
// goroutines through one Group, so that closing it leaves none behind.
package owner

import (
	"context"
	"sync"
	"time"
)

// Idle goroutines: a goroutine that finished its function waits for the next one for
// a while instead of exiting. A new goroutine starts with a small stack that grows, by
// copying, to what its function needs; a reused one has it already. This matters for
// an entity's mailbox, which starts a goroutine for nearly every message.
const (
	maxIdle     = 256             // idle goroutines kept per group
	idleTimeout = 2 * time.Second // an idle goroutine exits after one to two of these
)

// Group owns goroutines. The zero value is not usable: make one with New. All methods
// are safe for concurrent use.
//
// A Group is open until Close. While open, Go starts goroutines and Enter registers
// work on the caller's goroutine; Wait waits for both. Hold keeps the group open (Close
// waits for Release), for a caller that must not see the group close halfway through,
// and lets it start goroutines with GoHeld without checking again.
type Group struct {
	mu     sync.RWMutex // held for reading by holders; Close takes it for writing
	closed bool
	wg     sync.WaitGroup // functions started and work entered, not yet done
	ctx    context.Context
	cancel context.CancelFunc

	idleMu sync.Mutex
	idle   []*worker // LIFO: the most recently used has the warmest stack
	// idleClosed is set by Close, which wakes every idle goroutine to exit: none parks
	// after it.
	idleClosed bool
	workers    sync.WaitGroup // goroutines alive, idle or not
}

// worker is a goroutine of the group; work hands it its next function while it is idle,
// or nil when the group closes. An idle worker waits on its own channels only (work and
// its timer): one channel all of them waited on, as the group's Done, would have every
// worker going idle or waking take that channel's lock, and with hundreds of workers
// (an entity's mailbox runs on one per message) the runtime's lock took 11.7% of the
// CPU of concurrent asks, half of it spinning.
type worker struct {
	work chan func()
}

// New returns an open group.
func New() *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel}
}

// Go runs f on a goroutine the group owns. It reports false, without running f, once
// the group is closed.
func (g *Group) Go(f func()) bool {
	if !g.Enter() {
		return false
	}
	g.run(f)
	return true
}

// GoHeld runs f on a goroutine the group owns. Precondition: the caller holds the group
// (Hold returned true and Release has not been called) or runs on a goroutine of the
// group, or between Enter and Leave; either way the group's Wait has not returned, so
// it waits for f too. Without that precondition, use Go.
func (g *Group) GoHeld(f func()) {
	g.wg.Add(1)
	g.run(f)
}

// run runs f, registered in g.wg, on an idle goroutine of the group or a new one.
func (g *Group) run(f func()) {
	g.idleMu.Lock()
	if n := len(g.idle); n > 0 {
		w := g.idle[n-1]
		g.idle[n-1] = nil
		g.idle = g.idle[:n-1]
		g.idleMu.Unlock()
		w.work <- f // buffered: the worker takes it when it wakes
		return
	}
	g.idleMu.Unlock()
	g.workers.Add(1)
	go g.work(&worker{work: make(chan func(), 1)}, f)
}

// work runs f, then what run hands it while it is idle, until it has been idle for
// a whole period of its timer (between idleTimeout and twice that), or the group
// closes, or too many are idle already. The timer runs on while the goroutine works: a
// message's worth of work costs no timer reset, and a tick that finds the goroutine
// used since the last one arms the next.
func (g *Group) work(w *worker, f func()) {
	defer g.workers.Done()
	timer := time.NewTimer(idleTimeout)
	defer timer.Stop()
	for {
		f()
		f = nil
		g.wg.Done()
		if !g.park(w) {
			return
		}
		if !g.idleWait(w, timer, &f) {
			if f == nil {
				return // the group closed
			}
			continue
		}
		if g.unpark(w) {
			return
		}
		// run took it off the idle list meanwhile, and its function is on the way; or
		// Close did, and nil is.
		if f = <-w.work; f == nil {
			return
		}
	}
}

// idleWait waits, w being idle, for its next function (put in *f, nil if the group
// closed: it reports false) or for the end of its idleness: a whole period of timer
// without work (the timer ticked during the work just done; true).
func (g *Group) idleWait(w *worker, timer *time.Timer, f *func()) bool {
	used := true // since the last tick
	for {
		select {
		case *f = <-w.work:
			return false
		case <-timer.C:
			if !used {
				return true
			}
			used = false
			timer.Reset(idleTimeout)
		}
	}
}

// park puts w on the idle list; false if it should exit instead (the group is closed
// or enough are idle).
func (g *Group) park(w *worker) bool {
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	if g.idleClosed || len(g.idle) >= maxIdle {
		return false
	}
	g.idle = append(g.idle, w)
	return true
}

// unpark takes w off the idle list so that it can exit; false if run took it already.
func (g *Group) unpark(w *worker) bool {
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	for i, other := range g.idle {
		if other == w {
			g.idle = append(g.idle[:i], g.idle[i+1:]...)
			return true
		}
	}
	return false
}

// Enter registers work the caller does on its own goroutine, which Wait waits for; the
// caller calls Leave when done. It reports false (and Leave must not be called) once
// the group is closed.
func (g *Group) Enter() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Leave ends work registered by Enter.
func (g *Group) Leave() { g.wg.Done() }

// Hold keeps the group open until Release: Close waits for every holder to release. It
// reports false (and Release must not be called) if the group is closed. Holders must
// not call Close, nor Hold again (a waiting Close would deadlock them).
func (g *Group) Hold() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

// Release ends a Hold.
func (g *Group) Release() { g.mu.RUnlock() }

// Close closes the group: Go, Enter and Hold fail from now on and the group's context
// is cancelled. It waits for the current holders to release, not for the goroutines
// (that is Wait). It reports whether this call closed the group (false if it was
// closed already).
func (g *Group) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	g.cancel()
	g.idleMu.Lock()
	g.idleClosed = true
	idle := g.idle
	g.idle = nil
	g.idleMu.Unlock()
	for _, w := range idle {
		w.work <- nil // buffered, and empty: run sends only to workers it takes off the list
	}
	return true
}

// Closed reports whether Close has been called.
func (g *Group) Closed() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.closed
}

// Wait waits for the group's functions and for the work registered with Enter, then,
// once the group is closed, for its idle goroutines to exit. Call it after Close;
// before, more may start and idle goroutines stay.
func (g *Group) Wait() {
	g.wg.Wait()
	if g.Closed() {
		g.workers.Wait()
	}
}

// WaitContext is Wait bounded by ctx: it returns ctx's error if ctx ends first (the
// goroutines go on).
func (g *Group) WaitContext(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Context returns a context that Close cancels: the goroutines' own work derives from
// it, so that closing the group interrupts their waits.
func (g *Group) Context() context.Context { return g.ctx }

// Done returns a channel closed by Close.
func (g *Group) Done() <-chan struct{} { return g.ctx.Done() }
