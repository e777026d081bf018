package sharding

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/btree"
)

// Durable reminders (docs/sharding.md, "Reminders"): an entity's reminders are kept in
// the state store with its shard, fenced by the shard's allocation epoch like its state.
// The shard's home keeps only the next due time of each shard it hosts, with one timer
// per shard; when it fires, the home reads the reminders then due and delivers each to
// its entity (activating it if it is passivated) as a KindReminder ask, then moves the
// reminder on (an interval's next due) or deletes it (a one-shot), at least once.

// Limits of reminders (CheckReminder).
const (
	// MaxReminderName is the longest reminder name, in bytes.
	MaxReminderName = 128
	// MaxReminderPayload is the largest reminder payload, in bytes (64 KiB).
	MaxReminderPayload = 64 << 10
	// MaxRemindersPerEntity is the most reminders one entity may have.
	MaxRemindersPerEntity = 100
	// MinReminderInterval is the shortest interval of a repeating reminder.
	MinReminderInterval = time.Second
)

var (
	// ErrInvalidReminder: a reminder with an empty name, a name over MaxReminderName
	// bytes or not UTF-8, a negative due time, an interval that is negative or under
	// MinReminderInterval, or a payload over MaxReminderPayload.
	ErrInvalidReminder = errors.New("sharding: invalid reminder")
	// ErrTooManyReminders: setting the reminder would give the entity more than
	// MaxRemindersPerEntity.
	ErrTooManyReminders = errors.New("sharding: too many reminders")
)

// Reminder is a durable reminder of an entity: at Due (Unix milliseconds) its Payload is
// delivered to the entity as a KindReminder message whose Sender is Name and whose Tag
// is Due; with Interval (milliseconds) > 0 it comes again every Interval after that,
// until cancelled.
type Reminder struct {
	Name     string `cbor:"1,keyasint" json:"name"`
	Due      int64  `cbor:"2,keyasint" json:"due_unix_ms"`
	Interval int64  `cbor:"3,keyasint,omitempty" json:"interval_ms,omitempty"`
	Payload  []byte `cbor:"4,keyasint,omitempty" json:"payload,omitempty"`
}

// EntityReminder is a reminder with the ID of its entity, in a shard's listing.
type EntityReminder struct {
	ID string
	Reminder
}

// CheckReminder reports, with an error wrapping ErrInvalidReminder, a reminder no
// entity may set: see ErrInvalidReminder, and a name that begins with U+FFFE (those
// of scheduled messages, ScheduledNamePrefix). A due time in the past is valid: the
// reminder fires at once.
func CheckReminder(r Reminder) error {
	if strings.HasPrefix(r.Name, "\ufffe") {
		return fmt.Errorf("%w: a name that begins with U+FFFE (kept for scheduled messages)", ErrInvalidReminder)
	}
	return checkReminder(r)
}

// checkReminder is CheckReminder for a record in the store, whose names may be
// scheduled messages'.
func checkReminder(r Reminder) error {
	switch {
	case r.Name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidReminder)
	case len(r.Name) > MaxReminderName:
		return fmt.Errorf("%w: a name of %d bytes (at most %d)", ErrInvalidReminder, len(r.Name), MaxReminderName)
	case !utf8.ValidString(r.Name):
		return fmt.Errorf("%w: the name is not UTF-8", ErrInvalidReminder)
	case r.Due < 0:
		return fmt.Errorf("%w: negative due time %d", ErrInvalidReminder, r.Due)
	case r.Interval < 0:
		return fmt.Errorf("%w: negative interval %d ms", ErrInvalidReminder, r.Interval)
	case r.Interval > 0 && r.Interval < MinReminderInterval.Milliseconds():
		return fmt.Errorf("%w: an interval of %d ms (at least %d)", ErrInvalidReminder, r.Interval, MinReminderInterval.Milliseconds())
	case len(r.Payload) > MaxReminderPayload:
		return fmt.Errorf("%w: a payload of %d bytes (at most %d)", ErrInvalidReminder, len(r.Payload), MaxReminderPayload)
	}
	return nil
}

// ReminderStore is a StateStore that keeps reminders itself (a table of its own, an
// index on due times). A store without it keeps them through its StateStore methods
// (RemindersOf): one record per entity with reminders beside its snapshot, and its ID
// among the shard's remembered ones, both under ReminderIDPrefix.
type ReminderStore interface {
	StateStore
	// SaveReminders replaces the entity's reminders with rs (each valid, CheckReminder;
	// names unique); an empty rs deletes them. Fenced as Save is. Errors: ErrStaleEpoch,
	// ErrStoreUnavailable, ErrInvalidStateKey, ErrInvalidReminder.
	SaveReminders(ctx context.Context, key EntityKey, epoch uint64, rs []Reminder) error
	// LoadReminders returns the entity's reminders sorted by name (nil: none). A read
	// epoch in ctx (WithReadEpoch) is honoured as Load honours it. Errors:
	// ErrStaleEpoch, ErrStoreUnavailable, ErrInvalidStateKey.
	LoadReminders(ctx context.Context, key EntityKey) ([]Reminder, error)
	// DueReminders returns the shard's reminders whose Due is at or before before
	// (Unix milliseconds), earliest first (then by ID and name), at most limit of them
	// (limit > 0), and next: the earliest Due among the shard's reminders it did not
	// return (0: none). Errors: ErrStaleEpoch (read epoch), ErrStoreUnavailable,
	// ErrInvalidStateKey.
	DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) (due []EntityReminder, next int64, err error)
}

// ReminderAdvancer is a ReminderStore that moves delivered reminders on itself, those
// of many entities of a shard in one call, without a LoadReminders and a
// SaveReminders of each entity's whole set. A shard's home uses it when its
// ReminderStore implements it; otherwise it reads and rewrites each entity's set.
type ReminderAdvancer interface {
	ReminderStore
	// AdvanceReminders moves on each fired reminder of the shard (its ID, Name and Due,
	// the due time it fired at; the rest is not read) whose Due is still that one: an
	// interval's Due becomes its first due after now (Unix ms: due plus as many whole
	// intervals as it takes to pass now), a one-shot is deleted; one cancelled or set
	// anew meanwhile (another due, or none) is left as it is. Fenced at epoch as
	// SaveReminders is. It returns the earliest new due time among those it
	// moved (0: none). Errors: ErrStaleEpoch, ErrStoreUnavailable, ErrInvalidStateKey;
	// on an error nothing changed.
	AdvanceReminders(ctx context.Context, typ string, shard int, epoch uint64, fired []EntityReminder, now int64) (next int64, err error)
}

// PlatformIDPrefix (U+FFFE, which no entity ID holds) begins the IDs of the platform's
// own records in a state store: ReminderIDPrefix, ScheduledNamePrefix, DeltaIDPrefix and
// the outbox marks. They are not entities: listings leave them out.
const PlatformIDPrefix = "\ufffe"

// ReminderIDPrefix begins the IDs under which a store without ReminderStore keeps
// reminders (RemindersOf): U+FFFE, which no entity ID holds, then "reminders:", then the
// entity's ID.
const ReminderIDPrefix = "\ufffereminders:"

// RemindersOf returns the store's own ReminderStore (StateStoreAs), or one that keeps
// reminders through the store's StateStore methods.
func RemindersOf(s StateStore) ReminderStore {
	if rs, ok := StateStoreAs[ReminderStore](s); ok {
		return rs
	}
	return recordReminders{s}
}

// recordReminders keeps reminders in a StateStore's own records: an entity's reminders
// are the snapshot of ID ReminderIDPrefix+ID (CBOR), remembered in its shard while it
// has any. Its writes are read-modify-writes of the shard's home, which serialises them
// per shard (shardReminders.mu).
type recordReminders struct{ StateStore }

func (s recordReminders) Unwrap() StateStore { return s.StateStore }

// RecordReminders keeps reminders through s's StateStore methods as RemindersOf does for
// a store without ReminderStore (one record per entity with reminders, under
// ReminderIDPrefix), whether or not s implements ReminderStore: for a store that keeps
// those records and answers DueReminders itself from an index of their due times
// (package replstore), and whose SaveReminders and LoadReminders are these.
func RecordReminders(s StateStore) ReminderStore { return recordReminders{s} }

func reminderKey(key EntityKey) EntityKey {
	return EntityKey{Type: key.Type, Shard: key.Shard, ID: ReminderIDPrefix + key.ID}
}

// CheckReminderSet checks an entity's set of reminders as ReminderStore.SaveReminders
// takes it, for a store that implements it: its own reminders (at most
// MaxRemindersPerEntity) and its scheduled messages (IsScheduledName, at most
// MaxScheduledPerEntity), each valid, with unique names. Errors: ErrInvalidReminder,
// ErrTooManyReminders, ErrTooManyScheduled.
func CheckReminderSet(rs []Reminder) error { return checkReminders(rs) }

// checkReminders is CheckReminderSet.
func checkReminders(rs []Reminder) error {
	scheduled := 0
	for _, r := range rs {
		if IsScheduledName(r.Name) {
			scheduled++
		}
	}
	if own := len(rs) - scheduled; own > MaxRemindersPerEntity {
		return fmt.Errorf("%w: %d reminders (at most %d per entity)", ErrTooManyReminders, own, MaxRemindersPerEntity)
	}
	if scheduled > MaxScheduledPerEntity {
		return fmt.Errorf("%w: %d scheduled messages (at most %d per entity)", ErrTooManyScheduled, scheduled, MaxScheduledPerEntity)
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if err := checkReminder(r); err != nil {
			return err
		}
		if seen[r.Name] {
			return fmt.Errorf("%w: the name %q twice", ErrInvalidReminder, r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

func sortedReminders(rs []Reminder) []Reminder {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b Reminder) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s recordReminders) SaveReminders(ctx context.Context, key EntityKey, epoch uint64, rs []Reminder) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkReminders(rs); err != nil {
		return err
	}
	rk := reminderKey(key)
	if len(rs) == 0 {
		// Forgotten first: a shard's listing may name an entity without record, never
		// hold a record it does not name.
		if err := s.Remember(ctx, rk, epoch, false); err != nil {
			return err
		}
		return s.Save(ctx, rk, epoch, nil)
	}
	b, err := EncodeReminderRecord(rs)
	if err != nil {
		return err
	}
	if err := s.Save(ctx, rk, epoch, b); err != nil {
		return err
	}
	return s.Remember(ctx, rk, epoch, true)
}

func (s recordReminders) LoadReminders(ctx context.Context, key EntityKey) ([]Reminder, error) {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	b, err := s.Load(ctx, reminderKey(key))
	if errors.Is(err, ErrNoState) || err == nil && len(b) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rs, err := DecodeReminderRecord(b)
	if err != nil {
		return nil, fmt.Errorf("sharding: the reminders of %s/%s: %w", key.Type, key.ID, err)
	}
	return rs, nil
}

func (s recordReminders) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]EntityReminder, int64, error) {
	if err := CheckStateKey(typ, shard, "", false); err != nil {
		return nil, 0, err
	}
	ids, err := s.Remembered(ctx, typ, shard)
	if err != nil {
		return nil, 0, err
	}
	var all []EntityReminder
	for _, rid := range ids {
		id, ok := strings.CutPrefix(rid, ReminderIDPrefix)
		if !ok {
			continue
		}
		rs, err := s.LoadReminders(ctx, EntityKey{Type: typ, Shard: shard, ID: id})
		if err != nil {
			return nil, 0, err
		}
		for _, r := range rs {
			all = append(all, EntityReminder{ID: id, Reminder: r})
		}
	}
	due, next := splitDue(all, before, limit)
	return due, next, nil
}

// splitDue sorts reminders by due time (then ID and name) and returns those due at or
// before before, at most limit, and the earliest due of the rest (0: none).
func splitDue(all []EntityReminder, before int64, limit int) ([]EntityReminder, int64) {
	slices.SortFunc(all, func(a, b EntityReminder) int {
		return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.ID, b.ID), strings.Compare(a.Name, b.Name))
	})
	n := 0
	for n < len(all) && all[n].Due <= before && (limit <= 0 || n < limit) {
		n++
	}
	var next int64
	if n < len(all) {
		next = all[n].Due
	}
	if n == 0 {
		return nil, next
	}
	return all[:n:n], next
}

// IsReminderID reports whether a remembered ID or snapshot ID is a reminder record's
// (ReminderIDPrefix), not an entity's.
func IsReminderID(id string) bool { return strings.HasPrefix(id, ReminderIDPrefix) }

var _ ReminderAdvancer = (*MemoryStateStore)(nil)

// memShardReminders is a shard's reminders in a MemoryStateStore: each entity's, sorted
// by name, and an index of them all ordered by due time (then ID and name), so that
// DueReminders costs what it returns, not the shard's size.
type memShardReminders struct {
	byID map[string][]Reminder
	due  *btree.BTreeG[dueEntry]
}

// dueEntry is one reminder in a due-time index: its due time, its entity, and the
// reminder itself, in the entity's slice of byID (replaced whole by each save).
type dueEntry struct {
	due int64
	id  string
	r   *Reminder
}

// lessDue orders a due-time index: by due time, then ID, then name. The strings are
// compared only between entries of one due time (cmp.Or would compare them always, as
// its arguments are all evaluated: most of a firing's index update).
func lessDue(a, b dueEntry) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if a.id != b.id {
		return a.id < b.id
	}
	return a.r.Name < b.r.Name
}

// SaveReminders implements ReminderStore.
func (m *MemoryStateStore) SaveReminders(ctx context.Context, key EntityKey, epoch uint64, rs []Reminder) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkReminders(rs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fence(shardKey{key.Type, key.Shard}, epoch); err != nil {
		return err
	}
	sk := shardKey{key.Type, key.Shard}
	if m.reminders == nil {
		m.reminders = map[shardKey]*memShardReminders{}
	}
	sr := m.reminders[sk]
	if sr == nil {
		if len(rs) == 0 {
			return nil
		}
		sr = &memShardReminders{byID: map[string][]Reminder{}, due: btree.NewG(32, lessDue)}
		m.reminders[sk] = sr
	}
	old := sr.byID[key.ID]
	cp := sortedReminders(rs)
	if len(cp) > 0 && slices.EqualFunc(old, cp, func(a, b Reminder) bool { return a.Name == b.Name }) {
		// The same names (a firing's advance, a set that replaces one): the entries
		// stay where they point, and only the reminders whose due changed move in
		// the index.
		for i := range old {
			moved := old[i].Due != cp[i].Due
			if moved {
				sr.due.Delete(dueEntry{old[i].Due, key.ID, &old[i]})
			}
			old[i] = cp[i]
			old[i].Payload = slices.Clone(cp[i].Payload)
			if moved {
				sr.due.ReplaceOrInsert(dueEntry{old[i].Due, key.ID, &old[i]})
			}
		}
		return nil
	}
	for i := range old {
		sr.due.Delete(dueEntry{old[i].Due, key.ID, &old[i]})
	}
	if len(rs) == 0 {
		delete(sr.byID, key.ID)
		if len(sr.byID) == 0 {
			delete(m.reminders, sk)
		}
		return nil
	}
	for i := range cp {
		cp[i].Payload = slices.Clone(cp[i].Payload)
		sr.due.ReplaceOrInsert(dueEntry{cp[i].Due, key.ID, &cp[i]})
	}
	sr.byID[key.ID] = cp
	return nil
}

// LoadReminders implements ReminderStore.
func (m *MemoryStateStore) LoadReminders(ctx context.Context, key EntityKey) ([]Reminder, error) {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch, ok := ReadEpoch(ctx); ok {
		if cur := m.epochs[shardKey{key.Type, key.Shard}]; cur > epoch {
			return nil, staleReadError(key, epoch, cur)
		}
	}
	sr := m.reminders[shardKey{key.Type, key.Shard}]
	if sr == nil || len(sr.byID[key.ID]) == 0 {
		return nil, nil
	}
	out := slices.Clone(sr.byID[key.ID])
	for i := range out {
		out[i].Payload = slices.Clone(out[i].Payload)
	}
	return out, nil
}

// DueReminders implements ReminderStore: a walk of the shard's due-time index from its
// earliest, as long as what it returns (and one more, for next).
func (m *MemoryStateStore) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]EntityReminder, int64, error) {
	if err := CheckStateKey(typ, shard, "", false); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch, ok := ReadEpoch(ctx); ok {
		if cur := m.epochs[shardKey{typ, shard}]; cur > epoch {
			return nil, 0, staleReadError(EntityKey{Type: typ, Shard: shard}, epoch, cur)
		}
	}
	sr := m.reminders[shardKey{typ, shard}]
	if sr == nil {
		return nil, 0, nil
	}
	var due []EntityReminder
	var next int64
	sr.due.Ascend(func(e dueEntry) bool {
		if e.due > before || (limit > 0 && len(due) >= limit) {
			next = e.due
			return false
		}
		r := *e.r
		r.Payload = slices.Clone(r.Payload)
		due = append(due, EntityReminder{ID: e.id, Reminder: r})
		return true
	})
	return due, next, nil
}

// AdvanceReminders implements ReminderAdvancer: under the store's lock, each fired
// interval reminder's due time changes in place and moves in the shard's index; a fired
// one-shot's entity has its set rewritten without it.
func (m *MemoryStateStore) AdvanceReminders(ctx context.Context, typ string, shard int, epoch uint64, fired []EntityReminder, now int64) (int64, error) {
	if err := CheckStateKey(typ, shard, "", false); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sk := shardKey{typ, shard}
	if err := m.fence(sk, epoch); err != nil {
		return 0, err
	}
	sr := m.reminders[sk]
	if sr == nil {
		return 0, nil
	}
	var next int64
	for _, f := range fired {
		rs := sr.byID[f.ID]
		i, ok := slices.BinarySearchFunc(rs, f.Name, func(r Reminder, name string) int { return strings.Compare(r.Name, name) })
		if !ok || rs[i].Due != f.Due {
			continue // cancelled or set anew meanwhile
		}
		if rs[i].Interval > 0 {
			sr.due.Delete(dueEntry{rs[i].Due, f.ID, &rs[i]})
			rs[i].Due = nextDue(f.Due, rs[i].Interval, now)
			sr.due.ReplaceOrInsert(dueEntry{rs[i].Due, f.ID, &rs[i]})
			if next == 0 || rs[i].Due < next {
				next = rs[i].Due
			}
			continue
		}
		// A one-shot goes: the index's entries point into the entity's slice, so the
		// entity's entries are made anew over a new slice without it.
		for k := range rs {
			sr.due.Delete(dueEntry{rs[k].Due, f.ID, &rs[k]})
		}
		if len(rs) == 1 {
			delete(sr.byID, f.ID)
			if len(sr.byID) == 0 {
				delete(m.reminders, sk)
				sr = nil
			}
		} else {
			left := make([]Reminder, 0, len(rs)-1)
			left = append(append(left, rs[:i]...), rs[i+1:]...)
			for k := range left {
				sr.due.ReplaceOrInsert(dueEntry{left[k].Due, f.ID, &left[k]})
			}
			sr.byID[f.ID] = left
		}
		if sr == nil {
			break // the shard has no reminders left: none of the rest is there
		}
	}
	return next, nil
}
