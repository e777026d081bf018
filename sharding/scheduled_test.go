package sharding

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

func schedule(t *testing.T, n *testNode, typ, id string, due int64, payload, key string) (ScheduledMessage, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sm, replaced, err := n.sharding.Schedule(ctx, typ, id, due, []byte(payload), key)
	if err != nil {
		t.Fatalf("Schedule %s/%s on %s: %v", typ, id, n.name, err)
	}
	return sm, replaced
}

func scheduledOn(t *testing.T, n *testNode, typ, id string) []ScheduledMessage {
	t.Helper()
	ms, err := n.sharding.ScheduledOf(context.Background(), typ, id)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// awayFrom returns an entity ID of typ whose home is not tc.nodes[0] (the coordinator's
// member), and its home.
func awayFrom(t *testing.T, tc *testCluster, typ, prefix string) (string, *testNode) {
	t.Helper()
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		if home := homeOf(t, tc, typ, id); home != tc.nodes[0] {
			return id, home
		}
	}
}

func TestScheduledIDRoundTrip(t *testing.T) {
	for _, c := range []struct{ typ, id string }{{"counter", "a"}, {"t", "with/slash and spaces"}, {"x", strings.Repeat("é", 100)}} {
		name := scheduledName("")
		sid := ScheduledID(c.typ, c.id, name)
		typ, id, got, err := ParseScheduledID(sid)
		if err != nil || typ != c.typ || id != c.id || got != name {
			t.Fatalf("ParseScheduledID(%q) = %q %q %q %v, want %q %q %q", sid, typ, id, got, err, c.typ, c.id, name)
		}
	}
	good := ScheduledID("counter", "a", scheduledName("k"))
	for _, bad := range []string{"", "sm-", "xx-" + good[3:], "sm-!!!", good + "A", good[:len(good)-2], "sm-AA"} {
		if _, _, _, err := ParseScheduledID(bad); !errors.Is(err, ErrInvalidScheduled) || ErrorCode(err) != CodeBadRequest {
			t.Errorf("ParseScheduledID(%q) = %v, want ErrInvalidScheduled", bad, err)
		}
	}
	// The same idempotency key names the same message; no key, a new one each time.
	if scheduledName("k") != scheduledName("k") || scheduledName("") == scheduledName("") {
		t.Fatal("scheduledName: a key must name one message, no key a new one")
	}
}

// A message scheduled from a member that does not host its entity is kept with the
// entity's shard, wakes it once passivated, comes as a KindMessage with its due time,
// once, and is gone from the listing after.
func TestScheduledMessageWakesAPassivatedEntity(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	id, home := awayFrom(t, tc, "counter", "s")
	key := "counter/" + id
	due := time.Now().Add(500 * time.Millisecond).UnixMilli()
	sm, replaced := schedule(t, tc.nodes[0], "counter", id, due, "append hello", "")
	if replaced || !strings.HasPrefix(sm.ID, "sm-") || sm.Due != due || sm.EntityID != id {
		t.Fatalf("Schedule = %+v, replaced %v", sm, replaced)
	}
	if ms := scheduledOn(t, tc.nodes[0], "counter", id); len(ms) != 1 || ms[0].ID != sm.ID || string(ms[0].Payload) != "append hello" {
		t.Fatalf("ScheduledOf = %+v, want %s", ms, sm.ID)
	}
	// Not one of the entity's own reminders.
	if rs := remindersOn(t, home, "counter", id); len(rs) != 0 {
		t.Fatalf("Reminders = %+v, want none", rs)
	}
	if ok, err := home.sharding.Passivate(context.Background(), "counter", id); err != nil || !ok {
		t.Fatalf("passivate: %v %v", ok, err)
	}
	testutil.Eventually(t, 20*time.Second, "the scheduled message", func() bool { return len(tc.acts.scheduledTo(key)) > 0 })
	testutil.Eventually(t, 20*time.Second, "its deletion", func() bool { return len(scheduledOn(t, home, "counter", id)) == 0 })
	got := tc.acts.scheduledTo(key)
	if len(got) != 1 || got[0].payload != "append hello" || got[0].due != due || got[0].at < due {
		t.Fatalf("delivered %+v, want once, due %d, not before", got, due)
	}
	if l := mustAsk(t, home, "counter", id, "list"); l != "hello" {
		t.Fatalf("list = %q, want hello", l)
	}
	if _, err := tc.nodes[0].sharding.CancelScheduled(context.Background(), sm.ID); !errors.Is(err, ErrScheduledNotFound) || ErrorCode(err) != CodeNotFound {
		t.Fatalf("cancel after delivery: %v, want ErrScheduledNotFound", err)
	}
}

// A cancelled message never comes: one scheduled after it, due later, does, and it
// does not.
func TestCancelledScheduledMessageIsNeverDelivered(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	id, _ := awayFrom(t, tc, "counter", "c")
	key := "counter/" + id
	now := time.Now()
	first, _ := schedule(t, tc.nodes[0], "counter", id, now.Add(time.Second).UnixMilli(), "append cancelled", "")
	later, _ := schedule(t, tc.nodes[0], "counter", id, now.Add(2*time.Second).UnixMilli(), "append kept", "")
	gone, err := tc.nodes[1].sharding.CancelScheduled(context.Background(), first.ID)
	if err != nil || gone.Due != first.Due || string(gone.Payload) != "append cancelled" {
		t.Fatalf("CancelScheduled = %+v, %v", gone, err)
	}
	if ms := scheduledOn(t, tc.nodes[1], "counter", id); len(ms) != 1 || ms[0].ID != later.ID {
		t.Fatalf("after the cancel: %+v, want only %s", ms, later.ID)
	}
	if _, err := tc.nodes[1].sharding.CancelScheduled(context.Background(), first.ID); !errors.Is(err, ErrScheduledNotFound) {
		t.Fatalf("second cancel: %v, want ErrScheduledNotFound", err)
	}
	testutil.Eventually(t, 20*time.Second, "the later message", func() bool { return len(tc.acts.scheduledTo(key)) > 0 })
	if got := tc.acts.scheduledTo(key); len(got) != 1 || got[0].payload != "append kept" {
		t.Fatalf("delivered %+v, want only the kept one", got)
	}
}

func TestScheduledMessageSurvivesACrashOfItsMember(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore(), withFastFailureDetection())
	id, home := awayFrom(t, tc, "counter", "k")
	key := "counter/" + id
	schedule(t, tc.nodes[0], "counter", id, time.Now().Add(2*time.Second).UnixMilli(), "append survived", "")
	home.crash(true)
	tc.waitMembers()
	testutil.Eventually(t, 60*time.Second, "the message on another member", func() bool { return len(tc.acts.scheduledTo(key)) > 0 })
	testutil.Eventually(t, 20*time.Second, "its deletion", func() bool { return len(scheduledOn(t, tc.nodes[0], "counter", id)) == 0 })
	got := tc.acts.scheduledTo(key)
	if len(got) != 1 || got[0].node == home.addr() {
		t.Fatalf("delivered %+v: want once, not on the crashed %s", got, home.addr())
	}
}

func TestScheduledMessageDueInThePastComesAtOnce(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	due := time.Now().Add(-time.Hour).UnixMilli()
	schedule(t, tc.nodes[0], "counter", "past", due, "append late", "")
	testutil.Eventually(t, 20*time.Second, "the overdue message", func() bool { return len(tc.acts.scheduledTo("counter/past")) > 0 })
	if f := tc.acts.scheduledTo("counter/past")[0]; f.due != due || f.at-f.due < time.Hour.Milliseconds() {
		t.Fatalf("delivered %+v: want due %d, about an hour late", f, due)
	}
}

func TestScheduleWithAnIdempotencyKeyKeepsOne(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	due := time.Now().Add(time.Hour).UnixMilli()
	a, r1 := schedule(t, n, "counter", "idem", due, "append a", "order-7")
	b, r2 := schedule(t, n, "counter", "idem", due+5, "append b", "order-7")
	if r1 || !r2 || a.ID != b.ID {
		t.Fatalf("the same key twice: %s (replaced %v), %s (replaced %v): want one ID, the second replaced", a.ID, r1, b.ID, r2)
	}
	if ms := scheduledOn(t, n, "counter", "idem"); len(ms) != 1 || ms[0].Due != due || string(ms[0].Payload) != "append a" {
		t.Fatalf("waiting %+v, want the first one only", ms)
	}
}

// Each bad input gets a clear error and changes nothing: neither the messages waiting
// nor the entity's reminders.
func TestScheduledBadInputChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	n := tc.nodes[1]
	ctx := context.Background()
	due := time.Now().Add(time.Hour).UnixMilli()
	setReminder(t, homeOf(t, tc, "counter", "bad"), "counter", "bad", Reminder{Name: "own", Due: due})
	keep, _ := schedule(t, n, "counter", "bad", due, "append x", "")
	for _, c := range []struct {
		due     int64
		payload []byte
		key     string
		want    error
		text    string
	}{
		{-1, nil, "", ErrInvalidScheduled, "negative due"},
		{due, make([]byte, MaxScheduledPayload+1), "", ErrInvalidScheduled, "at most 65536"},
		{due, nil, strings.Repeat("k", MaxIdempotencyKeyLen+1), ErrInvalidIdempotencyKey, "at most 256"},
	} {
		_, _, err := n.sharding.Schedule(ctx, "counter", "bad", c.due, c.payload, c.key)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) || ErrorCode(err) != CodeBadRequest {
			t.Errorf("Schedule(due %d, %d bytes) = %v (code %s), want %v naming %q", c.due, len(c.payload), err, ErrorCode(err), c.want, c.text)
		}
	}
	if _, _, err := n.sharding.Schedule(ctx, "nosuch", "bad", due, nil, ""); !errors.Is(err, ErrUnknownEntityType) {
		t.Errorf("Schedule to an unknown type: %v", err)
	}
	if _, _, err := n.sharding.Schedule(ctx, "counter", "", due, nil, ""); !errors.Is(err, ErrEmptyEntityID) {
		t.Errorf("Schedule to an empty ID: %v", err)
	}
	unknown := ScheduledID("counter", "bad", scheduledName("never"))
	if _, err := n.sharding.CancelScheduled(ctx, unknown); !errors.Is(err, ErrScheduledNotFound) || ErrorCode(err) != CodeNotFound ||
		!strings.Contains(err.Error(), unknown) {
		t.Errorf("cancel of an unknown ID: %v (code %s), want ErrScheduledNotFound naming it", err, ErrorCode(err))
	}
	if _, err := n.sharding.CancelScheduled(ctx, "sm-nonsense!"); !errors.Is(err, ErrInvalidScheduled) {
		t.Errorf("cancel of a malformed ID: %v, want ErrInvalidScheduled", err)
	}
	// An entity cannot reach a scheduled message through its reminders.
	home := homeOf(t, tc, "counter", "bad")
	_, _, name, _ := ParseScheduledID(keep.ID)
	if err := home.sharding.SetReminder(ctx, "counter", "bad", Reminder{Name: name, Due: due}); !errors.Is(err, ErrInvalidReminder) {
		t.Errorf("SetReminder with a scheduled message's name: %v, want ErrInvalidReminder", err)
	}
	if ok, err := home.sharding.CancelReminder(ctx, "counter", "bad", name); ok || err != nil {
		t.Errorf("CancelReminder with a scheduled message's name: %v %v, want false", ok, err)
	}
	// The limit: MaxScheduledPerEntity waiting, counted apart from the reminders.
	for i := 1; i < MaxScheduledPerEntity; i++ {
		schedule(t, n, "counter", "bad", due+int64(i), "append y", "")
	}
	_, _, err := n.sharding.Schedule(ctx, "counter", "bad", due, nil, "")
	if !errors.Is(err, ErrTooManyScheduled) || ErrorCode(err) != CodeBadRequest || !strings.Contains(err.Error(), "at most 100") {
		t.Fatalf("scheduled message %d: %v, want ErrTooManyScheduled", MaxScheduledPerEntity+1, err)
	}
	setReminder(t, home, "counter", "bad", Reminder{Name: "own2", Due: due})
	if ms := scheduledOn(t, n, "counter", "bad"); len(ms) != MaxScheduledPerEntity || ms[0].ID != keep.ID {
		t.Fatalf("%d waiting after the refusals, want %d, %s first", len(ms), MaxScheduledPerEntity, keep.ID)
	}
	if rs := remindersOn(t, n, "counter", "bad"); len(rs) != 2 || rs[0].Name != "own" || rs[1].Name != "own2" {
		t.Fatalf("reminders %+v, want own and own2", rs)
	}
	all, more, err := n.sharding.ScheduledOfType(ctx, "counter", 10)
	if err != nil || len(all) != 10 || !more || all[0].ID != keep.ID {
		t.Fatalf("ScheduledOfType(limit 10) = %d, more %v, %v", len(all), more, err)
	}
}
