package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/statestoretest"
)

func open(t testing.TB, url string) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.URL = url
	s, err := Open(pgtest.WithTimeout(t, 60*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The contract of sharding.StateStore, each subtest on a fresh database through two
// stores (two pools: two members of a cluster).
func TestContract(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	statestoretest.Run(t, func(t *testing.T) []sharding.StateStore {
		url := srv.NewDatabase(t)
		return []sharding.StateStore{open(t, url), open(t, url)}
	})
}

// Members starting at once migrate the schema once (the advisory lock); a restart
// finds it done; a schema newer than the build's is refused.
func TestMigrations(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	url := srv.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := DefaultConfig()
			cfg.URL = url
			s, err := Open(pgtest.WithTimeout(t, 60*time.Second), cfg)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent open: %v", err)
	}
	s := open(t, url)
	ctx := pgtest.WithTimeout(t, 30*time.Second)
	var n, max int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*), max(version) FROM shardhost_schema_migrations").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations) || max != migrations[len(migrations)-1].version {
		t.Fatalf("%d migrations recorded up to %d, want %d", n, max, len(migrations))
	}
	if _, err := s.Pool().Exec(ctx, "INSERT INTO shardhost_schema_migrations (version, name) VALUES (9999, 'from the future')"); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.URL = url
	_, err := Open(ctx, cfg)
	if !errors.Is(err, errSchema) || !errors.Is(err, sharding.ErrStoreUnavailable) || !strings.Contains(err.Error(), "9999") {
		t.Fatalf("open on a newer schema: %v", err)
	}
}

// TLS with the server's certificate checked (verify-full), and credentials from the PG*
// environment when the URL leaves them out; a wrong password and a server that does
// not answer give clear errors without the password in them.
func TestConnectionTLSAndEnvironment(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{TLS: true})
	full := srv.NewDatabase(t)
	s := open(t, full)
	key := sharding.EntityKey{Type: "t", Shard: 1, ID: "tls"}
	ctx := pgtest.WithTimeout(t, 30*time.Second)
	if err := s.Save(ctx, key, 1, []byte("over TLS")); err != nil {
		t.Fatal(err)
	}
	var ssl bool
	if err := s.Pool().QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("the connection is not TLS: %v %v", ssl, err)
	}

	u, _ := url.Parse(full)
	db := strings.TrimPrefix(u.Path, "/")
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGPORT", fmt.Sprint(srv.Port))
	t.Setenv("PGUSER", pgtest.Superuser)
	t.Setenv("PGPASSWORD", pgtest.Password)
	t.Setenv("PGSSLMODE", "verify-full")
	t.Setenv("PGSSLROOTCERT", srv.CAFile)
	t.Setenv("PGDATABASE", db)
	env := open(t, "postgres://")
	got, err := env.Load(ctx, key)
	if err != nil || string(got) != "over TLS" {
		t.Fatalf("through the PG* environment: %q %v", got, err)
	}

	bad := strings.Replace(full, pgtest.Password, "wrong-password", 1)
	cfg := DefaultConfig()
	cfg.URL = bad
	_, err = Open(ctx, cfg)
	if !errors.Is(err, sharding.ErrStoreUnavailable) || !strings.Contains(err.Error(), "password") {
		t.Fatalf("a wrong password: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("the error shows the password: %v", err)
	}
	noTLS := strings.Replace(full, "sslmode=verify-full", "sslmode=disable", 1)
	cfg.URL = noTLS
	if _, err := Open(ctx, cfg); !errors.Is(err, sharding.ErrStoreUnavailable) {
		t.Fatalf("without TLS on a server that demands it: %v", err)
	}
	cfg.URL = "postgres://nobody:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"
	_, err = Open(ctx, cfg)
	if !errors.Is(err, sharding.ErrStoreUnavailable) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("no server: %v", err)
	}
	cfg.URL = "postgres://u:secret@host:notaport/x"
	_, err = Open(ctx, cfg)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad URL: %v", err)
	}
}

// What PostgreSQL's text cannot hold is refused as an invalid key, not stored mangled.
func TestKeysPostgresCannotHold(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 30*time.Second)
	for _, id := range []string{"nul\x00inside", "bad\xffutf8"} {
		if err := s.Save(ctx, sharding.EntityKey{Type: "t", Shard: 1, ID: id}, 1, nil); !errors.Is(err, sharding.ErrInvalidStateKey) {
			t.Errorf("ID %q: %v, want ErrInvalidStateKey", id, err)
		}
	}
	if err := s.Save(ctx, sharding.EntityKey{Type: "t", Shard: 1, ID: "x"}, 1<<63, nil); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Errorf("an epoch over bigint: %v", err)
	}
	if err := s.Save(ctx, sharding.EntityKey{Type: "t", Shard: 1, ID: "big"}, 1, make([]byte, 64<<20+1)); !errors.Is(err, sharding.ErrStateTooLarge) {
		t.Errorf("a snapshot over 64 MiB: %v", err)
	}
}

// MaxEpochs reports the newest epoch of each type, RememberedShards the shards with
// remembered entities.
func TestMaxEpochs(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 30*time.Second)
	for _, w := range []struct {
		typ   string
		shard int
		epoch uint64
	}{{"a", 1, 3}, {"a", 2, 7}, {"b", 1, 2}} {
		if err := s.Save(ctx, sharding.EntityKey{Type: w.typ, Shard: w.shard, ID: "x"}, w.epoch, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.MaxEpochs(ctx)
	if err != nil || len(got) != 2 || got["a"] != 7 || got["b"] != 2 {
		t.Fatalf("MaxEpochs: %v %v", got, err)
	}
	for _, k := range []sharding.EntityKey{{Type: "a", Shard: 4, ID: "x"}, {Type: "a", Shard: 2, ID: "y"}, {Type: "a", Shard: 2, ID: "z"}, {Type: "c", Shard: 0, ID: "x"}} {
		if err := s.Remember(ctx, k, 7, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remember(ctx, sharding.EntityKey{Type: "c", Shard: 0, ID: "x"}, 7, false); err != nil {
		t.Fatal(err)
	}
	shards, err := s.RememberedShards(ctx)
	if err != nil || fmt.Sprint(shards) != "map[a:[2 4]]" {
		t.Fatalf("RememberedShards: %v %v", shards, err)
	}
}

// Killing the server: saves and loads fail with ErrStoreUnavailable and a message
// that says so, within their context; acknowledged saves are all there after the
// restart, and the same store serves again without being reopened.
func TestServerKilledAndBack(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.NewDatabase(t))
	ctx := pgtest.WithTimeout(t, 120*time.Second)
	acked := map[string]string{}
	for i := 0; i < 50; i++ {
		id := fmt.Sprint("e-", i)
		if err := s.Save(ctx, sharding.EntityKey{Type: "t", Shard: i % 5, ID: id}, 1, []byte(id)); err != nil {
			t.Fatal(err)
		}
		acked[id] = id
	}
	srv.Kill()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.Save(sctx, sharding.EntityKey{Type: "t", Shard: 0, ID: "during"}, 1, []byte("x"))
	cancel()
	if !errors.Is(err, sharding.ErrStoreUnavailable) || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("a save with the server down: %v", err)
	}
	t.Logf("save while down: %v", err)
	if _, err := s.Load(ctx, sharding.EntityKey{Type: "t", Shard: 0, ID: "e-0"}); !errors.Is(err, sharding.ErrStoreUnavailable) {
		t.Fatalf("a load with the server down: %v", err)
	}
	srv.Restart()
	testutil.EventuallyNil(t, 60*time.Second, "saves again after the restart", func() error {
		return s.Save(ctx, sharding.EntityKey{Type: "t", Shard: 0, ID: "after"}, 1, []byte("after"))
	})
	for id, want := range acked {
		var shard int
		fmt.Sscanf(id, "e-%d", &shard)
		got, err := s.Load(ctx, sharding.EntityKey{Type: "t", Shard: shard % 5, ID: id})
		if err != nil || string(got) != want {
			t.Fatalf("%s after the restart: %q %v", id, got, err)
		}
	}
}

// TestKeysAreByteOrderedUnderALocaleCollation: on a database whose collation is not
// byte order (ICU's root locale puts "a" before "B"), the key columns and their primary
// key indexes compare bytes, and the listing pages through IDs in Go's byte order.
func TestKeysAreByteOrderedUnderALocaleCollation(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	if err := srv.SQL("postgres", `CREATE DATABASE test_icu TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' LOCALE 'C'`); err != nil {
		t.Skipf("this PostgreSQL has no ICU collations: %v", err)
	}
	s := open(t, srv.URL("test_icu"))
	ctx := pgtest.WithTimeout(t, 60*time.Second)
	var localeFirst bool
	if err := s.Pool().QueryRow(ctx, `SELECT 'a'::text < 'B'::text`).Scan(&localeFirst); err != nil || !localeFirst {
		t.Fatalf("the database's collation puts \"a\" before \"B\": %v %v (the test's premise)", localeFirst, err)
	}
	var notC []string
	rows, err := s.Pool().Query(ctx, `
SELECT c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relname LIKE 'shardhost\_%' AND c.relkind IN ('r', 'i') AND a.attnum > 0 AND a.atttypid = 'text'::regtype
  AND c.relname <> 'shardhost_schema_migrations' AND a.attcollation <> 'pg_catalog."C"'::regcollation
ORDER BY 1`)
	if err == nil {
		notC, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(notC) != 0 {
		t.Fatalf("key columns and index columns not in byte order: %v %v", notC, err)
	}
	ids := []string{"b", "B", "a", "_x", "Z9", "é", "A-1", "a0"}
	for _, id := range ids {
		if err := s.Save(ctx, sharding.EntityKey{Type: "lst", Shard: 0, ID: id}, 1, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Sorted(slices.Values(ids))
	var got []string
	q := sharding.StateListing{Type: "lst", Limit: 3}
	for {
		page, more, err := s.ListStates(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			got = append(got, e.Key.ID)
		}
		if !more {
			break
		}
		last := page[len(page)-1].Key
		q.After = &last
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q, want byte order %q", got, want)
	}
}
