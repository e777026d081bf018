// The replica file's index of reminders by due time, and the store's due-reminder read
// over it (sharding.ReminderStore).

package replstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// The due index: the bucket stateBucketDue holds, for each reminder record (the
// snapshot of a sharding.ReminderIDPrefix ID, sharding.RecordReminders) in the records
// bucket, one empty value per distinct due time of its reminders, keyed by the shard's
// prefix, the due time (8 bytes, big-endian: Unix ms) and the entity's ID (the
// record's ID without the prefix). It changes in the transaction that changes the
// record (reindexDue: a write, a repair's, an import's, a write-ahead log's replay; a
// handover's drop; a type's deletion), so that it always agrees with the records; a
// file without it has it built when it opens (buildDueIndex). A shard's due read walks
// it from the shard's earliest: its cost is the due reminders', not the shard's.

// dueKey is the due index's key of an entity's due time.
func dueKey(prefix []byte, due int64, id string) []byte {
	k := make([]byte, 0, len(prefix)+8+len(id))
	k = append(k, prefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(due))
	return append(k, id...)
}

// recordDues returns the distinct due times of the reminders in a records value (an
// encoded stateRecord: nil, a tombstone, or a record that does not decode have none).
func recordDues(v []byte) []int64 {
	_, _, data, ok := decodeStateValue(v)
	if !ok || len(data) == 0 {
		return nil
	}
	all, err := sharding.ReminderRecordDues(data)
	if err != nil {
		return nil
	}
	dues := all[:0]
	for _, due := range all {
		if due >= 0 {
			dues = append(dues, due)
		}
	}
	slices.Sort(dues)
	return slices.Compact(dues)
}

// reindexDue brings the due index of the record of kind and id under prefix from its
// value old to new (either nil: none), in the transaction of rb. Records other than
// reminder records are not indexed.
func reindexDue(rb *bolt.Bucket, prefix []byte, kind uint8, id string, old, new []byte) error {
	eid, ok := strings.CutPrefix(id, sharding.ReminderIDPrefix)
	if kind != stateKindSnapshot || !ok {
		return nil
	}
	db := rb.Tx().Bucket(stateBucketDue)
	if db == nil {
		return nil // an offline read-only file
	}
	before, after := recordDues(old), recordDues(new)
	for _, due := range before {
		if _, found := slices.BinarySearch(after, due); !found {
			if err := db.Delete(dueKey(prefix, due, eid)); err != nil {
				return err
			}
		}
	}
	for _, due := range after {
		if _, found := slices.BinarySearch(before, due); !found {
			if err := db.Put(dueKey(prefix, due, eid), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropDueShard deletes the due index of the shard prefix (a type's deletion).
func dropDueShard(tx *bolt.Tx, prefix []byte) error {
	db := tx.Bucket(stateBucketDue)
	if db == nil {
		return nil
	}
	var keys [][]byte
	c := db.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) >= len(prefix)+8; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := db.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// buildDueIndex makes the due index from the records, in tx: for a file written before
// the index was (openStateDisk creates its bucket empty).
func buildDueIndex(tx *bolt.Tx) error {
	rb := tx.Bucket(stateBucketRecords)
	c := rb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		n, w := binary.Uvarint(k)
		plen := w + int(n) + 8
		if w <= 0 || n == 0 || len(k) <= plen || k[plen] != stateKindSnapshot {
			continue
		}
		prefix, id := k[:plen], string(k[plen+1:])
		if !sharding.IsReminderID(id) {
			continue
		}
		if err := reindexDue(rb, prefix, stateKindSnapshot, id, nil, v); err != nil {
			return err
		}
	}
	return nil
}

// stateDueEntry is one entry of a due page: an entity with a reminder due at Due.
type stateDueEntry struct {
	Due int64  `cbor:"1,keyasint"`
	ID  string `cbor:"2,keyasint"`
}

// duePage reads the shard's due index from its earliest: the entries due at or before
// before, at most limit of them, and next, the due time of the first entry it did not
// return (0: none); and the shard's epoch here.
func (d *stateDisk) duePage(prefix []byte, before int64, limit int) (entries []stateDueEntry, next int64, epoch uint64, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		entries, next = nil, 0
		epoch, _ = stateEpochOf(eb, prefix)
		db := rb.Tx().Bucket(stateBucketDue)
		if db == nil {
			return nil
		}
		c := db.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) < len(prefix)+8 {
				continue
			}
			due := int64(binary.BigEndian.Uint64(k[len(prefix):]))
			if due > before || len(entries) >= limit {
				next = due
				return nil
			}
			entries = append(entries, stateDueEntry{Due: due, ID: string(k[len(prefix)+8:])})
		}
		return nil
	})
	return entries, next, epoch, err
}

// stateDueAnswer is one replica's due page.
type stateDueAnswer struct {
	rep     stateReplica
	entries []stateDueEntry
	next    int64
	epoch   uint64
	err     error
}

func (a stateDueAnswer) replica() stateReplica { return a.rep }

func (a stateDueAnswer) failure() error { return a.err }

// dueFrom reads a shard's due page from one replica: the local disk, or a peer.
func (s *Store) dueFrom(ctx context.Context, r stateReplica, typ string, shard int, before int64, limit int) stateDueAnswer {
	a := stateDueAnswer{rep: r}
	if r.local {
		a.entries, a.next, a.epoch, a.err = s.disk.duePage(stateShardPrefix(typ, shard), before, limit)
		return a
	}
	var reply stateRememberedReply
	if err := s.call(ctx, r, topicStateRemembered, &stateRememberedReq{Type: typ, Shard: shard, Due: true, Before: before, Limit: limit}, &reply); err != nil {
		a.err = err
		return a
	}
	if len(reply.Due) > limit {
		a.err = fmt.Errorf("%w: replica %s: a due page of %d entries (asked for %d)", sharding.ErrStoreUnavailable, r.addr, len(reply.Due), limit)
		return a
	}
	for _, e := range reply.Due {
		if e.Due > before || len(e.ID) > sharding.MaxStateIDLen {
			a.err = fmt.Errorf("%w: replica %s: bad due page (entry %q due %d, after %d)", sharding.ErrStoreUnavailable, r.addr, e.ID, e.Due, before)
			return a
		}
	}
	a.entries, a.next, a.epoch = reply.Due, reply.Next, reply.Shard
	return a
}

var _ sharding.ReminderStore = (*Store)(nil)

// SaveReminders implements sharding.ReminderStore: the entity's reminder record
// (sharding.RecordReminders), which the replicas' due indexes follow.
func (s *Store) SaveReminders(ctx context.Context, key sharding.EntityKey, epoch uint64, rs []sharding.Reminder) error {
	return sharding.RecordReminders(s).SaveReminders(ctx, key, epoch, rs)
}

// LoadReminders implements sharding.ReminderStore (sharding.RecordReminders).
func (s *Store) LoadReminders(ctx context.Context, key sharding.EntityKey) ([]sharding.Reminder, error) {
	return sharding.RecordReminders(s).LoadReminders(ctx, key)
}

// DueReminders implements sharding.ReminderStore from the replicas' due indexes: each
// reachable replica of the shard returns the entities with a reminder due by before (at
// most limit entries, from the earliest), a majority at least; the entities any of them
// names are read as Load reads (the newest version of a majority; dueLoaders at a
// time), and their due reminders returned, at most limit, earliest first (then by ID
// and name). A write a majority acknowledged is in the index of one replica of any
// majority, so no due reminder is missed; a replica's stale entry costs a read, and
// returns nothing once the record is read. next is the earliest due among what it did
// not return, or earlier (a replica's stale entry: the caller reads again for nothing).
// Its cost is the due reminders', not the shard's. Errors: sharding.ErrInvalidStateKey,
// sharding.ErrStaleEpoch (a read epoch in ctx older than a replica's), and
// sharding.ErrStoreUnavailable. A limit under 1 (none) or over 65,536 reads 65,536 at
// most.
func (s *Store) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]sharding.EntityReminder, int64, error) {
	if err := sharding.CheckStateKey(typ, shard, "", false); err != nil {
		return nil, 0, err
	}
	if limit < 1 || limit > stateMaxListLen {
		// No limit: as many as a replica's page holds; next says what is left.
		limit = stateMaxListLen
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(typ, shard)
	if err != nil {
		return nil, 0, err
	}
	results := make(chan stateDueAnswer, len(reps.reps))
	for _, r := range reps.reps {
		if !s.owner.Go(func() { results <- s.dueFrom(s.owner.Context(), r, typ, shard, before, limit) }) {
			results <- stateDueAnswer{rep: r, err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, 0, fmt.Errorf("replstore: due reminders of %s/%d: %w", typ, shard, err)
	}
	if epoch, ok := sharding.ReadEpoch(ctx); ok {
		for _, a := range answers {
			if a.err == nil && a.epoch > epoch {
				return nil, 0, fmt.Errorf("%w: read at epoch %d, and %s/%d is at %d", sharding.ErrStaleEpoch, epoch, typ, shard, a.epoch)
			}
		}
	}
	// A record that reached fewer replicas still counts (as Remembered's marks do).
	answers = append(answers, stragglers(reps.reps, answers, results, ctx.Done())...)
	recordReplicas(ctx, len(reps.reps), answeredOK(answers))
	var next int64
	seen := map[string]bool{}
	var ids []string
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		if a.next != 0 && (next == 0 || a.next < next) {
			next = a.next
		}
		for _, e := range a.entries {
			if !seen[e.ID] {
				seen[e.ID] = true
				ids = append(ids, e.ID)
			}
		}
	}
	slices.Sort(ids)
	// The records read are kept for the write backs of their firings at the read epoch
	// (AdvanceReminders), the shard's home's.
	epoch, fenced := sharding.ReadEpoch(ctx)
	var token uint64
	if fenced {
		token = s.fired.begin(typ, shard, epoch, ids)
	}
	loaded, err := s.loadRemindersOf(ctx, typ, shard, ids)
	if err != nil {
		return nil, 0, err
	}
	if fenced {
		s.fired.keep(typ, shard, token, ids, loaded)
	}
	var due []sharding.EntityReminder
	for i, id := range ids {
		for _, r := range loaded[i] {
			if r.Due <= before {
				due = append(due, sharding.EntityReminder{ID: id, Reminder: r})
			} else if next == 0 || r.Due < next {
				next = r.Due
			}
		}
	}
	slices.SortFunc(due, func(a, b sharding.EntityReminder) int {
		return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.ID, b.ID), strings.Compare(a.Name, b.Name))
	})
	if len(due) > limit {
		if next == 0 || due[limit].Due < next {
			next = due[limit].Due
		}
		due = due[:limit:limit]
	}
	return due, next, nil
}

// dueLoaders bounds the reads of a due read's entities under way at once. The reads
// wait on round trips and on the replicas' writers, not on CPU: in
// BenchmarkReminderSteadyStateReplicated (40k reminders over 4k entities, 3,000/s due,
// on a 2-core machine shared with other work) 16 of them fired 1,607/s and
// 64 fired 2,452-2,922/s; 256 fired no more, for more CPU per firing.
const dueLoaders = 64

// loadRemindersOf reads the reminders of the shard's entities ids (LoadReminders),
// dueLoaders at a time; the first error fails them all.
func (s *Store) loadRemindersOf(ctx context.Context, typ string, shard int, ids []string) ([][]sharding.Reminder, error) {
	out := make([][]sharding.Reminder, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, dueLoaders)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		if !s.owner.Go(func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = s.LoadReminders(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: id})
		}) {
			<-sem
			wg.Done()
			errs[i] = closedError()
			break
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
