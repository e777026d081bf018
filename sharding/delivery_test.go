package sharding

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// sendingEntity is the entity of the types "sender*": a fakeEntity that also sends.
// "tell TYPE/ID MSG" counts one and holds a tell for its outbox (OutboxEntity);
// "ask TYPE/ID MSG" asks and replies the answer. A replayed message sends nothing
// (its record's sends are the outbox's).
type sendingEntity struct {
	*fakeEntity
	held []Message
}

var _ OutboxEntity = (*sendingEntity)(nil)

func (e *sendingEntity) TakeTells() []Message {
	t := e.held
	e.held = nil
	return t
}

func (e *sendingEntity) Receive(ctx context.Context, payload []byte) ([]byte, error) {
	mi, _ := MessageInfoFrom(ctx)
	verb, rest, _ := strings.Cut(string(payload), " ")
	target, body, _ := strings.Cut(rest, " ")
	typ, id, _ := strings.Cut(target, "/")
	switch verb {
	case "tell":
		e.n++
		if !mi.Replay {
			e.held = append(e.held, Message{EntityType: typ, EntityID: id, Payload: []byte(body), Sender: e.key})
		}
		return []byte(strconv.Itoa(e.n)), nil
	case "ask":
		if mi.Replay {
			return nil, nil
		}
		r, err := e.f.s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: []byte(body), Sender: e.key})
		return r.Payload, err
	}
	return e.fakeEntity.Receive(ctx, payload)
}

// deliveryStore is a MemoryStateStore whose appends and loads a test can fail per
// entity: refuse fails an append before it is written, lose after (the record is
// durable, the writer hears it is not: a crash between the two), noLoad fails a load.
type deliveryStore struct {
	*MemoryStateStore
	mu     sync.Mutex
	refuse map[string]bool
	lose   map[string]int // appends left to lose
	noLoad map[string]bool
}

func newDeliveryStore() *deliveryStore {
	return &deliveryStore{MemoryStateStore: NewMemoryStateStore(), refuse: map[string]bool{}, lose: map[string]int{}, noLoad: map[string]bool{}}
}

func (d *deliveryStore) set(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

func (d *deliveryStore) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	k := key.Type + "/" + key.ID
	d.mu.Lock()
	refuse, lose := d.refuse[k], d.lose[k] > 0
	if lose {
		d.lose[k]--
	}
	d.mu.Unlock()
	if refuse {
		return ErrStoreUnavailable
	}
	if err := d.MemoryStateStore.AppendJournal(ctx, key, epoch, recs); err != nil {
		return err
	}
	if lose {
		return ErrStoreUnavailable
	}
	return nil
}

func (d *deliveryStore) Load(ctx context.Context, key EntityKey) ([]byte, error) {
	d.mu.Lock()
	no := d.noLoad[key.Type+"/"+key.ID]
	d.mu.Unlock()
	if no {
		return nil, ErrStoreUnavailable
	}
	return d.MemoryStateStore.Load(ctx, key)
}

func (d *deliveryStore) Unwrap() StateStore { return d.MemoryStateStore }

// journalOf reads and decodes typ/id's journal from the store.
func journalOf(t *testing.T, st *MemoryStateStore, typ, id string, shards int) []JournalEntry {
	t.Helper()
	key := EntityKey{Type: typ, Shard: abiShard(id, shards), ID: id}
	recs, err := st.ReadJournal(context.Background(), key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]JournalEntry, len(recs))
	for k, r := range recs {
		if out[k], err = DecodeJournalEntry(key, r); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// sendsIn returns the sends the records hold.
func sendsIn(entries []JournalEntry) []Send {
	var out []Send
	for _, en := range entries {
		out = append(out, en.Sends...)
	}
	return out
}

func countOf(t *testing.T, n *testNode, typ, id string) int {
	t.Helper()
	v, err := strconv.Atoi(mustAsk(t, n, typ, id, "get"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A tell leaves from the outbox once its record is durable, numbered in the sender's
// sequence, and counts once at the receiver, whose records carry the number; the
// sender's next activation sends its records' tells again and the receiver's marks,
// replayed from its own journal, answer them without handling them.
func TestOutboxTellCountsOnceAndARedeliveryIsARepeat(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	for i := 1; i <= 3; i++ {
		if got := mustAsk(t, n, "sender", "s", "tell counter/c inc"); got != strconv.Itoa(i) {
			t.Fatalf("tell %d: %q", i, got)
		}
	}
	testutil.Eventually(t, 20*time.Second, "three increments at the receiver", func() bool { return countOf(t, n, "counter", "c") == 3 })
	sends := sendsIn(journalOf(t, store.MemoryStateStore, "sender", "s", 10))
	if len(sends) != 3 || sends[0].Seq != 1 || sends[2].Seq != 3 || sends[1].EntityID != "c" || string(sends[1].Payload) != "inc" {
		t.Fatalf("the sender's records hold the sends %+v, want #1..#3 to counter/c", sends)
	}
	var seqs []uint64
	for _, en := range journalOf(t, store.MemoryStateStore, "counter", "c", 10) {
		if en.Sender == "sender/s" {
			seqs = append(seqs, en.SenderSeq)
		}
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("the receiver's records carry the sender sequences %v, want [1 2 3]", seqs)
	}
	// Both passivate; the sender's next activation replays its records, whose sends
	// leave again; the receiver, activated from its journal, knows them.
	mustAsk(t, n, "counter", "c", "passivate")
	mustAsk(t, n, "sender", "s", "passivate")
	if got := mustAsk(t, n, "sender", "s", "get"); got != "3" {
		t.Fatalf("sender after its activation: %s", got)
	}
	testutil.Eventually(t, 20*time.Second, "the sender's outbox drained", func() bool { return outboxLen(n, "sender", "s") == 0 })
	if got := countOf(t, n, "counter", "c"); got != 3 {
		t.Fatalf("receiver = %d after the sender's redelivery, want 3", got)
	}
}

// outboxLen is typ/id's pending sends on n; -1 when n has no mailbox of it.
func outboxLen(n *testNode, typ, id string) int {
	r := n.sharding.region(typ)
	if r == nil {
		return -1
	}
	r.mu.Lock()
	sh := r.hostedLocked(abiShard(id, 10))
	var e *entity
	if sh != nil {
		e = sh.entities[id]
	}
	r.mu.Unlock()
	if e == nil {
		return -1
	}
	return e.ob.len()
}

// The receiver crashes after its record is durable and before its acknowledgment
// leaves (the append reports a failure after writing it): the outbox sends the tell
// again, and the receiver, activated from its journal, knows it: it counts once.
func TestReceiverCrashAfterItsRecordCountsTheTellOnce(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "r", "get") // activated
	store.set(func() { store.lose["counter/r"] = 1 })
	mustAsk(t, n, "sender", "s", "tell counter/r inc")
	testutil.Eventually(t, 20*time.Second, "the sender's outbox drained", func() bool { return outboxLen(n, "sender", "s") == 0 })
	if got := countOf(t, n, "counter", "r"); got != 1 {
		t.Fatalf("receiver = %d, want 1: the tell counted once", got)
	}
	var handled int
	for _, en := range journalOf(t, store.MemoryStateStore, "counter", "r", 10) {
		if en.SenderSeq != 0 {
			handled++
		}
	}
	if handled != 1 {
		t.Fatalf("the receiver's journal holds %d records of the tell, want 1", handled)
	}
}

// crashVictim returns a member other than the first (which runs the coordinator) and
// an ID of typ that it hosts.
func crashVictim(t *testing.T, tc *testCluster, typ, prefix string) (*testNode, string) {
	t.Helper()
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		if home := homeOf(t, tc, typ, id); home != tc.nodes[0] {
			return home, id
		}
	}
}

// The sender's member crashes after the sender's record is durable and before the
// receiver acknowledged the tell (it could not take it): the tell is not lost. The
// sender's next activation, on another member, sends it from its journal, once.
func TestSenderCrashAfterItsRecordLosesNoTell(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 3, withConfig(func(c *Config) { c.States = store }), withFastFailureDetection())
	victim, id := crashVictim(t, tc, "sender", "s")
	store.set(func() { store.refuse["counter/x"] = true })
	mustAsk(t, victim, "sender", id, "tell counter/x inc")
	if sends := sendsIn(journalOf(t, store.MemoryStateStore, "sender", id, 10)); len(sends) != 1 {
		t.Fatalf("the sender's records hold %d sends, want 1", len(sends))
	}
	victim.crash(true)
	tc.waitMembers()
	store.set(func() { store.refuse["counter/x"] = false })
	live := tc.live()[0]
	if got := mustAsk(t, live, "sender", id, "get"); got != "1" { // its activation elsewhere
		t.Fatalf("sender after the crash: %s", got)
	}
	testutil.Eventually(t, 30*time.Second, "the tell at the receiver", func() bool { return countOf(t, live, "counter", "x") == 1 })
	mustAsk(t, live, "sender", id, "passivate")
	mustAsk(t, live, "sender", id, "get") // sends its records' tell again: a repeat
	testutil.Eventually(t, 20*time.Second, "the sender's outbox drained", func() bool {
		return outboxLen(hostOf(t, tc, live, "sender", id), "sender", id) == 0
	})
	if got := countOf(t, live, "counter", "x"); got != 1 {
		t.Fatalf("receiver = %d, want 1", got)
	}
}

// Both crash: the receiver's record of the tell is durable but its acknowledgment is
// lost, and the sender's member crashes before the outbox sends it again. The
// sender's next activation sends it again, and the receiver knows it: once.
func TestSenderAndReceiverCrashCountTheTellOnce(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 3, withConfig(func(c *Config) { c.States = store }), withFastFailureDetection())
	victim, id := crashVictim(t, tc, "sender", "s")
	mustAsk(t, tc.nodes[0], "counter", "y", "get")
	// The receiver's append is durable but reported failed (its member "crashed"), and
	// it cannot activate again until the sender's member is gone.
	store.set(func() { store.lose["counter/y"] = 1; store.noLoad["counter/y"] = true })
	mustAsk(t, victim, "sender", id, "tell counter/y inc")
	testutil.Eventually(t, 20*time.Second, "the receiver's record", func() bool {
		return len(journalOf(t, store.MemoryStateStore, "counter", "y", 10)) > 0
	})
	victim.crash(true)
	tc.waitMembers()
	store.set(func() { store.noLoad["counter/y"] = false })
	live := tc.live()[0]
	mustAsk(t, live, "sender", id, "get")
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained", func() bool {
		return outboxLen(hostOf(t, tc, live, "sender", id), "sender", id) == 0
	})
	if got := countOf(t, live, "counter", "y"); got != 1 {
		t.Fatalf("receiver = %d, want 1", got)
	}
}

// A numbered ask is handled once: a repeat at the mark gets the recorded reply (or
// error), a repeat below it ErrRepeatForgotten, the same number with another payload
// (its sender lost the first) is handled; the marks outlive a passivation.
func TestNumberedAskIsHandledOnce(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	askSeq := func(seq uint64, msg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := n.sharding.AskMessage(ctx, Message{EntityType: "counter", EntityID: "a", Payload: []byte(msg), Sender: "sender/q", SenderSeq: seq})
		return string(r.Payload), err
	}
	for i := 0; i < 2; i++ {
		if got, err := askSeq(1, "inc"); err != nil || got != "1" {
			t.Fatalf("#1 inc, try %d: %q %v, want 1", i, got, err)
		}
	}
	if got, err := askSeq(2, "inc"); err != nil || got != "2" {
		t.Fatalf("#2 inc: %q %v", got, err)
	}
	if _, err := askSeq(1, "inc"); !errors.Is(err, ErrRepeatForgotten) {
		t.Fatalf("#1 again, under the mark: %v, want ErrRepeatForgotten", err)
	}
	_, err1 := askSeq(3, "fail")
	_, err2 := askSeq(3, "fail")
	if ErrorCode(err1) != CodeEntityError || ErrorCode(err2) != CodeEntityError || err1.Error() != err2.Error() {
		t.Fatalf("a failed numbered ask and its repeat: %v / %v", err1, err2)
	}
	mustAsk(t, n, "counter", "a", "passivate")
	if got, err := askSeq(3, "inc"); err != nil || got != "3" {
		t.Fatalf("#3 with another payload: %q %v, want it handled (3)", got, err)
	}
	if got, err := askSeq(3, "inc"); err != nil || got != "3" {
		t.Fatalf("#3 inc repeated after a passivation: %q %v, want 3", got, err)
	}
	if got := countOf(t, n, "counter", "a"); got != 3 {
		t.Fatalf("count %d, want 3", got)
	}
	// An entity's own ask takes its sender sequence, which its record keeps.
	if got := mustAsk(t, n, "sender", "q2", "ask counter/a inc"); got != "4" {
		t.Fatalf("an entity's ask: %q", got)
	}
	en := journalOf(t, store.MemoryStateStore, "sender", "q2", 10)
	if len(en) != 1 || en[0].SendSeq != 1 {
		t.Fatalf("the asking entity's record: %+v, want SendSeq 1", en)
	}
	// An at-most-once sender numbers nothing.
	if got := mustAsk(t, n, "sender-amo", "q3", "ask counter/a inc"); got != "5" {
		t.Fatalf("an at-most-once entity's ask: %q", got)
	}
	if en := journalOf(t, store.MemoryStateStore, "sender-amo", "q3", 10); len(en) != 1 || en[0].SendSeq != 0 {
		t.Fatalf("the at-most-once entity's record: %+v, want no SendSeq", en)
	}
}

// The records' and bases' new fields survive their encodings; a record without them
// is still written as version 1.
func TestDeliveryFieldsRoundTrip(t *testing.T) {
	key := EntityKey{Type: "t", Shard: 1, ID: "i"}
	plain := JournalEntry{Seq: 4, Time: time.UnixMilli(1000), Payload: []byte("p")}
	if b := plain.Encode(key); b[0] != journalVersion {
		t.Fatalf("a record without delivery fields is version %d", b[0])
	}
	en := JournalEntry{Seq: 5, Time: time.UnixMilli(2000), Sender: "a/b", Ask: true, Payload: []byte("x"), SenderSeq: 9,
		Reply: []byte("r"), SendSeq: 12, Sends: []Send{{Seq: 11, EntityType: "c", EntityID: "d", Payload: []byte("y")},
			{Seq: 12, EntityType: "c", EntityID: "e", IdempotencyKey: "k"}}}
	back, err := DecodeJournalEntry(key, JournalRecord{Seq: 5, Data: en.Encode(key)})
	if err != nil {
		t.Fatal(err)
	}
	if back.SenderSeq != 9 || string(back.Reply) != "r" || back.SendSeq != 12 || !reflect.DeepEqual(back.Sends, en.Sends) {
		t.Fatalf("decoded %+v", back)
	}
	b, err := DecodeBase(EncodeBase(Base{Seq: 3, State: []byte("s"), History: 2, HistoryAt: 7, Delivery: []byte{1, 2}}))
	if err != nil || b.Seq != 3 || b.History != 2 || b.HistoryAt != 7 || !bytes.Equal(b.Delivery, []byte{1, 2}) || string(b.State) != "s" {
		t.Fatalf("base %+v %v", b, err)
	}
	e := &entity{ob: &outbox{pending: []Send{{Seq: 3, EntityType: "c", EntityID: "d", Payload: []byte("z")}}}, sendSeq: 4}
	e.marks.put("a/b", &senderMark{seq: 7, digest: 5, outcome: "entity-error", reply: []byte("no"), at: 99})
	seq, pending, marks, err := decodeDelivery(e.encodeDelivery())
	if err != nil || seq != 4 || !reflect.DeepEqual(pending, e.ob.pending) || !reflect.DeepEqual(marks, e.marks) {
		t.Fatalf("delivery state: %d %+v %+v %v", seq, pending, marks, err)
	}
	if _, _, _, err := decodeDelivery([]byte{1, 0xff}); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a truncated delivery state: %v", err)
	}
	if err := (&TypeSettings{Name: "x", NumberOfShards: 1, Delivery: "twice"}).Validate(); err == nil || !strings.Contains(err.Error(), "at-most-once") {
		t.Fatalf("delivery twice: %v", err)
	}
}

// An outbox's tell that keeps failing pauses its receiver as a tell does (the outbox
// sends it again meanwhile and is refused); once skipped, it counts as handled: the
// outbox's next attempt is a repeat, acknowledged, and the receiver does not pause
// again, also after a passivation (the skip's record keeps the mark).
func TestAPoisonTellFromAnOutboxPausesAndASkipAcknowledgesIt(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	mustAsk(t, n, "sender", "s", "tell counter/p crash")
	testutil.Eventually(t, 30*time.Second, "the receiver paused", func() bool {
		_, err := ask(t, n, "counter", "p", "get")
		return errors.Is(err, ErrEntityPaused)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := n.sharding.Skip(ctx, "counter", "p"); err != nil || !ok {
		t.Fatalf("skip: %v %v", ok, err)
	}
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained", func() bool { return outboxLen(n, "sender", "s") == 0 })
	if _, err := ask(t, n, "counter", "p", "get"); err != nil {
		t.Fatalf("the receiver after the skip: %v", err)
	}
	mustAsk(t, n, "counter", "p", "passivate")
	mustAsk(t, n, "sender", "s", "passivate")
	mustAsk(t, n, "sender", "s", "get") // sends its record's tell again
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained again", func() bool { return outboxLen(n, "sender", "s") == 0 })
	if _, err := ask(t, n, "counter", "p", "get"); err != nil {
		t.Fatalf("the receiver after the sender's redelivery: %v (the skipped tell ran again)", err)
	}
}

// outboxMarked reports whether the store holds typ/id's outbox mark.
func outboxMarked(t *testing.T, st StateStore, typ, id string) bool {
	t.Helper()
	ids, err := st.Remembered(context.Background(), typ, abiShard(id, 10))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(ids, outboxMarkPrefix+id)
}

// activatedOn lists the members key was activated on, in order.
func (a *activations) activatedOn(key string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, l := range a.log {
		if node, k, _ := strings.Cut(l, " "); k == key {
			out = append(out, node)
		}
	}
	return out
}

// A passivated sender whose tell its receiver could not take when the sender's member
// crashed: the shard's new home finds the sender's outbox mark, activates it without
// any message for it, and the tell is delivered, once. Another sender of the shard,
// whose outbox drained before it passivated, has no mark and is not activated.
func TestAShardsNewHomeSendsTheOutboxesItsMarksName(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 3, withConfig(func(c *Config) { c.States = store }), withFastFailureDetection())
	victim, id := crashVictim(t, tc, "sender", "s")
	quietID := ""
	for i := 0; quietID == ""; i++ {
		if c := "q" + strconv.Itoa(i); abiShard(c, 10) == abiShard(id, 10) {
			quietID = c
		}
	}
	// The quiet sender's tell is acknowledged; once it passivates its mark goes.
	mustAsk(t, victim, "sender", quietID, "tell counter/z inc")
	testutil.Eventually(t, 30*time.Second, "the quiet sender's outbox drained", func() bool { return outboxLen(victim, "sender", quietID) == 0 })
	mustAsk(t, victim, "sender", quietID, "passivate")
	testutil.Eventually(t, 30*time.Second, "the quiet sender's mark cleared", func() bool {
		return !outboxMarked(t, store.MemoryStateStore, "sender", quietID)
	})
	// The other's tell cannot be taken: its outbox goes on after its passivation.
	store.set(func() { store.refuse["counter/x"] = true })
	mustAsk(t, victim, "sender", id, "tell counter/x inc")
	mustAsk(t, victim, "sender", id, "passivate")
	if !outboxMarked(t, store.MemoryStateStore, "sender", id) {
		t.Fatal("the sender's outbox holds an unacknowledged tell, and the store no mark of it")
	}
	records := len(journalOf(t, store.MemoryStateStore, "sender", id, 10))
	victim.crash(true)
	tc.waitMembers()
	store.set(func() { store.refuse["counter/x"] = false })
	live := tc.live()[0]
	testutil.Eventually(t, 60*time.Second, "the tell at the receiver", func() bool { return countOf(t, live, "counter", "x") == 1 })
	if n := len(journalOf(t, store.MemoryStateStore, "sender", id, 10)); n != records {
		t.Fatalf("the sender's journal holds %d records, %d before the crash: it got a message", n, records)
	}
	on := tc.acts.activatedOn("sender/" + id)
	if len(on) < 2 || on[len(on)-1] == victim.addr() {
		t.Fatalf("the sender was activated on %v, want its last activation off the crashed %s", on, victim.addr())
	}
	for _, node := range tc.acts.activatedOn("sender/" + quietID) {
		if node != victim.addr() {
			t.Fatalf("the quiet sender, whose outbox had drained, was activated on %s", node)
		}
	}
	home := hostOf(t, tc, live, "sender", id)
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained", func() bool { return outboxLen(home, "sender", id) == 0 })
	if got := countOf(t, live, "counter", "x"); got != 1 {
		t.Fatalf("receiver = %d, want 1", got)
	}
	mustAsk(t, home, "sender", id, "passivate")
	testutil.Eventually(t, 30*time.Second, "the sender's mark cleared", func() bool {
		return !outboxMarked(t, store.MemoryStateStore, "sender", id)
	})
}

// An activation puts back in the outbox only the sends not acknowledged yet: those its
// mailbox saw acknowledged since are not sent again (here, their receiver could not
// answer them: they would stay pending), and a mailbox whose outbox still sends after
// its entity passivated is kept, so that the next activation does not start a second
// outbox beside it.
func TestAnActivationSendsAgainOnlyWhatIsNotAcknowledged(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	for i := 1; i <= 3; i++ {
		mustAsk(t, n, "sender", "s", "tell counter/c inc")
	}
	testutil.Eventually(t, 20*time.Second, "the sender's outbox drained", func() bool { return outboxLen(n, "sender", "s") == 0 })
	mustAsk(t, n, "counter", "c", "passivate")
	store.set(func() { store.noLoad["counter/c"] = true }) // a redelivery would stay pending
	mustAsk(t, n, "sender", "s", "passivate")
	mustAsk(t, n, "sender", "s", "get") // replays the three records with sends
	if got := outboxLen(n, "sender", "s"); got != 0 {
		t.Fatalf("after the activation the outbox holds %d sends, acknowledged before: want 0", got)
	}
	store.set(func() { store.noLoad["counter/c"] = false })

	// In flight: a passivated sender's outbox goes on; the idle sweep keeps its mailbox.
	store.set(func() { store.refuse["counter/w"] = true })
	mustAsk(t, n, "sender", "t", "tell counter/w inc")
	mustAsk(t, n, "sender", "t", "passivate")
	r := n.sharding.region("sender")
	r.passivateIdle(time.Now())
	if got := outboxLen(n, "sender", "t"); got != 1 {
		t.Fatalf("after the idle sweep the sender's mailbox holds %d pending sends (-1: forgotten), want 1", got)
	}
	mustAsk(t, n, "sender", "t", "get")
	if got := outboxLen(n, "sender", "t"); got != 1 {
		t.Fatalf("after the activation the outbox holds %d sends, want the 1 in flight", got)
	}
	store.set(func() { store.refuse["counter/w"] = false })
	testutil.Eventually(t, 30*time.Second, "the tell at the receiver", func() bool { return countOf(t, n, "counter", "w") == 1 })
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained", func() bool { return outboxLen(n, "sender", "t") == 0 })
	if got := countOf(t, n, "counter", "w"); got != 1 {
		t.Fatalf("receiver = %d, want 1", got)
	}
}

// A member leaves, its shards handed off, while a passivated sender's tell waits for
// its receiver: the shard's new home activates the sender, whose outbox sends the tell,
// once, with no message for the sender.
func TestAHandedOffShardsNewHomeSendsItsOutboxes(t *testing.T) {
	store := newDeliveryStore()
	tc := newTestCluster(t, 3, withConfig(func(c *Config) { c.States = store }))
	leaver, id := crashVictim(t, tc, "sender", "h")
	store.set(func() { store.refuse["counter/h"] = true })
	mustAsk(t, leaver, "sender", id, "tell counter/h inc")
	mustAsk(t, leaver, "sender", id, "passivate")
	records := len(journalOf(t, store.MemoryStateStore, "sender", id, 10))
	tc.stop(leaver, true)
	tc.waitMembers()
	store.set(func() { store.refuse["counter/h"] = false })
	live := tc.live()[0]
	testutil.Eventually(t, 60*time.Second, "the tell at the receiver", func() bool { return countOf(t, live, "counter", "h") == 1 })
	if n := len(journalOf(t, store.MemoryStateStore, "sender", id, 10)); n != records {
		t.Fatalf("the sender's journal holds %d records, %d before the handoff: it got a message", n, records)
	}
	home := hostOf(t, tc, live, "sender", id)
	testutil.Eventually(t, 30*time.Second, "the sender's outbox drained", func() bool { return outboxLen(home, "sender", id) == 0 })
	if got := countOf(t, live, "counter", "h"); got != 1 {
		t.Fatalf("receiver = %d, want 1", got)
	}
}

// What an outbox remembers of acknowledged sends skips only the same send (number,
// receiver and payload: after a revert a number may come again for another), and goes
// with the records a base leaves behind.
func TestAcknowledgedSendsAreKnownByNumberReceiverAndPayload(t *testing.T) {
	tc := newTestCluster(t, 1)
	e := newEntity(tc.nodes[0].sharding.region("sender"), 1, "a", 1)
	sent := Send{Seq: 4, EntityType: "counter", EntityID: "c", Payload: []byte("inc")}
	e.ob.mu.Lock()
	e.ob.ackLocked(sent)
	e.ob.mu.Unlock()
	other := sent
	other.Payload = []byte("dec")
	elsewhere := sent
	elsewhere.EntityID = "d"
	e.learnDelivery(&JournalEntry{Sends: []Send{sent, other}})
	e.learnDelivery(&JournalEntry{Sends: []Send{{Seq: 5, EntityType: "counter", EntityID: "c", Payload: []byte("inc")}}})
	if got := e.ob.snapshot(); len(got) != 2 || string(got[0].Payload) != "dec" || got[1].Seq != 5 {
		t.Fatalf("pending %+v, want #4 dec (another send under an acknowledged number) and #5", got)
	}
	e.ob.pending = nil
	e.learnDelivery(&JournalEntry{Sends: []Send{elsewhere}})
	if got := e.ob.snapshot(); len(got) != 1 || got[0].EntityID != "d" {
		t.Fatalf("pending %+v, want #4 to counter/d", got)
	}
	e.ob.pending = nil
	e.ob.forgetAckedUpTo(4)
	e.learnDelivery(&JournalEntry{Sends: []Send{sent}})
	if got := e.ob.snapshot(); len(got) != 1 {
		t.Fatalf("pending %+v after the acknowledgment was forgotten, want #4 again", got)
	}
}
