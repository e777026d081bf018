package sharding

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// liveOn reports how many instances of the entity key live on the member at node.
func (a *activations) liveOn(node, key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lives[node+" "+key]
}

// A member cut off from the other two (the bridge and one-way partitions of faults/,
// seeds 1161 and 1449, reduced to their effect on it) stops its entities within its
// hosting lease, without waiting to learn that it was downed, and refuses their
// messages with ErrNoMajority; once healed, it serves them again from their saved
// state.
func TestHostingLeaseStopsTheEntitiesOfAMemberCutOffFromTheMajority(t *testing.T) {
	leaseCutOff(t, newTestCluster(t, 3, withSharedStateStore(), withConfig(func(c *Config) {
		c.DownRemovalMargin = 2 * time.Second // a lease of 1 s
	})))
}

// The lease is measured on membership's clock (Membership.Now), which dates the
// majority contact: with membership clocks an hour ahead of time.Now or behind it, a
// member hosts while it has the contact (measured on time.Now, an hour behind, it
// never would) and a member cut off stops its entities within the lease (an hour ahead,
// it never would).
func TestHostingLeaseIsMeasuredOnTheMembershipClock(t *testing.T) {
	clock := func(i int) func() time.Time {
		offset := time.Hour
		if i%2 == 1 {
			offset = -time.Hour
		}
		return func() time.Time { return time.Now().Add(offset) }
	}
	leaseCutOff(t, newTestCluster(t, 3, withSharedStateStore(), withMembershipClock(clock), withConfig(func(c *Config) {
		c.DownRemovalMargin = 2 * time.Second // a lease of 1 s
	})))
}

// leaseCutOff checks the hosting lease of the member of an entity: cut off from the
// others, it stops the entity and refuses its messages; healed, it serves it again.
func leaseCutOff(t *testing.T, tc *testCluster) {
	t.Helper()
	r, err := ask(t, tc.nodes[0], "durable", "x", "inc")
	if err != nil {
		t.Fatal(err)
	}
	var cut *testNode
	for _, n := range tc.nodes {
		if n.addr() == r.Node {
			cut = n
		}
	}
	if cut == nil {
		t.Fatalf("no member at %s", r.Node)
	}
	if got := tc.acts.liveOn(cut.addr(), "durable/x"); got != 1 {
		t.Fatalf("durable/x has %d lives on %s, want 1", got, cut.name)
	}
	isolate := func(on bool) {
		for _, o := range tc.nodes {
			if o != cut {
				tc.link(cut, o, !on)
			}
		}
	}
	isolate(true)
	testutil.Eventually(t, 20*time.Second, "the cut-off member stops its entity", func() bool {
		return tc.acts.liveOn(cut.addr(), "durable/x") == 0
	})
	if _, err := ask(t, cut, "durable", "x", "get"); !errors.Is(err, ErrNoMajority) {
		t.Fatalf("ask through the cut-off member: %v, want ErrNoMajority", err)
	}
	isolate(false)
	testutil.Eventually(t, 30*time.Second, "the healed member serves the entity's saved state", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := cut.sharding.Ask(ctx, "durable", "x", []byte("get"))
		return err == nil && string(r.Payload) == "1"
	})
}
