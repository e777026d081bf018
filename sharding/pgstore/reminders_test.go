package pgstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/sharding"
)

func reminderText(rs []sharding.Reminder) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s@%d/%d:%s", r.Name, r.Due, r.Interval, r.Payload))
	}
	return strings.Join(out, " ")
}

// A database of schema version 3 keeps reminders as records (the snapshot of
// sharding.ReminderIDPrefix and the entity's ID, remembered); migration 4 moves them
// into shardhost_reminders, where the store reads them, and leaves no record behind.
func TestRemindersMigrationFromVersion3(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	url := srv.NewDatabase(t)
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := migrate(ctx, pool, migrations[:3]); err != nil || v != 3 {
		t.Fatalf("schema version 3: %d %v", v, err)
	}
	set := []sharding.Reminder{{Name: "a", Due: 500, Payload: []byte("pa")}, {Name: "b", Due: 100, Interval: 60000}}
	b, err := cbor.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	rid := sharding.ReminderIDPrefix + "e"
	if _, err := pool.Exec(ctx, "SELECT shardhost_save('timed', 2, 5, ARRAY[$1], ARRAY[$2::bytea])", rid, b); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT shardhost_remember('timed', 2, 5, $1, true)", rid); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	s := open(t, url)
	key := sharding.EntityKey{Type: "timed", Shard: 2, ID: "e"}
	got, err := s.LoadReminders(ctx, key)
	if err != nil || reminderText(got) != "a@500/0:pa b@100/60000:" {
		t.Fatalf("the reminders after the migration: %q %v", reminderText(got), err)
	}
	due, next, err := s.DueReminders(ctx, "timed", 2, 100, 0)
	if err != nil || len(due) != 1 || due[0].ID != "e" || due[0].Name != "b" || next != 500 {
		t.Fatalf("due by 100: %+v next %d %v", due, next, err)
	}
	if ids, err := s.Remembered(ctx, "timed", 2); err != nil || len(ids) != 0 {
		t.Fatalf("remembered after the migration: %q %v", ids, err)
	}
	var records int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM shardhost_snapshots").Scan(&records); err != nil || records != 0 {
		t.Fatalf("snapshots after the migration: %d %v", records, err)
	}
	// Their epoch came with them: an older write is refused.
	if err := s.SaveReminders(ctx, key, 4, nil); err == nil {
		t.Fatal("a save at epoch 4 after the migration of records written at 5 succeeded")
	}
	if shards, err := s.RememberedShards(ctx); err != nil || fmt.Sprint(shards) != "map[timed:[2]]" {
		t.Fatalf("the shards to allocate at recovery: %v %v", shards, err)
	}
}

// Export carries reminders as records (as a store without its own keeps them) and
// Import takes them back into shardhost_reminders: the digests match and the
// reminders read alike.
func TestRemindersExportImport(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	a := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	ka := sharding.EntityKey{Type: "t", Shard: 1, ID: "a"}
	kb := sharding.EntityKey{Type: "t", Shard: 1, ID: "b"}
	if err := a.Save(ctx, ka, 2, []byte("state of a")); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveReminders(ctx, ka, 2, []sharding.Reminder{{Name: "x", Due: 7, Payload: []byte("px")}, {Name: "w", Due: 9, Interval: 1000}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveReminders(ctx, kb, 3, []sharding.Reminder{{Name: "y", Due: 8}}); err != nil {
		t.Fatal(err)
	}
	shards, digest := export(t, a)
	if len(shards) != 1 {
		t.Fatalf("exported %d shards, want 1", len(shards))
	}
	var ids []string
	for _, sn := range shards[0].Snapshots {
		ids = append(ids, strings.TrimPrefix(sn.ID, sharding.ReminderIDPrefix))
	}
	if fmt.Sprint(ids) != "[a a b]" || len(shards[0].Remembered) != 2 || !slices.ContainsFunc(shards[0].Snapshots, func(sn sharding.StoredSnapshot) bool {
		return sn.ID == sharding.ReminderIDPrefix+"b" && sn.Epoch == 3
	}) {
		t.Fatalf("exported %+v", shards[0])
	}

	b := open(t, srv.NewDatabase(t))
	im, err := b.Import(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.ImportShard(ctx, shards[0]); err != nil {
		t.Fatal(err)
	}
	if err := im.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, backDigest := export(t, b); !backDigest.Equal(digest) {
		t.Fatalf("digest after the import: %v, want %v", backDigest, digest)
	}
	if got, err := b.LoadReminders(ctx, ka); err != nil || reminderText(got) != "w@9/1000: x@7/0:px" {
		t.Fatalf("a's reminders after the import: %q %v", reminderText(got), err)
	}
	due, next, err := b.DueReminders(ctx, "t", 1, 8, 0)
	if err != nil || len(due) != 2 || due[0].ID != "a" || due[1].ID != "b" || next != 9 {
		t.Fatalf("due by 8 after the import: %+v next %d %v", due, next, err)
	}
	if ids, err := b.Remembered(ctx, "t", 1); err != nil || len(ids) != 0 {
		t.Fatalf("remembered after the import: %q %v", ids, err)
	}
	// A database that holds reminders only is not empty.
	if _, err := b.Import(ctx); err == nil || !strings.Contains(err.Error(), "3 reminders") {
		t.Fatalf("import into a database with reminders: %v, want ErrNotEmpty", err)
	}
}

// The read of a shard's due reminders is served by the index on due times, not a scan
// of the shard's rows: PostgreSQL's plan for it, over 20,000 reminders of one shard.
func TestDueRemindersUseTheIndex(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	if _, err := s.Pool().Exec(ctx, `INSERT INTO shardhost_reminders (entity_type, shard, entity_id, name, due, interval_ms, payload, epoch)
SELECT 't', 1, 'e' || (i / 10), 'r' || (i % 10), 1000 + i, 0, '', 1 FROM generate_series(0, 19999) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE shardhost_reminders"); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, "EXPLAIN "+dueRemindersSQL, "t", int32(1), int64(1100), int64(1001))
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	t.Log(text)
	if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "shardhost_reminders_due") {
		t.Fatalf("the plan of the due reminders' read:\n%s", text)
	}
	due, next, err := s.DueReminders(ctx, "t", 1, 1100, 1000)
	if err != nil || len(due) != 101 || next != 1101 {
		t.Fatalf("due by 1100: %d next %d %v", len(due), next, err)
	}
}
