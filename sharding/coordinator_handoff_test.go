package sharding

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// countingReminders is the memory state store, counting its DueReminders calls per
// shard.
type countingReminders struct {
	*MemoryStateStore
	mu    sync.Mutex
	calls map[int]int
}

func (s *countingReminders) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]EntityReminder, int64, error) {
	s.mu.Lock()
	s.calls[shard]++
	s.mu.Unlock()
	return s.MemoryStateStore.DueReminders(ctx, typ, shard, before, limit)
}

func (s *countingReminders) snapshot() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func (s *countingReminders) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[int]int{}
}

// After a handoff the coordinator looks at the shard handed off alone: it is allocated
// again at once for the reminder it holds, and no other shard without a home is read
// from the store (every one of them was, once per handoff: O(S²/M) store reads for a
// member that leaves with S/M shards).
func TestShardStoppedLooksOnlyAtTheShardHandedOff(t *testing.T) {
	store := &countingReminders{MemoryStateStore: NewMemoryStateStore(), calls: map[int]int{}}
	tc := newTestCluster(t, 1, withMemberStateStores(func(testing.TB, *cluster.Membership, *cluster.Messenger, string) (StateStore, func() error) {
		return store, func() error { return nil }
	}),
		withConfig(func(c *Config) { c.RebalanceInterval = time.Hour })) // no safety-net walk meanwhile
	const typ = "remind"
	n := homeOf(t, tc, typ, "r")
	shard := abiShard("r", abi.DefaultNumberOfShards)
	setReminder(t, n, typ, "r", Reminder{Name: "later", Due: time.Now().Add(time.Hour).UnixMilli()})

	c := n.sharding.coord
	c.mu.Lock()
	before, ok := c.alloc[typ][shard]
	// Every other shard of the type is known and has no home, as after a leave whose
	// shards no message has asked for yet.
	for s := range abi.DefaultNumberOfShards {
		if s != shard {
			c.knowLocked(typ, s)
		}
	}
	c.mu.Unlock()
	if !ok {
		t.Fatalf("shard %d of %s has no allocation after an ask", shard, typ)
	}
	store.reset()
	c.shardStopped(shardRef{Type: typ, Shard: shard, Requester: n.addr()})
	testutil.Eventually(t, 20*time.Second, "the shard with a reminder allocated again", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		a, ok := c.alloc[typ][shard]
		return ok && a.epoch > before.epoch
	})
	calls := store.snapshot()
	if calls[shard] == 0 {
		t.Fatalf("the shard handed off was not read from the store: %v", calls)
	}
	delete(calls, shard)
	if len(calls) > 0 {
		t.Fatalf("%d other shards without a home were read from the store after one handoff: %v", len(calls), calls)
	}
}
