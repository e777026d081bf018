package sharding

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func askKeyed(t *testing.T, n *testNode, typ, id, msg, key string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := n.sharding.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: []byte(msg), IdempotencyKey: key})
	return string(r.Payload), err
}

// A message with a key the entity remembers gets the first one's reply (or error) and
// is not handled again: not while active, not after a passivation (the base keeps the
// keys), not after a crash (the journal does), under the journal and the passivation
// policy alike while the entity is active.
func TestIdempotencyKeyAnswersARetryWithTheFirstOutcome(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	var handled atomic.Int64
	n.factory.onReceive = func(key, msg string) {
		if key == "counter/k" && msg == "inc" {
			handled.Add(1)
		}
	}
	for i, want := range []string{"1", "1", "1"} {
		if got, err := askKeyed(t, n, "counter", "k", "inc", "deposit-1"); err != nil || got != want {
			t.Fatalf("inc %d with the key: %q %v, want %s", i, got, err, want)
		}
	}
	if got, _ := askKeyed(t, n, "counter", "k", "inc", "deposit-2"); got != "2" {
		t.Fatalf("inc with another key: %q, want 2", got)
	}
	if got := handled.Load(); got != 2 {
		t.Fatalf("the entity handled %d incs, want 2", got)
	}
	// An entity error is remembered too, with its code.
	_, err1 := askKeyed(t, n, "counter", "k", "fail", "f-1")
	_, err2 := askKeyed(t, n, "counter", "k", "fail", "f-1")
	if ErrorCode(err1) != CodeEntityError || ErrorCode(err2) != CodeEntityError || err1.Error() != err2.Error() {
		t.Fatalf("a failed message and its retry: %v / %v", err1, err2)
	}
	mustAsk(t, n, "counter", "k", "passivate") // the next activation replays the keys
	if got, _ := askKeyed(t, n, "counter", "k", "inc", "deposit-1"); got != "1" {
		t.Fatalf("the first key after a passivation: %q, want the first reply 1", got)
	}
	if got, _ := askKeyed(t, n, "counter", "k", "inc", "deposit-3"); got != "3" {
		t.Fatalf("a new key after the passivation: %q, want 3", got)
	}
	if _, err := ask(t, n, "counter", "k", "crash"); ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	// deposit-3 is in the journal after the base: replayed, remembered.
	for _, c := range []struct{ key, want string }{{"deposit-3", "3"}, {"deposit-2", "2"}, {"deposit-1", "1"}} {
		if got, err := askKeyed(t, n, "counter", "k", "inc", c.key); err != nil || got != c.want {
			t.Fatalf("%s after the crash: %q %v, want %s", c.key, got, err, c.want)
		}
	}
	if got := mustAsk(t, n, "counter", "k", "get"); got != "3" {
		t.Fatalf("count %s, want 3 (three keyed incs)", got)
	}
	// A key over the cap is refused before it is sent.
	if _, err := askKeyed(t, n, "counter", "k", "inc", strings.Repeat("k", MaxIdempotencyKeyLen+1)); !errors.Is(err, ErrInvalidIdempotencyKey) || ErrorCode(err) != CodeBadRequest {
		t.Fatalf("a key of %d bytes: %v, want ErrInvalidIdempotencyKey", MaxIdempotencyKeyLen+1, err)
	}
}

// The remembered keys: kept for the retention, the oldest forgotten past the bounds,
// and through their encoding.
func TestIdemTable(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	var tab idemTable
	tab.put(&idemEntry{key: "a", seq: 1, at: now.UnixMilli(), reply: []byte("ra")}, now, time.Hour)
	tab.put(&idemEntry{key: "b", seq: 2, at: now.Add(time.Minute).UnixMilli(), outcome: "entity-error", reply: []byte("no")}, now, time.Hour)
	if e, ok := tab.get("a", now.Add(59*time.Minute), time.Hour); !ok || string(e.reply) != "ra" {
		t.Fatalf("a within the retention: %+v %v", e, ok)
	}
	if _, ok := tab.get("a", now.Add(61*time.Minute), time.Hour); ok {
		t.Fatal("a past the retention is still remembered")
	}
	back, err := decodeIdemTable(tab.encode(), now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := back.get("b", now, time.Hour); !ok || e.outcome != "entity-error" || string(e.reply) != "no" || e.seq != 2 {
		t.Fatalf("b after a round trip: %+v %v", e, ok)
	}
	// Decoding forgets what has expired.
	if later, _ := decodeIdemTable(tab.encode(), now.Add(61*time.Minute), time.Hour); len(later.byKey) != 1 {
		t.Fatalf("%d keys decoded an hour on, want 1", len(later.byKey))
	}
	// A replaced key is remembered once, with its new outcome.
	tab.put(&idemEntry{key: "a", seq: 3, at: now.Add(2 * time.Minute).UnixMilli(), reply: []byte("ra2")}, now, time.Hour)
	if e, _ := tab.get("a", now, time.Hour); e.seq != 3 || len(tab.byKey) != 2 {
		t.Fatalf("a replaced: %+v, %d keys", e, len(tab.byKey))
	}
	// Past the bounds, the oldest go first.
	var big idemTable
	for k := 0; k < maxIdempotencyKeys+10; k++ {
		big.put(&idemEntry{key: fmt.Sprint(k), at: now.UnixMilli()}, now, time.Hour)
	}
	if len(big.byKey) != maxIdempotencyKeys {
		t.Fatalf("%d keys remembered, want the cap %d", len(big.byKey), maxIdempotencyKeys)
	}
	if _, ok := big.get("0", now, time.Hour); ok {
		t.Fatal("the oldest key is still remembered past the cap")
	}
	if _, ok := big.get(fmt.Sprint(maxIdempotencyKeys+9), now, time.Hour); !ok {
		t.Fatal("the newest key is forgotten")
	}
	huge := bytes.Repeat([]byte("x"), maxIdempotencyBytes/3)
	var sized idemTable
	for k := 0; k < 4; k++ {
		sized.put(&idemEntry{key: fmt.Sprint(k), at: now.UnixMilli(), reply: huge}, now, time.Hour)
	}
	if sized.bytes > maxIdempotencyBytes || len(sized.byKey) != 2 {
		t.Fatalf("%d bytes in %d keys, want at most %d bytes", sized.bytes, len(sized.byKey), maxIdempotencyBytes)
	}
	if _, err := decodeIdemTable([]byte{5, 1}, now, time.Hour); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("garbage keys: %v, want ErrCorruptRecord", err)
	}
}

// A reminder's firings are remembered by name, the latest due only: an interval
// reminder costs one key however often it fires, a firing of its latest due or of an
// earlier one (a duplicate) is answered as already handled, a later one is new, and a
// base keeps the same.
func TestIdemTableKeepsTheLatestFiringOfEachReminder(t *testing.T) {
	now := time.UnixMilli(1_000_000_000)
	var tab idemTable
	for k := int64(0); k < 1000; k++ {
		due := 1000 + 60_000*k
		if _, ok := tab.get(reminderIdempotencyKey("tick", due), now, time.Hour); ok {
			t.Fatalf("firing %d (due %d) answered as handled before it was", k, due)
		}
		tab.put(&idemEntry{key: reminderIdempotencyKey("tick", due), seq: uint64(k + 1), at: now.UnixMilli()}, now, time.Hour)
	}
	tab.put(&idemEntry{key: reminderIdempotencyKey("other", 5), seq: 2000, at: now.UnixMilli()}, now, time.Hour)
	tab.put(&idemEntry{key: "deposit-1", seq: 2001, at: now.UnixMilli()}, now, time.Hour)
	if len(tab.byKey) != 3 {
		t.Fatalf("%d keys remembered after 1,000 firings of one reminder, one of another and a caller's key: want 3", len(tab.byKey))
	}
	latest := 1000 + 60_000*int64(999)
	for _, due := range []int64{latest, latest - 60_000, 1000} {
		e, ok := tab.get(reminderIdempotencyKey("tick", due), now, time.Hour)
		if !ok || e.seq != 1000 {
			t.Fatalf("a duplicate firing due %d: %+v %v, want the latest firing's entry (seq 1000)", due, e, ok)
		}
	}
	if _, ok := tab.get(reminderIdempotencyKey("tick", latest+60_000), now, time.Hour); ok {
		t.Fatal("the next due answered as handled")
	}
	// A name that is another's prefix, or a caller's key that looks alike, is its own.
	if _, ok := tab.get(reminderIdempotencyKey("tic", latest), now, time.Hour); ok {
		t.Fatal("a reminder named tic answered by tick's firing")
	}
	// An earlier due put after a later one (a replay out of order) keeps the later.
	tab.put(&idemEntry{key: reminderIdempotencyKey("other", 1), seq: 3000, at: now.UnixMilli()}, now, time.Hour)
	if e, ok := tab.get(reminderIdempotencyKey("other", 5), now, time.Hour); !ok || e.seq != 2000 {
		t.Fatalf("other's latest after an earlier due was put: %+v %v", e, ok)
	}
	// The base: the same three keys, and the same answers.
	back, err := decodeIdemTable(tab.encode(), now, time.Hour)
	if err != nil || len(back.byKey) != 3 {
		t.Fatalf("decoded: %d keys, %v; want 3", len(back.byKey), err)
	}
	if e, ok := back.get(reminderIdempotencyKey("tick", 1000), now, time.Hour); !ok || e.seq != 1000 {
		t.Fatalf("a duplicate firing after the base: %+v %v", e, ok)
	}
	// Retention still applies.
	if _, ok := back.get(reminderIdempotencyKey("tick", latest), now.Add(2*time.Hour), time.Hour); ok {
		t.Fatal("a firing remembered past the retention")
	}
	for _, key := range []string{"\x00reminder:", "\x00reminder:x", "\x00reminder:12", "\x00reminder:abc:n", "reminder:5:n"} {
		if _, _, ok := parseReminderIdempotencyKey(key); ok {
			t.Fatalf("%q parsed as a reminder's firing", key)
		}
	}
}
