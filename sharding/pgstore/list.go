package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/sharding"
)

var _ sharding.StateLister = (*Store)(nil)

// ListStates implements sharding.StateLister from the tables' primary keys: the
// entities with a snapshot or journal records, in byte order of type (COLLATE "C"),
// shard and ID, without reading a state (octet_length only). Errors:
// sharding.ErrInvalidStateKey (a limit under 1, a key PostgreSQL's text cannot hold),
// sharding.ErrStoreUnavailable.
func (s *Store) ListStates(ctx context.Context, q sharding.StateListing) ([]sharding.StoredEntity, bool, error) {
	if q.Limit < 1 {
		return nil, false, fmt.Errorf("%w: listing limit %d", sharding.ErrInvalidStateKey, q.Limit)
	}
	if q.Type != "" {
		if err := checkKey(q.Type, 0, q.Prefix, false); err != nil {
			return nil, false, err
		}
	}
	afterType, afterShard, afterID, hasAfter := "", int32(0), "", q.After != nil
	if hasAfter {
		if err := checkKey(q.After.Type, q.After.Shard, q.After.ID, false); err != nil {
			return nil, false, err
		}
		afterType, afterShard, afterID = q.After.Type, int32(q.After.Shard), q.After.ID
	}
	// One condition for both tables: $1 the type ("" every one), $2 the prefix, $3 the
	// prefix of the platform's own records (sharding.PlatformIDPrefix), $4-$7 the key to start after.
	const where = `($1 = '' OR entity_type = $1) AND starts_with(entity_id, $2) AND NOT starts_with(entity_id, $3)
  AND (NOT $4 OR (entity_type COLLATE "C", shard, entity_id COLLATE "C") > ($5 COLLATE "C", $6, $7 COLLATE "C"))`
	var out []sharding.StoredEntity
	err := retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `
SELECT entity_type, shard, entity_id, max(bytes), max(saved_at) FROM (
  SELECT entity_type, shard, entity_id, octet_length(state)::bigint AS bytes, saved_at FROM shardhost_snapshots WHERE `+where+`
  UNION ALL
  SELECT DISTINCT entity_type, shard, entity_id, 0::bigint, NULL::timestamptz FROM shardhost_journal WHERE `+where+`
) AS e
GROUP BY entity_type, shard, entity_id
ORDER BY entity_type COLLATE "C", shard, entity_id COLLATE "C"
LIMIT $8`, q.Type, q.Prefix, sharding.PlatformIDPrefix, hasAfter, afterType, afterShard, afterID, q.Limit+1)
		if err != nil {
			return err
		}
		var e sharding.StoredEntity
		var shard int32
		var savedAt *time.Time
		_, err = pgx.ForEachRow(rows, []any{&e.Key.Type, &shard, &e.Key.ID, &e.Bytes, &savedAt}, func() error {
			e.Key.Shard = int(shard)
			e.SavedAt = time.Time{}
			if savedAt != nil {
				e.SavedAt = *savedAt
			}
			out = append(out, e)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: list entities: %w", s.fail("list", err))
	}
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// StatOne implements sharding.StateLister: the entity's snapshot size and save time
// and its journal's length, in one statement. Errors: sharding.ErrNoState,
// sharding.ErrInvalidStateKey, sharding.ErrStoreUnavailable.
func (s *Store) StatOne(ctx context.Context, key sharding.EntityKey) (sharding.StoredEntity, error) {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return sharding.StoredEntity{}, err
	}
	e := sharding.StoredEntity{Key: key}
	var bytes *int64
	var savedAt *time.Time
	var records int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `
SELECT (SELECT octet_length(state)::bigint FROM shardhost_snapshots WHERE entity_type = $1 AND shard = $2 AND entity_id = $3),
       (SELECT saved_at FROM shardhost_snapshots WHERE entity_type = $1 AND shard = $2 AND entity_id = $3),
       (SELECT count(*) FROM shardhost_journal WHERE entity_type = $1 AND shard = $2 AND entity_id = $3)`,
			key.Type, int32(key.Shard), key.ID).Scan(&bytes, &savedAt, &records)
	})
	if err != nil {
		return e, fmt.Errorf("pgstore: describe %s/%d/%q: %w", key.Type, key.Shard, key.ID, s.fail("stat", err))
	}
	if bytes == nil && records == 0 {
		return e, fmt.Errorf("%w: %s/%d/%s", sharding.ErrNoState, key.Type, key.Shard, key.ID)
	}
	e.JournalRecords = int(records)
	if bytes != nil {
		e.Bytes = *bytes
	}
	if savedAt != nil {
		e.SavedAt = *savedAt
	}
	return e, nil
}
