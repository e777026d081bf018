package sharding

import (
	"context"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// An activation waits for another instance of its entity here to stop (shardRegion.lives),
// but not past its message's deadline and, for a tell, not past Config.HandOffTimeout:
// a life that never ends (a bug, as 454e451 fixed one) fails the entity's messages
// instead of holding its mailbox forever. Here a phantom life holds the entity's place;
// once it is gone (its end never signalled), the entity's next message is served.
func TestAnActivationWaitsForAnotherLifeOnlyUntilItsDeadline(t *testing.T) {
	tc := newTestCluster(t, 1, withConfig(func(c *Config) {
		c.AskTimeout = 300 * time.Millisecond // an ask whose context has no deadline
		c.ResolveTimeout = time.Second        // HandOffTimeout: 2 RequestTimeouts (3 s) and this
	}))
	n := tc.nodes[0]
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		mustAsk(t, n, "counter", id, "get") // its shard hosted here
		if ok, err := n.sharding.Passivate(ctx, "counter", id); err != nil || !ok {
			t.Fatalf("passivate %s: %v %v", id, ok, err)
		}
	}
	r := n.sharding.region("counter")
	haunt := func(id string) (exorcise func()) {
		phantom := &entity{r: r, id: id, lifeDone: make(chan struct{})}
		r.mu.Lock()
		r.lives[id] = phantom
		r.mu.Unlock()
		return func() {
			r.mu.Lock()
			delete(r.lives, id)
			r.mu.Unlock()
		}
	}

	// An ask with the member's AskTimeout as its deadline (its context has none).
	exorcise := haunt("a")
	if _, err := n.sharding.Ask(ctx, "counter", "a", []byte("inc")); err == nil {
		t.Fatal("an ask answered while another life of its entity held its place")
	}
	exorcise()
	if got := mustAsk(t, n, "counter", "a", "inc"); got != "1" {
		t.Fatalf("the next ask: %s, want 1 (the failed one not applied)", got)
	}

	// A tell, which has no deadline: HandOffTimeout (7 s here) bounds its wait, and
	// its failure is a dead letter.
	exorcise = haunt("b")
	dead := n.sharding.DeadLetters()
	if err := n.sharding.Tell(ctx, "counter", "b", []byte("inc")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the tell a dead letter", func() bool {
		return n.sharding.DeadLetters() == dead+1
	})
	exorcise()
	if got := mustAsk(t, n, "counter", "b", "get"); got != "0" {
		t.Fatalf("get: %s, want 0 (the tell not applied)", got)
	}
}
