package sharding

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// The state TTL: an entity idle longer than its type's StateTTL (passivated, or still
// active) loses its state, and its next message starts from nothing; one that handled
// a message within the TTL keeps it, and so does every entity of a type without one.
// The sweep is run by hand (expireIdle), on sharding's and the store's simulated clock.
func TestStateTTLDeletesTheStateOfIdleEntitiesOnly(t *testing.T) {
	clock := newSimClock()
	store := NewMemoryStateStore()
	store.now = clock.Now
	tc := newTestCluster(t, 1, func(tc *testCluster) { tc.states = store }, withConfig(func(c *Config) {
		c.Now = clock.Now
		c.StateTTLInterval = time.Hour // its own loop stays out of the way: the test sweeps
	}))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"idle", "busy", "busy", "awake"} {
		mustAsk(t, n, "ttl", id, "inc")
	}
	mustAsk(t, n, "counter", "no-ttl", "inc")
	for _, id := range []string{"idle", "busy"} {
		if ok, err := n.sharding.Passivate(ctx, "ttl", id); err != nil || !ok {
			t.Fatalf("passivate %s: %v %v", id, ok, err)
		}
	}
	if got, err := n.sharding.expireIdle(ctx); err != nil || got != 0 {
		t.Fatalf("a sweep before the TTL: %d deleted (%v), want 0", got, err)
	}
	clock.Advance(2 * time.Hour)
	// busy handles a message within the TTL (and passivates again: the store's index
	// has its last write), awake stays active and idle.
	if got := mustAsk(t, n, "ttl", "busy", "inc"); got != "3" {
		t.Fatalf("busy: %s, want 3", got)
	}
	if ok, err := n.sharding.Passivate(ctx, "ttl", "busy"); err != nil || !ok {
		t.Fatalf("passivate busy: %v %v", ok, err)
	}
	// The mailbox checks again: a message may come between the sweep's listing and its
	// ask. busy, passivated (its last write in the store) and awake-later (active),
	// both within the TTL, are kept.
	// busy's mailbox is forgotten once idle (the idle sweep, every ReconcileInterval):
	// what is left of it is the store's index.
	testutil.Eventually(t, 10*time.Second, "busy's mailbox forgotten", func() bool {
		r := n.sharding.region("ttl")
		r.mu.Lock()
		defer r.mu.Unlock()
		sh := r.hostedLocked(abiShard("busy", 4))
		return sh != nil && sh.entities["busy"] == nil
	})
	mustAsk(t, n, "ttl", "awake-later", "inc")
	for _, id := range []string{"busy", "awake-later"} {
		r, err := n.sharding.AskMessage(ctx, Message{EntityType: "ttl", EntityID: id, Kind: kindExpire})
		if err != nil || string(r.Payload) != expireKept {
			t.Fatalf("expire %s, within the TTL: %q %v, want %q", id, r.Payload, err, expireKept)
		}
	}
	got, err := n.sharding.expireIdle(ctx)
	if err != nil || got != 2 {
		t.Fatalf("the sweep: %d deleted (%v), want 2 (idle, awake)", got, err)
	}
	if activeOn(tc, "ttl/awake") {
		t.Fatal("awake, idle past the TTL, is still active")
	}
	for _, id := range []string{"idle", "awake"} {
		if _, err := store.StatOne(ctx, EntityKey{Type: "ttl", Shard: abiShard(id, 4), ID: id}); !errors.Is(err, ErrNoState) {
			t.Fatalf("%s's state after the sweep: %v, want ErrNoState", id, err)
		}
	}
	if r := n.sharding.region("ttl"); r == nil || r.expired.Load() != 2 {
		t.Fatal("the region did not count 2 expired entities")
	}
	for id, want := range map[string]string{"idle": "0", "awake": "0", "busy": "3", "awake-later": "1"} {
		if got := mustAsk(t, n, "ttl", id, "get"); got != want {
			t.Fatalf("%s after the sweep: %s, want %s", id, got, want)
		}
	}
	if got := mustAsk(t, n, "counter", "no-ttl", "get"); got != "1" {
		t.Fatalf("an entity of a type without a TTL: %s, want 1", got)
	}
	// A second sweep finds the new incarnations' writes recent.
	if got, err := n.sharding.expireIdle(ctx); err != nil || got != 0 {
		t.Fatalf("a second sweep: %d deleted (%v), want 0", got, err)
	}
}
