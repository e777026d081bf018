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
// in-memory store, all due already, and measures how fast the member fires them: each
// an ask of its entity (activated on the way) and the store's deletion of the one-shot.
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
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "B/reminder")
	// Now make them all due: set again with a due time in the past (a replacement, no
	// new one), and time the firing.
	past := time.Now().Add(-time.Second).UnixMilli()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		id := "b" + strconv.Itoa(i/perEntity)
		if err := n.sharding.SetReminder(ctx, "counter", id, Reminder{Name: "r" + strconv.Itoa(i%perEntity), Due: past, Payload: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	testutil.Eventually(b, 10*time.Minute, "every reminder fired", func() bool {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		return len(tc.acts.reminded) >= b.N
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reminders/s")
}
