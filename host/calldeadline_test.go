package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// The call timer outlives calls (calldeadline.go): a loop is still stopped at its own
// deadline when the timer was set for an earlier call (it fires during later, quick
// calls and is set again each time), and when it went off with no call in progress
// (and was left unset).
func TestCallDeadlineAcrossCalls(t *testing.T) {
	const deadline = 200 * time.Millisecond
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.MessageDeadline = deadline })
	m := compile(t, rt, "faulty")
	ctx := context.Background()
	loop := func(inst *wasmInstance) {
		t.Helper()
		_, err := inst.Receive(ctx, []byte("loop"))
		var ge *GuestError
		if !errors.As(err, &ge) || !errors.Is(err, ErrGuestDeadline) || ge.Ran < deadline {
			t.Fatalf("loop: %v, want ErrGuestDeadline after at least %v", err, deadline)
		}
		if !inst.Closed() {
			t.Fatal("instance survived its deadline")
		}
	}

	t.Run("set for an earlier call", func(t *testing.T) {
		inst, err := m.Instantiate(ctx, "faulty", "a")
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		// Quick calls for three deadlines: the timer set by the first fires during
		// later ones, each with its deadline ahead, and is set again.
		for start := time.Now(); time.Since(start) < 3*deadline; {
			if out, err := inst.Receive(ctx, []byte("echo x")); err != nil || string(out) != "x" {
				t.Fatalf("echo: %q %v", out, err)
			}
		}
		if inst.deadlineHit.Load() || inst.Closed() {
			t.Fatal("quick calls hit the deadline")
		}
		loop(inst)
	})

	t.Run("unset while idle", func(t *testing.T) {
		inst, err := m.Instantiate(ctx, "faulty", "b")
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		if out, err := inst.Receive(ctx, []byte("echo y")); err != nil || string(out) != "y" {
			t.Fatalf("echo: %q %v", out, err)
		}
		testutil.Eventually(t, 10*time.Second, "the call timer to go off with no call and be left unset", func() bool {
			return !inst.callArmed.Load()
		})
		loop(inst)
	})
}
