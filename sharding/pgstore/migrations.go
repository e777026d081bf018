package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardhost/shardhost/sharding"
)

// migration is one step of the schema, applied once, in order, in its own
// transaction.
type migration struct {
	version int
	name    string
	sql     string
	// then, if set, runs after sql in the same transaction: a change of data SQL
	// cannot make (decoding CBOR).
	then func(ctx context.Context, tx pgx.Tx) error
}

// migrationLockKey is the advisory lock (pg_advisory_lock, session level) held while
// migrations run, so that members starting at once apply each step once.
const migrationLockKey int64 = 0x5368617264486f73 // "ShardHos"

// migrations is the schema, oldest first. Never edit a released step: add one.
var migrations = []migration{
	{1, "state tables and fencing", `
CREATE TABLE shardhost_shard_epochs (
	entity_type text    NOT NULL,
	shard       integer NOT NULL CHECK (shard >= 0),
	epoch       bigint  NOT NULL CHECK (epoch >= 0),
	PRIMARY KEY (entity_type, shard)
);
COMMENT ON TABLE shardhost_shard_epochs IS 'shardhost: the newest allocation epoch each shard was written with (fencing)';

CREATE TABLE shardhost_snapshots (
	entity_type text        NOT NULL,
	shard       integer     NOT NULL CHECK (shard >= 0),
	entity_id   text        NOT NULL,
	epoch       bigint      NOT NULL CHECK (epoch >= 0),
	seq         bigint      NOT NULL CHECK (seq >= 1),
	state       bytea       NOT NULL,
	saved_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (entity_type, shard, entity_id)
);
COMMENT ON TABLE shardhost_snapshots IS 'shardhost: each entity''s latest snapshot; seq counts its writes';

CREATE TABLE shardhost_remembered (
	entity_type   text        NOT NULL,
	shard         integer     NOT NULL CHECK (shard >= 0),
	entity_id     text        NOT NULL,
	epoch         bigint      NOT NULL CHECK (epoch >= 0),
	remembered_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (entity_type, shard, entity_id)
);
COMMENT ON TABLE shardhost_remembered IS 'shardhost: the remembered entities of each shard (remember-entities types)';

-- shardhost_fence makes the shard's epoch at least p_epoch and returns it, or returns
-- the newer epoch the shard has (the caller is stale). A caller at the shard's epoch
-- holds a share lock on the epoch row until its transaction ends: concurrent writers
-- of one epoch go on together, and a writer with a newer epoch waits for them, so once
-- it has written no older writer can.
CREATE FUNCTION shardhost_fence(p_type text, p_shard integer, p_epoch bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	FOR attempt IN 1..3 LOOP
		UPDATE shardhost_shard_epochs SET epoch = p_epoch
			WHERE entity_type = p_type AND shard = p_shard AND epoch < p_epoch;
		IF FOUND THEN
			RETURN p_epoch;
		END IF;
		SELECT epoch INTO cur FROM shardhost_shard_epochs
			WHERE entity_type = p_type AND shard = p_shard FOR SHARE;
		IF FOUND AND cur >= p_epoch THEN
			RETURN cur;
		END IF;
		IF NOT FOUND THEN
			INSERT INTO shardhost_shard_epochs (entity_type, shard, epoch) VALUES (p_type, p_shard, p_epoch)
				ON CONFLICT DO NOTHING;
			IF FOUND THEN
				RETURN p_epoch;
			END IF;
		END IF;
	END LOOP;
	RAISE EXCEPTION 'shardhost: the epoch of %/% keeps changing', p_type, p_shard USING ERRCODE = '40001';
END $$;

-- shardhost_save fences the shard, then stores the snapshots (p_ids[i] gets
-- p_states[i]). It returns the shard's epoch: more than p_epoch means stale, and
-- nothing was written.
CREATE FUNCTION shardhost_save(p_type text, p_shard integer, p_epoch bigint, p_ids text[], p_states bytea[])
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	cur := shardhost_fence(p_type, p_shard, p_epoch);
	IF cur > p_epoch THEN
		RETURN cur;
	END IF;
	INSERT INTO shardhost_snapshots AS s (entity_type, shard, entity_id, epoch, seq, state)
		SELECT p_type, p_shard, u.id, p_epoch, 1, u.state FROM unnest(p_ids, p_states) AS u(id, state)
		ON CONFLICT (entity_type, shard, entity_id) DO UPDATE
			SET epoch = EXCLUDED.epoch, seq = s.seq + 1, state = EXCLUDED.state, saved_at = now();
	RETURN cur;
END $$;

-- shardhost_remember fences the shard, then records (p_remember) or forgets the
-- entity; it returns the shard's epoch as shardhost_save does.
CREATE FUNCTION shardhost_remember(p_type text, p_shard integer, p_epoch bigint, p_id text, p_remember boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	cur := shardhost_fence(p_type, p_shard, p_epoch);
	IF cur > p_epoch THEN
		RETURN cur;
	END IF;
	IF p_remember THEN
		INSERT INTO shardhost_remembered AS r (entity_type, shard, entity_id, epoch)
			VALUES (p_type, p_shard, p_id, p_epoch)
			ON CONFLICT (entity_type, shard, entity_id) DO UPDATE SET epoch = EXCLUDED.epoch;
	ELSE
		DELETE FROM shardhost_remembered WHERE entity_type = p_type AND shard = p_shard AND entity_id = p_id;
	END IF;
	RETURN cur;
END $$;
`, nil},
	{2, "entity journals", `
CREATE TABLE shardhost_journal (
	entity_type text    NOT NULL,
	shard       integer NOT NULL CHECK (shard >= 0),
	entity_id   text    NOT NULL,
	seq         bigint  NOT NULL CHECK (seq >= 1),
	epoch       bigint  NOT NULL CHECK (epoch >= 0),
	record      bytea   NOT NULL,
	PRIMARY KEY (entity_type, shard, entity_id, seq)
);
COMMENT ON TABLE shardhost_journal IS 'shardhost: each entity''s journal records (sharding.JournalEntry encodings, CRC-32C checked) and the epoch that wrote them';

CREATE TABLE shardhost_journal_floors (
	entity_type text    NOT NULL,
	shard       integer NOT NULL CHECK (shard >= 0),
	entity_id   text    NOT NULL,
	floor       bigint  NOT NULL CHECK (floor >= 1),
	PRIMARY KEY (entity_type, shard, entity_id)
);
COMMENT ON TABLE shardhost_journal_floors IS 'shardhost: each entity''s journal truncation point: records below it are gone (a base holds them)';

-- shardhost_append writes the records of many entities' appends in one statement: row
-- i is record p_seqs[i] of entity (p_types[i], p_shards[i], p_ids[i]), appended at
-- epoch p_epochs[i]. It fences each shard once, in (type, shard) order (every writer
-- locks epoch rows in that order), at the newest epoch the rows carry for it, and
-- returns each shard with its epoch: a row whose epoch is older than its shard's is
-- refused and written nowhere; the others are written in this transaction. A record at
-- a held seq is replaced; one below the entity's floor is dropped. The caller sends no
-- two rows of one (type, shard, ID, seq), sorted in that order (concurrent appends lock
-- journal rows alike).
CREATE FUNCTION shardhost_append(p_types text[], p_shards integer[], p_epochs bigint[],
	p_ids text[], p_seqs bigint[], p_records bytea[])
RETURNS TABLE (fenced_type text, fenced_shard integer, shard_epoch bigint) LANGUAGE plpgsql AS $$
DECLARE
	g record;
	f_types text[] := '{}';
	f_shards integer[] := '{}';
	f_epochs bigint[] := '{}';
BEGIN
	FOR g IN SELECT u.t, u.s, max(u.e) AS e FROM unnest(p_types, p_shards, p_epochs) AS u(t, s, e)
			GROUP BY u.t, u.s ORDER BY u.t COLLATE "C", u.s LOOP
		fenced_type := g.t;
		fenced_shard := g.s;
		shard_epoch := shardhost_fence(g.t, g.s, g.e);
		f_types := f_types || g.t;
		f_shards := f_shards || g.s;
		f_epochs := f_epochs || shard_epoch;
		RETURN NEXT;
	END LOOP;
	INSERT INTO shardhost_journal AS j (entity_type, shard, entity_id, seq, epoch, record)
		SELECT u.t, u.s, u.i, u.q, u.e, u.r
		FROM unnest(p_types, p_shards, p_epochs, p_ids, p_seqs, p_records) WITH ORDINALITY AS u(t, s, e, i, q, r, n)
		JOIN unnest(f_types, f_shards, f_epochs) AS f(t, s, e) ON f.t = u.t AND f.s = u.s
		WHERE u.e >= f.e
			AND u.q >= coalesce((SELECT fl.floor FROM shardhost_journal_floors fl
				WHERE fl.entity_type = u.t AND fl.shard = u.s AND fl.entity_id = u.i), 1)
		ORDER BY u.n
		ON CONFLICT (entity_type, shard, entity_id, seq) DO UPDATE SET epoch = EXCLUDED.epoch, record = EXCLUDED.record;
	RETURN;
END $$;

-- shardhost_truncate_journal fences the shard, raises the entity's floor to p_before
-- (never lowers it) and deletes its records below the floor; it returns the shard's
-- epoch as shardhost_save does. An append that committed while the floor rose may
-- leave a record below it: reads skip records below the floor, and the next
-- truncation deletes them.
CREATE FUNCTION shardhost_truncate_journal(p_type text, p_shard integer, p_epoch bigint, p_id text, p_before bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
	fl bigint;
BEGIN
	cur := shardhost_fence(p_type, p_shard, p_epoch);
	IF cur > p_epoch OR p_before < 1 THEN
		RETURN cur;
	END IF;
	INSERT INTO shardhost_journal_floors AS f (entity_type, shard, entity_id, floor)
		VALUES (p_type, p_shard, p_id, p_before)
		ON CONFLICT (entity_type, shard, entity_id) DO UPDATE SET floor = greatest(f.floor, EXCLUDED.floor)
		RETURNING f.floor INTO fl;
	DELETE FROM shardhost_journal
		WHERE entity_type = p_type AND shard = p_shard AND entity_id = p_id AND seq < fl;
	RETURN cur;
END $$;
`, nil},
	{3, "byte-ordered keys", `
-- The key columns compare bytes (COLLATE "C"), as Go's strings and the other stores
-- do, whatever the database's collation: the primary key indexes then serve the
-- listing's keyset pages in their order, rather than a sort of every row per page.
ALTER TABLE shardhost_shard_epochs ALTER COLUMN entity_type TYPE text COLLATE "C";
ALTER TABLE shardhost_snapshots ALTER COLUMN entity_type TYPE text COLLATE "C", ALTER COLUMN entity_id TYPE text COLLATE "C";
ALTER TABLE shardhost_remembered ALTER COLUMN entity_type TYPE text COLLATE "C", ALTER COLUMN entity_id TYPE text COLLATE "C";
ALTER TABLE shardhost_journal ALTER COLUMN entity_type TYPE text COLLATE "C", ALTER COLUMN entity_id TYPE text COLLATE "C";
ALTER TABLE shardhost_journal_floors ALTER COLUMN entity_type TYPE text COLLATE "C", ALTER COLUMN entity_id TYPE text COLLATE "C";
`, nil},
	{4, "reminders with an index on due times", `
CREATE TABLE shardhost_reminders (
	entity_type text COLLATE "C" NOT NULL,
	shard       integer NOT NULL CHECK (shard >= 0),
	entity_id   text COLLATE "C" NOT NULL,
	name        text COLLATE "C" NOT NULL,
	due         bigint  NOT NULL CHECK (due >= 0),
	interval_ms bigint  NOT NULL CHECK (interval_ms >= 0),
	payload     bytea   NOT NULL,
	epoch       bigint  NOT NULL CHECK (epoch >= 0),
	PRIMARY KEY (entity_type, shard, entity_id, name)
);
COMMENT ON TABLE shardhost_reminders IS 'shardhost: each entity''s durable reminders and scheduled messages (sharding.Reminder; due and interval in Unix ms)';
-- A shard's home reads its due reminders, earliest first, up to 100 times a second: the
-- index makes a read cost what it returns, not the shard's reminders.
CREATE INDEX shardhost_reminders_due ON shardhost_reminders (entity_type, shard, due, entity_id, name);

-- shardhost_save_reminders fences the shard, then replaces the entity's reminders with
-- the rows given (row i: p_names[i], p_dues[i], p_intervals[i], p_payloads[i]; none
-- deletes them); it returns the shard's epoch as shardhost_save does.
CREATE FUNCTION shardhost_save_reminders(p_type text, p_shard integer, p_epoch bigint, p_id text,
	p_names text[], p_dues bigint[], p_intervals bigint[], p_payloads bytea[])
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	cur := shardhost_fence(p_type, p_shard, p_epoch);
	IF cur > p_epoch THEN
		RETURN cur;
	END IF;
	DELETE FROM shardhost_reminders WHERE entity_type = p_type AND shard = p_shard AND entity_id = p_id
		AND NOT (name = ANY (p_names));
	INSERT INTO shardhost_reminders AS r (entity_type, shard, entity_id, name, due, interval_ms, payload, epoch)
		SELECT p_type, p_shard, p_id, u.n, u.d, u.i, u.p, p_epoch FROM unnest(p_names, p_dues, p_intervals, p_payloads) AS u(n, d, i, p)
		ON CONFLICT (entity_type, shard, entity_id, name) DO UPDATE
			SET due = EXCLUDED.due, interval_ms = EXCLUDED.interval_ms, payload = EXCLUDED.payload, epoch = EXCLUDED.epoch;
	RETURN cur;
END $$;
`, moveReminderRecords},
}

// moveReminderRecords moves the reminders a store before migration 4 kept as records
// (a snapshot under sharding.ReminderIDPrefix holding the entity's reminders in CBOR,
// and a remembered row of that ID) into shardhost_reminders, at their snapshot's
// epoch.
func moveReminderRecords(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT entity_type, shard, entity_id, epoch, state FROM shardhost_snapshots
WHERE starts_with(entity_id, $1)`, sharding.ReminderIDPrefix)
	if err != nil {
		return err
	}
	var batch pgx.Batch
	var typ, id string
	var shard int32
	var epoch int64
	var state []byte
	if _, err := pgx.ForEachRow(rows, []any{&typ, &shard, &id, &epoch, &state}, func() error {
		var rs []sharding.Reminder
		if err := cbor.Unmarshal(state, &rs); err != nil {
			return fmt.Errorf("the reminders of %s/%d/%q: %w", typ, shard, id, err)
		}
		for _, r := range rs {
			p := r.Payload
			if p == nil {
				p = []byte{}
			}
			batch.Queue(`INSERT INTO shardhost_reminders (entity_type, shard, entity_id, name, due, interval_ms, payload, epoch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, typ, shard, strings.TrimPrefix(id, sharding.ReminderIDPrefix), r.Name, r.Due, r.Interval, p, epoch)
		}
		return nil
	}); err != nil {
		return err
	}
	if batch.Len() > 0 {
		if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
			return err
		}
	}
	for _, table := range []string{"shardhost_snapshots", "shardhost_remembered"} {
		if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE starts_with(entity_id, $1)", sharding.ReminderIDPrefix); err != nil {
			return err
		}
	}
	return nil
}

// migrate applies the steps (migrations, or the first of them in tests) the database
// lacks, under the advisory lock, and returns the schema version. A database whose
// schema is newer than the last step is refused.
func migrate(ctx context.Context, pool *pgxpool.Pool, steps []migration) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		return 0, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		// A broken connection drops the session's lock with it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockKey); err != nil {
			conn.Conn().Close(context.Background())
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS shardhost_schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return 0, fmt.Errorf("creating shardhost_schema_migrations: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM shardhost_schema_migrations").Scan(&current); err != nil {
		return 0, err
	}
	latest := steps[len(steps)-1].version
	if current > latest {
		return current, fmt.Errorf("%w: the database's schema is at version %d, newer than this shardhost knows (%d): upgrade shardhost",
			errSchema, current, latest)
	}
	for _, m := range steps {
		if m.version <= current {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			if m.then != nil {
				if err := m.then(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "INSERT INTO shardhost_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return current, fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		current = m.version
	}
	return current, nil
}

var errSchema = errors.New("pgstore: unknown schema version")
