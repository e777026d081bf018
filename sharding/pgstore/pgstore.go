// Package pgstore is a sharding.StateStore and sharding.JournalStore on PostgreSQL
// (pgx and its pool): entity snapshots, remembered entities, per-shard fencing epochs
// and entity journals (records, and each entity's truncation point) in tables of a
// database the user already runs, backs up and restores. Select it with
// `shardhost start --state-store postgres://…` (docs/state-stores.md, "Choosing a state store").
//
// Fencing is in SQL: every write calls a function (shardhost_save,
// shardhost_remember, shardhost_append, shardhost_truncate_journal,
// shardhost_save_reminders) that raises or
// checks the shard's epoch row and writes in the same transaction, one statement and
// one round trip; a write with an older epoch than the shard's writes nothing and fails
// with sharding.ErrStaleEpoch. FenceShard raises the epoch row alone (shardhost_fence),
// which a region does before it first reads a shard it has been allocated
// (sharding.ShardFencer).
//
// Journal appends are group-committed: a goroutine of the store gathers the appends of
// concurrent callers (of many entities and shards) and writes them in one
// shardhost_append statement, one transaction and one WAL flush, which checks each
// shard's fence on its own: an append of a shard that moved on fails alone. An append
// returns once its transaction committed. Every record read is checked against its
// CRC-32C (sharding.VerifyJournalRecord); the database is the one copy, so a corrupt
// record cannot be repaired from another replica: reading it fails with
// sharding.ErrCorruptRecord until the row is restored from a backup or the journal is
// truncated past it.
//
// Reminders (sharding.ReminderStore) are rows of shardhost_reminders, one per reminder,
// with an index on (type, shard, due time): a shard's home reads its due reminders at
// the cost of what it gets, whatever the shard holds.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/sharding"
)

// Errors of the PostgreSQL store, beside those of sharding.StateStore.
var (
	// ErrNotEmpty: an import found state in the database already.
	ErrNotEmpty = errors.New("pgstore: the database already holds entity state")
)

// Config configures a Store.
type Config struct {
	// URL is the connection string: a postgres:// URL or key=value pairs, as libpq
	// takes them (host, port, dbname, user, password, sslmode, sslrootcert, sslcert,
	// sslkey, connect_timeout, options, search_path via options, pool_max_conns, ...).
	// What it leaves out comes from the PG* environment variables (PGHOST, PGPORT,
	// PGDATABASE, PGUSER, PGPASSWORD, PGSSLMODE, PGSSLROOTCERT, PGPASSFILE, ...) and
	// ~/.pgpass, as with psql. TLS: sslmode=verify-full with sslrootcert checks the
	// server's certificate and name; libpq's default (prefer) tries TLS without
	// checking it. Required.
	URL string
	// MaxConns caps the pool's connections, unless the URL sets pool_max_conns. Each
	// save holds one for a round trip; more connections let more saves run at once at
	// the cost of server memory (a backend process each). Default 16.
	MaxConns int32
	// MaxStateSize caps one snapshot, in bytes; larger ones are refused with
	// sharding.ErrStateTooLarge. Default 64 MiB (the default guest memory limit);
	// PostgreSQL's own cap for a bytea is 1 GiB.
	MaxStateSize int
	// MaxBatchBytes caps the snapshot bytes of one SaveBatch request; a larger batch
	// goes in several requests (each its own transaction, each fenced), up to 4 at once
	// on as many connections. Default 4 MiB.
	MaxBatchBytes int
	// JournalBatchWindow is how long the journal's group commit waits, after the first
	// append of a gathering arrives, for more to share its commit. 0 (the default) waits
	// for none: a lone append commits at once, and appends that arrive while commits
	// are under way gather until a commit slot is free, so batches grow with the load
	// without adding latency at low load. A window adds up to its length to every
	// append's latency and saves commits when appends arrive spread out.
	JournalBatchWindow time.Duration
	// JournalBatchSize caps the appends that share one commit (one statement, one
	// transaction). Larger batches cost fewer commits per append under load but make
	// each commit, and its callers, wait longer. Default 256.
	JournalBatchSize int
	// JournalCommits caps the journal's group commits under way at once, each a
	// transaction on a connection of the pool. More let the server's own WAL flushes
	// overlap; fewer make each batch larger. Default 2.
	JournalCommits int
	// Logger receives the store's logs. Nil: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults: 16 connections, snapshots up to 64 MiB, batch
// requests of up to 4 MiB, journal group commits of up to 256 appends, 2 at once,
// without a window. URL is to be set.
func DefaultConfig() Config {
	return Config{MaxConns: 16, MaxStateSize: 64 << 20, MaxBatchBytes: 4 << 20, JournalBatchSize: 256, JournalCommits: 2}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("pgstore: URL is required")
	case c.MaxConns < 1:
		return fmt.Errorf("pgstore: MaxConns %d must be positive", c.MaxConns)
	case c.MaxStateSize <= 0 || c.MaxStateSize > 1<<30:
		return fmt.Errorf("pgstore: MaxStateSize %d out of range (0, 1 GiB]", c.MaxStateSize)
	case c.MaxBatchBytes <= 0:
		return fmt.Errorf("pgstore: MaxBatchBytes %d must be positive", c.MaxBatchBytes)
	case c.JournalBatchWindow < 0 || c.JournalBatchWindow > time.Second:
		return fmt.Errorf("pgstore: JournalBatchWindow %v out of range [0, 1s]", c.JournalBatchWindow)
	case c.JournalBatchSize < 1:
		return fmt.Errorf("pgstore: JournalBatchSize %d must be positive", c.JournalBatchSize)
	case c.JournalCommits < 1:
		return fmt.Errorf("pgstore: JournalCommits %d must be positive", c.JournalCommits)
	}
	return nil
}

// Store is the PostgreSQL state store. Safe for concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	pool   *pgxpool.Pool
	target string // host:port/db, for errors (no credentials)

	group       *owner.Group    // the journal's batcher and its commits
	appends     chan *appendReq // to the batcher (unbuffered: a send is a receipt)
	commitSlots chan struct{}   // JournalCommits: a commit under way holds one
	// gathered counts the appends the batcher holds, not yet handed to a commit;
	// commits counts the commits it started. Both for tests.
	gathered, commits atomic.Int64
}

var (
	_ sharding.StateStore         = (*Store)(nil)
	_ sharding.BatchStateStore    = (*Store)(nil)
	_ sharding.ExternalStateStore = (*Store)(nil)
)

// Open connects to the database, applies the schema's migrations (under an advisory
// lock, so that members starting together apply each once) and returns the store.
// Errors wrap sharding.ErrStoreUnavailable: a bad URL, a server that does not answer
// or refuses the credentials, a schema newer than this build knows.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's parse errors may quote the connection string: keep the password out.
		return nil, fmt.Errorf("%w: pgstore: bad connection string: %s", sharding.ErrStoreUnavailable, redactErr(err, cfg.URL))
	}
	if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = cfg.MaxConns
	}
	cc := pc.ConnConfig
	s := &Store{cfg: cfg, log: cfg.Logger.With("component", "pgstore"),
		target: fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)}
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, s.fail("connect", err)
	}
	version, err := migrate(ctx, s.pool, migrations)
	if err != nil {
		s.pool.Close()
		return nil, s.fail("migrate the schema", err)
	}
	s.group = owner.New()
	s.appends = make(chan *appendReq)
	s.commitSlots = make(chan struct{}, cfg.JournalCommits)
	s.group.Go(s.runBatcher)
	s.log.Info("PostgreSQL state store ready", "database", s.target, "schema_version", version)
	return s, nil
}

// Close stops the journal's batcher (appends not yet under way fail with
// ErrStoreUnavailable, and those under way are interrupted: they may or may not have
// committed), then closes the pool's connections, waiting for those in use.
func (s *Store) Close() error {
	s.group.Close()
	s.group.Wait()
	s.pool.Close()
	return nil
}

// Pool returns the connection pool (for tools and tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func redactErr(err error, url string) string {
	msg := err.Error()
	if url != "" {
		msg = strings.ReplaceAll(msg, url, "<the connection string>")
	}
	return msg
}

// fail wraps a database error: sharding.ErrStoreUnavailable, with what was being done
// and where.
func (s *Store) fail(what string, err error) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		// 08: connection exceptions; 57: the server shutting down or restarting.
		if strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57") {
			what += " (the database is unreachable, or closed the connection)"
		}
	case !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		what += " (the database is unreachable, or closed the connection)"
	}
	return fmt.Errorf("%w: postgres %s: %s: %w", sharding.ErrStoreUnavailable, s.target, what, err)
}

// checkKey refuses keys the store cannot hold: those of sharding.ErrInvalidStateKey,
// and (PostgreSQL's text) IDs and types that are not UTF-8 or contain NUL.
func checkKey(typ string, shard int, id string, needID bool) error {
	switch {
	case typ == "" || len(typ) > 1<<10:
		return fmt.Errorf("%w: entity type of %d bytes", sharding.ErrInvalidStateKey, len(typ))
	case shard < 0 || shard > math.MaxInt32:
		return fmt.Errorf("%w: shard %d", sharding.ErrInvalidStateKey, shard)
	case needID && id == "" || len(id) > 16<<10:
		return fmt.Errorf("%w: entity ID of %d bytes", sharding.ErrInvalidStateKey, len(id))
	}
	for _, v := range []string{typ, id} {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: %q is not UTF-8 text without NUL (PostgreSQL text)", sharding.ErrInvalidStateKey, v)
		}
	}
	return nil
}

func checkEpoch(epoch uint64) error {
	if epoch > math.MaxInt64 {
		return fmt.Errorf("%w: epoch %d over PostgreSQL's bigint", sharding.ErrInvalidStateKey, epoch)
	}
	return nil
}

// retry runs fn again (three attempts in all) when it failed before its request
// reached the server, or lost a deadlock or serialization conflict (rolled back), while
// ctx allows.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = fn(); err == nil || ctx.Err() != nil {
			return err
		}
		var pe *pgconn.PgError
		conflict := errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
		if !conflict && !pgconn.SafeToRetry(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
	return err
}

// Save implements sharding.StateStore: the snapshot is written, fenced, in one
// statement (shardhost_save) and durable when Save returns (the commit's WAL flush, as
// the server's synchronous_commit promises). Errors: sharding.ErrStaleEpoch,
// ErrStoreUnavailable (the server is unreachable, failed, or ctx ended: the write may
// or may not have committed), ErrStateTooLarge, ErrInvalidStateKey.
func (s *Store) Save(ctx context.Context, key sharding.EntityKey, epoch uint64, state []byte) error {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	err := s.saveBatch(ctx, key.Type, key.Shard, epoch, []sharding.StateSave{{ID: key.ID, State: state}})
	if err != nil {
		return fmt.Errorf("pgstore: save state of %s/%d/%q at epoch %d: %w", key.Type, key.Shard, key.ID, epoch, err)
	}
	return nil
}

// SaveBatch implements sharding.BatchStateStore: the snapshots go in one statement
// (arrays unnested into a multi-row upsert), fenced once, one transaction and one
// round trip per MaxBatchBytes of snapshots (several at once for a large batch). A
// repeated ID keeps its last snapshot. Errors as Save's; with several requests, those
// that succeeded stay written.
func (s *Store) SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []sharding.StateSave) error {
	if err := checkKey(typ, shard, "", false); err != nil {
		return err
	}
	for _, sv := range saves {
		if err := checkKey(typ, shard, sv.ID, true); err != nil {
			return err
		}
	}
	// The last snapshot of each ID, in ID order (concurrent batches lock rows alike).
	last := map[string]int{}
	for i, sv := range saves {
		last[sv.ID] = i
	}
	sorted := make([]sharding.StateSave, 0, len(last))
	for i, sv := range saves {
		if last[sv.ID] == i {
			sorted = append(sorted, sv)
		}
	}
	slices.SortFunc(sorted, func(a, b sharding.StateSave) int { return strings.Compare(a.ID, b.ID) })
	var parts [][]sharding.StateSave
	for len(sorted) > 0 {
		n, size := 0, 0
		for n < len(sorted) && (n == 0 || size+len(sorted[n].State) <= s.cfg.MaxBatchBytes) {
			size += len(sorted[n].State)
			n++
		}
		parts, sorted = append(parts, sorted[:n]), sorted[n:]
	}
	// Large batches go as several requests at once, on as many connections.
	errs := make([]error, len(parts))
	sem := make(chan struct{}, batchParallelism)
	var wg sync.WaitGroup
	for i, part := range parts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.saveBatch(ctx, typ, shard, epoch, part); err != nil {
				errs[i] = fmt.Errorf("pgstore: save %d snapshots of %s/%d at epoch %d: %w", len(part), typ, shard, epoch, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// batchParallelism caps the requests of one SaveBatch under way at once.
const batchParallelism = 4

func (s *Store) saveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []sharding.StateSave) error {
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	ids := make([]string, len(saves))
	states := make([][]byte, len(saves))
	for i, sv := range saves {
		if len(sv.State) > s.cfg.MaxStateSize {
			return fmt.Errorf("%w: %q: %d bytes, the cap is %d", sharding.ErrStateTooLarge, sv.ID, len(sv.State), s.cfg.MaxStateSize)
		}
		ids[i], states[i] = sv.ID, sv.State
		if states[i] == nil {
			states[i] = []byte{}
		}
	}
	var cur int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, "SELECT shardhost_save($1, $2, $3, $4, $5)", typ, int32(shard), int64(epoch), ids, states).Scan(&cur)
	})
	if err != nil {
		return s.fail("save", err)
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("%w: epoch %d is older than the shard's %d", sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}

// Load implements sharding.StateStore; with a read epoch in ctx (sharding.WithReadEpoch)
// it reads the shard's epoch row in the same statement. Errors: sharding.ErrNoState,
// sharding.ErrStaleEpoch (the shard's epoch is newer than the read epoch),
// ErrStoreUnavailable, ErrInvalidStateKey.
func (s *Store) Load(ctx context.Context, key sharding.EntityKey) ([]byte, error) {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	var state []byte
	readEpoch, checked := sharding.ReadEpoch(ctx)
	var cur *int64
	err := retry(ctx, func() error {
		if checked {
			return s.pool.QueryRow(ctx, `SELECT (SELECT epoch FROM shardhost_shard_epochs WHERE entity_type = $1 AND shard = $2),
	(SELECT state FROM shardhost_snapshots WHERE entity_type = $1 AND shard = $2 AND entity_id = $3)`,
				key.Type, int32(key.Shard), key.ID).Scan(&cur, &state)
		}
		return s.pool.QueryRow(ctx, "SELECT state FROM shardhost_snapshots WHERE entity_type = $1 AND shard = $2 AND entity_id = $3",
			key.Type, int32(key.Shard), key.ID).Scan(&state)
	})
	if err == nil && checked && cur != nil && uint64(*cur) > readEpoch {
		return nil, fmt.Errorf("pgstore: load state of %s/%d/%q: %w: read at epoch %d, and the shard is at %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, readEpoch, *cur)
	}
	if errors.Is(err, pgx.ErrNoRows) || err == nil && checked && state == nil {
		return nil, sharding.ErrNoState
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: load state of %s/%d/%q: %w", key.Type, key.Shard, key.ID, s.fail("load", err))
	}
	if state == nil {
		state = []byte{}
	}
	return state, nil
}

// Remember implements sharding.StateStore: a row in shardhost_remembered is inserted
// (remember) or deleted (forget), fenced as Save is. Errors: sharding.ErrStaleEpoch,
// ErrStoreUnavailable, ErrInvalidStateKey.
func (s *Store) Remember(ctx context.Context, key sharding.EntityKey, epoch uint64, remember bool) error {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	var cur int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, "SELECT shardhost_remember($1, $2, $3, $4, $5)",
			key.Type, int32(key.Shard), int64(epoch), key.ID, remember).Scan(&cur)
	})
	if err != nil {
		return fmt.Errorf("pgstore: remember %s/%d/%q (%v): %w", key.Type, key.Shard, key.ID, remember, s.fail("remember", err))
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("pgstore: remember %s/%d/%q: %w: epoch %d is older than the shard's %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}

var _ sharding.ShardFencer = (*Store)(nil)

// FenceShard implements sharding.ShardFencer: shardhost_fence alone, one statement
// and one round trip. It raises the shard's epoch row, waiting for the saves of older
// epochs under way (they hold a share lock on the row), so a read after it sees them
// and a later write with an older epoch is refused. Errors: sharding.ErrStaleEpoch,
// ErrStoreUnavailable, ErrInvalidStateKey.
func (s *Store) FenceShard(ctx context.Context, typ string, shard int, epoch uint64) error {
	if err := checkKey(typ, shard, "", false); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	var cur int64
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, "SELECT shardhost_fence($1, $2, $3)", typ, int32(shard), int64(epoch)).Scan(&cur)
	})
	if err != nil {
		return fmt.Errorf("pgstore: fence %s/%d at epoch %d: %w", typ, shard, epoch, s.fail("fence", err))
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("pgstore: fence %s/%d: %w: epoch %d is older than the shard's %d", typ, shard, sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}

// Remembered implements sharding.StateStore: the shard's remembered IDs, sorted
// bytewise. Errors: ErrStoreUnavailable, ErrInvalidStateKey.
func (s *Store) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	if err := checkKey(typ, shard, "", false); err != nil {
		return nil, err
	}
	var out []string
	err := retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, "SELECT entity_id FROM shardhost_remembered WHERE entity_type = $1 AND shard = $2", typ, int32(shard))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: remembered entities of %s/%d: %w", typ, shard, s.fail("list remembered", err))
	}
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out, nil
}

// MaxEpochs implements sharding.ExternalStateStore.
func (s *Store) MaxEpochs(ctx context.Context) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := retry(ctx, func() error {
		clear(out)
		rows, err := s.pool.Query(ctx, "SELECT entity_type, max(epoch) FROM shardhost_shard_epochs GROUP BY entity_type")
		if err != nil {
			return err
		}
		var typ string
		var epoch int64
		_, err = pgx.ForEachRow(rows, []any{&typ, &epoch}, func() error {
			out[typ] = uint64(epoch)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, s.fail("read the epochs", err)
	}
	return out, nil
}

// RememberedShards implements sharding.ExternalStateStore: the shards with remembered
// entities or with reminders (which a new home fires).
func (s *Store) RememberedShards(ctx context.Context) (map[string][]int, error) {
	out := map[string][]int{}
	err := retry(ctx, func() error {
		clear(out)
		rows, err := s.pool.Query(ctx, `SELECT entity_type, shard FROM shardhost_remembered
UNION SELECT entity_type, shard FROM shardhost_reminders ORDER BY 1, 2`)
		if err != nil {
			return err
		}
		var typ string
		var shard int32
		_, err = pgx.ForEachRow(rows, []any{&typ, &shard}, func() error {
			out[typ] = append(out[typ], int(shard))
			return nil
		})
		return err
	})
	if err != nil {
		return nil, s.fail("list the shards with remembered entities", err)
	}
	return out, nil
}

var _ sharding.TypeStateDeleter = (*Store)(nil)

// DeleteType implements sharding.TypeStateDeleter: the type's rows of
// shardhost_snapshots, shardhost_remembered, shardhost_journal,
// shardhost_journal_floors and shardhost_reminders go, in one transaction; its rows of shardhost_shard_epochs
// stay (fencing). Errors: ErrStoreUnavailable, ErrInvalidStateKey.
func (s *Store) DeleteType(ctx context.Context, typ string) error {
	if err := checkKey(typ, 0, "", false); err != nil {
		return err
	}
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, table := range []string{"shardhost_snapshots", "shardhost_remembered", "shardhost_journal", "shardhost_journal_floors", "shardhost_reminders"} {
				if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE entity_type = $1", typ); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("pgstore: delete the state of %s: %w", typ, s.fail("delete", err))
	}
	return nil
}

var _ sharding.EntityStateDeleter = (*Store)(nil)

// DeleteEntity implements sharding.EntityStateDeleter: in one transaction,
// shardhost_fence at epoch (a writer of an older epoch is refused from then on, and
// one under way is waited for), then the entity's rows of snapshots, remember marks,
// journal records and journal floor are deleted. The database is the one copy, so its
// fence is the tombstone. Errors: sharding.ErrStaleEpoch, ErrStoreUnavailable,
// ErrInvalidStateKey.
func (s *Store) DeleteEntity(ctx context.Context, key sharding.EntityKey, epoch uint64) error {
	if err := checkKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if err := checkEpoch(epoch); err != nil {
		return err
	}
	var cur int64
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT shardhost_fence($1, $2, $3)", key.Type, int32(key.Shard), int64(epoch)).Scan(&cur); err != nil {
				return err
			}
			if uint64(cur) > epoch {
				return nil
			}
			for _, table := range []string{"shardhost_snapshots", "shardhost_remembered", "shardhost_journal", "shardhost_journal_floors"} {
				if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE entity_type = $1 AND shard = $2 AND entity_id = $3",
					key.Type, int32(key.Shard), key.ID); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("pgstore: delete the state of %s/%d/%q: %w", key.Type, key.Shard, key.ID, s.fail("delete", err))
	}
	if uint64(cur) > epoch {
		return fmt.Errorf("pgstore: delete the state of %s/%d/%q: %w: epoch %d is older than the shard's %d",
			key.Type, key.Shard, key.ID, sharding.ErrStaleEpoch, epoch, cur)
	}
	return nil
}
