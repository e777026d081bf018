package host

import "time"

// monoBase is the origin of the instances' call deadlines (wasmInstance.callEnd): a reading
// of the monotonic clock, taken once.
var monoBase = time.Now()

// The message deadline of a guest call, kept without a timer operation per call.
//
// Resetting and stopping a timer for every call into the guest costs about 0.1 µs (the
// runtime's timer heap, under its lock), a few percent of a local ask. Instead each
// instance's call timer stays set across calls: a call records when its deadline
// passes (callEnd) and sets the timer only if it is not set already; the timer, when
// it fires, looks at the call in progress: none, it is left unset; one whose deadline
// is still ahead (a later call than the one it was set for), it is set again for that
// deadline; one past its deadline, the guest is stopped (stopGuest) and the instance's
// context cancelled, as the activation deadline's timer does. A call that ends takes
// its callEnd back with a compare-and-swap, which fails only if the timer took it first:
// the deadline passed during the call (endDeadline reports it, as a stopped timer's
// Stop would have).

// sinceMonoBase reads the monotonic clock: one clock read, where time.Now makes two
// (the wall clock too).
func sinceMonoBase() time.Duration { return time.Since(monoBase) }

// startDeadline records that a call starting at started (sinceMonoBase) may run for
// deadline, and makes sure the call timer will fire by then. It returns the call's
// callEnd, for endDeadline. Only the instance's calling goroutine calls it.
func (i *wasmInstance) startDeadline(started, deadline time.Duration) int64 {
	end := int64(started + deadline)
	if end <= 0 {
		end = 1 // 0 means no call
	}
	i.callEnd.Store(end)
	t := i.callTimer.Load()
	if t == nil {
		// Made stopped, and kept before it is set: its function finds it.
		t = time.AfterFunc(time.Hour, i.callDeadlineFired)
		t.Stop()
		i.callTimer.Store(t)
	}
	if i.callArmed.CompareAndSwap(false, true) {
		t.Reset(deadline)
	}
	return end
}

// endDeadline ends the call whose callEnd is end. It reports whether its deadline
// passed during the call: the guest was (or is being) stopped, and the instance's
// context cancelled.
func (i *wasmInstance) endDeadline(end int64) (fired bool) {
	return !i.callEnd.CompareAndSwap(end, 0)
}

// callDeadlineFired is the call timer's function (see above). It runs on a goroutine of
// its own; the timer is set (callArmed) while it runs.
func (i *wasmInstance) callDeadlineFired() {
	for {
		end := i.callEnd.Load()
		if end <= 0 {
			// No call in progress. Unset, then look again: a call that started
			// meanwhile either saw the timer set (and is looked at here) or sets it.
			i.callArmed.Store(false)
			if i.callEnd.Load() <= 0 || !i.callArmed.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if left := end - int64(sinceMonoBase()); left > 0 {
			i.callTimer.Load().Reset(time.Duration(left))
			return
		}
		if i.callEnd.CompareAndSwap(end, -1) {
			i.deadlineHit.Store(true)
			i.stopGuest()
			i.cancel()
			return
		}
		// The call ended (or another began) meanwhile: look again.
	}
}

// disarmCallTimer stops the call timer between two calls, so that the next call sets it
// for its own deadline: after a replay, whose deadline is the longer activation
// deadline, the timer would otherwise stay set for it, and the next message's deadline
// would be seen only then. If the timer's function runs meanwhile, it finds no call in
// progress and leaves the timer unset itself. Only the instance's calling goroutine
// calls it.
func (i *wasmInstance) disarmCallTimer() {
	if t := i.callTimer.Load(); t != nil && t.Stop() {
		i.callArmed.Store(false)
	}
}
