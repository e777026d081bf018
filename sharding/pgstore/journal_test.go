package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/statestoretest"
)

func openWith(t testing.TB, url string, edit func(*Config)) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.URL = url
	edit(&cfg)
	s, err := Open(pgtest.WithTimeout(t, 60*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func appendText(ctx context.Context, s *Store, key sharding.EntityKey, epoch uint64, seq uint64, texts ...string) error {
	var recs []sharding.JournalRecord
	for i, text := range texts {
		recs = append(recs, statestoretest.Record(key, seq+uint64(i), text))
	}
	return s.AppendJournal(ctx, key, epoch, recs)
}

// journalText reads key's journal as "seq:payload" strings.
func journalText(t *testing.T, s *Store, key sharding.EntityKey) []string {
	t.Helper()
	recs, err := s.ReadJournal(pgtest.WithTimeout(t, 30*time.Second), key, 1, 0)
	if err != nil {
		t.Fatalf("read %v: %v", key, err)
	}
	var out []string
	for _, r := range recs {
		e, err := sharding.DecodeJournalEntry(key, r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", r.Seq, e.Payload))
	}
	return out
}

// plug holds the epoch row of shard plug/0 locked from another connection, so that
// an append to it waits inside its commit, holding the store's only commit slot, until
// the returned release.
func plug(t *testing.T, s, other *Store) (key sharding.EntityKey, release func()) {
	t.Helper()
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	key = sharding.EntityKey{Type: "plug", Shard: 0, ID: "p"}
	if err := s.FenceShard(ctx, key.Type, key.Shard, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := other.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM shardhost_shard_epochs WHERE entity_type = 'plug' AND shard = 0 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	return key, release
}

// The appends of many entities under way at once share one commit, and a stale epoch
// fails its own append only: another append of the same shard, and the others of the
// commit, are written. Of two appends of one record at two epochs in one commit, the
// newer epoch's is written and the older is refused (as if the newer had come first).
func TestJournalGroupCommit(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	url := srv.NewDatabase(t)
	s := openWith(t, url, func(c *Config) { c.JournalCommits = 1; c.JournalBatchSize = 64 })
	other := open(t, url)
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	if err := s.FenceShard(ctx, "counter", 9, 5); err != nil {
		t.Fatal(err)
	}
	plugKey, release := plug(t, s, other)
	plugDone := make(chan error, 1)
	go func() { plugDone <- appendText(ctx, s, plugKey, 1, 1, "plug") }()
	testutil.Eventually(t, 30*time.Second, "the plug's commit under way", func() bool {
		return s.commits.Load() == 1 && s.gathered.Load() == 0
	})

	type call struct {
		key   sharding.EntityKey
		epoch uint64
		text  string
		want  error
	}
	dup := sharding.EntityKey{Type: "counter", Shard: 7, ID: "dup"}
	calls := []call{
		{sharding.EntityKey{Type: "counter", Shard: 1, ID: "a"}, 1, "a", nil},
		{sharding.EntityKey{Type: "counter", Shard: 2, ID: "b"}, 1, "b", nil},
		{sharding.EntityKey{Type: "counter", Shard: 3, ID: "c"}, 1, "c", nil},
		{sharding.EntityKey{Type: "other", Shard: 1, ID: "a"}, 1, "other a", nil},
		{sharding.EntityKey{Type: "counter", Shard: 9, ID: "stale"}, 4, "stale", sharding.ErrStaleEpoch},
		{sharding.EntityKey{Type: "counter", Shard: 9, ID: "fresh"}, 5, "fresh", nil},
		{dup, 2, "dup at 2", sharding.ErrStaleEpoch},
		{dup, 3, "dup at 3", nil},
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = appendText(ctx, s, c.key, c.epoch, 1, c.text)
		}()
	}
	testutil.Eventually(t, 30*time.Second, "every append gathered behind the plug", func() bool {
		return s.gathered.Load() == int64(len(calls))
	})
	release()
	if err := <-plugDone; err != nil {
		t.Fatalf("the plug's append: %v", err)
	}
	wg.Wait()
	if got := s.commits.Load(); got != 2 {
		t.Fatalf("%d commits, want 2: the plug's and one for the %d appends", got, len(calls))
	}
	for i, c := range calls {
		if c.want == nil && errs[i] != nil || c.want != nil && !errors.Is(errs[i], c.want) {
			t.Errorf("append of %q at epoch %d: %v, want %v", c.text, c.epoch, errs[i], c.want)
		}
	}
	for _, c := range calls {
		if c.key == dup || c.want != nil {
			continue
		}
		if got := journalText(t, other, c.key); fmt.Sprint(got) != fmt.Sprint([]string{"1:" + c.text}) {
			t.Errorf("%v: %v", c.key, got)
		}
	}
	if got := journalText(t, other, sharding.EntityKey{Type: "counter", Shard: 9, ID: "stale"}); len(got) != 0 {
		t.Errorf("the stale append was written: %v", got)
	}
	if got := journalText(t, other, dup); fmt.Sprint(got) != "[1:dup at 3]" {
		t.Errorf("the record appended at epochs 2 and 3: %v", got)
	}
}

// Close fails the appends the batcher holds and interrupts the commit under way,
// without waiting for the database; appends after it fail at once.
func TestJournalClose(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	url := srv.NewDatabase(t)
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.JournalCommits = 1
	s, err := Open(pgtest.WithTimeout(t, 60*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := open(t, url)
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	plugKey, _ := plug(t, s, other)
	inFlight := make(chan error, 1)
	go func() { inFlight <- appendText(ctx, s, plugKey, 1, 1, "in flight") }()
	testutil.Eventually(t, 30*time.Second, "a commit under way", func() bool {
		return s.commits.Load() == 1 && s.gathered.Load() == 0
	})
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "queued"}
	queued := make(chan error, 1)
	go func() { queued <- appendText(ctx, s, key, 1, 1, "queued") }()
	testutil.Eventually(t, 30*time.Second, "an append gathered", func() bool { return s.gathered.Load() == 1 })
	s.Close()
	for name, ch := range map[string]chan error{"in flight": inFlight, "queued": queued} {
		if err := <-ch; !errors.Is(err, sharding.ErrStoreUnavailable) {
			t.Errorf("the %s append at Close: %v, want ErrStoreUnavailable", name, err)
		}
	}
	if err := appendText(ctx, s, key, 1, 1, "after"); !errors.Is(err, sharding.ErrStoreUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("an append after Close: %v", err)
	}
	if got := journalText(t, other, key); len(got) != 0 {
		t.Errorf("the queued append was written: %v", got)
	}
}

// A record damaged in the table (a bit flipped, or a row moved under another seq) fails
// the read and the export with ErrCorruptRecord, and is never returned; records before
// it read as before, and truncating past it heals the journal.
func TestJournalCorruptRecord(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	key := sharding.EntityKey{Type: "counter", Shard: 4, ID: "damaged"}
	if err := appendText(ctx, s, key, 1, 1, "one", "two", "three", "four"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE shardhost_journal SET record = set_byte(record, 5, get_byte(record, 5) # 16)
WHERE entity_type = 'counter' AND shard = 4 AND entity_id = 'damaged' AND seq = 2`); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadJournal(ctx, key, 1, 0)
	if !errors.Is(err, sharding.ErrCorruptRecord) || got != nil || !strings.Contains(err.Error(), "#2") {
		t.Fatalf("read over a flipped bit: %v, %v; want ErrCorruptRecord naming record 2", got, err)
	}
	t.Logf("the read: %v", err)
	if got, err := s.ReadJournal(ctx, key, 1, 1); err != nil || len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("read of record 1 alone: %v, %v", got, err)
	}
	if got, err := s.ReadJournal(ctx, key, 3, -1); err != nil || len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 {
		t.Fatalf("read from record 3, without a limit: %v, %v", got, err)
	}
	if err := s.Export(ctx, func(*sharding.StoredShard) error { return nil }); !errors.Is(err, sharding.ErrCorruptRecord) {
		t.Fatalf("export over a flipped bit: %v, want ErrCorruptRecord", err)
	}
	if err := s.TruncateJournal(ctx, key, 1, 3); err != nil {
		t.Fatal(err)
	}
	if got := journalText(t, s, key); fmt.Sprint(got) != "[3:three 4:four]" {
		t.Fatalf("after truncating past it: %v", got)
	}
	// A record moved under another seq (its checksum covers the seq).
	if _, err := s.Pool().Exec(ctx, `UPDATE shardhost_journal SET seq = 5
WHERE entity_type = 'counter' AND shard = 4 AND entity_id = 'damaged' AND seq = 4`); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadJournal(ctx, key, 4, 0); !errors.Is(err, sharding.ErrCorruptRecord) || got != nil {
		t.Fatalf("read of a record moved to seq 5: %v, %v", got, err)
	}
}

// A database at the previous schema version (snapshots, remembered entities, epochs,
// no journals) migrates forward at Open: its state and its fences are kept, and
// journals work.
func TestJournalMigrationFromVersion1(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	url := srv.NewDatabase(t)
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := migrate(ctx, pool, migrations[:1]); err != nil || v != 1 {
		t.Fatalf("schema version 1: %d %v", v, err)
	}
	if _, err := pool.Exec(ctx, "SELECT shardhost_save('counter', 1, 3, ARRAY['a'], ARRAY['state of a'::bytea])"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT shardhost_remember('counter', 1, 3, 'a', true)"); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	s := open(t, url)
	var version int
	if err := s.Pool().QueryRow(ctx, "SELECT max(version) FROM shardhost_schema_migrations").Scan(&version); err != nil || version != migrations[len(migrations)-1].version {
		t.Fatalf("schema version after Open: %d %v", version, err)
	}
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "a"}
	if got, err := s.Load(ctx, key); err != nil || string(got) != "state of a" {
		t.Fatalf("the snapshot written at version 1: %q %v", got, err)
	}
	if got, err := s.Remembered(ctx, "counter", 1); err != nil || fmt.Sprint(got) != "[a]" {
		t.Fatalf("the remembered entities: %v %v", got, err)
	}
	if err := appendText(ctx, s, key, 2, 1, "stale"); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("an append older than the fence written at version 1: %v", err)
	}
	if err := appendText(ctx, s, key, 3, 1, "one", "two"); err != nil {
		t.Fatal(err)
	}
	if got := journalText(t, s, key); fmt.Sprint(got) != "[1:one 2:two]" {
		t.Fatalf("the journal: %v", got)
	}
}

// export reads every shard of s.
func export(t *testing.T, s *Store) ([]*sharding.StoredShard, *sharding.StateDigest) {
	t.Helper()
	var shards []*sharding.StoredShard
	d := &sharding.StateDigest{}
	if err := s.Export(pgtest.WithTimeout(t, 60*time.Second), func(sh *sharding.StoredShard) error {
		shards = append(shards, sh)
		return d.Add(sh)
	}); err != nil {
		t.Fatal(err)
	}
	return shards, d
}

// Export carries journals (truncation points, the records at or above them) and Import
// writes them back: the digests match, the journals read alike, and the imported
// floors still drop records below them.
func TestJournalExportImport(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	a := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	ka := sharding.EntityKey{Type: "t", Shard: 1, ID: "a"}
	kb := sharding.EntityKey{Type: "t", Shard: 2, ID: "b"}
	kc := sharding.EntityKey{Type: "u", Shard: 0, ID: "c"}
	if err := a.Save(ctx, ka, 2, []byte("base of a")); err != nil {
		t.Fatal(err)
	}
	if err := a.Remember(ctx, ka, 2, true); err != nil {
		t.Fatal(err)
	}
	if err := appendText(ctx, a, ka, 2, 1, "a1", "a2", "a3", "a4", "a5"); err != nil {
		t.Fatal(err)
	}
	if err := a.TruncateJournal(ctx, ka, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := appendText(ctx, a, kb, 1, 1, "b1", "b2"); err != nil {
		t.Fatal(err)
	}
	if err := a.TruncateJournal(ctx, kc, 1, 7); err != nil { // a floor, no records
		t.Fatal(err)
	}
	// A record below c's floor, as an append that raced the truncation leaves: read
	// nowhere, exported nowhere.
	stray := statestoretest.Record(kc, 3, "stray")
	if _, err := a.Pool().Exec(ctx, "INSERT INTO shardhost_journal VALUES ('u', 0, 'c', 3, 1, $1)", stray.Data); err != nil {
		t.Fatal(err)
	}
	if got := journalText(t, a, kc); len(got) != 0 {
		t.Fatalf("read below the floor: %v", got)
	}
	shards, digest := export(t, a)
	var journals []string
	for _, sh := range shards {
		for _, j := range sh.Journals {
			var seqs []uint64
			for _, r := range j.Records {
				seqs = append(seqs, r.Seq)
			}
			journals = append(journals, fmt.Sprintf("%s/%d/%s floor %d %v", sh.Type, sh.Shard, j.ID, j.Floor, seqs))
		}
	}
	if want := "[t/1/a floor 3 [3 4 5] t/2/b floor 0 [1 2] u/0/c floor 7 []]"; fmt.Sprint(journals) != want {
		t.Fatalf("exported journals: %v, want %v", journals, want)
	}
	if digest.JournalRecords != 5 || digest.Shards != 3 {
		t.Fatalf("digest: %v", digest)
	}

	b := open(t, srv.NewDatabase(t))
	im, err := b.Import(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		if err := im.ImportShard(ctx, sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := im.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	back, backDigest := export(t, b)
	if !backDigest.Equal(digest) {
		t.Fatalf("digest after the import: %v, want %v", backDigest, digest)
	}
	for i := range shards {
		if !reflect.DeepEqual(back[i].Journals, shards[i].Journals) {
			t.Fatalf("journals of %s/%d after the import: %+v, want %+v", shards[i].Type, shards[i].Shard, back[i].Journals, shards[i].Journals)
		}
	}
	// The cluster started on the import writes over it from epoch 1; the floor holds.
	if err := appendText(ctx, b, ka, 1, 2, "below the floor", "a3 again"); err != nil {
		t.Fatal(err)
	}
	if got := journalText(t, b, ka); fmt.Sprint(got) != "[3:a3 again 4:a4 5:a5]" {
		t.Fatalf("a after the import: %v", got)
	}
	if err := appendText(ctx, b, kc, 1, 6, "c6", "c7"); err != nil {
		t.Fatal(err)
	}
	if got := journalText(t, b, kc); fmt.Sprint(got) != "[7:c7]" {
		t.Fatalf("c after the import: %v", got)
	}
	// A database that holds journals only is not empty.
	c := open(t, srv.NewDatabase(t))
	if err := appendText(ctx, c, kb, 1, 1, "b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Import(ctx); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "1 journals") {
		t.Fatalf("import into a database with a journal: %v, want ErrNotEmpty", err)
	}
}

// With a window, a lone append waits for it and then commits alone.
func TestJournalBatchWindow(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := openWith(t, srv.NewDatabase(t), func(c *Config) { c.JournalBatchWindow = 100 * time.Millisecond })
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "alone"}
	t0 := time.Now()
	if err := appendText(ctx, s, key, 1, 1, "alone"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(t0); waited < 100*time.Millisecond {
		t.Fatalf("the append returned after %v, before the window of 100ms", waited)
	}
	if got := journalText(t, s, key); fmt.Sprint(got) != "[1:alone]" || s.commits.Load() != 1 {
		t.Fatalf("%v in %d commits", got, s.commits.Load())
	}
}
