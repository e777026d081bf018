package clustertest

import (
	"sync"
	"time"
)

// Clock is a member's simulated clock: real time (time.Now) moved by an offset and
// running at a rate. Within a stretch of constant rate r that began at real time a, it
// reads
//
//	now = t + offset + drift + (r-1)·(t-a)
//
// at real time t, where drift is what earlier stretches gained or lost (at rate 1 and no
// offset, it is time.Now). A member's components that read time through a hook are
// given Now: the membership core (cluster.MembershipConfig.Now, which passes on only its
// advances), and the replicator's, sharding's and the state store's Now hooks. SetOffset
// steps it (a wall clock set by hand, or by NTP's step), SetRate makes it run fast or
// slow (an oscillator's drift); a rate's end keeps the drift, as a clock whose rate is
// corrected keeps what it gained until it is stepped. For a rate above 0 and a constant
// offset, Now never goes back. Its readings carry time.Now's monotonic reading moved by
// the same amount, so they compare with each other on it.
//
// What it does not cover: timers, tickers and context deadlines (the ticks of the
// membership core and of the replicator, the timeouts of requests, memberlist's own
// probes, the transport) run on real time, so a skewed or drifting member still ticks at
// the real rate and times out on real time; and code that calls time.Now itself reads
// real time.
//
// It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	real   func() time.Time // time.Now; the clock's own tests step a simulated one
	offset time.Duration
	rate   float64       // 1 unless drifting
	anchor time.Time     // real time when the rate was last set
	drift  time.Duration // gained (or lost, negative) before anchor
}

// NewClock returns a clock that reads real time (offset 0, rate 1).
func NewClock() *Clock { return newClockOn(time.Now) }

func newClockOn(real func() time.Time) *Clock {
	return &Clock{real: real, rate: 1, anchor: real()}
}

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.real()
	return t.Add(c.offset + c.drift + c.gainedLocked(t))
}

// gainedLocked is what the clock gained since anchor at its rate, by real time t.
func (c *Clock) gainedLocked(t time.Time) time.Duration {
	if c.rate == 1 {
		return 0
	}
	return time.Duration((c.rate - 1) * float64(t.Sub(c.anchor)))
}

// SetOffset moves the clock to offset from where its drift has it (a step; 0 undoes
// earlier steps).
func (c *Clock) SetOffset(offset time.Duration) {
	c.mu.Lock()
	c.offset = offset
	c.mu.Unlock()
}

// SetRate makes the clock run at rate r from now on (1 is real time); what it gained or
// lost so far stays. It panics if r is not above 0: the clock would stop or run back.
func (c *Clock) SetRate(r float64) {
	if r <= 0 {
		panic("clustertest: a clock's rate must be positive")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.real()
	c.drift += c.gainedLocked(t)
	c.anchor, c.rate = t, r
}
