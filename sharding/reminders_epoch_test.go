package sharding

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// dueHookStore is a MemoryStateStore whose DueReminders first calls hook with the read
// epoch it was given (0: none), so that a test can change what happens between a
// shard's scan and its read of the store.
type dueHookStore struct {
	*MemoryStateStore
	mu   sync.Mutex
	hook func(typ string, shard int, epoch uint64)
}

func (s *dueHookStore) setHook(h func(typ string, shard int, epoch uint64)) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

func (s *dueHookStore) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]EntityReminder, int64, error) {
	s.mu.Lock()
	h := s.hook
	s.mu.Unlock()
	if h != nil {
		epoch, _ := ReadEpoch(ctx)
		h(typ, shard, epoch)
	}
	return s.MemoryStateStore.DueReminders(ctx, typ, shard, before, limit)
}

var _ ReminderStore = (*dueHookStore)(nil)

// TestReminderScanRefusedAtAnOldEpochReadsAgainAtTheNewOne: a shard's scan of its due
// reminders reads the store at the epoch the shard had when the scan began; if the
// coordinator hosts the shard here again at a newer epoch meanwhile (HostShard to the
// region that has it: the shard stays, its epoch goes up) and the store is fenced at
// that epoch first, the read is refused as stale, and the shard, which is not dropped
// (it is hosted here at the newer epoch), must read again. It did not: the timer that
// started the scan had fired, so a reminder due then waited for the next write of the
// shard's reminders on this member, and in a run with none (the last scheduled message
// of an inbox) it never came. The hook does the re-hosting and the fence inside the
// scan's read: no timing.
func TestReminderScanRefusedAtAnOldEpochReadsAgainAtTheNewOne(t *testing.T) {
	store := &dueHookStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := homeOf(t, tc, "counter", "b")
	reg := n.sharding.region("counter")
	sh := abiShard("b", 10)
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()

	var once sync.Once
	bumped := make(chan struct{})
	store.setHook(func(typ string, shard int, at uint64) {
		if typ != "counter" || shard != sh || at != epoch {
			return
		}
		once.Do(func() {
			// The coordinator hosts the shard here again at a newer epoch, and the
			// region's next write fences the store at it, before this read.
			reg.hostShard(sh, epoch+1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := reg.fenceShard(ctx, sh, epoch+1); err != nil {
				t.Errorf("fence at %d: %v", epoch+1, err)
			}
			close(bumped)
		})
	})
	setReminder(t, n, "counter", "b", Reminder{Name: "r", Due: time.Now().Add(50 * time.Millisecond).UnixMilli(), Payload: []byte("x")})
	select {
	case <-bumped:
	case <-time.After(20 * time.Second):
		t.Fatal("no scan of the shard read its reminders at the old epoch")
	}
	testutil.Eventually(t, 20*time.Second, "the reminder, read again at the new epoch", func() bool {
		return len(tc.acts.reminders("counter/b")) > 0
	})
}
