package faults

import (
	"sync"
	"time"
)

// memberClock is one member's simulated clock: real time (time.Now) moved by an offset
// and running at a rate. Within a stretch of constant rate r that began at real time
// a, it reads
//
//	now = t + offset + drift + (r-1)·(t-a)
//
// at real time t, where drift is what earlier stretches gained or lost (at rate 1 and
// no offset, it is time.Now). Every component of the member that reads time through a
// hook is given Now: the membership core (cluster.MembershipConfig.Now, which passes
// on only its advances), the replicated state store's hybrid clock, sharding's idle
// passivation and measurements, and the distributed data replicator. A ClockSkew fault
// moves the offset (a step, as a wall clock set by hand or by NTP's step), a ClockDrift
// fault the rate (an oscillator running fast or slow); a rate's end keeps the drift,
// as a clock whose rate is corrected keeps what it gained until it is stepped. For
// r > 0 and a constant offset, Now never goes back. Its readings carry time.Now's
// monotonic reading moved by the same amount, so they compare with each other on it.
//
// What it does not cover: timers, tickers and context deadlines (the tick of the
// membership core and of the replicator, requests' and asks' timeouts, memberlist's own
// probes and suspicion timers, the transport) run on real time, so a skewed or drifting
// member still ticks at the real rate and times out on real time; and code that calls
// time.Now itself (memberlist, the transport, the harness's clients and histories)
// reads real time. Nor does it make a run deterministic: goroutines are scheduled by
// the runtime and those timers fire on the machine's clock.
//
// It is safe for concurrent use.
type memberClock struct {
	mu     sync.Mutex
	offset time.Duration
	rate   float64       // 1 unless drifting
	anchor time.Time     // real time when the rate was last set
	drift  time.Duration // gained (or lost, negative) before anchor
}

func newMemberClock() *memberClock { return &memberClock{rate: 1, anchor: time.Now()} }

// Now reads the clock.
func (c *memberClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := time.Now()
	return t.Add(c.offset + c.drift + c.gainedLocked(t))
}

// gainedLocked is what the clock gained since anchor at its rate, by real time t.
func (c *memberClock) gainedLocked(t time.Time) time.Duration {
	if c.rate == 1 {
		return 0
	}
	return time.Duration((c.rate - 1) * float64(t.Sub(c.anchor)))
}

// SetOffset moves the clock to offset from where drift has it (a step).
func (c *memberClock) SetOffset(offset time.Duration) {
	c.mu.Lock()
	c.offset = offset
	c.mu.Unlock()
}

// SetRate makes the clock run at rate r (> 0) from now on; what it gained or lost so
// far stays.
func (c *memberClock) SetRate(r float64) {
	if r <= 0 {
		panic("faults: a clock's rate must be positive")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := time.Now()
	c.drift += c.gainedLocked(t)
	c.anchor, c.rate = t, r
}
