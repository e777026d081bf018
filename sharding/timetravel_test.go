package sharding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An entity reverted to one of its records has the state it had then, its journal a
// record of the revert, and goes on from there, through a crash too; a fork starts a
// new entity from another's state at a record. What cannot be done is refused,
// naming why, and changes nothing.
func TestRevertAndFork(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		mustAsk(t, n, "counter", "r", "inc") // records 1 to 5
	}
	seq, err := n.sharding.Revert(ctx, "counter", "r", 3)
	if err != nil || seq != 6 {
		t.Fatalf("revert to 3: record %d, %v; want record 6", seq, err)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "3" {
		t.Fatalf("count after the revert %s, want 3", got)
	}
	if got := mustAsk(t, n, "counter", "r", "inc"); got != "4" { // record 8
		t.Fatalf("inc after the revert %s, want 4", got)
	}
	if _, err := ask(t, n, "counter", "r", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("count after a crash %s, want 4", got)
	}
	key := EntityKey{Type: "counter", Shard: abiShard("r", 10), ID: "r"}
	recs, err := store.ReadJournal(ctx, key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		e, err := DecodeJournalEntry(key, r)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == KindBase {
			kinds = append(kinds, "base")
			continue
		}
		kinds = append(kinds, e.Kind.String()+":"+string(e.Payload))
	}
	// The revert's base is copied to the journal: a revert to a record after it
	// starts there.
	if want := "message:inc message:inc message:inc message:inc message:inc revert:revert to record 3 base message:get message:inc message:get"; strings.Join(kinds, " ") != want {
		t.Fatalf("journal %v\nwant      %s", kinds, want)
	}

	// Refusals.
	for _, c := range []struct {
		to   uint64
		want string
	}{{0, "records count from 1"}, {100, "past the journal's last, 10"}} {
		if _, err := n.sharding.Revert(ctx, "counter", "r", c.to); !errors.Is(err, ErrNotInHistory) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("revert to %d: %v, want ErrNotInHistory saying %q", c.to, err, c.want)
		}
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("count after refused reverts %s, want 4", got)
	}
	if _, err := n.sharding.Revert(ctx, "passive", "p", 1); !errors.Is(err, ErrNotInHistory) {
		t.Fatalf("revert of a type without a journal: %v, want ErrNotInHistory", err)
	}

	// Forks.
	if err := n.sharding.Fork(ctx, "counter", "r", "r2", 9); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "counter", "r2", "get"); got != "4" {
		t.Fatalf("the fork at record 9: %s, want 4", got)
	}
	if got := mustAsk(t, n, "counter", "r2", "inc"); got != "5" {
		t.Fatalf("the fork goes on: %s, want 5", got)
	}
	if got := mustAsk(t, n, "counter", "r", "get"); got != "4" {
		t.Fatalf("the source after a fork: %s, want 4", got)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r3", 0); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "counter", "r3", "get"); got != "4" {
		t.Fatalf("the fork at the last record: %s, want 4", got)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r2", 0); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("a fork onto an existing entity: %v, want ErrEntityExists", err)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r", 0); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("a fork onto itself: %v, want ErrEntityExists", err)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r4", 2); err != nil {
		t.Fatalf("a fork behind the source's last base, from its first record: %v", err)
	}
	if got := mustAsk(t, n, "counter", "r4", "get"); got != "2" {
		t.Fatalf("the fork at record 2: %s, want 2", got)
	}
	if err := n.sharding.Fork(ctx, "counter", "r", "r5", 500); !errors.Is(err, ErrNotInHistory) {
		t.Fatalf("a fork past the source's last record: %v, want ErrNotInHistory", err)
	}
	if got := mustAsk(t, n, "counter", "r2", "get"); got != "5" {
		t.Fatalf("r2 after a refused fork onto it: %s, want 5", got)
	}
}

// A revert reaches behind the entity's base as far as its type's history: from the
// journal's first record while it has it, then from the copies of bases the journal
// keeps (KindBase records), the records before the previous copy truncated. Before
// that, it is refused, naming what the type keeps, and nothing changes.
func TestRevertBehindTheBaseWithinTheHistory(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := EntityKey{Type: "history", Shard: abiShard("h", 10), ID: "h"}
	kinds := func() (first uint64, bases []uint64) {
		t.Helper()
		recs, err := store.ReadJournal(ctx, key, 0, 0)
		if err != nil || len(recs) == 0 {
			t.Fatalf("journal: %d records, %v", len(recs), err)
		}
		for _, r := range recs {
			e, err := DecodeJournalEntry(key, r)
			if err != nil {
				t.Fatal(err)
			}
			if e.Kind == KindBase {
				bases = append(bases, e.Seq)
			}
		}
		return recs[0].Seq, bases
	}

	// Records 1 to 1000, a base after 1000 and its copy, record 1001, after the reply
	// to 1000: the get after them waits for it.
	for i := 0; i < journalBaseEvery; i++ {
		mustAsk(t, n, "history", "h", "inc")
	}
	mustAsk(t, n, "history", "h", "get")
	if first, bases := kinds(); first != 1 || len(bases) != 1 || bases[0] != journalBaseEvery+1 {
		// The first base's copy: none before it, so it is due.
		t.Fatalf("journal from %d with copies of bases at %v, want from 1 with one at %d", first, bases, journalBaseEvery+1)
	}
	// Behind the base, from the journal's first record.
	if _, err := n.sharding.Revert(ctx, "history", "h", 10); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "history", "h", "get"); got != "10" {
		t.Fatalf("count after a revert to record 10: %s, want 10", got)
	}
	// Records up to a second base: its copy truncates the journal before the first.
	for i := 0; i < journalBaseEvery; i++ {
		mustAsk(t, n, "history", "h", "inc")
	}
	mustAsk(t, n, "history", "h", "get")
	first, bases := kinds()
	if len(bases) != 2 || first != bases[0] {
		t.Fatalf("journal from %d with copies of bases at %v, want it to start at the first of two", first, bases)
	}
	// From the first copy kept (the revert's, a count of 10), the get and an inc.
	to := bases[0] + 2
	if _, err := n.sharding.Revert(ctx, "history", "h", to); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "history", "h", "get"); got != "11" {
		t.Fatalf("count after a revert to record %d: %s, want 11", to, got)
	}
	// Before the history: refused, and nothing changes.
	if _, err := n.sharding.Revert(ctx, "history", "h", 10); !errors.Is(err, ErrNotInHistory) ||
		!strings.Contains(err.Error(), "the last 5 records") || !strings.Contains(err.Error(), "before the oldest a revert reaches, "+strconv.FormatUint(bases[0]-1, 10)) {
		t.Fatalf("revert to record 10 after truncation: %v, want ErrNotInHistory naming the history and the oldest", err)
	}
	if got := mustAsk(t, n, "history", "h", "get"); got != "11" {
		t.Fatalf("count after a refused revert %s, want 11", got)
	}
	// A fork from behind the base starts from the same copy.
	if err := n.sharding.Fork(ctx, "history", "h", "h2", bases[0]); err != nil {
		t.Fatal(err)
	}
	if got := mustAsk(t, n, "history", "h2", "get"); got != "10" {
		t.Fatalf("fork at record %d: %s, want 10", bases[0], got)
	}
}

func TestHistorySettings(t *testing.T) {
	for _, c := range []struct {
		st   TypeSettings
		want string
	}{
		{TypeSettings{Name: "a", NumberOfShards: 1, History: -3}, "history of -3 records"},
		{TypeSettings{Name: "a", NumberOfShards: 1, HistoryAge: -time.Second}, "history of -1s"},
		{TypeSettings{Name: "a", NumberOfShards: 1, HistoryAge: 366 * 24 * time.Hour}, "up to a year"},
	} {
		if err := c.st.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.st, err, c.want)
		}
	}
	byCount := TypeSettings{History: 5}
	byAge := TypeSettings{History: 5, HistoryAge: time.Hour}
	none := TypeSettings{History: -1}
	all := TypeSettings{History: HistoryAll}
	if err := (&TypeSettings{Name: "a", NumberOfShards: 1, History: HistoryAll}).Validate(); err != nil {
		t.Errorf("history all: %v", err)
	}
	for _, c := range []struct {
		st      TypeSettings
		records uint64
		age     time.Duration
		passed  bool
	}{
		{byCount, 4, 10 * time.Hour, false}, {byCount, 5, 0, true},
		{byAge, 1000, 59 * time.Minute, false}, {byAge, 1, time.Hour, true},
		{none, 1000, time.Hour, false},
		{all, DefaultHistory - 1, time.Hour, false}, {all, DefaultHistory, 0, true},
	} {
		if got := c.st.historyPassed(c.records, c.age); got != c.passed {
			t.Errorf("%+v after %d records and %v: passed %v, want %v", c.st, c.records, c.age, got, c.passed)
		}
	}
	if byAge.historyLimit() != "the last 1h0m0s" || none.keepsHistory() {
		t.Errorf("limit %q, none keeps %v", byAge.historyLimit(), none.keepsHistory())
	}
	if !all.keepsHistory() || !all.KeepsAllHistory() || all.historyLimit() != "every record" || byCount.KeepsAllHistory() ||
		(TypeSettings{History: HistoryAll, HistoryAge: time.Hour}).KeepsAllHistory() {
		t.Errorf("all: keeps %v, all %v, limit %q; by count: all %v", all.keepsHistory(), all.KeepsAllHistory(), all.historyLimit(),
			byCount.KeepsAllHistory())
	}
}

// capStore refuses journal records that hold a copy of a base, as a store whose cap
// of a record the entity's state passes does (ErrStateTooLarge).
type capStore struct{ *MemoryStateStore }

func (c capStore) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	for _, r := range recs {
		if e, err := DecodeJournalEntry(key, r); err == nil && e.Kind == KindBase {
			return fmt.Errorf("%w: a copy of a base of %d bytes", ErrStateTooLarge, len(r.Data))
		}
	}
	return c.MemoryStateStore.AppendJournal(ctx, key, epoch, recs)
}

// A base too large for a journal record leaves no copy: the journal keeps the
// history's count of records behind the base, for `shardhost history`, and a revert
// behind the base is refused, saying why.
func TestHistoryWithoutACopyOfTheBase(t *testing.T) {
	store := capStore{NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < journalBaseEvery; i++ {
		mustAsk(t, n, "history", "h", "inc")
	}
	mustAsk(t, n, "history", "h", "get") // after the base's truncation
	key := EntityKey{Type: "history", Shard: abiShard("h", 10), ID: "h"}
	recs, err := store.ReadJournal(ctx, key, 0, 0)
	if err != nil || len(recs) == 0 || recs[0].Seq != journalBaseEvery+1-5 || recs[len(recs)-1].Seq != journalBaseEvery+1 {
		t.Fatalf("journal of %d records from %d, %v; want %d to %d", len(recs), recs[0].Seq, err, journalBaseEvery+1-5, journalBaseEvery+1)
	}
	if _, err := n.sharding.Revert(ctx, "history", "h", journalBaseEvery-1); !errors.Is(err, ErrNotInHistory) || !strings.Contains(err.Error(), "holds no copy of an earlier base") {
		t.Fatalf("revert behind the base: %v, want ErrNotInHistory saying there is no copy", err)
	}
	if _, err := n.sharding.Revert(ctx, "history", "h", journalBaseEvery); err != nil {
		t.Fatalf("revert to the base: %v", err)
	}
	if got := mustAsk(t, n, "history", "h", "get"); got != strconv.Itoa(journalBaseEvery) {
		t.Fatalf("count after the revert %s", got)
	}
}
