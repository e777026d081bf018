package sharding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// gateStore is a MemoryStateStore whose appends a test can hold or fail.
type gateStore struct {
	*MemoryStateStore
	mu      sync.Mutex
	hold    chan struct{} // appends wait on it while set
	entered chan struct{} // an append signals it as it starts waiting
	fail    error         // appends fail with it while set
}

func (g *gateStore) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	g.mu.Lock()
	hold, entered, fail := g.hold, g.entered, g.fail
	g.mu.Unlock()
	if hold != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	return g.MemoryStateStore.AppendJournal(ctx, key, epoch, recs)
}

func (g *gateStore) Unwrap() StateStore { return g.MemoryStateStore }

// The reply of a journaled message waits for its record: while the append is held,
// no reply; once it is durable, the reply.
func TestJournaledReplyWaitsForItsRecord(t *testing.T) {
	g := &gateStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = g }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "g", "inc") // activated, journaled
	hold := make(chan struct{})
	g.mu.Lock()
	g.hold, g.entered = hold, make(chan struct{}, 1)
	entered := g.entered
	g.mu.Unlock()
	replied := make(chan string, 1)
	go func() { replied <- mustAsk(t, n, "counter", "g", "inc") }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the append never started")
	}
	select {
	case r := <-replied:
		t.Fatalf("replied %q before its record was durable", r)
	default:
	}
	g.mu.Lock()
	g.hold = nil
	g.mu.Unlock()
	close(hold)
	if r := <-replied; r != "2" {
		t.Fatalf("reply %q, want 2", r)
	}
}

// A failed append fails the message (not saved) and takes back its change: the entity
// restarts from its base and journal, without it.
func TestFailedAppendFailsTheMessageAndLosesItsChange(t *testing.T) {
	g := &gateStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = g }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "f", "inc")
	g.mu.Lock()
	g.fail = fmt.Errorf("%w: the disk is full", ErrStoreUnavailable)
	g.mu.Unlock()
	if _, err := ask(t, n, "counter", "f", "inc"); !errors.Is(err, ErrStateNotSaved) {
		t.Fatalf("ask with a failing journal: %v, want ErrStateNotSaved", err)
	}
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()
	if got := mustAsk(t, n, "counter", "f", "get"); got != "1" {
		t.Fatalf("count %s after the failed append, want 1", got)
	}
	if got := activationsOf(tc, "counter/f"); got != 2 {
		t.Fatalf("%d activations, want 2 (the instance with the unsaved change stopped)", got)
	}
}

// A base is saved every journalBaseEvery records; it truncates the journal but for the
// type's history, and the next activation replays only what follows the base.
func TestBasesTruncateTheJournalButForTheHistory(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	total := journalBaseEvery + 10
	for i := 1; i <= total; i++ {
		if got := mustAsk(t, n, "counter", "b", "inc"); got != strconv.Itoa(i) {
			t.Fatalf("inc %d: %s", i, got)
		}
	}
	key := EntityKey{Type: "counter", Shard: abiShard("b", 10), ID: "b"}
	st, err := store.Load(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	base, err := DecodeBase(st)
	seq, state := base.Seq, base.State
	if err != nil || seq != journalBaseEvery || string(state) != fmt.Sprintf("%d|", journalBaseEvery) {
		t.Fatalf("base after record %d, state %q, %v; want after %d", seq, state, err, journalBaseEvery)
	}
	recs, err := store.ReadJournal(context.Background(), key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The history keeps every record so far (the type keeps DefaultHistory, no fewer),
	// a copy of the base after it (a KindBase record), and the records after that.
	if first, last := recs[0].Seq, recs[len(recs)-1].Seq; first != 1 || last != uint64(total)+1 {
		t.Fatalf("journal holds records %d to %d, want 1 to %d", first, last, total+1)
	}
	if e, err := DecodeJournalEntry(key, recs[journalBaseEvery]); err != nil || e.Kind != KindBase {
		t.Fatalf("record %d: %v, %v; want the base's copy", journalBaseEvery+1, e.Kind, err)
	}
	// A crash: the next activation starts from the base and replays the ten after it.
	if _, err := ask(t, n, "counter", "b", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	replayed := 0
	tc.nodes[0].factory.onReceive = func(key, msg string) {
		if msg == "inc" {
			replayed++
		}
	}
	if got := mustAsk(t, n, "counter", "b", "get"); got != strconv.Itoa(total) {
		t.Fatalf("count %s after the crash, want %d", got, total)
	}
	if replayed != 10 {
		t.Fatalf("the activation replayed %d messages, want the 10 after the base", replayed)
	}
}

// Under HistoryAll, bases are saved and copied into the journal as under any history,
// but no record goes: the journal holds every one from the entity's first.
func TestHistoryAllKeepsEveryRecord(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	// Three bases: under a history of DefaultHistory records, the second copy of a
	// base would truncate the journal before the first.
	total := 3*journalBaseEvery + 10
	for i := 1; i <= total; i++ {
		if got := mustAsk(t, n, "history-all", "a", "inc"); got != strconv.Itoa(i) {
			t.Fatalf("inc %d: %s", i, got)
		}
	}
	key := EntityKey{Type: "history-all", Shard: abiShard("a", 10), ID: "a"}
	recs, err := store.ReadJournal(context.Background(), key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	bases := 0
	for k, r := range recs {
		if r.Seq != uint64(k+1) {
			t.Fatalf("record %d where record %d should be: the journal was truncated", r.Seq, k+1)
		}
		if e, err := DecodeJournalEntry(key, r); err != nil {
			t.Fatal(err)
		} else if e.Kind == KindBase {
			bases++
		}
	}
	// Every message's record, and the copies of the bases (two at least: a revert
	// starts from one).
	if len(recs) != total+bases || bases < 2 {
		t.Fatalf("%d records with %d copies of a base, want %d messages' and a copy at least", len(recs), bases, total)
	}
}

// A journal with a corrupt record does not activate its entity: the record is not
// replayed, and the entity does not start without it either.
func TestACorruptRecordIsNeverReplayed(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "c", "inc")
	mustAsk(t, n, "counter", "c", "inc")
	key := EntityKey{Type: "counter", Shard: abiShard("c", 10), ID: "c"}
	store.mu.Lock()
	store.journals[key].records[2][2] ^= 0x10
	store.mu.Unlock()
	if _, err := ask(t, n, "counter", "c", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	_, err := ask(t, n, "counter", "c", "get")
	if !errors.Is(err, ErrStateNotLoaded) || !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("activation over a corrupt record: %v, want ErrStateNotLoaded with ErrCorruptRecord", err)
	}
}

// A type whose store keeps no journals saves a snapshot before each reply instead: what
// is acknowledged stays durable.
func TestJournalPolicyWithoutAJournalStoreSavesEveryMessage(t *testing.T) {
	store := &plainStore{NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "p", "inc")
	mustAsk(t, n, "counter", "p", "inc")
	if got := store.m.Saves(); got != 2 {
		t.Fatalf("%d saves, want 2 (one per message)", got)
	}
	if _, err := ask(t, n, "counter", "p", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "counter", "p", "get"); got != "2" {
		t.Fatalf("count %s after the crash, want 2", got)
	}
}

// plainStore is a StateStore without journals.
type plainStore struct{ m *MemoryStateStore }

func (p *plainStore) Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error {
	return p.m.Save(ctx, key, epoch, state)
}
func (p *plainStore) Load(ctx context.Context, key EntityKey) ([]byte, error) {
	return p.m.Load(ctx, key)
}
func (p *plainStore) Remember(ctx context.Context, key EntityKey, epoch uint64, remember bool) error {
	return p.m.Remember(ctx, key, epoch, remember)
}
func (p *plainStore) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	return p.m.Remembered(ctx, typ, shard)
}

// TestWriteContextSharesADeadlineWithinItsBounds: untraced journal appends share a
// context while its deadline is within the request timeout and the lease from now and
// at least half the timeout away; otherwise a new one is made, within both bounds.
func TestWriteContextSharesADeadlineWithinItsBounds(t *testing.T) {
	s := &Sharding{tel: &shardingTelemetry{}}
	within := func(ctx context.Context, left time.Duration) {
		t.Helper()
		d, ok := ctx.Deadline()
		if !ok || d.After(time.Now().Add(left)) {
			t.Fatalf("deadline %v (set: %v), want one within %v from now", d, ok, left)
		}
	}
	c1, cancel := s.writeContext(context.Background(), time.Hour, time.Hour)
	cancel()
	within(c1, time.Hour)
	c2, cancel := s.writeContext(context.Background(), time.Hour, 2*time.Hour)
	cancel()
	if c2 != c1 {
		t.Fatal("a second append within the bounds did not share the first's context")
	}
	// The lease ends sooner than the shared deadline: a context of its own, within it.
	c3, cancel := s.writeContext(context.Background(), time.Second, time.Second)
	cancel()
	if c3 == c1 {
		t.Fatal("an append with a second of lease left shared a deadline an hour away")
	}
	within(c3, time.Second)
	// Less than half the timeout is left of the shared one: a new one.
	c4, cancel := s.writeContext(context.Background(), time.Hour, time.Hour)
	cancel()
	if c4 == c3 {
		t.Fatal("an append shared a deadline under half its timeout away")
	}
	within(c4, time.Hour)
	if err := c4.Err(); err != nil {
		t.Fatalf("a shared context ended with its append's cancel: %v", err)
	}
}
