// Package testutil holds what shardhost's tests share: the polling wait for a condition
// that becomes true on its own (a view converging, a shard moving, a value spreading),
// and the process's CPU time that benchmarks report per operation (ProcessCPU).
// Tests wait on the event itself with a generous deadline, never on a sleep of a
// guessed length: CI shares two cores with other work.
package testutil

import (
	"testing"
	"time"
)

// Poll intervals: the first check is immediate, then the wait between checks doubles
// from pollMin up to pollMax, so a quick condition is seen quickly and a slow one does
// not keep a loaded machine busy.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// Eventually checks cond until it returns true, and fails tb (t.Fatalf) with "timed out
// after <within> waiting for <what>" if within passes first. cond runs on the caller's
// goroutine; it may call tb's methods, but a t.Fatal inside it ends the test at once.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyNil(tb, within, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// EventuallyNil checks check until it returns nil, and fails tb with "timed out after
// <within> waiting for <what>: <check's last error>" if within passes first. The
// error says where the wait got to (a count, the last reply), which makes a timeout
// readable.
func EventuallyNil(tb testing.TB, within time.Duration, what string, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	wait := pollMin
	for {
		err := check()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			if err == errNotYet {
				tb.Fatalf("timed out after %v waiting for %s", within, what)
			}
			tb.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
		}
		time.Sleep(min(wait, time.Until(deadline)))
		wait = min(2*wait, pollMax)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

// errNotYet is a false cond of Eventually.
var errNotYet error = notYet{}
