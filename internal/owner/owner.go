// Package owner gives background goroutines an owner: a Group starts them until it is
// closed, hands them a context that its closing cancels, and waits for them. Every
// long-lived component (the node, sharding, the replicated state store) owns its
// goroutines through one Group, so that closing it leaves none behind.
package owner

import (
	"context"
	"sync"
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
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
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
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// GoHeld runs f on a goroutine the group owns. Precondition: the caller holds the group
// (Hold returned true and Release has not been called) or runs on a goroutine of the
// group, or between Enter and Leave; either way the group's Wait has not returned, so
// it waits for f too. Without that precondition, use Go.
func (g *Group) GoHeld(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
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
	return true
}

// Closed reports whether Close has been called.
func (g *Group) Closed() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.closed
}

// Wait waits for the group's goroutines and for the work registered with Enter. Call
// it after Close; before, more may start.
func (g *Group) Wait() { g.wg.Wait() }

// WaitContext is Wait bounded by ctx: it returns ctx's error if ctx ends first (the
// goroutines go on).
func (g *Group) WaitContext(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
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
