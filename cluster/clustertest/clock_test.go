package clustertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// simulatedTime is a source of real time that a test steps, and that moves on a
// nanosecond at each reading (so that readings from several goroutines differ).
type simulatedTime struct{ ns atomic.Int64 }

func (s *simulatedTime) now() time.Time       { return time.Unix(0, s.ns.Add(1)) }
func (s *simulatedTime) step(d time.Duration) { s.ns.Add(int64(d)) }

// A clock steps by its offset, gains or loses at its rate against real time and keeps
// what it gained when the rate ends; on a simulated source of real time, to the
// nanosecond.
func TestClockOffsetAndDrift(t *testing.T) {
	var src simulatedTime
	src.step(1_800_000_000 * time.Second)
	c := newClockOn(src.now)
	// ahead checks that the clock reads real time moved by want; the readings of the
	// source around the clock's own bound real time, and a nanosecond covers the float
	// rounding of the drift.
	ahead := func(what string, want time.Duration) {
		t.Helper()
		before := src.now()
		got := c.Now()
		after := src.now()
		if got.Before(before.Add(want-time.Nanosecond)) || got.After(after.Add(want+time.Nanosecond)) {
			t.Fatalf("%s: clock %v ahead of real time, want %v", what, got.Sub(before), want)
		}
	}
	ahead("at rest", 0)
	c.SetOffset(-42 * time.Second)
	ahead("offset -42s", -42*time.Second)
	c.SetOffset(0)
	ahead("offset undone", 0)

	c.SetRate(1.1)
	src.step(time.Second)
	ahead("a second at rate 1.1", 100*time.Millisecond)
	c.SetOffset(time.Minute)
	ahead("and offset 1m", 100*time.Millisecond+time.Minute)
	c.SetOffset(0)
	src.step(time.Second)
	ahead("two seconds at rate 1.1", 200*time.Millisecond)

	c.SetRate(1)
	src.step(time.Hour)
	ahead("back to rate 1: the drift kept", 200*time.Millisecond)

	c.SetRate(0.9)
	src.step(time.Second)
	ahead("a second at rate 0.9", 100*time.Millisecond)

	// Monotone: at rate 0.9, readings from several goroutines, each after the last,
	// never go back.
	var mu sync.Mutex
	var last time.Time
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				mu.Lock()
				now := c.Now()
				if now.Before(last) {
					mu.Unlock()
					t.Errorf("the clock went back from %v to %v", last, now)
					return
				}
				last = now
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// NewClock's clock, untouched, reads time.Now.
func TestNewClockReadsRealTime(t *testing.T) {
	c := NewClock()
	before := time.Now()
	now := c.Now()
	if now.Before(before) || now.After(time.Now()) {
		t.Fatalf("Now = %v, not between two readings of time.Now", now)
	}
}

// A rate of zero or less would stop the clock or run it backwards: refused.
func TestClockRefusesANonPositiveRate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("SetRate(0) did not panic")
		}
	}()
	NewClock().SetRate(0)
}
