// Package statestoretest is the contract every sharding.StateStore keeps, as tests that
// run against each implementation (the in-memory one, the replicated one, PostgreSQL):
// fencing, versions, remember and forget, concurrent saves, batches, one entity's
// delete (sharding.EntityStateDeleter), and journals
// (appends, reads, truncation, refusals of corrupt records, concurrent appends), and
// the listing of a store that keeps an index (sharding.StateLister), and reminders
// (sharding.RemindersOf), and their write back (sharding.ReminderAdvancer). It also builds a
// replicated store of several members on in-memory networks, for tests and benchmarks
// outside package sharding.
package statestoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// Open returns handles on one fresh, empty store: what one handle writes every other
// reads (the members of a cluster, or several clients of one database). At least two.
type Open func(t *testing.T) []sharding.StateStore

// Run runs the contract against the stores open returns, each subtest on a fresh one.
func Run(t *testing.T, open Open) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, h []sharding.StateStore)
	}{
		{"SaveLoad", saveLoad},
		{"Versions", versions},
		{"Fencing", fencing},
		{"ReadEpoch", readEpoch},
		{"RememberForget", rememberForget},
		{"ConcurrentSaves", concurrentSaves},
		{"ConcurrentFencing", concurrentFencing},
		{"Batch", batch},
		{"FenceShard", fenceShard},
		{"InvalidKeys", invalidKeys},
		{"DeleteType", deleteType},
		{"DeleteEntity", deleteEntity},
		{"JournalAppendRead", journalAppendRead},
		{"JournalFencing", journalFencing},
		{"JournalTruncate", journalTruncate},
		{"JournalRefusals", journalRefusals},
		{"JournalConcurrent", journalConcurrent},
		{"JournalDeleteType", journalDeleteType},
		{"Listing", listing},
		{"RemindersSaveLoad", remindersSaveLoad},
		{"RemindersDue", remindersDue},
		{"RemindersDueIndex", remindersDueIndex},
		{"RemindersFencing", remindersFencing},
		{"RemindersRefusals", remindersRefusals},
		{"RemindersWithScheduled", remindersWithScheduled},
		{"RemindersDeleteType", remindersDeleteType},
		{"RemindersAdvance", remindersAdvance},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := open(t)
			if len(h) < 2 {
				t.Fatalf("open gave %d handles, want at least 2", len(h))
			}
			c.fn(t, h)
		})
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSave(t *testing.T, s sharding.StateStore, key sharding.EntityKey, epoch uint64, state []byte) {
	t.Helper()
	if err := s.Save(ctxOf(t), key, epoch, state); err != nil {
		t.Fatalf("save %v at epoch %d: %v", key, epoch, err)
	}
}

func mustLoad(t *testing.T, s sharding.StateStore, key sharding.EntityKey, want []byte) {
	t.Helper()
	got, err := s.Load(ctxOf(t), key)
	if err != nil {
		t.Fatalf("load %v: %v", key, err)
	}
	if !bytes.Equal(got, want) || got == nil {
		t.Fatalf("load %v: %q, want %q", key, got, want)
	}
}

func mustRemembered(t *testing.T, s sharding.StateStore, typ string, shard int, want ...string) {
	t.Helper()
	got, err := s.Remembered(ctxOf(t), typ, shard)
	if err != nil {
		t.Fatalf("remembered %s/%d: %v", typ, shard, err)
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("remembered %s/%d: %q, want %q", typ, shard, got, want)
	}
}

func saveLoad(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	for i := 0; i < 10; i++ {
		key := sharding.EntityKey{Type: "counter", Shard: i, ID: fmt.Sprint("e-", i)}
		state := []byte(fmt.Sprintf("state of %v", key))
		mustSave(t, h[i%len(h)], key, 1, state)
		for _, s := range h {
			mustLoad(t, s, key, state)
		}
	}
	for _, s := range h {
		if _, err := s.Load(ctx, sharding.EntityKey{Type: "counter", Shard: 3, ID: "nobody"}); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("load of a key never saved: %v, want ErrNoState", err)
		}
	}
	// The key is (type, shard, ID): the same ID elsewhere is another entity.
	if _, err := h[0].Load(ctx, sharding.EntityKey{Type: "other", Shard: 1, ID: "e-1"}); !errors.Is(err, sharding.ErrNoState) {
		t.Fatalf("load under another type: %v, want ErrNoState", err)
	}
	// An empty snapshot is a snapshot (non-nil, empty).
	empty := sharding.EntityKey{Type: "counter", Shard: 2, ID: "empty"}
	mustSave(t, h[0], empty, 1, nil)
	mustLoad(t, h[1], empty, []byte{})
	// The caller may reuse its buffer.
	buf := []byte("original")
	key := sharding.EntityKey{Type: "counter", Shard: 4, ID: "reused"}
	mustSave(t, h[0], key, 1, buf)
	copy(buf, "CHANGED!")
	mustLoad(t, h[1], key, []byte("original"))
	// Binary state, every byte value.
	bin := make([]byte, 256*4)
	for i := range bin {
		bin[i] = byte(i)
	}
	mustSave(t, h[1], sharding.EntityKey{Type: "blob", Shard: 0, ID: "bin"}, 1, bin)
	mustLoad(t, h[0], sharding.EntityKey{Type: "blob", Shard: 0, ID: "bin"}, bin)
}

func versions(t *testing.T, h []sharding.StateStore) {
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "v"}
	// Later saves win, whichever handle wrote them and whichever reads.
	for i := 0; i < 6; i++ {
		mustSave(t, h[i%len(h)], key, 1, []byte(fmt.Sprint("v", i)))
		for _, s := range h {
			mustLoad(t, s, key, []byte(fmt.Sprint("v", i)))
		}
	}
	// A newer epoch supersedes, and so does a later save within it.
	mustSave(t, h[1], key, 2, []byte("epoch 2"))
	mustLoad(t, h[0], key, []byte("epoch 2"))
	mustSave(t, h[0], key, 2, []byte("epoch 2 again"))
	mustLoad(t, h[1], key, []byte("epoch 2 again"))
}

func fencing(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 7, ID: "fenced"}
	mustSave(t, h[0], key, 5, []byte("five"))
	for i, s := range h {
		if err := s.Save(ctx, key, 4, []byte("four")); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: save at epoch 4 after 5: %v, want ErrStaleEpoch", i, err)
		}
		if err := s.Remember(ctx, key, 4, true); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: remember at epoch 4 after 5: %v, want ErrStaleEpoch", i, err)
		}
	}
	for _, s := range h {
		mustLoad(t, s, key, []byte("five"))
	}
	mustRemembered(t, h[1], "counter", 7)
	// The fence is per shard: another entity of the shard is fenced too, another shard
	// or type is not.
	if err := h[1].Save(ctx, sharding.EntityKey{Type: "counter", Shard: 7, ID: "other"}, 4, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save of another entity of the shard at epoch 4: %v, want ErrStaleEpoch", err)
	}
	mustSave(t, h[1], sharding.EntityKey{Type: "counter", Shard: 8, ID: "fenced"}, 4, []byte("other shard"))
	mustSave(t, h[1], sharding.EntityKey{Type: "other", Shard: 7, ID: "fenced"}, 4, []byte("other type"))
	// A remember raises the fence as a save does.
	if err := h[0].Remember(ctx, key, 6, true); err != nil {
		t.Fatal(err)
	}
	if err := h[1].Save(ctx, key, 5, []byte("five again")); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at epoch 5 after a remember at 6: %v, want ErrStaleEpoch", err)
	}
	mustSave(t, h[1], key, 7, []byte("seven"))
	mustLoad(t, h[0], key, []byte("seven"))
}

// readEpoch: a load whose context carries a read epoch (sharding.WithReadEpoch) is
// refused with ErrStaleEpoch once the shard was written at a newer one, from every
// handle, for an entity with state or none; at the shard's epoch or a newer one, or
// with no read epoch, it reads as before; other shards are not concerned.
func readEpoch(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "read"}
	mustSave(t, h[0], key, 5, []byte("five"))
	for i, s := range h {
		if got, err := s.Load(sharding.WithReadEpoch(ctx, 5), key); err != nil || string(got) != "five" {
			t.Fatalf("handle %d: load at the shard's epoch 5: %q %v", i, got, err)
		}
	}
	mustSave(t, h[1], sharding.EntityKey{Type: "counter", Shard: 3, ID: "newer"}, 7, []byte("seven"))
	for i, s := range h {
		for _, id := range []string{"read", "none"} {
			k := key
			k.ID = id
			if got, err := s.Load(sharding.WithReadEpoch(ctx, 5), k); !errors.Is(err, sharding.ErrStaleEpoch) {
				t.Fatalf("handle %d: load of %s at epoch 5 after a save at 7: %q %v, want ErrStaleEpoch", i, id, got, err)
			}
		}
		for _, c := range []context.Context{sharding.WithReadEpoch(ctx, 7), sharding.WithReadEpoch(ctx, 8), ctx} {
			if got, err := s.Load(c, key); err != nil || string(got) != "five" {
				e, _ := sharding.ReadEpoch(c)
				t.Fatalf("handle %d: load at epoch %d (0: none): %q %v", i, e, got, err)
			}
		}
		if _, err := s.Load(sharding.WithReadEpoch(ctx, 5), sharding.EntityKey{Type: "counter", Shard: 4, ID: "read"}); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("handle %d: load at epoch 5 in another shard: %v, want ErrNoState", i, err)
		}
	}
}

func rememberForget(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	const typ, shard = "counter", 9
	for _, id := range []string{"c", "a", "b", "a"} {
		if err := h[0].Remember(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: id}, 1, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range h {
		mustRemembered(t, s, typ, shard, "a", "b", "c")
	}
	if err := h[1].Remember(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: "b"}, 1, false); err != nil {
		t.Fatal(err)
	}
	// Forgetting an entity never remembered is no error.
	if err := h[1].Remember(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: "zz"}, 1, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range h {
		mustRemembered(t, s, typ, shard, "a", "c")
	}
	mustRemembered(t, h[0], typ, shard+1)
	mustRemembered(t, h[0], "other", shard)
	// Remembered again after a forget, at a later epoch.
	if err := h[0].Remember(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: "b"}, 2, true); err != nil {
		t.Fatal(err)
	}
	mustRemembered(t, h[1], typ, shard, "a", "b", "c")
	// Remembering saves no state.
	if _, err := h[0].Load(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: "a"}); !errors.Is(err, sharding.ErrNoState) {
		t.Fatalf("load of a remembered entity never saved: %v, want ErrNoState", err)
	}
}

// deleteType: a store that can delete a type's state (sharding.TypeStateDeleter, as
// shardhost undeploy --delete-state uses it) deletes every snapshot and remember mark
// of the type, in every shard, on every handle, and nothing of another type; the
// shards' epochs stay (a stale write is still refused), and the type's state can be
// written again afterwards. A store without the ability skips this.
func deleteType(t *testing.T, h []sharding.StateStore) {
	del, ok := sharding.StateStoreAs[sharding.TypeStateDeleter](h[0])
	if !ok {
		t.Skip("the store cannot delete a type's state")
	}
	ctx := ctxOf(t)
	for shard := 0; shard < 5; shard++ {
		for _, typ := range []string{"gone", "kept"} {
			for _, id := range []string{"a", "b"} {
				key := sharding.EntityKey{Type: typ, Shard: shard, ID: id}
				mustSave(t, h[shard%len(h)], key, 3, []byte(typ+id))
				if err := h[0].Remember(ctx, key, 3, true); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := del.DeleteType(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for _, s := range h {
		for shard := 0; shard < 5; shard++ {
			for _, id := range []string{"a", "b"} {
				if _, err := s.Load(ctx, sharding.EntityKey{Type: "gone", Shard: shard, ID: id}); !errors.Is(err, sharding.ErrNoState) {
					t.Fatalf("load of gone/%d/%s after the delete: %v, want ErrNoState", shard, id, err)
				}
				mustLoad(t, s, sharding.EntityKey{Type: "kept", Shard: shard, ID: id}, []byte("kept"+id))
			}
			mustRemembered(t, s, "gone", shard)
			mustRemembered(t, s, "kept", shard, "a", "b")
		}
	}
	// The epochs stay: an older one is refused; the same one writes again.
	key := sharding.EntityKey{Type: "gone", Shard: 1, ID: "a"}
	if err := h[1].Save(ctx, key, 2, []byte("late")); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at an older epoch after the delete: %v, want ErrStaleEpoch", err)
	}
	mustSave(t, h[1], key, 3, []byte("again"))
	for _, s := range h {
		mustLoad(t, s, key, []byte("again"))
	}
	if err := del.DeleteType(ctx, "never-saved"); err != nil {
		t.Fatalf("deleting a type with no state: %v", err)
	}
	if err := del.DeleteType(ctx, ""); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("deleting the empty type: %v, want ErrInvalidStateKey", err)
	}
}

// concurrentSaves: many writers at once, on one shard and on several, through every
// handle; each entity ends with the last state its one writer saved.
func concurrentSaves(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	const writers, rounds = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := h[w%len(h)]
			key := sharding.EntityKey{Type: "counter", Shard: w % 3, ID: fmt.Sprint("w-", w)}
			for r := 0; r < rounds; r++ {
				if err := s.Save(ctx, key, 1, []byte(fmt.Sprintf("%d/%d", w, r))); err != nil {
					errs <- err
					return
				}
				if err := s.Remember(ctx, key, 1, r%2 == 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Writers of one entity: the store ends with one of their states.
	shared := sharding.EntityKey{Type: "counter", Shard: 0, ID: "shared"}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				if err := h[w%len(h)].Save(ctx, shared, 1, []byte(fmt.Sprint("shared by ", w))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < writers; w++ {
		key := sharding.EntityKey{Type: "counter", Shard: w % 3, ID: fmt.Sprint("w-", w)}
		mustLoad(t, h[(w+1)%len(h)], key, []byte(fmt.Sprintf("%d/%d", w, rounds-1)))
	}
	for shard := 0; shard < 3; shard++ {
		// The last round (odd) forgot every writer's entity.
		mustRemembered(t, h[0], "counter", shard)
	}
	got, err := h[0].Load(ctx, shared)
	if err != nil || !bytes.HasPrefix(got, []byte("shared by ")) {
		t.Fatalf("the shared entity: %q %v", got, err)
	}
}

// concurrentFencing: a writer at epoch 1 keeps saving while another takes the shard
// over at epoch 2. Once the takeover's save has returned, no save at epoch 1 that
// starts later succeeds, and the shard's last state is from epoch 2.
func concurrentFencing(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 5, ID: "race"}
	mustSave(t, h[0], key, 1, []byte("old owner"))
	var takenOver atomic.Bool
	var lateSuccess atomic.Int64
	var staleSeen atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				after := takenOver.Load()
				err := h[0].Save(ctx, sharding.EntityKey{Type: "counter", Shard: 5, ID: fmt.Sprint("old-", w, "-", i%4)}, 1, []byte("old owner"))
				switch {
				case err == nil && after:
					lateSuccess.Add(1)
				case errors.Is(err, sharding.ErrStaleEpoch):
					staleSeen.Add(1)
				case err != nil:
					t.Errorf("old owner's save: %v", err)
					return
				}
			}
		}()
	}
	mustSave(t, h[1], key, 2, []byte("new owner"))
	takenOver.Store(true)
	testutil.Eventually(t, 30*time.Second, "the old owner refused", func() bool { return staleSeen.Load() >= 8 })
	close(done)
	wg.Wait()
	if n := lateSuccess.Load(); n > 0 {
		t.Fatalf("%d saves at epoch 1 succeeded after the save at epoch 2 returned", n)
	}
	mustLoad(t, h[0], key, []byte("new owner"))
}

func batch(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	b, ok := sharding.StateStoreAs[sharding.BatchStateStore](h[0])
	if !ok {
		t.Skip("the store has no batch saves")
	}
	var saves []sharding.StateSave
	for i := 0; i < 100; i++ {
		saves = append(saves, sharding.StateSave{ID: fmt.Sprintf("b-%03d", i), State: []byte(fmt.Sprint("batched ", i))})
	}
	saves = append(saves, sharding.StateSave{ID: "b-000", State: []byte("last wins")})
	if err := b.SaveBatch(ctx, "counter", 6, 3, saves); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, h[1], sharding.EntityKey{Type: "counter", Shard: 6, ID: "b-000"}, []byte("last wins"))
	for i := 1; i < 100; i++ {
		mustLoad(t, h[1], sharding.EntityKey{Type: "counter", Shard: 6, ID: fmt.Sprintf("b-%03d", i)}, []byte(fmt.Sprint("batched ", i)))
	}
	// Fenced as a whole: nothing of a stale batch is written.
	err := b.SaveBatch(ctx, "counter", 6, 2, []sharding.StateSave{{ID: "b-001", State: []byte("stale")}, {ID: "new", State: []byte("stale")}})
	if !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a batch at epoch 2 after 3: %v, want ErrStaleEpoch", err)
	}
	mustLoad(t, h[1], sharding.EntityKey{Type: "counter", Shard: 6, ID: "b-001"}, []byte("batched 1"))
	if _, err := h[1].Load(ctx, sharding.EntityKey{Type: "counter", Shard: 6, ID: "new"}); !errors.Is(err, sharding.ErrNoState) {
		t.Fatalf("an entity of a stale batch: %v, want ErrNoState", err)
	}
	// A batch raises the fence for single saves too.
	if err := h[1].Save(ctx, sharding.EntityKey{Type: "counter", Shard: 6, ID: "x"}, 2, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a save at epoch 2 after a batch at 3: %v, want ErrStaleEpoch", err)
	}
	if err := b.SaveBatch(ctx, "counter", 6, 3, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
}

// fenceShard: a fence raises the shard's epoch as a write would, writing nothing, for
// every handle; it is refused below the shard's epoch, and idempotent at it.
func fenceShard(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	f, ok := sharding.StateStoreAs[sharding.ShardFencer](h[1])
	if !ok {
		t.Skip("the store has no FenceShard")
	}
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "x"}
	mustSave(t, h[0], key, 4, []byte("four"))
	if err := f.FenceShard(ctx, "counter", 3, 5); err != nil {
		t.Fatal(err)
	}
	// Nothing written: the state is the former owner's, and no entity is remembered.
	for _, s := range h {
		mustLoad(t, s, key, []byte("four"))
	}
	mustRemembered(t, h[0], "counter", 3)
	// Writes below the fence are refused, from every handle.
	for i, s := range h {
		if err := s.Save(ctx, key, 4, []byte("lost")); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: save at epoch 4 after a fence at 5: %v, want ErrStaleEpoch", i, err)
		}
		if err := s.Remember(ctx, sharding.EntityKey{Type: "counter", Shard: 3, ID: "y"}, 4, true); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: remember at epoch 4 after a fence at 5: %v, want ErrStaleEpoch", i, err)
		}
		if b, ok := sharding.StateStoreAs[sharding.BatchStateStore](s); ok {
			if err := b.SaveBatch(ctx, "counter", 3, 4, []sharding.StateSave{{ID: "x", State: []byte("lost")}}); !errors.Is(err, sharding.ErrStaleEpoch) {
				t.Fatalf("handle %d: batch at epoch 4 after a fence at 5: %v, want ErrStaleEpoch", i, err)
			}
		}
	}
	mustLoad(t, h[0], key, []byte("four"))
	// At the fence's epoch: idempotent, and writes go on.
	if err := f.FenceShard(ctx, "counter", 3, 5); err != nil {
		t.Fatalf("a fence at the shard's epoch: %v", err)
	}
	mustSave(t, h[0], key, 5, []byte("five"))
	mustLoad(t, h[1], key, []byte("five"))
	// Below the shard's epoch: the fencer is stale.
	for i, s := range h {
		if g, ok := sharding.StateStoreAs[sharding.ShardFencer](s); ok {
			if err := g.FenceShard(ctx, "counter", 3, 4); !errors.Is(err, sharding.ErrStaleEpoch) {
				t.Fatalf("handle %d: a fence at epoch 4 after 5: %v, want ErrStaleEpoch", i, err)
			}
		}
	}
	// A fence of a shard with no state at all fences it too; other shards and types
	// are not fenced.
	if err := f.FenceShard(ctx, "counter", 9, 7); err != nil {
		t.Fatal(err)
	}
	if err := h[0].Save(ctx, sharding.EntityKey{Type: "counter", Shard: 9, ID: "z"}, 6, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at epoch 6 in a fresh shard fenced at 7: %v, want ErrStaleEpoch", err)
	}
	mustSave(t, h[0], sharding.EntityKey{Type: "counter", Shard: 8, ID: "z"}, 6, []byte("other shard"))
	mustSave(t, h[0], sharding.EntityKey{Type: "other", Shard: 9, ID: "z"}, 6, []byte("other type"))
	if err := f.FenceShard(ctx, "", 1, 1); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("a fence of an empty type: %v, want ErrInvalidStateKey", err)
	}
}

func invalidKeys(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	for _, key := range []sharding.EntityKey{{Type: "", Shard: 1, ID: "x"}, {Type: "t", Shard: -1, ID: "x"}, {Type: "t", Shard: 1, ID: ""}} {
		if err := h[0].Save(ctx, key, 1, nil); !errors.Is(err, sharding.ErrInvalidStateKey) {
			t.Errorf("save %#v: %v, want ErrInvalidStateKey", key, err)
		}
		if _, err := h[0].Load(ctx, key); !errors.Is(err, sharding.ErrInvalidStateKey) {
			t.Errorf("load %#v: %v, want ErrInvalidStateKey", key, err)
		}
		if err := h[0].Remember(ctx, key, 1, true); !errors.Is(err, sharding.ErrInvalidStateKey) {
			t.Errorf("remember %#v: %v, want ErrInvalidStateKey", key, err)
		}
	}
	if _, err := h[0].Remembered(ctx, "", 1); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Errorf("remembered of an empty type: %v, want ErrInvalidStateKey", err)
	}
	// IDs are UTF-8 text of any script.
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "ünïcødé/日本/🙂 with spaces"}
	mustSave(t, h[0], key, 1, []byte("fine"))
	mustLoad(t, h[1], key, []byte("fine"))
}

// Replicated starts n members of a clustertest cluster (transport addresses state-0,
// state-1...), each with a replstore.Store on its own directory (bbolt, fsynced),
// waits until they are all up and returns their stores; everything stops in
// tb.Cleanup, each store before its member (clustertest.Member.OnStop). mutate may
// change each store's configuration.
func Replicated(tb testing.TB, n int, mutate func(*replstore.Config)) []sharding.StateStore {
	tb.Helper()
	quiet := slog.New(slog.DiscardHandler)
	c := clustertest.New(tb, 0, clustertest.WithTransportAddrs(func(i int) string { return fmt.Sprintf("state-%d", i) }))
	var stores []sharding.StateStore
	for i := 0; i < n; i++ {
		m := c.Add()
		scfg := replstore.DefaultLocalConfig()
		scfg.Membership, scfg.Messenger, scfg.Dir, scfg.Logger = m.Membership, m.Messenger, tb.TempDir(), quiet
		scfg.RequestTimeout = 5 * time.Second
		if mutate != nil {
			mutate(&scfg)
		}
		store, err := replstore.New(scfg)
		if err != nil {
			tb.Fatal(err)
		}
		m.OnStop(func() { store.Close() })
		stores = append(stores, store)
	}
	c.WaitUp()
	return stores
}
