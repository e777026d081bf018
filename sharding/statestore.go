package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Errors of entity state stores.
var (
	// ErrStaleEpoch: a write carried an allocation epoch older than one the store has
	// seen for the shard; the writer no longer owns the shard (fencing).
	ErrStaleEpoch = errors.New("sharding: stale allocation epoch: the shard has moved")
	// ErrNoState: the store has no state for the entity.
	ErrNoState = errors.New("sharding: no stored state")
	// ErrStoreUnavailable: not enough replicas of the shard's state answered.
	ErrStoreUnavailable = errors.New("sharding: entity state store unavailable")
	// ErrStateTooLarge: a snapshot is over the store's MaxStateSize.
	ErrStateTooLarge = errors.New("sharding: entity state too large")
	// ErrInvalidStateKey: a key the store cannot hold: an empty type or ID, a negative
	// shard, or a type or ID over its length cap (MaxStateTypeLen, MaxStateIDLen).
	ErrInvalidStateKey = errors.New("sharding: invalid entity state key")
)

// Limits of a state key's parts, in bytes (bbolt keys are at most 32 KiB): CheckStateKey
// refuses longer ones.
const (
	MaxStateTypeLen = 1 << 10
	MaxStateIDLen   = 16 << 10
)

// CheckStateKey reports, with an error wrapping ErrInvalidStateKey, a key a store
// cannot hold: an empty type, a negative shard, an empty ID where needID (a key of an
// entity rather than of a shard), or a type or ID over MaxStateTypeLen or
// MaxStateIDLen.
func CheckStateKey(typ string, shard int, id string, needID bool) error {
	switch {
	case typ == "":
		return fmt.Errorf("%w: empty entity type", ErrInvalidStateKey)
	case len(typ) > MaxStateTypeLen:
		return fmt.Errorf("%w: entity type of %d bytes (the cap is %d)", ErrInvalidStateKey, len(typ), MaxStateTypeLen)
	case shard < 0:
		return fmt.Errorf("%w: negative shard %d", ErrInvalidStateKey, shard)
	case needID && id == "":
		return fmt.Errorf("%w: empty entity ID", ErrInvalidStateKey)
	case len(id) > MaxStateIDLen:
		return fmt.Errorf("%w: entity ID of %d bytes (the cap is %d)", ErrInvalidStateKey, len(id), MaxStateIDLen)
	}
	return nil
}

// EntityKey names an entity in a state store.
type EntityKey struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	ID    string `cbor:"3,keyasint"`
}

// StateStore keeps entity state: each entity's latest snapshot, and, for types that
// remember entities, the IDs of each shard's entities (docs/design.md: the entity state
// store). Every write carries the writer's allocation epoch for the shard; a store
// refuses, with ErrStaleEpoch, a write whose epoch is older than the newest it has seen
// for the shard, so a host whose allocation is stale cannot overwrite the state of the
// shard's new home; a store that is a ShardFencer also takes the epoch alone, which
// the new home writes before it first reads the shard. Implementations are safe for
// concurrent use.
type StateStore interface {
	// Save stores state as the entity's snapshot. It returns once the write is durable
	// as the implementation promises (for the replicated store: on a majority of the
	// shard's replicas). Errors: ErrStaleEpoch, ErrStoreUnavailable.
	Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error
	// Load returns the entity's latest snapshot, or ErrNoState. When ctx carries the
	// reader's allocation epoch for the shard (WithReadEpoch: an activation's load), a
	// store that keeps the shards' epochs refuses with ErrStaleEpoch if the shard has a
	// newer one, as it would refuse a write at that epoch: the reader's copy of the
	// shard is stale.
	Load(ctx context.Context, key EntityKey) ([]byte, error)
	// Remember records (remember) or forgets (!remember) the entity among its shard's
	// remembered entities. Errors: ErrStaleEpoch, ErrStoreUnavailable.
	Remember(ctx context.Context, key EntityKey, epoch uint64, remember bool) error
	// Remembered returns the IDs remembered for a shard, sorted.
	Remembered(ctx context.Context, typ string, shard int) ([]string, error)
}

// MemoryStateStore is the in-memory StateStore for tests: one store shared by the
// members of a test cluster plays a replicated store that never loses a write.
type MemoryStateStore struct {
	mu         sync.Mutex
	state      map[EntityKey][]byte
	savedAt    map[EntityKey]time.Time
	remembered map[shardKey]map[string]bool
	epochs     map[shardKey]uint64
	journals   map[EntityKey]*memJournal
	reminders  map[shardKey]*memShardReminders
	saves      int
	appends    int
	// now dates savedAt (nil: time.Now); tests give sharding's simulated clock.
	now func() time.Time
}

// clock returns the time savedAt records.
func (m *MemoryStateStore) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

// memJournal is an entity's journal in a MemoryStateStore: its records by Seq, and its
// truncation point.
type memJournal struct {
	records map[uint64][]byte
	floor   uint64 // records below it are gone
}

type shardKey struct {
	typ   string
	shard int
}

var _ StateStore = (*MemoryStateStore)(nil)

var _ TypeStateDeleter = (*MemoryStateStore)(nil)

// DeleteType implements TypeStateDeleter.
func (m *MemoryStateStore) DeleteType(ctx context.Context, typ string) error {
	if err := CheckStateKey(typ, 0, "", false); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.state {
		if k.Type == typ {
			delete(m.state, k)
			delete(m.savedAt, k)
		}
	}
	for k := range m.remembered {
		if k.typ == typ {
			delete(m.remembered, k)
		}
	}
	for k := range m.journals {
		if k.Type == typ {
			delete(m.journals, k)
			delete(m.savedAt, k)
		}
	}
	for k := range m.reminders {
		if k.typ == typ {
			delete(m.reminders, k)
		}
	}
	return nil
}

var _ EntityStateDeleter = (*MemoryStateStore)(nil)

// DeleteEntity implements EntityStateDeleter: the store holds one copy, so its fence
// is the tombstone.
func (m *MemoryStateStore) DeleteEntity(ctx context.Context, key EntityKey, epoch uint64) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := shardKey{key.Type, key.Shard}
	if err := m.fence(k, epoch); err != nil {
		return err
	}
	delete(m.state, key)
	delete(m.savedAt, key)
	delete(m.journals, key)
	delete(m.remembered[k], key.ID)
	return nil
}

// readEpochKey is the context key of WithReadEpoch.
type readEpochKey struct{}

// WithReadEpoch returns ctx carrying a reader's allocation epoch for the shard it
// loads from: StateStore.Load then refuses, with ErrStaleEpoch, to read a shard whose
// store has seen a newer epoch (a fence or a write of a newer owner). A context passes
// through store decorators unchanged, which an extra Load method would not.
// An activation loads so: a member's copy of a shard that was allocated elsewhere since
// (its region still taking it for its own, its fence at the old epoch remembered) must
// not start the entity beside the shard's owner (fault seed 82305, faults/doc.go
// bug 20).
func WithReadEpoch(ctx context.Context, epoch uint64) context.Context {
	return context.WithValue(ctx, readEpochKey{}, epoch)
}

// ReadEpoch returns the reader's allocation epoch WithReadEpoch put in ctx, and whether
// there is one.
func ReadEpoch(ctx context.Context) (uint64, bool) {
	e, ok := ctx.Value(readEpochKey{}).(uint64)
	return e, ok
}

// staleReadError is the ErrStaleEpoch of a load at epoch from a shard at cur.
func staleReadError(key EntityKey, epoch, cur uint64) error {
	return fmt.Errorf("%w: read at epoch %d, and %s/%d is at %d", ErrStaleEpoch, epoch, key.Type, key.Shard, cur)
}

// NewMemoryStateStore returns an empty store.
func NewMemoryStateStore() *MemoryStateStore {
	return &MemoryStateStore{state: map[EntityKey][]byte{}, savedAt: map[EntityKey]time.Time{}, remembered: map[shardKey]map[string]bool{},
		epochs: map[shardKey]uint64{}, journals: map[EntityKey]*memJournal{}}
}

func (m *MemoryStateStore) fence(k shardKey, epoch uint64) error {
	if epoch < m.epochs[k] {
		return ErrStaleEpoch
	}
	m.epochs[k] = epoch
	return nil
}

// Save implements StateStore.
func (m *MemoryStateStore) Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fence(shardKey{key.Type, key.Shard}, epoch); err != nil {
		return err
	}
	m.state[key] = append([]byte(nil), state...)
	m.savedAt[key] = m.clock()
	m.saves++
	return nil
}

var _ ShardFencer = (*MemoryStateStore)(nil)

// FenceShard implements ShardFencer.
func (m *MemoryStateStore) FenceShard(ctx context.Context, typ string, shard int, epoch uint64) error {
	if err := CheckStateKey(typ, shard, "", false); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fence(shardKey{typ, shard}, epoch)
}

// Load implements StateStore.
func (m *MemoryStateStore) Load(ctx context.Context, key EntityKey) ([]byte, error) {
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
	s, ok := m.state[key]
	if !ok {
		return nil, ErrNoState
	}
	return append([]byte{}, s...), nil
}

// Remember implements StateStore.
func (m *MemoryStateStore) Remember(ctx context.Context, key EntityKey, epoch uint64, remember bool) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := shardKey{key.Type, key.Shard}
	if err := m.fence(k, epoch); err != nil {
		return err
	}
	if m.remembered[k] == nil {
		m.remembered[k] = map[string]bool{}
	}
	if remember {
		m.remembered[k][key.ID] = true
	} else {
		delete(m.remembered[k], key.ID)
	}
	return nil
}

// Remembered implements StateStore.
func (m *MemoryStateStore) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	if err := CheckStateKey(typ, shard, "", false); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []string{}
	for id := range m.remembered[shardKey{typ, shard}] {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

// Saves returns how many snapshots were saved, for tests.
func (m *MemoryStateStore) Saves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}

var _ JournalStore = (*MemoryStateStore)(nil)

// AppendJournal implements JournalStore.
func (m *MemoryStateStore) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	if err := CheckJournalAppend(key, recs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fence(shardKey{key.Type, key.Shard}, epoch); err != nil {
		return err
	}
	j := m.journals[key]
	if j == nil {
		j = &memJournal{records: map[uint64][]byte{}}
		m.journals[key] = j
	}
	for _, r := range recs {
		if r.Seq >= j.floor {
			j.records[r.Seq] = append([]byte(nil), r.Data...)
		}
	}
	if len(recs) > 0 {
		m.savedAt[key] = m.clock() // its last write (StoredEntity.SavedAt)
	}
	m.appends++
	return nil
}

// ReadJournal implements JournalStore.
func (m *MemoryStateStore) ReadJournal(ctx context.Context, key EntityKey, from uint64, limit int) ([]JournalRecord, error) {
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
	j := m.journals[key]
	if j == nil {
		return nil, nil
	}
	seqs := make([]uint64, 0, len(j.records))
	for s := range j.records {
		if s >= from {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	if limit > 0 && len(seqs) > limit {
		seqs = seqs[:limit]
	}
	out := make([]JournalRecord, len(seqs))
	for k, s := range seqs {
		out[k] = JournalRecord{Seq: s, Data: append([]byte(nil), j.records[s]...)}
	}
	return out, nil
}

// TruncateJournal implements JournalStore.
func (m *MemoryStateStore) TruncateJournal(ctx context.Context, key EntityKey, epoch uint64, before uint64) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fence(shardKey{key.Type, key.Shard}, epoch); err != nil {
		return err
	}
	j := m.journals[key]
	if j == nil {
		if before <= 1 {
			return nil // nothing below 1
		}
		j = &memJournal{records: map[uint64][]byte{}}
		m.journals[key] = j
	}
	if before <= j.floor {
		return nil
	}
	j.floor = before
	for s := range j.records {
		if s < before {
			delete(j.records, s)
		}
	}
	return nil
}

// JournalAppends returns how many appends the store took, for tests.
func (m *MemoryStateStore) JournalAppends() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appends
}
