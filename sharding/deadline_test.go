package sharding

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// TestAnExpiredRemoteAskNoLongerHoldsTheEntity: an ask with a short timeout reaches an
// entity on another member while the entity is busy with a slow message, and its asker
// gives up. When the entity is free, the ask's message, past its deadline, is dropped
// before it reaches the entity (a dead letter, reason "expired"), and the entity takes
// the next message at once. Before the envelope carried the ask's deadline, the member
// hosting the entity gave a forwarded ask its own AskTimeout (10 s): the entity handled
// the message long after its asker gave up, and its mailbox waited for it.
func TestAnExpiredRemoteAskNoLongerHoldsTheEntity(t *testing.T) {
	rec := &logRecorder{}
	tc := newTestCluster(t, 2, withConfig(func(c *Config) { c.Logger = slog.New(rec) }))
	asker := tc.nodes[0]
	// An entity the other member hosts.
	var id string
	var host *testNode
	for i := 0; host == nil; i++ {
		if i == 200 {
			t.Fatal("no entity of 200 is hosted on the other member")
		}
		id = "d" + strconv.Itoa(i)
		r, err := ask(t, asker, "counter", id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if r.Node != asker.addr() {
			host = tc.nodes[1]
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	host.factory.onReceive = func(key, msg string) {
		if key == "counter/"+id && msg == "block" {
			close(entered)
			<-release
		}
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := ask(t, asker, "counter", id, "block")
		blocked <- err
	}()
	<-entered

	// The short ask waits behind "block" in the entity's mailbox on its member.
	const timeout = 300 * time.Millisecond
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	late := make(chan error, 1)
	go func() {
		_, err := asker.sharding.Ask(ctx, "counter", id, []byte("append late"))
		late <- err
	}()
	reg := host.sharding.region("counter")
	reg.mu.Lock()
	e := reg.hostedLocked(abiShard(id, 10)).entities[id]
	reg.mu.Unlock()
	var deadline time.Time
	testutil.Eventually(t, 10*time.Second, "the short ask in the entity's mailbox", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.queued() == 0 {
			return false
		}
		deadline = e.queue[e.head].deadline
		return true
	})
	// Its deadline there is the asker's (the time it had left at the send, from its
	// arrival), not the hosting member's AskTimeout.
	if deadline.IsZero() || !deadline.Before(sent.Add(tc.nodes[1].sharding.cfg.AskTimeout/2)) {
		t.Fatalf("the short ask's deadline on the entity's member is %v after its send, want about %v",
			deadline.Sub(sent), timeout)
	}
	if err := <-late; !errors.Is(err, ErrAskTimeout) || !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotDelivered) {
		// It was in the entity's mailbox when its asker gave up: whether the entity
		// would take it was not known then.
		t.Fatalf("the short ask: %v, want ErrAskTimeout of an unknown outcome", err)
	}
	testutil.Eventually(t, 10*time.Second, "the short ask's deadline on the entity's member", func() bool {
		return time.Now().After(deadline)
	})
	before := host.sharding.DeadLetters()
	close(release)
	if err := <-blocked; err != nil {
		t.Fatalf("the slow ask: %v", err)
	}

	// The expired message is a dead letter, and never reached the entity.
	testutil.Eventually(t, 10*time.Second, "the expired ask's dead letter", func() bool {
		return len(rec.find("dead letter", "entity", "counter/"+id, "reason", "expired")) == 1
	})
	if n := host.sharding.DeadLetters() - before; n != 1 {
		t.Errorf("%d dead letters on the entity's member, want 1", n)
	}
	if got := mustAsk(t, asker, "counter", id, "list"); got != "" {
		t.Errorf("the entity's list is %q: the expired ask reached it", got)
	}
	// The entity is free: the next message is handled.
	if got := mustAsk(t, asker, "counter", id, "inc"); got != "1" {
		t.Errorf("inc after the expired ask: %q, want 1", got)
	}
}

// TestAForwardedAskTakesTheSoonerDeadline: the member hosting the entity gives a
// forwarded ask the sooner of the deadline it carries and its own AskTimeout; a tell
// has the deadline it carries, or none.
func TestAForwardedAskTakesTheSoonerDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		left uint64
		ask  bool
		want time.Duration // after now; 0: no deadline
	}{
		{uint64(200 * time.Millisecond), true, 200 * time.Millisecond},
		{uint64(time.Minute), true, 10 * time.Second},
		{0, true, 10 * time.Second}, // a sender of an older version
		{uint64(time.Minute), false, time.Minute},
		{0, false, 0},
		{1<<64 - 1, true, 10 * time.Second},
	} {
		got := deadlineAt(c.left, now, c.ask, 10*time.Second)
		if (c.want == 0) != got.IsZero() || c.want != 0 && got.Sub(now) != c.want {
			t.Errorf("deadlineAt(%d, ask %v): %v after now, want %v", c.left, c.ask, got.Sub(now), c.want)
		}
	}
	if got := deadlineAt(1<<64-1, now, false, 0); !got.After(now.Add(100 * 365 * 24 * time.Hour)) {
		t.Errorf("a tell with the largest time left expires at %v", got)
	}
	d := delivery{deadline: now.Add(time.Second)}
	if got := d.timeLeft(now); got != uint64(time.Second) {
		t.Errorf("timeLeft: %d, want %d", got, uint64(time.Second))
	}
	if got := d.timeLeft(now.Add(time.Hour)); got != 1 {
		t.Errorf("timeLeft past the deadline: %d, want 1 (expired, but a deadline still)", got)
	}
	if got := (&delivery{}).timeLeft(now); got != 0 {
		t.Errorf("timeLeft without a deadline: %d, want 0", got)
	}
}
