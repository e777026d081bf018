package sharding

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// A tell that keeps trapping pauses its entity after MaxRetries attempts instead of
// becoming a dead letter: tells queue behind it, asks are refused with entity-paused,
// a skip drops it (a dead letter) and the queue goes on; under the journal a pause
// outlives a passivation, and a resume tries the poison again.
func TestATellThatKeepsFailingPausesItsEntity(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tell := func(msg string) {
		t.Helper()
		if err := n.sharding.Tell(ctx, "counter", "p", []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	paused := func() {
		t.Helper()
		testutil.EventuallyNil(t, 30*time.Second, "the entity paused", func() error {
			_, err := ask(t, n, "counter", "p", "get")
			if !errors.Is(err, ErrEntityPaused) || ErrorCode(err) != CodeEntityPaused {
				return errors.New("not paused: " + errString(err))
			}
			return nil
		})
	}
	mustAsk(t, n, "counter", "p", "inc") // 1
	tell("crash")
	paused()
	if got := activationsOf(tc, "counter/p"); got != 3 {
		t.Fatalf("%d activations, want 3 (the first, then one for each attempt after the first trap)", got)
	}
	tell("inc") // waits behind the poison
	tell("inc")
	if skipped, err := n.sharding.Skip(ctx, "counter", "p"); err != nil || !skipped {
		t.Fatalf("skip: %v %v", skipped, err)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the queued tells handled", func() error {
		if got := mustAsk(t, n, "counter", "p", "get"); got != "3" {
			return errors.New("count " + got)
		}
		return nil
	})
	if d := n.sharding.DeadLetters(); d == 0 {
		t.Fatal("the skipped message is not a dead letter")
	}
	if resumed, err := n.sharding.Resume(ctx, "counter", "p"); err != nil || resumed {
		t.Fatalf("resume of an entity not paused: %v %v, want false", resumed, err)
	}

	// Paused again; passivated; the next activation is paused too (the journal says
	// so), and a resume tries the poison again, which pauses it again.
	tell("crash")
	paused()
	if _, err := n.sharding.Passivate(ctx, "counter", "p"); err != nil {
		t.Fatal(err)
	}
	paused()
	before := activationsOf(tc, "counter/p")
	if resumed, err := n.sharding.Resume(ctx, "counter", "p"); err != nil || !resumed {
		t.Fatalf("resume: %v %v", resumed, err)
	}
	paused()
	if got := activationsOf(tc, "counter/p") - before; got < 3 {
		t.Fatalf("%d activations after the resume, want 3 at least (one to resume, one per attempt after the first trap)", got)
	}
	if skipped, err := n.sharding.Skip(ctx, "counter", "p"); err != nil || !skipped {
		t.Fatalf("skip: %v %v", skipped, err)
	}
	if got := mustAsk(t, n, "counter", "p", "get"); got != "3" {
		t.Fatalf("count %s after the skip, want 3", got)
	}
	key := EntityKey{Type: "counter", Shard: abiShard("p", 10), ID: "p"}
	recs, err := store.ReadJournal(ctx, key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		e, _ := DecodeJournalEntry(key, r)
		if isControlRecord(e.Kind) {
			kinds = append(kinds, e.Kind.String())
		}
	}
	if want := "[pause skip pause resume pause skip]"; fmtList(kinds) != want {
		t.Fatalf("control records %v, want %s", kinds, want)
	}
}

// An operator's pause holds an entity on no message: asks are refused with
// entity-paused, tells queue up to the mailbox's size and beyond it are refused; the
// pause outlives a passivation under the journal; a resume handles what queued, in
// order, and drops nothing.
func TestAnOperatorPausesAnEntity(t *testing.T) {
	store := NewMemoryStateStore()
	const mailbox = 4
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States, c.MailboxSize = store, mailbox }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mustAsk(t, n, "counter", "h", "inc") // 1
	if paused, err := n.sharding.Pause(ctx, "counter", "h"); err != nil || !paused {
		t.Fatalf("pause: %v %v", paused, err)
	}
	if paused, err := n.sharding.Pause(ctx, "counter", "h"); err != nil || paused {
		t.Fatalf("pause of a paused entity: %v %v, want false", paused, err)
	}
	refused := func() {
		t.Helper()
		_, err := ask(t, n, "counter", "h", "get")
		if !errors.Is(err, ErrEntityPaused) || ErrorCode(err) != CodeEntityPaused || !strings.Contains(err.Error(), "paused by an operator") {
			t.Fatalf("ask of a paused entity: %v, want entity-paused by an operator", err)
		}
	}
	refused()
	if _, err := n.sharding.Passivate(ctx, "counter", "h"); err != nil {
		t.Fatal(err)
	}
	refused() // the journal's pause record pauses the next activation
	dead := n.sharding.DeadLetters()
	for range mailbox + 1 {
		if err := n.sharding.Tell(ctx, "counter", "h", []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyNil(t, 30*time.Second, "the tell beyond the mailbox refused", func() error {
		if got := n.sharding.DeadLetters() - dead; got != 1 {
			return fmt.Errorf("%d dead letters, want 1", got)
		}
		return nil
	})
	dead = n.sharding.DeadLetters()
	if resumed, err := n.sharding.Resume(ctx, "counter", "h"); err != nil || !resumed {
		t.Fatalf("resume: %v %v", resumed, err)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the queued tells handled", func() error {
		if got := mustAsk(t, n, "counter", "h", "get"); got != fmt.Sprint(1+mailbox) {
			return errors.New("count " + got)
		}
		return nil
	})
	if got := n.sharding.DeadLetters() - dead; got != 0 {
		t.Fatalf("%d dead letters after the resume, want none (it drops nothing)", got)
	}
	// A skip of an operator's pause resumes too, and drops nothing.
	if paused, err := n.sharding.Pause(ctx, "counter", "h"); err != nil || !paused {
		t.Fatalf("pause: %v %v", paused, err)
	}
	if skipped, err := n.sharding.Skip(ctx, "counter", "h"); err != nil || !skipped {
		t.Fatalf("skip: %v %v", skipped, err)
	}
	if got := mustAsk(t, n, "counter", "h", "get"); got != fmt.Sprint(1+mailbox) {
		t.Fatalf("count %s after the skip, want %d", got, 1+mailbox)
	}
	key := EntityKey{Type: "counter", Shard: abiShard("h", 10), ID: "h"}
	recs, err := store.ReadJournal(ctx, key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		e, _ := DecodeJournalEntry(key, r)
		if isControlRecord(e.Kind) {
			kinds = append(kinds, e.Kind.String())
		}
	}
	if want := "[pause resume pause skip]"; fmtList(kinds) != want {
		t.Fatalf("control records %v, want %s", kinds, want)
	}
}

// An ask that traps fails to its asker at once, as before: no retry, no pause.
func TestAnAskThatTrapsDoesNotPause(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	for range 5 {
		if _, err := ask(t, n, "counter", "a", "crash"); ErrorCode(err) != CodeGuestTrap {
			t.Fatalf("crash: %v", err)
		}
	}
	if got := mustAsk(t, n, "counter", "a", "get"); got != "0" {
		t.Fatalf("get after failed asks: %s", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func fmtList(s []string) string {
	out := "["
	for k, v := range s {
		if k > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}
