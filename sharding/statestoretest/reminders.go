package statestoretest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// The reminders' part of the contract, run on sharding.RemindersOf(store): the store's
// own ReminderStore, or reminders kept in its records.

func remindersOf(h []sharding.StateStore) []sharding.ReminderStore {
	out := make([]sharding.ReminderStore, len(h))
	for i, s := range h {
		out[i] = sharding.RemindersOf(s)
	}
	return out
}

func mustLoadReminders(t *testing.T, s sharding.ReminderStore, key sharding.EntityKey, want ...sharding.Reminder) {
	t.Helper()
	got, err := s.LoadReminders(ctxOf(t), key)
	if err != nil {
		t.Fatalf("load reminders of %v: %v", key, err)
	}
	if !slices.EqualFunc(got, want, equalReminder) {
		t.Fatalf("reminders of %v: %+v, want %+v", key, got, want)
	}
}

func equalReminder(a, b sharding.Reminder) bool {
	return a.Name == b.Name && a.Due == b.Due && a.Interval == b.Interval && string(a.Payload) == string(b.Payload)
}

// remindersSaveLoad: what one handle saves every handle loads, sorted by name; a save
// replaces the entity's set; an empty set deletes it; entities and shards are apart.
func remindersSaveLoad(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "timed", Shard: 3, ID: "e"}
	a := sharding.Reminder{Name: "b-second", Due: 2000, Interval: 1000, Payload: []byte{0, 1, 2, 255}}
	b := sharding.Reminder{Name: "a-first", Due: 1000}
	if err := rs[0].SaveReminders(ctx, key, 1, []sharding.Reminder{a, b}); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key, b, a)
		mustLoadReminders(t, s, sharding.EntityKey{Type: "timed", Shard: 3, ID: "other"})
		mustLoadReminders(t, s, sharding.EntityKey{Type: "timed", Shard: 4, ID: "e"})
	}
	a.Due = 5000
	if err := rs[1].SaveReminders(ctx, key, 1, []sharding.Reminder{a}); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key, a)
	}
	if err := rs[1].SaveReminders(ctx, key, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key)
		if due, next, err := s.DueReminders(ctx, "timed", 3, 1<<62, 0); err != nil || len(due) != 0 || next != 0 {
			t.Fatalf("due reminders of a shard whose reminders were deleted: %+v next %d, %v", due, next, err)
		}
	}
	// Reminder records are none of the shard's remembered entities to restart.
	if err := rs[0].SaveReminders(ctx, key, 1, []sharding.Reminder{b}); err != nil {
		t.Fatal(err)
	}
	ids, err := h[0].Remembered(ctx, "timed", 3)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(ids, func(id string) bool { return !sharding.IsReminderID(id) }) {
		t.Fatalf("remembered %q after saving reminders only", ids)
	}
}

// remindersDue: a shard's due reminders come earliest first, up to before and limit,
// with the next due of the rest.
func remindersDue(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	for i := 0; i < 6; i++ {
		key := sharding.EntityKey{Type: "timed", Shard: 1, ID: fmt.Sprint("e", i)}
		set := []sharding.Reminder{{Name: "x", Due: int64(100 * (6 - i))}, {Name: "y", Due: int64(1000 + i)}}
		if err := rs[i%len(rs)].SaveReminders(ctx, key, 2, set); err != nil {
			t.Fatal(err)
		}
	}
	// Another shard's and another type's are not this shard's.
	if err := rs[0].SaveReminders(ctx, sharding.EntityKey{Type: "timed", Shard: 2, ID: "e0"}, 2, []sharding.Reminder{{Name: "x", Due: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := rs[0].SaveReminders(ctx, sharding.EntityKey{Type: "else", Shard: 1, ID: "e0"}, 2, []sharding.Reminder{{Name: "x", Due: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		due, next, err := s.DueReminders(ctx, "timed", 1, 300, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range due {
			got = append(got, fmt.Sprintf("%s/%s@%d", d.ID, d.Name, d.Due))
		}
		if want := []string{"e5/x@100", "e4/x@200", "e3/x@300"}; !slices.Equal(got, want) || next != 400 {
			t.Fatalf("due at 300: %q next %d, want %q next 400", got, next, want)
		}
		due, next, err = s.DueReminders(ctx, "timed", 1, 5000, 2)
		if err != nil || len(due) != 2 || due[0].ID != "e5" || next != 300 {
			t.Fatalf("due at 5000, at most 2: %+v next %d, %v; want e5, e4 and next 300", due, next, err)
		}
		due, next, err = s.DueReminders(ctx, "timed", 1, 50, 0)
		if err != nil || len(due) != 0 || next != 100 {
			t.Fatalf("due at 50: %+v next %d, %v; want none and next 100", due, next, err)
		}
	}
}

// remindersFencing: a save at an older epoch than the shard's is refused and changes
// nothing; a read epoch older than the shard's is refused.
func remindersFencing(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "timed", Shard: 0, ID: "f"}
	r := sharding.Reminder{Name: "n", Due: 10}
	if err := rs[0].SaveReminders(ctx, key, 5, []sharding.Reminder{r}); err != nil {
		t.Fatal(err)
	}
	if err := rs[1].SaveReminders(ctx, key, 4, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at an older epoch: %v, want ErrStaleEpoch", err)
	}
	// A state save fences reminders too: they share the shard's epoch.
	mustSave(t, h[1], sharding.EntityKey{Type: "timed", Shard: 0, ID: "state"}, 7, []byte("s"))
	if err := rs[0].SaveReminders(ctx, key, 6, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at epoch 6 after a state save at 7: %v, want ErrStaleEpoch", err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key, r)
		if _, err := s.LoadReminders(sharding.WithReadEpoch(ctx, 6), key); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("load at read epoch 6 of a shard at 7: %v, want ErrStaleEpoch", err)
		}
	}
}

// remindersRefusals: invalid reminders and keys are refused, and nothing changes.
func remindersRefusals(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "timed", Shard: 0, ID: "r"}
	good := sharding.Reminder{Name: "ok", Due: 1}
	if err := rs[0].SaveReminders(ctx, key, 1, []sharding.Reminder{good}); err != nil {
		t.Fatal(err)
	}
	tooMany := make([]sharding.Reminder, sharding.MaxRemindersPerEntity+1)
	for i := range tooMany {
		tooMany[i] = sharding.Reminder{Name: fmt.Sprint("r", i), Due: 1}
	}
	for _, c := range []struct {
		rs   []sharding.Reminder
		want error
	}{
		{[]sharding.Reminder{{Name: "", Due: 1}}, sharding.ErrInvalidReminder},
		{[]sharding.Reminder{{Name: "i", Due: 1, Interval: 10}}, sharding.ErrInvalidReminder},
		{[]sharding.Reminder{{Name: "p", Due: 1, Payload: make([]byte, sharding.MaxReminderPayload+1)}}, sharding.ErrInvalidReminder},
		{[]sharding.Reminder{{Name: "d", Due: 1}, {Name: "d", Due: 2}}, sharding.ErrInvalidReminder},
		{tooMany, sharding.ErrTooManyReminders},
	} {
		if err := rs[1].SaveReminders(ctx, key, 1, c.rs); !errors.Is(err, c.want) {
			t.Fatalf("save of %d reminders: %v, want %v", len(c.rs), err, c.want)
		}
	}
	if err := rs[1].SaveReminders(ctx, sharding.EntityKey{Type: "timed", Shard: 0}, 1, []sharding.Reminder{good}); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("save without an entity ID: %v, want ErrInvalidStateKey", err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key, good)
	}
}

// remindersWithScheduled: an entity's record holds its own reminders and its scheduled
// messages (names under sharding.ScheduledNamePrefix), each up to its own limit; one
// over either limit is refused and the record stays as it was.
func remindersWithScheduled(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "timed", Shard: 1, ID: "both"}
	var full []sharding.Reminder
	for i := range sharding.MaxRemindersPerEntity {
		full = append(full, sharding.Reminder{Name: fmt.Sprintf("own%03d", i), Due: int64(1000 + i)})
	}
	for i := range sharding.MaxScheduledPerEntity {
		full = append(full, sharding.Reminder{Name: fmt.Sprintf("%s%016x", sharding.ScheduledNamePrefix, i), Due: int64(500 + i), Payload: []byte("m")})
	}
	if err := rs[0].SaveReminders(ctx, key, 1, full); err != nil {
		t.Fatalf("save of %d reminders and %d scheduled messages: %v", sharding.MaxRemindersPerEntity, sharding.MaxScheduledPerEntity, err)
	}
	want := slices.Clone(full)
	slices.SortFunc(want, func(a, b sharding.Reminder) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for _, extra := range []struct {
		r    sharding.Reminder
		want error
	}{
		{sharding.Reminder{Name: "own-more", Due: 1}, sharding.ErrTooManyReminders},
		{sharding.Reminder{Name: sharding.ScheduledNamePrefix + "ffffffffffffffff", Due: 1}, sharding.ErrTooManyScheduled},
	} {
		if err := rs[1].SaveReminders(ctx, key, 1, append(slices.Clone(full), extra.r)); !errors.Is(err, extra.want) {
			t.Fatalf("one more (%q): %v, want %v", extra.r.Name, err, extra.want)
		}
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key, want...)
		due, next, err := s.DueReminders(ctx, "timed", 1, 999, 0)
		if err != nil || len(due) != sharding.MaxScheduledPerEntity || due[0].Due != 500 || next != 1000 ||
			slices.ContainsFunc(due, func(r sharding.EntityReminder) bool { return !sharding.IsScheduledName(r.Name) }) {
			t.Fatalf("due by 999: %d, next %d, %v; want the %d scheduled messages, earliest first, then 1000", len(due), next, err, sharding.MaxScheduledPerEntity)
		}
	}
}

// remindersDeleteType: deleting a type's state deletes its reminders.
func remindersDeleteType(t *testing.T, h []sharding.StateStore) {
	del, ok := sharding.StateStoreAs[sharding.TypeStateDeleter](h[0])
	if !ok {
		t.Skip("the store cannot delete a type's state")
	}
	rs := remindersOf(h)
	ctx := ctxOf(t)
	gone := sharding.EntityKey{Type: "gone", Shard: 1, ID: "a"}
	kept := sharding.EntityKey{Type: "kept", Shard: 1, ID: "a"}
	r := sharding.Reminder{Name: "n", Due: 1}
	for _, k := range []sharding.EntityKey{gone, kept} {
		if err := rs[0].SaveReminders(ctx, k, 1, []sharding.Reminder{r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := del.DeleteType(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, gone)
		mustLoadReminders(t, s, kept, r)
		if due, next, err := s.DueReminders(ctx, "gone", 1, 1<<62, 0); err != nil || len(due) != 0 || next != 0 {
			t.Fatalf("due reminders of a deleted type: %+v next %d, %v", due, next, err)
		}
	}
}

// remindersDueIndex: a store's due reminders follow every change of the shard's
// reminders, as an index on due times must (one that is not updated when a reminder
// moves, is deleted or its entity's set shrinks returns stale ones): rounds of random
// saves through every handle, each followed by reads at several due times and limits,
// checked against a model of the shard's reminders.
func remindersDueIndex(t *testing.T, h []sharding.StateStore) {
	rs := remindersOf(h)
	ctx := ctxOf(t)
	const (
		typ      = "indexed"
		shard    = 4
		entities = 12
	)
	rng := rand.New(rand.NewPCG(35, 1))
	model := map[string][]sharding.Reminder{}
	// Another shard of the type, whose reminders are always due, and never this shard's.
	other := sharding.EntityKey{Type: typ, Shard: shard + 1, ID: "e0"}
	if err := rs[0].SaveReminders(ctx, other, 1, []sharding.Reminder{{Name: "x", Due: 1}}); err != nil {
		t.Fatal(err)
	}
	for round := range 8 {
		for e := range entities {
			if rng.IntN(2) == 0 && round > 0 {
				continue // left as it was
			}
			id := fmt.Sprint("e", e)
			var set []sharding.Reminder
			for k := range rng.IntN(4) { // 0 (a deletion) to 3
				// Few distinct due times: ties are ordered by ID, then name.
				set = append(set, sharding.Reminder{Name: fmt.Sprint("r", k), Due: int64(100 * (1 + rng.IntN(10))),
					Payload: []byte(fmt.Sprint(round, id, k))})
			}
			if err := rs[(round+e)%len(rs)].SaveReminders(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: id}, 1, set); err != nil {
				t.Fatal(err)
			}
			model[id] = set
		}
		var all []sharding.EntityReminder
		for id, set := range model {
			for _, r := range set {
				all = append(all, sharding.EntityReminder{ID: id, Reminder: r})
			}
		}
		slices.SortFunc(all, func(a, b sharding.EntityReminder) int {
			return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.ID, b.ID), strings.Compare(a.Name, b.Name))
		})
		for _, before := range []int64{50, 100, 450, 500, 1000, 1 << 62} {
			for _, limit := range []int{0, 1, 3, 1000} {
				var want []sharding.EntityReminder
				var wantNext int64
				for _, r := range all {
					if r.Due > before || (limit > 0 && len(want) == limit) {
						wantNext = r.Due
						break
					}
					want = append(want, r)
				}
				for i, s := range rs {
					got, next, err := s.DueReminders(ctx, typ, shard, before, limit)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.EqualFunc(got, want, func(a, b sharding.EntityReminder) bool {
						return a.ID == b.ID && equalReminder(a.Reminder, b.Reminder)
					}) || next != wantNext {
						t.Fatalf("round %d, handle %d, due by %d, at most %d: %v next %d; want %v next %d",
							round, i, before, limit, got, next, want, wantNext)
					}
				}
			}
		}
	}
}

// remindersAdvance, for a store that moves fired reminders on itself
// (sharding.ReminderAdvancer; others skip it): the fired reminders of many entities of
// a shard move on in one call (an interval's due to its first after now, a one-shot
// out, an entity left without reminders has none), what every handle then reads; a
// reminder set anew between the due read and the advance keeps its new due; an
// advance at an epoch older than the shard's is refused and changes nothing.
func remindersAdvance(t *testing.T, h []sharding.StateStore) {
	adv, ok := sharding.StateStoreAs[sharding.ReminderAdvancer](h[0])
	if !ok {
		t.Skip("the store does not implement sharding.ReminderAdvancer")
	}
	rs := remindersOf(h)
	ctx := ctxOf(t)
	key := func(id string) sharding.EntityKey { return sharding.EntityKey{Type: "timed", Shard: 2, ID: id} }
	sets := map[string][]sharding.Reminder{
		"a": {{Name: "i", Due: 100, Interval: 1000, Payload: []byte("p")}, {Name: "o", Due: 200}, {Name: "z", Due: 9000}},
		"b": {{Name: "x", Due: 150}},
		"c": {{Name: "i", Due: 120, Interval: 1000}},
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := rs[0].SaveReminders(ctx, key(id), 2, sets[id]); err != nil {
			t.Fatal(err)
		}
	}
	due, _, err := adv.DueReminders(sharding.WithReadEpoch(ctx, 2), "timed", 2, 250, 0)
	if err != nil || len(due) != 4 {
		t.Fatalf("due at 250: %+v %v, want 4", due, err)
	}
	setC := []sharding.Reminder{{Name: "i", Due: 5000, Interval: 1000}}
	if err := rs[0].SaveReminders(ctx, key("c"), 2, setC); err != nil {
		t.Fatal(err)
	}
	next, err := adv.AdvanceReminders(ctx, "timed", 2, 2, due, 2150)
	if err != nil || next != 3100 {
		t.Fatalf("advance at 2150: next %d %v, want 3100", next, err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key("a"), sharding.Reminder{Name: "i", Due: 3100, Interval: 1000, Payload: []byte("p")}, sharding.Reminder{Name: "z", Due: 9000})
		mustLoadReminders(t, s, key("b"))
		mustLoadReminders(t, s, key("c"), setC...)
		due, next, err := s.DueReminders(ctx, "timed", 2, 3000, 0)
		if err != nil || len(due) != 0 || next != 3100 {
			t.Fatalf("due at 3000 after the advance: %+v next %d %v, want none, next 3100", due, next, err)
		}
	}
	// A newer epoch fences the advance at the older one out.
	mustSave(t, h[1], sharding.EntityKey{Type: "timed", Shard: 2, ID: "state"}, 3, []byte("s"))
	due, _, err = adv.DueReminders(sharding.WithReadEpoch(ctx, 3), "timed", 2, 10_000, 0)
	if err != nil || len(due) != 3 {
		t.Fatalf("due at 10000: %+v %v, want 3", due, err)
	}
	if _, err := adv.AdvanceReminders(ctx, "timed", 2, 2, due, 10_000); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("advance at epoch 2 of a shard at 3: %v, want ErrStaleEpoch", err)
	}
	for _, s := range rs {
		mustLoadReminders(t, s, key("a"), sharding.Reminder{Name: "i", Due: 3100, Interval: 1000, Payload: []byte("p")}, sharding.Reminder{Name: "z", Due: 9000})
		mustLoadReminders(t, s, key("c"), setC...)
	}
}
