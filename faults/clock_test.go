package faults

import (
	"sync"
	"testing"
	"time"
)

// within reports whether d is within tol of want.
func within(d, want, tol time.Duration) bool { return d >= want-tol && d <= want+tol }

// A member's clock: an offset steps it, a rate makes it gain or lose against real time
// (and it keeps what it gained when the rate ends), and it never goes back while its
// rate is positive and its offset constant, whatever goroutines read it.
func TestMemberClockOffsetAndDrift(t *testing.T) {
	c := newMemberClock()
	// Two readings of real time around each reading of the clock bound what it should
	// read; the tolerance only covers the float rounding of the drift.
	const tol = time.Microsecond
	check := func(what string, want func(real time.Time) time.Duration) {
		t.Helper()
		a := time.Now()
		got := c.Now()
		b := time.Now()
		lo, hi := a.Add(want(a)), b.Add(want(b))
		if got.Before(lo.Add(-tol)) || got.After(hi.Add(tol)) {
			t.Fatalf("%s: clock reads %v, want between %v and %v", what, got, lo, hi)
		}
	}
	check("at rest", func(time.Time) time.Duration { return 0 })

	c.SetOffset(-42 * time.Second)
	check("offset -42s", func(time.Time) time.Duration { return -42 * time.Second })
	c.SetOffset(0)
	check("offset undone", func(time.Time) time.Duration { return 0 })

	c.SetRate(1.1)
	c.mu.Lock()
	anchor := c.anchor
	c.mu.Unlock()
	gained := func(real time.Time) time.Duration { return time.Duration(0.1 * float64(real.Sub(anchor))) }
	// Wait on real time until the drift is large enough to tell from rest.
	for time.Since(anchor) < 20*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	check("rate 1.1", gained)
	c.SetOffset(time.Minute)
	check("rate 1.1 and offset 1m", func(real time.Time) time.Duration { return gained(real) + time.Minute })
	c.SetOffset(0)

	c.SetRate(1)
	c.mu.Lock()
	kept := c.drift
	c.mu.Unlock()
	if !within(kept, gained(c.anchor), tol) || kept < 2*time.Millisecond {
		t.Fatalf("after the drift the clock kept %v, want %v", kept, gained(c.anchor))
	}
	check("rate back to 1", func(time.Time) time.Duration { return kept })

	c.SetRate(0.9)
	c.mu.Lock()
	anchor = c.anchor
	c.mu.Unlock()
	check("rate 0.9", func(real time.Time) time.Duration {
		return kept - time.Duration(0.1*float64(real.Sub(anchor)))
	})

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

// A rate of zero or less would stop the clock or run it backwards: refused.
func TestMemberClockRefusesANonPositiveRate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("SetRate(0) did not panic")
		}
	}()
	newMemberClock().SetRate(0)
}
