package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/sharding"
)

// Export calls fn with each shard that holds snapshots, remembered entities or
// journals, in (type, shard) order (bytewise type order, as Go compares strings), from
// one repeatable-read snapshot of the database: a consistent copy even if something
// writes meanwhile (the cluster should be stopped all the same). fn owns the shard.
// Each journal comes with its truncation point and its records at or above it, each
// checked (sharding.VerifyJournalRecord): a corrupt one fails the export with
// sharding.ErrCorruptRecord.
func (s *Store) Export(ctx context.Context, fn func(*sharding.StoredShard) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return s.fail("export", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `
SELECT t.entity_type, t.shard, coalesce(e.epoch, 0)
FROM (SELECT entity_type, shard FROM shardhost_snapshots
      UNION SELECT entity_type, shard FROM shardhost_remembered
      UNION SELECT entity_type, shard FROM shardhost_journal
      UNION SELECT entity_type, shard FROM shardhost_journal_floors
      UNION SELECT entity_type, shard FROM shardhost_reminders) AS t
LEFT JOIN shardhost_shard_epochs e USING (entity_type, shard)
ORDER BY t.entity_type COLLATE "C", t.shard`)
	if err != nil {
		return s.fail("export: list shards", err)
	}
	type ref struct {
		typ   string
		shard int32
		epoch int64
	}
	var refs []ref
	var r ref
	if _, err := pgx.ForEachRow(rows, []any{&r.typ, &r.shard, &r.epoch}, func() error {
		refs = append(refs, r)
		return nil
	}); err != nil {
		return s.fail("export: list shards", err)
	}
	for _, r := range refs {
		sh := &sharding.StoredShard{Type: r.typ, Shard: int(r.shard), Epoch: uint64(r.epoch)}
		rows, err := tx.Query(ctx, `SELECT entity_id, epoch, seq, state FROM shardhost_snapshots
WHERE entity_type = $1 AND shard = $2`, r.typ, r.shard)
		if err != nil {
			return s.fail("export: snapshots", err)
		}
		var sn sharding.StoredSnapshot
		var epoch, seq int64
		if _, err := pgx.ForEachRow(rows, []any{&sn.ID, &epoch, &seq, &sn.State}, func() error {
			sn.Epoch, sn.Seq = uint64(epoch), uint64(seq)
			if sn.State == nil {
				sn.State = []byte{}
			}
			sh.Snapshots = append(sh.Snapshots, sn)
			sn.State = nil // ForEachRow scans into the same variables: the next row gets its own bytes
			return nil
		}); err != nil {
			return s.fail("export: snapshots", err)
		}
		rows, err = tx.Query(ctx, "SELECT entity_id FROM shardhost_remembered WHERE entity_type = $1 AND shard = $2", r.typ, r.shard)
		if err != nil {
			return s.fail("export: remembered", err)
		}
		if sh.Remembered, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return s.fail("export: remembered", err)
		}
		if sh.Journals, err = s.exportJournals(ctx, tx, r.typ, r.shard); err != nil {
			return err
		}
		if err := s.exportReminders(ctx, tx, sh); err != nil {
			return err
		}
		sh.Sort()
		if err := fn(sh); err != nil {
			return err
		}
	}
	return nil
}

// exportReminders adds the reminders of a shard to sh as a store without its own
// reminders keeps them (sharding.RemindersOf): each entity's as the snapshot of
// sharding.ReminderIDPrefix and its ID (the reminders by name, CBOR), at the newest
// epoch of its rows, and that ID remembered. ImportShard takes them back into
// shardhost_reminders; any other store's import keeps them as they come.
func (s *Store) exportReminders(ctx context.Context, tx pgx.Tx, sh *sharding.StoredShard) error {
	rows, err := tx.Query(ctx, `SELECT entity_id, epoch, name, due, interval_ms, payload FROM shardhost_reminders
WHERE entity_type = $1 AND shard = $2 ORDER BY entity_id, name`, sh.Type, int32(sh.Shard))
	if err != nil {
		return s.fail("export: reminders", err)
	}
	var id, last string
	var epoch, maxEpoch int64
	var set []sharding.Reminder
	flush := func() error {
		if len(set) == 0 {
			return nil
		}
		b, err := cbor.Marshal(set)
		if err != nil {
			return err
		}
		rid := sharding.ReminderIDPrefix + last
		sh.Snapshots = append(sh.Snapshots, sharding.StoredSnapshot{ID: rid, Epoch: uint64(maxEpoch), Seq: 1, State: b})
		sh.Remembered = append(sh.Remembered, rid)
		set, maxEpoch = nil, 0
		return nil
	}
	targets, take := scanReminder()
	if _, err := pgx.ForEachRow(rows, append([]any{&id, &epoch}, targets...), func() error {
		r := take()
		if id != last {
			if err := flush(); err != nil {
				return err
			}
			last = id
		}
		set = append(set, r)
		maxEpoch = max(maxEpoch, epoch)
		return nil
	}); err != nil {
		return s.fail("export: reminders", err)
	}
	return flush()
}

// exportJournals reads the journals of a shard: each entity's floor and its records
// at or above it, checked.
func (s *Store) exportJournals(ctx context.Context, tx pgx.Tx, typ string, shard int32) ([]sharding.StoredJournal, error) {
	// Each entity's floor (a row without a record), then its records at or above it (a
	// record below it, left by an append that raced a truncation, is gone already).
	// Journals come out in the database's order of IDs; sh.Sort puts them in Go's.
	rows, err := tx.Query(ctx, `SELECT f.entity_id, f.floor, NULL::bigint AS seq, NULL::bytea AS record
FROM shardhost_journal_floors f WHERE f.entity_type = $1 AND f.shard = $2
UNION ALL
SELECT j.entity_id, coalesce(f.floor, 0), j.seq, j.record
FROM shardhost_journal j LEFT JOIN shardhost_journal_floors f USING (entity_type, shard, entity_id)
WHERE j.entity_type = $1 AND j.shard = $2 AND j.seq >= coalesce(f.floor, 1)
ORDER BY 1, 3 NULLS FIRST`, typ, shard)
	if err != nil {
		return nil, s.fail("export: journals", err)
	}
	var out []sharding.StoredJournal
	var id string
	var floor int64
	var seq *int64
	var data []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &floor, &seq, &data}, func() error {
		if len(out) == 0 || out[len(out)-1].ID != id {
			out = append(out, sharding.StoredJournal{ID: id, Floor: uint64(floor)})
		}
		if seq != nil {
			j := &out[len(out)-1]
			rec := sharding.JournalRecord{Seq: uint64(*seq), Data: data}
			if err := sharding.VerifyJournalRecord(sharding.EntityKey{Type: typ, Shard: int(shard), ID: id}, rec); err != nil {
				return fmt.Errorf("pgstore: export: %w (PostgreSQL holds the one copy: restore the row of shardhost_journal from a backup, or truncate the journal past it)", err)
			}
			j.Records = append(j.Records, rec)
		}
		seq, data = nil, nil // ForEachRow scans into the same variables: the next row gets its own bytes
		return nil
	}); err != nil {
		if errors.Is(err, sharding.ErrCorruptRecord) {
			return nil, err
		}
		return nil, s.fail("export: journals", err)
	}
	return out, nil
}

// Importer writes shards into an empty database in one transaction: nothing is
// visible, and nothing stays, unless Commit succeeds. Snapshots, remembered IDs,
// journal records and truncation points go in with COPY. Imported records are written
// at epoch 0 (sequence numbers kept): an import starts a new history of allocations,
// and any write of the cluster started on it supersedes them and passes the fence.
type Importer struct {
	s  *Store
	tx pgx.Tx
}

// Import starts an import. Errors: ErrNotEmpty (the database holds snapshots,
// remembered entities or journals), sharding.ErrStoreUnavailable.
func (s *Store) Import(ctx context.Context) (*Importer, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, s.fail("import", err)
	}
	// Other writers wait until the import commits or rolls back.
	if _, err := tx.Exec(ctx, `LOCK TABLE shardhost_snapshots, shardhost_remembered, shardhost_shard_epochs,
	shardhost_journal, shardhost_journal_floors, shardhost_reminders IN EXCLUSIVE MODE`); err != nil {
		tx.Rollback(ctx)
		return nil, s.fail("import: lock the tables", err)
	}
	var snaps, remembered, journals, reminders int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM shardhost_snapshots), (SELECT count(*) FROM shardhost_remembered),
	(SELECT count(*) FROM (SELECT entity_type, shard, entity_id FROM shardhost_journal
		UNION SELECT entity_type, shard, entity_id FROM shardhost_journal_floors) AS j),
	(SELECT count(*) FROM shardhost_reminders)`).Scan(&snaps, &remembered, &journals, &reminders); err != nil {
		tx.Rollback(ctx)
		return nil, s.fail("import", err)
	}
	if snaps+remembered+journals+reminders > 0 {
		tx.Rollback(ctx)
		return nil, fmt.Errorf("%w (%s: %d snapshots, %d remembered entities, %d journals, %d reminders): import into an empty database",
			ErrNotEmpty, s.target, snaps, remembered, journals, reminders)
	}
	return &Importer{s: s, tx: tx}, nil
}

// ImportShard adds a shard to the import. The reminders a store without its own keeps
// as records (sharding.IsReminderID: a snapshot of the entity's reminders, remembered)
// go into shardhost_reminders. Errors: those of sharding.StoredShard.Validate,
// sharding.ErrInvalidStateKey, sharding.ErrStateTooLarge, sharding.ErrInvalidReminder
// (a reminder record that does not decode or check), sharding.ErrStoreUnavailable.
func (im *Importer) ImportShard(ctx context.Context, sh *sharding.StoredShard) error {
	if err := sh.Validate(); err != nil {
		return err
	}
	var reminders [][]any
	if slices.ContainsFunc(sh.Snapshots, func(sn sharding.StoredSnapshot) bool { return sharding.IsReminderID(sn.ID) }) {
		rest := *sh
		rest.Snapshots, rest.Remembered = nil, nil
		for _, sn := range sh.Snapshots {
			if !sharding.IsReminderID(sn.ID) {
				rest.Snapshots = append(rest.Snapshots, sn)
				continue
			}
			id := strings.TrimPrefix(sn.ID, sharding.ReminderIDPrefix)
			if err := checkKey(sh.Type, sh.Shard, id, true); err != nil {
				return err
			}
			var rs []sharding.Reminder
			if err := cbor.Unmarshal(sn.State, &rs); err != nil {
				return fmt.Errorf("%w: the reminders of %s/%d/%q: %v", sharding.ErrInvalidReminder, sh.Type, sh.Shard, id, err)
			}
			if err := sharding.CheckReminderSet(rs); err != nil {
				return fmt.Errorf("the reminders of %s/%d/%q: %w", sh.Type, sh.Shard, id, err)
			}
			for _, r := range rs {
				p := r.Payload
				if p == nil {
					p = []byte{}
				}
				reminders = append(reminders, []any{sh.Type, int32(sh.Shard), id, r.Name, r.Due, r.Interval, p, int64(0)})
			}
		}
		for _, id := range sh.Remembered {
			if !sharding.IsReminderID(id) {
				rest.Remembered = append(rest.Remembered, id)
			}
		}
		sh = &rest
	}
	if len(reminders) > 0 {
		_, err := im.tx.CopyFrom(ctx, pgx.Identifier{"shardhost_reminders"},
			[]string{"entity_type", "shard", "entity_id", "name", "due", "interval_ms", "payload", "epoch"}, pgx.CopyFromRows(reminders))
		if err != nil {
			return im.s.fail(fmt.Sprintf("import: reminders of %s/%d", sh.Type, sh.Shard), err)
		}
	}
	for _, sn := range sh.Snapshots {
		if err := checkKey(sh.Type, sh.Shard, sn.ID, true); err != nil {
			return err
		}
		if len(sn.State) > im.s.cfg.MaxStateSize {
			return fmt.Errorf("%w: %s/%d/%q: %d bytes, the cap is %d", sharding.ErrStateTooLarge, sh.Type, sh.Shard, sn.ID, len(sn.State), im.s.cfg.MaxStateSize)
		}
	}
	for _, id := range sh.Remembered {
		if err := checkKey(sh.Type, sh.Shard, id, true); err != nil {
			return err
		}
	}
	var records int
	for _, j := range sh.Journals {
		if err := checkKey(sh.Type, sh.Shard, j.ID, true); err != nil {
			return err
		}
		if j.Floor > math.MaxInt64 {
			return fmt.Errorf("%w: journal of %s/%d/%q: truncation point %d over PostgreSQL's bigint", sharding.ErrInvalidStateKey, sh.Type, sh.Shard, j.ID, j.Floor)
		}
		for _, r := range j.Records {
			if r.Seq > math.MaxInt64 {
				return fmt.Errorf("%w: journal of %s/%d/%q: record %d over PostgreSQL's bigint", sharding.ErrInvalidStateKey, sh.Type, sh.Shard, j.ID, r.Seq)
			}
			if len(r.Data) > im.s.cfg.MaxStateSize {
				return fmt.Errorf("%w: record %d of %s/%d/%q: %d bytes, the cap is %d", sharding.ErrStateTooLarge, r.Seq, sh.Type, sh.Shard, j.ID, len(r.Data), im.s.cfg.MaxStateSize)
			}
		}
		records += len(j.Records)
	}
	if _, err := im.tx.Exec(ctx, `INSERT INTO shardhost_shard_epochs (entity_type, shard, epoch) VALUES ($1, $2, 0)
ON CONFLICT (entity_type, shard) DO NOTHING`, sh.Type, int32(sh.Shard)); err != nil {
		return im.s.fail("import: epochs", err)
	}
	if len(sh.Snapshots) > 0 {
		_, err := im.tx.CopyFrom(ctx, pgx.Identifier{"shardhost_snapshots"}, []string{"entity_type", "shard", "entity_id", "epoch", "seq", "state"},
			pgx.CopyFromSlice(len(sh.Snapshots), func(i int) ([]any, error) {
				sn := sh.Snapshots[i]
				st := sn.State
				if st == nil {
					st = []byte{}
				}
				return []any{sh.Type, int32(sh.Shard), sn.ID, int64(0), int64(max(min(sn.Seq, 1<<62), 1)), st}, nil
			}))
		if err != nil {
			return im.s.fail(fmt.Sprintf("import: snapshots of %s/%d", sh.Type, sh.Shard), err)
		}
	}
	if len(sh.Remembered) > 0 {
		_, err := im.tx.CopyFrom(ctx, pgx.Identifier{"shardhost_remembered"}, []string{"entity_type", "shard", "entity_id", "epoch"},
			pgx.CopyFromSlice(len(sh.Remembered), func(i int) ([]any, error) {
				return []any{sh.Type, int32(sh.Shard), sh.Remembered[i], int64(0)}, nil
			}))
		if err != nil {
			return im.s.fail(fmt.Sprintf("import: remembered entities of %s/%d", sh.Type, sh.Shard), err)
		}
	}
	if records > 0 {
		var rows [][]any
		for _, j := range sh.Journals {
			for _, r := range j.Records {
				rows = append(rows, []any{sh.Type, int32(sh.Shard), j.ID, int64(r.Seq), int64(0), r.Data})
			}
		}
		_, err := im.tx.CopyFrom(ctx, pgx.Identifier{"shardhost_journal"}, []string{"entity_type", "shard", "entity_id", "seq", "epoch", "record"},
			pgx.CopyFromRows(rows))
		if err != nil {
			return im.s.fail(fmt.Sprintf("import: journals of %s/%d", sh.Type, sh.Shard), err)
		}
	}
	var floors [][]any
	for _, j := range sh.Journals {
		if j.Floor > 0 {
			floors = append(floors, []any{sh.Type, int32(sh.Shard), j.ID, int64(j.Floor)})
		}
	}
	if len(floors) > 0 {
		_, err := im.tx.CopyFrom(ctx, pgx.Identifier{"shardhost_journal_floors"}, []string{"entity_type", "shard", "entity_id", "floor"},
			pgx.CopyFromRows(floors))
		if err != nil {
			return im.s.fail(fmt.Sprintf("import: journal truncation points of %s/%d", sh.Type, sh.Shard), err)
		}
	}
	return nil
}

// Commit makes the import durable and visible.
func (im *Importer) Commit(ctx context.Context) error {
	if err := im.tx.Commit(ctx); err != nil {
		return im.s.fail("import: commit", err)
	}
	return nil
}

// Rollback abandons the import. Harmless after Commit.
func (im *Importer) Rollback(ctx context.Context) { im.tx.Rollback(ctx) }
