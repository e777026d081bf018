package statestoretest

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// deleteEntity: a sharding.EntityStateDeleter deletes one entity's snapshot, journal
// (its truncation point too) and remember mark, seen from every handle, and nothing of
// its neighbours; it is fenced as a write: at an older epoch it is refused and deletes
// nothing; after it, a write of an older epoch is refused (nothing comes back), and a
// write at the epoch starts the entity anew, its journal from record 1; it leaves the
// entity's reminders, and the listing leaves the entity out.
func deleteEntity(t *testing.T, h []sharding.StateStore) {
	del, ok := sharding.StateStoreAs[sharding.EntityStateDeleter](h[0])
	if !ok {
		t.Skipf("%T cannot delete one entity's state (not a sharding.EntityStateDeleter)", h[0])
	}
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "old"}
	near := sharding.EntityKey{Type: "counter", Shard: 3, ID: "kept"}
	for _, k := range []sharding.EntityKey{key, near} {
		mustSave(t, h[0], k, 4, []byte("state of "+k.ID))
		if err := h[0].Remember(ctx, k, 4, true); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, h[1], key, 4, Record(key, 1, "a"), Record(key, 2, "b"), Record(key, 3, "c"))
	if err := journalOf(t, h[0]).TruncateJournal(ctx, key, 4, 2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, h[1], near, 4, Record(near, 1, "n"))
	rs, hasReminders := sharding.StateStoreAs[sharding.ReminderStore](h[0])
	if hasReminders {
		if err := rs.SaveReminders(ctx, key, 4, []sharding.Reminder{{Name: "r", Due: 1_700_000_000_000}}); err != nil {
			t.Fatal(err)
		}
	}

	// At an older epoch: refused, nothing deleted.
	if err := del.DeleteEntity(ctx, key, 3); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("delete at an older epoch: %v, want ErrStaleEpoch", err)
	}
	mustLoad(t, h[1], key, []byte("state of old"))
	mustJournal(t, h[1], key, 1, "2:b", "3:c")

	if err := del.DeleteEntity(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	for _, s := range h {
		if _, err := s.Load(ctx, key); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("load after the delete: %v, want ErrNoState", err)
		}
		mustJournal(t, s, key, 1)
		// A store that keeps reminders as records (sharding.RecordReminders) remembers
		// them under their own ID, which the delete keeps with the reminders.
		remembered, err := s.Remembered(ctx, "counter", 3)
		if err != nil {
			t.Fatal(err)
		}
		remembered = slices.DeleteFunc(remembered, sharding.IsReminderID)
		if !slices.Equal(remembered, []string{"kept"}) {
			t.Fatalf("remembered counter/3 after the delete: %q, want [\"kept\"] (reminders' records aside)", remembered)
		}
		mustLoad(t, s, near, []byte("state of kept"))
		mustJournal(t, s, near, 1, "1:n")
	}
	if hasReminders {
		got, err := rs.LoadReminders(ctx, key)
		if err != nil || len(got) != 1 || got[0].Name != "r" {
			t.Fatalf("the reminders after the delete: %+v %v, want r kept", got, err)
		}
	}
	if l, ok := sharding.StateStoreAs[sharding.StateLister](h[1]); ok {
		if _, err := l.StatOne(ctx, key); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("stat after the delete: %v, want ErrNoState", err)
		}
		got, _, err := l.ListStates(ctx, sharding.StateListing{Type: "counter", Limit: 10, Shards: 4})
		if err != nil || len(got) != 1 || got[0].Key != near {
			t.Fatalf("the listing after the delete: %v %v, want %v alone", keysOf(got), err, near)
		}
	}

	// A late write of an older epoch brings nothing back.
	if err := h[1].Save(ctx, key, 3, []byte("late")); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at an older epoch after the delete: %v, want ErrStaleEpoch", err)
	}
	if err := journalOf(t, h[1]).AppendJournal(ctx, key, 3, []sharding.JournalRecord{Record(key, 4, "late")}); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("append at an older epoch after the delete: %v, want ErrStaleEpoch", err)
	}
	if err := h[1].Remember(ctx, key, 3, true); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("remember at an older epoch after the delete: %v, want ErrStaleEpoch", err)
	}
	for _, s := range h {
		if _, err := s.Load(ctx, key); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("load after late writes: %v, want ErrNoState", err)
		}
		mustJournal(t, s, key, 1)
	}

	// The entity starts anew: a snapshot, its journal from record 1.
	mustSave(t, h[1], key, 5, []byte("fresh"))
	mustAppend(t, h[0], key, 5, Record(key, 1, "x"))
	for _, s := range h {
		mustLoad(t, s, key, []byte("fresh"))
		mustJournal(t, s, key, 1, "1:x")
	}
	// Deleting what holds nothing is no error.
	if err := del.DeleteEntity(ctx, sharding.EntityKey{Type: "counter", Shard: 3, ID: "never"}, 5); err != nil {
		t.Fatalf("delete of an entity never saved: %v", err)
	}
	if err := del.DeleteEntity(ctx, sharding.EntityKey{Type: "counter", Shard: 3, ID: ""}, 5); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("delete of an empty ID: %v, want ErrInvalidStateKey", err)
	}
}
