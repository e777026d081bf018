package shardhost

import "time"

// Limits of the host functions (abi.MaxTimerName and the others).
const (
	// MaxTimerName is the longest timer name, in bytes.
	MaxTimerName = 256
	// MaxTimerMessage is the largest timer message, in bytes (64 KiB).
	MaxTimerMessage = 64 << 10
	// MaxTimers is the most timers one entity may have running.
	MaxTimers = 1000
	// MaxRandom is the most bytes one call of the host's random fills; Random makes as
	// many calls as it needs.
	MaxRandom = 64 << 10
)

// StartTimer delivers msg to this entity once, after delay, as a message of KindTimer
// whose Sender is name. Starting a name that is running replaces that timer. Timers
// belong to the entity: they are saved with its state and re-armed by its next
// incarnation (one overdue by then fires at once). Names are at most MaxTimerName bytes,
// messages at most MaxTimerMessage, and an entity has at most MaxTimers timers
// (ErrBadRequest beyond). The delay is rounded up to whole milliseconds.
func (c *Context) StartTimer(name string, msg []byte, delay time.Duration) error {
	code, res := c.h.timerStart(name, msg, millis64(delay), 0)
	return codeError(code, res)
}

// StartRepeatingTimer delivers msg to this entity after delay and then every interval
// (a fixed delay between deliveries) until CancelTimer; as StartTimer otherwise. The
// interval must be positive (ErrBadRequest otherwise).
func (c *Context) StartRepeatingTimer(name string, msg []byte, delay, interval time.Duration) error {
	if interval <= 0 {
		return &HostError{Code: CodeBadRequest, Text: "repeating timer " + quote(name) + ": the interval must be positive"}
	}
	code, res := c.h.timerStart(name, msg, millis64(delay), millis64(interval))
	return codeError(code, res)
}

// CancelTimer cancels the timer name and reports whether it was running. A message of
// the timer already queued is not delivered.
func (c *Context) CancelTimer(name string) bool { return c.h.timerCancel(name) }

// Clocks of the host's now function (abi.ClockWall, abi.ClockMonotonic).
const (
	clockWall      int32 = 0
	clockMonotonic int32 = 1
)

// Now returns the host's wall clock. Use it instead of time.Now: WASI's clocks are
// virtual and deterministic. Under test (Harness) it is a settable clock.
func (c *Context) Now() time.Time { return time.Unix(0, c.h.now(clockWall)) }

// Monotonic returns the host's monotonic clock: only differences mean anything, and it
// does not go back within an incarnation.
func (c *Context) Monotonic() time.Duration { return time.Duration(c.h.now(clockMonotonic)) }

// Random fills b with random bytes: cryptographically strong on a real host, seeded under
// test. Use it instead of crypto/rand and math/rand's default source, which WASI makes
// deterministic.
func (c *Context) Random(b []byte) {
	for len(b) > 0 {
		n := len(b)
		if n > MaxRandom {
			n = MaxRandom
		}
		c.h.random(b[:n])
		b = b[n:]
	}
}

// TraceEvent adds an event named name (cut at 256 bytes) to the trace span of the
// current message.
func (c *Context) TraceEvent(name string) { c.h.traceEvent(name) }
