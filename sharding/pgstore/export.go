package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/sharding"
)

// Export calls fn with each shard that holds snapshots or remembered entities, in
// (type, shard) order (bytewise type order, as Go compares strings), from one
// repeatable-read snapshot of the database: a consistent copy even if something
// writes meanwhile (the cluster should be stopped all the same). fn owns the shard.
func (s *Store) Export(ctx context.Context, fn func(*sharding.StoredShard) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return s.fail("export", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `
SELECT t.entity_type, t.shard, coalesce(e.epoch, 0)
FROM (SELECT entity_type, shard FROM shardhost_snapshots
      UNION SELECT entity_type, shard FROM shardhost_remembered) AS t
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
		sh.Sort()
		if err := fn(sh); err != nil {
			return err
		}
	}
	return nil
}

// Importer writes shards into an empty database in one transaction: nothing is
// visible, and nothing stays, unless Commit succeeds. Snapshots and remembered IDs go
// in with COPY. Imported records are written at epoch 0 (sequence numbers kept): an
// import starts a new history of allocations, and any write of the cluster started on
// it supersedes them and passes the fence.
type Importer struct {
	s  *Store
	tx pgx.Tx
}

// Import starts an import. Errors: ErrNotEmpty (the database holds snapshots or
// remembered entities), sharding.ErrStoreUnavailable.
func (s *Store) Import(ctx context.Context) (*Importer, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, s.fail("import", err)
	}
	// Other writers wait until the import commits or rolls back.
	if _, err := tx.Exec(ctx, "LOCK TABLE shardhost_snapshots, shardhost_remembered, shardhost_shard_epochs IN EXCLUSIVE MODE"); err != nil {
		tx.Rollback(ctx)
		return nil, s.fail("import: lock the tables", err)
	}
	var snaps, remembered int64
	if err := tx.QueryRow(ctx, "SELECT (SELECT count(*) FROM shardhost_snapshots), (SELECT count(*) FROM shardhost_remembered)").Scan(&snaps, &remembered); err != nil {
		tx.Rollback(ctx)
		return nil, s.fail("import", err)
	}
	if snaps+remembered > 0 {
		tx.Rollback(ctx)
		return nil, fmt.Errorf("%w (%s: %d snapshots, %d remembered entities): import into an empty database", ErrNotEmpty, s.target, snaps, remembered)
	}
	return &Importer{s: s, tx: tx}, nil
}

// ImportShard adds a shard to the import.
func (im *Importer) ImportShard(ctx context.Context, sh *sharding.StoredShard) error {
	if err := sh.Validate(); err != nil {
		return err
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
