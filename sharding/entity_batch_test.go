package sharding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// countingStore is a MemoryStateStore that records how many records each journal
// append carried.
type countingStore struct {
	*MemoryStateStore
	mu      sync.Mutex
	appends []int
}

func (c *countingStore) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	c.mu.Lock()
	c.appends = append(c.appends, len(recs))
	c.mu.Unlock()
	return c.MemoryStateStore.AppendJournal(ctx, key, epoch, recs)
}

func (c *countingStore) Unwrap() StateStore { return c.MemoryStateStore }

// largestAppend is the most records one append carried.
func (c *countingStore) largestAppend() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	most := 0
	for _, n := range c.appends {
		most = max(most, n)
	}
	return most
}

// blockedEntity activates TYPE/id on n and holds its mailbox goroutine on a "block"
// tell until the returned function is called, so that what is told meanwhile queues.
func blockedEntity(t *testing.T, n *testNode, id string) (release func()) {
	t.Helper()
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	n.factory.onReceive = func(key, msg string) {
		if msg == "block" && key == "counter/"+id {
			select {
			case entered <- struct{}{}:
			default: // a replay of it, after the first
			}
			<-hold
		}
	}
	mustAsk(t, n, "counter", id, "get")
	if err := n.sharding.Tell(context.Background(), "counter", id, []byte("block")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the entity never took the blocking message")
	}
	return func() { close(hold) }
}

// Tells that queue while their entity is busy are handled in batches, their records
// appended together; each sender's tells keep their order, none is lost, and the
// records replay to the same state after a crash.
func TestBatchedTellsKeepEachSendersOrder(t *testing.T) {
	store := &countingStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	release := blockedEntity(t, n, "o")
	const senders, each = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				msg := fmt.Sprintf("append %d-%d", s, i)
				if err := n.sharding.Tell(context.Background(), "counter", "o", []byte(msg)); err != nil {
					errs <- err
					return
				}
			}
		}(s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	release()
	check := func(when string) {
		t.Helper()
		list := strings.Split(mustAsk(t, n, "counter", "o", "list"), ",")
		if len(list) != senders*each {
			t.Fatalf("%s: %d items, want %d", when, len(list), senders*each)
		}
		next := make([]int, senders)
		for _, item := range list {
			a, b, _ := strings.Cut(item, "-")
			s, _ := strconv.Atoi(a)
			i, _ := strconv.Atoi(b)
			if i != next[s] {
				t.Fatalf("%s: sender %d's tell %d came where %d was due: %v", when, s, i, next[s], list)
			}
			next[s]++
		}
	}
	check("handled")
	if most := store.largestAppend(); most < 2 {
		t.Fatalf("the largest journal append carried %d record, want a batch of several", most)
	}
	// The next activation replays the batches' records: the same list, in order.
	if _, err := ask(t, n, "counter", "o", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	check("replayed")
}

// A tell that fails in the middle of a batch fails alone, as before (a dead letter, not
// journaled); the tells before and after it count, and survive a crash.
func TestABatchWithAFailingTellInTheMiddle(t *testing.T) {
	store := &countingStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	release := blockedEntity(t, n, "f")
	dead := n.sharding.DeadLetters()
	for _, msg := range []string{"inc", "inc", "inc", "inc", "fail", "inc", "inc", "inc", "inc"} {
		if err := n.sharding.Tell(context.Background(), "counter", "f", []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	release()
	if got := mustAsk(t, n, "counter", "f", "get"); got != "8" {
		t.Fatalf("count %s, want 8", got)
	}
	if got := n.sharding.DeadLetters() - dead; got != 1 {
		t.Fatalf("%d dead letters, want 1 (the failed tell)", got)
	}
	if most := store.largestAppend(); most < 2 {
		t.Fatalf("the largest journal append carried %d record, want a batch of several", most)
	}
	if _, err := ask(t, n, "counter", "f", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "counter", "f", "get"); got != "8" {
		t.Fatalf("count %s after the crash, want 8", got)
	}
}

// A tell that keeps trapping in the middle of a batch pauses its entity as a single one
// does: the tells before it count, those after it wait behind it, and a skip lets them
// through.
func TestATrapInABatchPausesItsEntityAsBefore(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	release := blockedEntity(t, n, "p")
	for _, msg := range []string{"inc", "inc", "inc", "crash", "inc", "inc"} {
		if err := n.sharding.Tell(ctx, "counter", "p", []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	release()
	testutil.EventuallyNil(t, 30*time.Second, "the entity paused", func() error {
		_, err := ask(t, n, "counter", "p", "get")
		if !errors.Is(err, ErrEntityPaused) {
			return errors.New("not paused: " + errString(err))
		}
		return nil
	})
	if skipped, err := n.sharding.Skip(ctx, "counter", "p"); err != nil || !skipped {
		t.Fatalf("skip: %v %v", skipped, err)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the tells behind the poison handled", func() error {
		if got := mustAsk(t, n, "counter", "p", "get"); got != "5" {
			return errors.New("count " + got)
		}
		return nil
	})
}

// An ask queued among tells joins their batch: its reply shows the tells before it and
// none after, and comes once the batch's records are durable.
func TestAnAskInABatchSeesTheTellsBeforeIt(t *testing.T) {
	store := &countingStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	release := blockedEntity(t, n, "a")
	tell := func(msg string) {
		t.Helper()
		if err := n.sharding.Tell(context.Background(), "counter", "a", []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	reg := n.sharding.region("counter")
	reg.mu.Lock()
	e := reg.hostedLocked(abiShard("a", 10)).entities["a"]
	reg.mu.Unlock()
	queued := func(want int) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, "the ask in the mailbox", func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.queued() == want
		})
	}
	tell("append 1")
	tell("append 2")
	replied := make(chan string, 1)
	go func() {
		r, err := ask(t, n, "counter", "a", "list")
		if err != nil {
			replied <- err.Error()
			return
		}
		replied <- string(r.Payload)
	}()
	queued(3)
	tell("append 3")
	release()
	if got := <-replied; got != "1,2" {
		t.Fatalf("the ask's reply %q, want 1,2", got)
	}
	if got := mustAsk(t, n, "counter", "a", "list"); got != "1,2,3" {
		t.Fatalf("list %q, want 1,2,3", got)
	}
	if most := store.largestAppend(); most < 3 {
		t.Fatalf("the largest journal append carried %d records, want the batch of 4", most)
	}
}
