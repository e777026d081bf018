package sharding

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// BenchmarkReminderFiring sets b.N reminders, ten per entity, on one member with the
// in-memory store, makes them all due, and measures how fast the member fires them: each
// an ask of its entity and the store's deletion of the one-shot.
// It reports reminders/s, and the heap the reminders take (B/reminder: the in-memory
// store's records and the member's state alike, an upper bound on the home's share,
// which is a due time and a timer per shard).
func BenchmarkReminderFiring(b *testing.B) {
	tc := newTestCluster(b, 1, withSharedStateStore(), withConfig(func(c *Config) { c.AskTimeout = time.Minute }))
	n := tc.nodes[0]
	ctx := context.Background()
	const perEntity = 10
	entities := (b.N + perEntity - 1) / perEntity
	for e := 0; e < entities; e++ {
		if _, err := n.sharding.Ask(ctx, "counter", "b"+strconv.Itoa(e), []byte("get")); err != nil {
			b.Fatal(err)
		}
	}
	// Every shard is hosted now; passivate nothing, so that the firing measures delivery
	// and the store, not activations.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	far := time.Now().Add(time.Hour).UnixMilli()
	for i := 0; i < b.N; i++ {
		id := "b" + strconv.Itoa(i/perEntity)
		if err := n.sharding.SetReminder(ctx, "counter", id, Reminder{Name: "r" + strconv.Itoa(i%perEntity), Due: far, Payload: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perReminder := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(b.N)
	// Now make them all due, in the store itself (each entity's ten in one write, at
	// its shard's epoch), and have each shard's home read them, as when the shard comes
	// to a member: the firing alone is timed.
	r := n.sharding.region("counter")
	r.mu.Lock()
	var shards []*shard
	r.eachHostedLocked(func(sh *shard) { shards = append(shards, sh) })
	r.mu.Unlock()
	epochs := map[int]uint64{}
	for _, sh := range shards {
		epochs[sh.id] = sh.epoch
	}
	past := time.Now().Add(-time.Second).UnixMilli()
	for e := 0; e < entities; e++ {
		id := "b" + strconv.Itoa(e)
		var rs []Reminder
		for k := 0; k < perEntity && e*perEntity+k < b.N; k++ {
			rs = append(rs, Reminder{Name: "r" + strconv.Itoa(k), Due: past, Payload: []byte("x")})
		}
		shardID := abiShard(id, r.settings.NumberOfShards)
		if err := tc.states.SaveReminders(ctx, EntityKey{Type: "counter", Shard: shardID, ID: id}, epochs[shardID], rs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for _, sh := range shards {
		n.sharding.owner.Go(func() { r.scanReminders(sh) })
	}
	testutil.Eventually(b, 10*time.Minute, "every reminder fired", func() bool {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		return len(tc.acts.reminded) >= b.N
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reminders/s")
	b.ReportMetric(perReminder, "B/reminder") // after ResetTimer, which drops metrics
}
