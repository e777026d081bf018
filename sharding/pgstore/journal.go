package pgstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/sharding"
)

// Journals (sharding.JournalStore). Records live in shardhost_journal, one row per
// (type, shard, entity ID, seq) with the epoch that wrote it; each entity's truncation
// point in shardhost_journal_floors. Appends are fenced as saves are, in SQL
// (shardhost_append, which calls shardhost_fence), and group-committed: one goroutine
// of the store, the batcher, gathers the appends of concurrent callers (many entities)
// and writes each gathering in one statement, one transaction and one commit, so that
// the commit's WAL flush is shared. The fence is checked per shard inside that
// statement: an append of a shard that has moved on fails alone, and the rest of the
// batch commits.

var _ sharding.JournalStore = (*Store)(nil)

// maxAppendBytes caps the record bytes of one AppendJournal call: a batch travels in
// one message, and PostgreSQL refuses messages of 1 GiB or more.
const maxAppendBytes = 256 << 20

// errClosed: the store was closed before the append was written.
var errClosed = fmt.Errorf("%w: pgstore: the store is closed", sharding.ErrStoreUnavailable)

// appendReq is one AppendJournal call waiting in the batcher. done receives its
// outcome once (buffered: the batcher never waits for a caller that gave up).
type appendReq struct {
	ctx   context.Context
	key   sharding.EntityKey
	epoch uint64
	recs  []sharding.JournalRecord // the store's copy: the caller may reuse its buffers once it returns
	size  int                      // record bytes
	done  chan error
}

// AppendJournal implements sharding.JournalStore. The records are checked
// (sharding.CheckJournalAppend), handed to the batcher, and written with the appends
// of other callers under way in one statement (shardhost_append) and one transaction;
// AppendJournal returns once that transaction committed (durable as the server's
// synchronous_commit promises). A shard whose epoch is newer than epoch refuses this
// append alone. Errors: sharding.ErrStaleEpoch, ErrStoreUnavailable (the server is
// unreachable or failed, ctx ended, or the store was closed: the records may or may not
// have been committed), ErrStateTooLarge (a record over MaxStateSize, or an append over
// 256 MiB), ErrCorruptRecord, ErrInvalidStateKey (also a key PostgreSQL's text cannot
// hold, an epoch or seq over its bigint).
func (s *Store) AppendJournal(ctx context.Context, key sharding.EntityKey, epoch uint64, recs []sharding.JournalRecord) error {
	if err := sharding.CheckJournalAppend(key, recs); err != nil {
		return err
	}
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	if last := recs[len(recs)-1].Seq; last > math.MaxInt64 {
		return fmt.Errorf("%w: record %d over PostgreSQL's bigint", sharding.ErrInvalidStateKey, last)
	}
	req := &appendReq{ctx: ctx, key: key, epoch: epoch, recs: make([]sharding.JournalRecord, len(recs)), done: make(chan error, 1)}
	for i, r := range recs {
		if len(r.Data) > s.cfg.MaxStateSize {
			return fmt.Errorf("%w: record %d of %s/%d/%q: %d bytes, the cap is %d",
				sharding.ErrStateTooLarge, r.Seq, key.Type, key.Shard, key.ID, len(r.Data), s.cfg.MaxStateSize)
		}
		req.size += len(r.Data)
		req.recs[i] = sharding.JournalRecord{Seq: r.Seq, Data: slices.Clone(r.Data)}
	}
	if req.size > maxAppendBytes {
		return fmt.Errorf("%w: an append of %d bytes to %s/%d/%q, the cap is %d",
			sharding.ErrStateTooLarge, req.size, key.Type, key.Shard, key.ID, maxAppendBytes)
	}
	wrap := func(err error) error {
		return fmt.Errorf("pgstore: append records %d..%d to the journal of %s/%d/%q at epoch %d: %w",
			recs[0].Seq, recs[len(recs)-1].Seq, key.Type, key.Shard, key.ID, epoch, err)
	}
	select {
	case s.appends <- req:
	case <-ctx.Done():
		return wrap(s.fail("append (nothing was written)", ctx.Err()))
	case <-s.group.Done():
		return wrap(errClosed)
	}
	select {
	case err := <-req.done:
		if err != nil {
			return wrap(err)
		}
		return nil
	case <-ctx.Done():
		return wrap(s.fail("append (the records may or may not have been committed)", ctx.Err()))
	}
}

// runBatcher is the batcher: it gathers appends until JournalBatchSize of them or
// MaxBatchBytes of records are waiting, or JournalBatchWindow has passed since the
// first, and hands each gathering to a commit of its own (flushJournal) when one of
// the JournalCommits slots is free. While every slot is busy the gathering grows: the
// more appends arrive at once, the more share a commit. At Close it fails the appends
// it holds (nothing of them was written) and returns; commits under way end with the
// group's context.
func (s *Store) runBatcher() {
	var (
		pending []*appendReq
		size    int
		due     bool // the window has passed (or there is none)
		timer   = time.NewTimer(time.Hour)
		timerC  <-chan time.Time
	)
	timer.Stop()
	defer timer.Stop()
	add := func(r *appendReq) {
		pending = append(pending, r)
		size += r.size
		s.gathered.Add(1)
		if len(pending) == 1 {
			if s.cfg.JournalBatchWindow <= 0 {
				due = true
			} else {
				timer.Reset(s.cfg.JournalBatchWindow)
				timerC = timer.C
			}
		}
	}
	full := func() bool { return len(pending) >= s.cfg.JournalBatchSize || size >= s.cfg.MaxBatchBytes }
	for {
		in := s.appends
		if full() {
			in = nil
		}
		var slot chan<- struct{}
		if len(pending) > 0 && (due || in == nil) {
			slot = s.commitSlots
		}
		select {
		case r := <-in:
			add(r)
			// Take every append already waiting before a commit may start.
		drain:
			for !full() {
				select {
				case r := <-s.appends:
					add(r)
				default:
					break drain
				}
			}
		case <-timerC:
			due, timerC = true, nil
		case slot <- struct{}{}:
			batch := pending
			pending, size, due, timerC = nil, 0, false, nil
			timer.Stop()
			s.gathered.Add(-int64(len(batch)))
			s.commits.Add(1)
			s.group.GoHeld(func() {
				defer func() { <-s.commitSlots }()
				s.flushJournal(batch)
			})
		case <-s.group.Done():
			s.gathered.Add(-int64(len(pending)))
			for _, r := range pending {
				r.done <- errClosed
			}
			return
		}
	}
}

// journalRow is one record of a batch, from append req.
type journalRow struct {
	key   sharding.EntityKey
	epoch uint64
	rec   sharding.JournalRecord
	req   int
}

// flushJournal writes a batch of appends in one statement (shardhost_append) and one
// transaction, and answers each append: nil once committed, ErrStaleEpoch for one
// whose shard has a newer epoch, the database's error for all if the statement failed.
func (s *Store) flushJournal(batch []*appendReq) {
	ctx := s.group.Context()
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() == nil { // a caller that gave up has returned: nothing to write for it
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	// One row per (type, shard, ID, seq): the newest epoch's record, and among appends
	// of one epoch the last one's (the order in which they could have run one by one).
	var rows []journalRow
	for i, r := range live {
		for _, rec := range r.recs {
			rows = append(rows, journalRow{key: r.key, epoch: r.epoch, rec: rec, req: i})
		}
	}
	slices.SortStableFunc(rows, func(a, b journalRow) int {
		if c := strings.Compare(a.key.Type, b.key.Type); c != 0 {
			return c
		}
		if a.key.Shard != b.key.Shard {
			return a.key.Shard - b.key.Shard
		}
		if c := strings.Compare(a.key.ID, b.key.ID); c != 0 {
			return c
		}
		if a.rec.Seq != b.rec.Seq {
			if a.rec.Seq < b.rec.Seq {
				return -1
			}
			return 1
		}
		if a.epoch != b.epoch {
			if a.epoch < b.epoch {
				return -1
			}
			return 1
		}
		return a.req - b.req
	})
	kept := rows[:0]
	for i, r := range rows {
		if i+1 < len(rows) && rows[i+1].key == r.key && rows[i+1].rec.Seq == r.rec.Seq {
			continue // a later row of the same record supersedes it
		}
		kept = append(kept, r)
	}
	n := len(kept)
	types, ids := make([]string, n), make([]string, n)
	shards := make([]int32, n)
	epochs, seqs := make([]int64, n), make([]int64, n)
	records := make([][]byte, n)
	for i, r := range kept {
		types[i], shards[i], ids[i] = r.key.Type, int32(r.key.Shard), r.key.ID
		epochs[i], seqs[i], records[i] = int64(r.epoch), int64(r.rec.Seq), r.rec.Data
	}
	type shardRef struct {
		typ   string
		shard int32
	}
	cur := map[shardRef]int64{}
	err := retry(ctx, func() error {
		clear(cur)
		res, err := s.pool.Query(ctx, "SELECT fenced_type, fenced_shard, shard_epoch FROM shardhost_append($1, $2, $3, $4, $5, $6)",
			types, shards, epochs, ids, seqs, records)
		if err != nil {
			return err
		}
		var ref shardRef
		var epoch int64
		_, err = pgx.ForEachRow(res, []any{&ref.typ, &ref.shard, &epoch}, func() error {
			cur[ref] = epoch
			return nil
		})
		return err
	})
	if err != nil {
		err = s.fail(fmt.Sprintf("append to the journals (a commit of %d appends)", len(live)), err)
		for _, r := range live {
			r.done <- err
		}
		return
	}
	for _, r := range live {
		c, ok := cur[shardRef{r.key.Type, int32(r.key.Shard)}]
		switch {
		case !ok:
			r.done <- fmt.Errorf("%w: postgres %s: the append's shard is missing from the answer", sharding.ErrStoreUnavailable, s.target)
		case uint64(c) > r.epoch:
			r.done <- fmt.Errorf("%w: epoch %d is older than the shard's %d", sharding.ErrStaleEpoch, r.epoch, c)
		default:
			r.done <- nil
		}
	}
}

// ReadJournal implements sharding.JournalStore: one statement, which with a read epoch
// in ctx (sharding.WithReadEpoch) also reads the shard's epoch row. Every record is
// checked (sharding.VerifyJournalRecord) before it is returned. PostgreSQL is the one
// copy, so there is no replica to repair a corrupt record from: the read fails with
// ErrCorruptRecord, naming the record, until the row is restored from a backup or the
// journal is truncated past it. Records below the entity's truncation point are never
// returned. Errors: sharding.ErrStaleEpoch, ErrCorruptRecord, ErrStoreUnavailable,
// ErrInvalidStateKey.
func (s *Store) ReadJournal(ctx context.Context, key sharding.EntityKey, from uint64, limit int) ([]sharding.JournalRecord, error) {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	if from > math.MaxInt64 {
		from = math.MaxInt64 // seqs over bigint are never written: whatever is read at MaxInt64 is filtered below
	}
	var lim *int64 // NULL: no limit (0, or below as MemoryStateStore takes it)
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	readEpoch, checked := sharding.ReadEpoch(ctx)
	var out []sharding.JournalRecord
	var cur *int64
	const records = `SELECT j.seq, j.record FROM shardhost_journal j
	WHERE j.entity_type = $1 AND j.shard = $2 AND j.entity_id = $3
		AND j.seq >= greatest($4, coalesce((SELECT f.floor FROM shardhost_journal_floors f
			WHERE f.entity_type = $1 AND f.shard = $2 AND f.entity_id = $3), 1))
	ORDER BY j.seq LIMIT $5`
	err := retry(ctx, func() error {
		out, cur = nil, nil
		var rows pgx.Rows
		var err error
		if checked {
			// The epoch row and the records in one statement (one snapshot); a row for
			// the epoch even when there are no records.
			rows, err = s.pool.Query(ctx, `SELECT e.epoch, r.seq, r.record
FROM (SELECT (SELECT epoch FROM shardhost_shard_epochs WHERE entity_type = $1 AND shard = $2) AS epoch) AS e
LEFT JOIN LATERAL (`+records+`) AS r ON true ORDER BY r.seq`, key.Type, int32(key.Shard), key.ID, int64(from), lim)
		} else {
			rows, err = s.pool.Query(ctx, records, key.Type, int32(key.Shard), key.ID, int64(from), lim)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq *int64
			var data []byte
			if checked {
				err = rows.Scan(&cur, &seq, &data)
			} else {
				err = rows.Scan(&seq, &data)
			}
			if err != nil {
				return err
			}
			if seq != nil {
				out = append(out, sharding.JournalRecord{Seq: uint64(*seq), Data: data})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: read the journal of %s/%d/%q: %w", key.Type, key.Shard, key.ID, s.fail("read the journal", err))
	}
	if checked && cur != nil && uint64(*cur) > readEpoch {
		return nil, fmt.Errorf("pgstore: read the journal of %s/%d/%q: %w: read at epoch %d, and the shard is at %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, readEpoch, *cur)
	}
	kept := out[:0]
	for _, r := range out {
		if r.Seq < from {
			continue
		}
		if err := sharding.VerifyJournalRecord(key, r); err != nil {
			return nil, fmt.Errorf("pgstore: read the journal of %s/%d/%q: %w (PostgreSQL holds the one copy: restore the row of shardhost_journal from a backup, or truncate the journal past it)",
				key.Type, key.Shard, key.ID, err)
		}
		kept = append(kept, r)
	}
	return kept, nil
}

// TruncateJournal implements sharding.JournalStore: one statement
// (shardhost_truncate_journal), fenced as a save is, that raises the entity's floor to
// before (a lower one leaves it) and deletes its records below the floor. Errors:
// sharding.ErrStaleEpoch, ErrStoreUnavailable, ErrInvalidStateKey (also an epoch or
// before over PostgreSQL's bigint).
func (s *Store) TruncateJournal(ctx context.Context, key sharding.EntityKey, epoch uint64, before uint64) error {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	if before > math.MaxInt64 {
		return fmt.Errorf("%w: truncation point %d over PostgreSQL's bigint", sharding.ErrInvalidStateKey, before)
	}
	var cur int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, "SELECT shardhost_truncate_journal($1, $2, $3, $4, $5)",
			key.Type, int32(key.Shard), int64(epoch), key.ID, int64(before)).Scan(&cur)
	})
	if err != nil {
		return fmt.Errorf("pgstore: truncate the journal of %s/%d/%q before %d: %w", key.Type, key.Shard, key.ID, before, s.fail("truncate the journal", err))
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("pgstore: truncate the journal of %s/%d/%q: %w: epoch %d is older than the shard's %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}
