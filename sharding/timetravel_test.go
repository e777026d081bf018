package sharding

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// An entity reverted to one of its records has the state it had then, its journal a
// record of the revert, and goes on from there, through a crash too; a fork starts a
// new entity from another's state at a record. What cannot be done is refused,
// naming why, and changes nothing.
func TestRevertAndFork(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		mustAsk(t, n, "counter", "r", "inc") // records 1 to 5
	}
	seq, err := n.sharding.Revert(ctx, "counter", "r", 3)
	if err != nil || seq != 6 {
		t.Fatalf("revert to 3: record %d, %v; want record 6", seq, err)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "3" {
		t.Fatalf("count after the revert %s, want 3", got)
	}
	if got := mustAsk(t, n, "counter", "r", "inc"); got != "4" { // record 8
		t.Fatalf("inc after the revert %s, want 4", got)
	}
	if _, err := ask(t, n, "counter", "r", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("count after a crash %s, want 4", got)
	}
	key := EntityKey{Type: "counter", Shard: abiShard("r", 10), ID: "r"}
	recs, err := store.ReadJournal(ctx, key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		e, err := DecodeJournalEntry(key, r)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, e.Kind.String()+":"+string(e.Payload))
	}
	if want := "message:inc message:inc message:inc message:inc message:inc revert:revert to record 3 message:get message:inc message:get"; strings.Join(kinds, " ") != want {
		t.Fatalf("journal %v\nwant      %s", kinds, want)
	}

	// Refusals.
	for _, c := range []struct {
		to   uint64
		want string
	}{{0, "records count from 1"}, {100, "past the journal's last, 9"}, {5, "before the entity's last base, after record 6"}} {
		if _, err := n.sharding.Revert(ctx, "counter", "r", c.to); !errors.Is(err, ErrNotInHistory) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("revert to %d: %v, want ErrNotInHistory saying %q", c.to, err, c.want)
		}
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("count after refused reverts %s, want 4", got)
	}
	if _, err := n.sharding.Revert(ctx, "passive", "p", 1); !errors.Is(err, ErrNotInHistory) {
		t.Fatalf("revert of a type without a journal: %v, want ErrNotInHistory", err)
	}

	// Forks.
	if err := n.sharding.Fork(ctx, "counter", "r", "r2", 8); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "counter", "r2", "get"); got != "4" {
		t.Fatalf("the fork at record 8: %s, want 4", got)
	}
	if got := mustAsk(t, n, "counter", "r2", "inc"); got != "5" {
		t.Fatalf("the fork goes on: %s, want 5", got)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("the source after a fork: %s, want 4", got)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r3", 0); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "counter", "r3", "get"); got != "4" {
		t.Fatalf("the fork at the last record: %s, want 4", got)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r2", 0); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("a fork onto an existing entity: %v, want ErrEntityExists", err)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r", 0); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("a fork onto itself: %v, want ErrEntityExists", err)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r4", 2); !errors.Is(err, ErrNotInHistory) {
		t.Fatalf("a fork before the source's last base: %v, want ErrNotInHistory", err)
	}
	if got := mustAsk(t, n, "counter", "r2", "get"); got != "5" {
		t.Fatalf("r2 after a refused fork onto it: %s, want 5", got)
	}
}
