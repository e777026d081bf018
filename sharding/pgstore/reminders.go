package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/sharding"
)

var _ sharding.ReminderStore = (*Store)(nil)

// SaveReminders implements sharding.ReminderStore: shardhost_save_reminders replaces
// the entity's rows of shardhost_reminders, fenced as Save is, in one statement. Errors:
// sharding.ErrStaleEpoch, sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey,
// sharding.ErrInvalidReminder, sharding.ErrTooManyReminders,
// sharding.ErrTooManyScheduled.
func (s *Store) SaveReminders(ctx context.Context, key sharding.EntityKey, epoch uint64, rs []sharding.Reminder) error {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	if err := sharding.CheckReminderSet(rs); err != nil {
		return err
	}
	names := make([]string, len(rs))
	dues := make([]int64, len(rs))
	intervals := make([]int64, len(rs))
	payloads := make([][]byte, len(rs))
	for i, r := range rs {
		names[i], dues[i], intervals[i], payloads[i] = r.Name, r.Due, r.Interval, r.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
	}
	var cur int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, "SELECT shardhost_save_reminders($1, $2, $3, $4, $5, $6, $7, $8)",
			key.Type, int32(key.Shard), int64(epoch), key.ID, names, dues, intervals, payloads).Scan(&cur)
	})
	if err != nil {
		return fmt.Errorf("pgstore: save the reminders of %s/%d/%q at epoch %d: %w", key.Type, key.Shard, key.ID, epoch, s.fail("save reminders", err))
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("pgstore: save the reminders of %s/%d/%q: %w: epoch %d is older than the shard's %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}

// withEpoch wraps a query of reminder rows (entity_id, name, due, interval_ms,
// payload; $1 the type, $2 the shard) so that one statement, one snapshot and one round
// trip, returns them with the shard's epoch: one row each, or one row of NULLs but the
// epoch when there are none. order sorts them (columns of r).
func withEpoch(query, order string) string {
	return `SELECT (SELECT epoch FROM shardhost_shard_epochs WHERE entity_type = $1 AND shard = $2),
	r.entity_id, r.name, r.due, r.interval_ms, r.payload
FROM (SELECT 1) AS one LEFT JOIN (` + query + `) AS r ON true
ORDER BY ` + order
}

// readReminders runs a query of withEpoch and calls fn with each reminder, in order.
// With a read epoch in ctx (sharding.WithReadEpoch) older than the shard's it fails
// with sharding.ErrStaleEpoch. fn is called again from the start if the query is
// retried (retry): it must reset what it gathers when first is true.
func (s *Store) readReminders(ctx context.Context, query string, args []any, fn func(first bool, id string, r sharding.Reminder)) error {
	var cur *int64
	err := retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		first := true
		fn(true, "", sharding.Reminder{})
		var id, name *string
		var due, interval *int64
		var payload []byte
		_, err = pgx.ForEachRow(rows, []any{&cur, &id, &name, &due, &interval, &payload}, func() error {
			if id != nil {
				r := sharding.Reminder{Name: *name, Due: *due, Interval: *interval}
				if len(payload) > 0 {
					r.Payload = payload
				}
				fn(first, *id, r)
				first = false
			}
			payload = nil // ForEachRow scans into the same variables: the next row gets its own bytes
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	if readEpoch, ok := sharding.ReadEpoch(ctx); ok && cur != nil && uint64(*cur) > readEpoch {
		return fmt.Errorf("%w: read at epoch %d, and the shard is at %d", sharding.ErrStaleEpoch, readEpoch, *cur)
	}
	return nil
}

// scanReminder returns the ForEachRow targets of a reminder row (name, due, interval,
// payload) and a function that takes the row's reminder.
func scanReminder() ([]any, func() sharding.Reminder) {
	var r sharding.Reminder
	return []any{&r.Name, &r.Due, &r.Interval, &r.Payload}, func() sharding.Reminder {
		out := r
		if len(out.Payload) == 0 {
			out.Payload = nil
		}
		r.Payload = nil // ForEachRow scans into the same variables: the next row gets its own bytes
		return out
	}
}

// LoadReminders implements sharding.ReminderStore: the entity's rows, by name (bytewise).
// Errors: sharding.ErrStaleEpoch (a read epoch older than the shard's),
// sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey.
func (s *Store) LoadReminders(ctx context.Context, key sharding.EntityKey) ([]sharding.Reminder, error) {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	var out []sharding.Reminder
	err := s.readReminders(ctx, loadRemindersSQL, []any{key.Type, int32(key.Shard), key.ID}, func(first bool, _ string, r sharding.Reminder) {
		if first {
			out = nil
		}
		if r.Name != "" {
			out = append(out, r)
		}
	})
	if errors.Is(err, sharding.ErrStaleEpoch) {
		return nil, fmt.Errorf("pgstore: load the reminders of %s/%d/%q: %w", key.Type, key.Shard, key.ID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: load the reminders of %s/%d/%q: %w", key.Type, key.Shard, key.ID, s.fail("load reminders", err))
	}
	return out, nil
}

// dueRemindersSQL reads a shard's ($1, $2) reminders due by $3, earliest first, at
// most $4 (NULL: all), and the first not due after them (withEpoch).
var dueRemindersSQL = withEpoch(`(SELECT entity_id, name, due, interval_ms, payload FROM shardhost_reminders
	WHERE entity_type = $1 AND shard = $2 AND due <= $3 ORDER BY due, entity_id, name LIMIT $4)
UNION ALL
(SELECT entity_id, name, due, interval_ms, payload FROM shardhost_reminders
	WHERE entity_type = $1 AND shard = $2 AND due > $3 ORDER BY due, entity_id, name LIMIT 1)`, "r.due, r.entity_id, r.name")

// loadRemindersSQL reads an entity's ($1, $2, $3) reminders by name (withEpoch).
var loadRemindersSQL = withEpoch(`SELECT entity_id, name, due, interval_ms, payload FROM shardhost_reminders
	WHERE entity_type = $1 AND shard = $2 AND entity_id = $3`, "r.name")

// DueReminders implements sharding.ReminderStore: one statement (and round trip) on
// the index on due times (shardhost_reminders_due), which reads the due rows and one
// more (for next), whatever the shard holds, and the shard's epoch. Errors: sharding.ErrStaleEpoch (a read epoch older than the
// shard's), sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey.
func (s *Store) DueReminders(ctx context.Context, typ string, shard int, before int64, limit int) ([]sharding.EntityReminder, int64, error) {
	if err := checkKey(typ, shard, "", false); err != nil {
		return nil, 0, err
	}
	var lim *int64 // NULL: no limit
	if limit > 0 && limit < math.MaxInt32 {
		l := int64(limit) + 1 // one more: the next due, if it is due too
		lim = &l
	}
	var due []sharding.EntityReminder
	var next int64
	err := s.readReminders(ctx, dueRemindersSQL, []any{typ, int32(shard), before, lim}, func(first bool, id string, r sharding.Reminder) {
		if first {
			due, next = nil, 0
		}
		switch {
		case r.Name == "":
		case next != 0 || r.Due > before || (limit > 0 && len(due) >= limit):
			if next == 0 {
				next = r.Due
			}
		default:
			due = append(due, sharding.EntityReminder{ID: id, Reminder: r})
		}
	})
	if errors.Is(err, sharding.ErrStaleEpoch) {
		return nil, 0, fmt.Errorf("pgstore: the due reminders of %s/%d: %w", typ, shard, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pgstore: the due reminders of %s/%d: %w", typ, shard, s.fail("read due reminders", err))
	}
	return due, next, nil
}
