package sharding

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Optional abilities of a StateStore, which sharding uses when the store has them.
// A decorator around a store (metrics, tracing) passes them on by implementing them
// too, or by an Unwrap() StateStore method that returns the store it wraps.

// StateSave is one entity's snapshot in a batch.
type StateSave struct {
	ID    string
	State []byte
}

// BatchStateStore is a StateStore that saves the snapshots of many entities of one
// shard in one request (one round trip to a database). A handoff saves its shard's
// entities this way when the store has it (stopForHandOff).
type BatchStateStore interface {
	StateStore
	// SaveBatch stores each snapshot as Save would, under one epoch, fenced once: a
	// stale epoch refuses the whole batch (ErrStaleEpoch) and nothing of it is written.
	// Errors: ErrStaleEpoch, ErrStoreUnavailable, ErrStateTooLarge,
	// ErrInvalidStateKey.
	SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []StateSave) error
}

// ShardFencer is a StateStore that can raise a shard's fence without writing a
// record. A region fences a shard once per allocation epoch, before the first read of
// its state there (an activation's Load, a Remembered), so that a read sees every write
// a former owner had acknowledged, and no later write of a former owner (an older
// epoch) is acknowledged: without it, a former owner that has not yet learnt of the
// move could still save after the new owner read the entity, and that acknowledged
// save would then be overwritten (docs/design.md, invariant 1). A store without it is
// fenced by the new owner's first write only.
type ShardFencer interface {
	StateStore
	// FenceShard raises the shard's epoch to epoch, as a Save at epoch would, writing
	// nothing else: once it returns, a Save, SaveBatch or Remember of the shard with an
	// older epoch is refused (ErrStaleEpoch), and every such write acknowledged before
	// is seen by a later read. Idempotent. Errors: ErrStaleEpoch (the shard's epoch is
	// newer: the caller's allocation is stale), ErrStoreUnavailable,
	// ErrInvalidStateKey.
	FenceShard(ctx context.Context, typ string, shard int, epoch uint64) error
}

// TypeStateDeleter is a StateStore that can delete everything it holds of one entity
// type: shardhost undeploy --delete-state.
type TypeStateDeleter interface {
	StateStore
	// DeleteType deletes every snapshot, remember mark and journal of the entity type typ, on
	// every replica the store has. The shards' epochs stay, so that fencing goes on
	// across a later deploy of the name. Call it once no member hosts the type: a write
	// of the type made meanwhile may survive. Errors: ErrStoreUnavailable (for the
	// replicated store: some members did not answer; what they hold is deleted when
	// they apply the deletion, and no copy of theirs comes back meanwhile),
	// ErrInvalidStateKey.
	DeleteType(ctx context.Context, typ string) error
}

// EntityStateDeleter is a StateStore that can delete one entity's durable state: a
// type's state TTL (TypeSettings) uses it to drop the state of entities idle too long.
type EntityStateDeleter interface {
	StateStore
	// DeleteEntity deletes the snapshot, the journal and the remember mark of key,
	// fenced as a Save at epoch is: with ErrStaleEpoch when the shard has a newer epoch,
	// and nothing deleted. Once it returns, Load gives ErrNoState, ReadJournal no
	// record, Remembered and a listing (StateLister) leave the entity out, and no write
	// acknowledged before it, nor any write of an older epoch after it, brings the
	// state back (the stores with one copy, in memory and PostgreSQL, have it from
	// their fence; a replicated store keeps a versioned tombstone until every replica
	// has it). A Save or an append at epoch or newer after it starts the entity anew.
	// The entity's reminders (ReminderStore) stay: they are its appointments, not its
	// state. Call it for an entity no member hosts. Errors: ErrStaleEpoch,
	// ErrStoreUnavailable, ErrInvalidStateKey.
	DeleteEntity(ctx context.Context, key EntityKey, epoch uint64) error
}

// ExternalStateStore is a StateStore whose data may outlive the cluster's own: a
// database kept while the members' data directories (and with them the shard
// coordinator's durable state) are new, or state imported into one. The coordinator
// reads from it, when it recovers, what it would otherwise know only from its own
// state: the newest epochs, so that it allocates above them (or every write of the new
// cluster would be refused as stale), and the shards with remembered entities, so
// that they restart by themselves.
type ExternalStateStore interface {
	StateStore
	// MaxEpochs returns the newest epoch of any shard of each type. Errors:
	// ErrStoreUnavailable.
	MaxEpochs(ctx context.Context) (map[string]uint64, error)
	// RememberedShards returns, per type, the shards that have remembered entities.
	// Errors: ErrStoreUnavailable.
	RememberedShards(ctx context.Context) (map[string][]int, error)
}

// StateStoreAs returns the store, or a store it wraps (through Unwrap() StateStore
// methods), that implements T.
func StateStoreAs[T any](s StateStore) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() StateStore })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}

// StoredShard is what a state store holds for one shard: its fencing epoch, its
// entities' snapshots (each with its version), its remembered entity IDs and its
// entities' journals; the unit that `shardhost state export` and `import` move between
// stores. Snapshots and Journals are sorted by ID, Remembered is sorted; forgotten
// entities are absent.
type StoredShard struct {
	Type       string           `cbor:"1,keyasint"`
	Shard      int              `cbor:"2,keyasint"`
	Epoch      uint64           `cbor:"3,keyasint,omitempty"`
	Snapshots  []StoredSnapshot `cbor:"4,keyasint,omitempty"`
	Remembered []string         `cbor:"5,keyasint,omitempty"`
	Journals   []StoredJournal  `cbor:"6,keyasint,omitempty"`
}

// StoredJournal is one entity's journal in a StoredShard: its truncation point
// (JournalStore.TruncateJournal; 0 for none) and its records in Seq order, each at or
// above it.
type StoredJournal struct {
	ID      string          `cbor:"1,keyasint"`
	Floor   uint64          `cbor:"2,keyasint,omitempty"`
	Records []JournalRecord `cbor:"3,keyasint,omitempty"`
}

// StoredSnapshot is one entity's snapshot in a StoredShard, with its version (the
// writer's epoch, and a sequence number that orders the writes of one epoch).
type StoredSnapshot struct {
	ID    string `cbor:"1,keyasint"`
	Epoch uint64 `cbor:"2,keyasint,omitempty"`
	Seq   uint64 `cbor:"3,keyasint,omitempty"`
	State []byte `cbor:"4,keyasint"`
}

// Validate reports a shard that no store could hold: a bad type, shard or ID, IDs out
// of order or repeated.
func (s *StoredShard) Validate() error {
	if err := CheckStateKey(s.Type, s.Shard, "", false); err != nil {
		return err
	}
	for i, sn := range s.Snapshots {
		if err := CheckStateKey(s.Type, s.Shard, sn.ID, true); err != nil {
			return err
		}
		if i > 0 && s.Snapshots[i-1].ID >= sn.ID {
			return fmt.Errorf("%w: snapshot IDs of %s/%d out of order at %q", ErrInvalidStateKey, s.Type, s.Shard, sn.ID)
		}
	}
	for i, id := range s.Remembered {
		if err := CheckStateKey(s.Type, s.Shard, id, true); err != nil {
			return err
		}
		if i > 0 && s.Remembered[i-1] >= id {
			return fmt.Errorf("%w: remembered IDs of %s/%d out of order at %q", ErrInvalidStateKey, s.Type, s.Shard, id)
		}
	}
	for i, j := range s.Journals {
		key := EntityKey{Type: s.Type, Shard: s.Shard, ID: j.ID}
		if err := CheckStateKey(s.Type, s.Shard, j.ID, true); err != nil {
			return err
		}
		if i > 0 && s.Journals[i-1].ID >= j.ID {
			return fmt.Errorf("%w: journal IDs of %s/%d out of order at %q", ErrInvalidStateKey, s.Type, s.Shard, j.ID)
		}
		if j.Floor == 0 && len(j.Records) == 0 {
			return fmt.Errorf("%w: journal of %s/%d/%s is empty, with no truncation point", ErrInvalidStateKey, s.Type, s.Shard, j.ID)
		}
		for k, r := range j.Records {
			if r.Seq < j.Floor || r.Seq == 0 || (k > 0 && r.Seq <= j.Records[k-1].Seq) {
				return fmt.Errorf("%w: journal of %s/%d/%s: record %d out of order or below its floor %d", ErrInvalidStateKey, s.Type, s.Shard, j.ID, r.Seq, j.Floor)
			}
			if err := VerifyJournalRecord(key, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// Empty reports whether the shard holds no snapshot, no remembered entity and no
// journal.
func (s *StoredShard) Empty() bool {
	return len(s.Snapshots) == 0 && len(s.Remembered) == 0 && len(s.Journals) == 0
}

// Sort puts Snapshots, Remembered and Journals in ID order, and each journal's records
// in Seq order.
func (s *StoredShard) Sort() {
	slices.SortFunc(s.Snapshots, func(a, b StoredSnapshot) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(s.Remembered)
	slices.SortFunc(s.Journals, func(a, b StoredJournal) int { return strings.Compare(a.ID, b.ID) })
	for _, j := range s.Journals {
		slices.SortFunc(j.Records, func(a, b JournalRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	}
}

// StateDigest sums up the content of stores: counts, bytes and a SHA-256 over every
// shard's type, number, snapshot IDs and bytes and remembered IDs, added in (type,
// shard) order. Versions and epochs are left out: two stores that hold the same state
// digest alike even where one was imported from the other at epoch 0.
type StateDigest struct {
	Shards int `cbor:"1,keyasint" json:"shards"`
	// Snapshots counts the entities' snapshot records, Deltas their delta records (IDs
	// that begin with DeltaIDPrefix: the host's delta checkpoints).
	Snapshots  int `cbor:"2,keyasint" json:"snapshots"`
	Deltas     int `cbor:"6,keyasint,omitempty" json:"deltas"`
	Remembered int `cbor:"3,keyasint" json:"remembered"`
	// JournalRecords counts the records of the entities' journals; Bytes counts theirs
	// too.
	JournalRecords int    `cbor:"7,keyasint,omitempty" json:"journal_records"`
	Bytes          int64  `cbor:"4,keyasint" json:"bytes"`
	SHA256         []byte `cbor:"5,keyasint" json:"-"`

	h    stateHash
	last *StoredShard
}

type stateHash struct{ sum [32]byte }

// Add adds a shard; shards must come in (type, shard) order (an error otherwise).
func (d *StateDigest) Add(s *StoredShard) error {
	if d.last != nil && (s.Type < d.last.Type || s.Type == d.last.Type && s.Shard <= d.last.Shard) {
		return fmt.Errorf("sharding: shards out of order: %s/%d after %s/%d", s.Type, s.Shard, d.last.Type, d.last.Shard)
	}
	d.last = &StoredShard{Type: s.Type, Shard: s.Shard}
	h := sha256.New()
	h.Write(d.h.sum[:])
	var buf []byte
	str := func(x string) {
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		buf = append(buf, x...)
	}
	str(s.Type)
	buf = binary.AppendUvarint(buf, uint64(s.Shard))
	buf = binary.AppendUvarint(buf, uint64(len(s.Snapshots)))
	for _, sn := range s.Snapshots {
		str(sn.ID)
		sum := sha256.Sum256(sn.State)
		buf = binary.AppendUvarint(buf, uint64(len(sn.State)))
		buf = append(buf, sum[:]...)
		d.Bytes += int64(len(sn.State))
	}
	buf = binary.AppendUvarint(buf, uint64(len(s.Remembered)))
	for _, id := range s.Remembered {
		str(id)
	}
	if len(s.Journals) > 0 {
		// Only then, so that a shard without journals digests as before journals.
		buf = binary.AppendUvarint(buf, uint64(len(s.Journals)))
		for _, j := range s.Journals {
			str(j.ID)
			buf = binary.AppendUvarint(buf, j.Floor)
			buf = binary.AppendUvarint(buf, uint64(len(j.Records)))
			for _, r := range j.Records {
				sum := sha256.Sum256(r.Data)
				buf = binary.AppendUvarint(buf, r.Seq)
				buf = append(buf, sum[:]...)
				d.Bytes += int64(len(r.Data))
			}
			d.JournalRecords += len(j.Records)
		}
	}
	h.Write(buf)
	copy(d.h.sum[:], h.Sum(nil))
	d.SHA256 = d.h.sum[:]
	d.Shards++
	for _, sn := range s.Snapshots {
		if strings.HasPrefix(sn.ID, DeltaIDPrefix) {
			d.Deltas++
		} else {
			d.Snapshots++
		}
	}
	d.Remembered += len(s.Remembered)
	return nil
}

// Equal reports whether two digests sum up the same content.
func (d *StateDigest) Equal(o *StateDigest) bool {
	return d.Shards == o.Shards && d.Snapshots == o.Snapshots && d.Deltas == o.Deltas && d.Remembered == o.Remembered &&
		d.JournalRecords == o.JournalRecords && d.Bytes == o.Bytes && string(d.sum()) == string(o.sum())
}

func (d *StateDigest) sum() []byte {
	if d.SHA256 == nil {
		return d.h.sum[:]
	}
	return d.SHA256
}

// String is "N shards, N snapshots (N bytes), N remembered entities, sha256 HEX", with
// "N snapshots and N deltas" when there are delta records and ", N journal records"
// after them when there are journals.
func (d *StateDigest) String() string {
	snapshots := fmt.Sprintf("%d snapshots", d.Snapshots)
	if d.Deltas > 0 {
		snapshots += fmt.Sprintf(" and %d deltas", d.Deltas)
	}
	if d.JournalRecords > 0 {
		snapshots += fmt.Sprintf(", %d journal records", d.JournalRecords)
	}
	return fmt.Sprintf("%d shards, %s (%d bytes), %d remembered entities, sha256 %x",
		d.Shards, snapshots, d.Bytes, d.Remembered, d.sum())
}

// DeltaIDPrefix begins the ID of an entity's delta record, which the host stores beside
// the entity's snapshot (its delta checkpoints, docs/design.md): U+FFFE, a
// noncharacter no entity ID holds, then "delta:".
const DeltaIDPrefix = "\ufffedelta:"
