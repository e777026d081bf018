package sharding

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shardhost/shardhost/internal/testutil"
)

// homeOf activates typ/id with an ask and returns the member that hosts it.
func homeOf(t *testing.T, tc *testCluster, typ, id string) *testNode {
	t.Helper()
	r, err := ask(t, tc.live()[0], typ, id, "get")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.live() {
		if n.addr() == r.Node {
			return n
		}
	}
	t.Fatalf("%s/%s answered from %s, no live member", typ, id, r.Node)
	return nil
}

func setReminder(t *testing.T, n *testNode, typ, id string, r Reminder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.sharding.SetReminder(ctx, typ, id, r); err != nil {
		t.Fatalf("SetReminder %s/%s %+v on %s: %v", typ, id, r, n.name, err)
	}
}

func remindersOn(t *testing.T, n *testNode, typ, id string) []Reminder {
	t.Helper()
	rs, err := n.sharding.Reminders(context.Background(), typ, id)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestReminderWakesAPassivatedEntity(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := homeOf(t, tc, "counter", "w")
	setReminder(t, n, "counter", "w", Reminder{Name: "wake", Due: time.Now().Add(300 * time.Millisecond).UnixMilli(), Payload: []byte("hello")})
	if rs := remindersOn(t, n, "counter", "w"); len(rs) != 1 || rs[0].Name != "wake" {
		t.Fatalf("reminders = %+v, want wake", rs)
	}
	if ok, err := n.sharding.Passivate(context.Background(), "counter", "w"); err != nil || !ok {
		t.Fatalf("passivate: %v %v", ok, err)
	}
	testutil.Eventually(t, 20*time.Second, "the reminder", func() bool { return len(tc.acts.reminders("counter/w")) > 0 })
	// Delivered, then deleted (a one-shot): it cannot come again.
	testutil.Eventually(t, 20*time.Second, "the one-shot's deletion", func() bool { return len(remindersOn(t, n, "counter", "w")) == 0 })
	got := tc.acts.reminders("counter/w")
	if len(got) != 1 || got[0].name != "wake" || got[0].payload != "hello" {
		t.Fatalf("delivered %+v, want one wake with hello", got)
	}
	if activationsOf(tc, "counter/w") < 2 {
		t.Fatalf("the entity was not activated again by its reminder: %d activations", activationsOf(tc, "counter/w"))
	}
	// The reminder's message counted in the entity's state: get sees it.
	if c := mustAsk(t, n, "counter", "w", "get"); c != "1" {
		t.Fatalf("count after the reminder = %s, want 1", c)
	}
}

func TestIntervalReminderFiresOncePerDue(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := homeOf(t, tc, "counter", "i")
	first := time.Now().UnixMilli() + 100
	setReminder(t, n, "counter", "i", Reminder{Name: "tick", Due: first, Interval: 1000})
	testutil.Eventually(t, 30*time.Second, "three ticks", func() bool { return len(tc.acts.reminders("counter/i")) >= 3 })
	if ok, err := n.sharding.CancelReminder(context.Background(), "counter", "i", "tick"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	got := tc.acts.reminders("counter/i")
	seen := map[int64]bool{}
	for k, f := range got {
		if seen[f.due] {
			t.Fatalf("due %d delivered twice: %+v", f.due, got)
		}
		seen[f.due] = true
		if (f.due-first)%1000 != 0 || f.due < first {
			t.Fatalf("firing %d due at %d, not on the interval from %d", k, f.due, first)
		}
		if k > 0 && f.due <= got[k-1].due {
			t.Fatalf("dues out of order: %+v", got)
		}
		if f.at < f.due {
			t.Fatalf("delivered at %d before its due %d", f.at, f.due)
		}
	}
	if ok, err := n.sharding.CancelReminder(context.Background(), "counter", "i", "tick"); err != nil || ok {
		t.Fatalf("second cancel: %v %v, want false", ok, err)
	}
}

func TestReminderDueInThePastFiresLate(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := homeOf(t, tc, "counter", "late")
	due := time.Now().Add(-time.Hour).UnixMilli()
	setReminder(t, n, "counter", "late", Reminder{Name: "overdue", Due: due})
	testutil.Eventually(t, 20*time.Second, "the overdue reminder", func() bool { return len(tc.acts.reminders("counter/late")) > 0 })
	f := tc.acts.reminders("counter/late")[0]
	if f.due != due || f.at-f.due < time.Hour.Milliseconds() {
		t.Fatalf("delivered %+v: want due %d, about an hour late", f, due)
	}
}

func TestReminderSurvivesACrashOfItsMember(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore(), withFastFailureDetection())
	// An entity away from the oldest member, which runs the coordinator: its crash
	// is not the point here.
	id, home := "", (*testNode)(nil)
	for i := 0; home == nil || home == tc.nodes[0]; i++ {
		id = "c" + strconv.Itoa(i)
		home = homeOf(t, tc, "counter", id)
	}
	key := "counter/" + id
	setReminder(t, home, "counter", id, Reminder{Name: "later", Due: time.Now().Add(2 * time.Second).UnixMilli(), Payload: []byte("p")})
	home.crash(true)
	tc.waitMembers()
	// The coordinator allocates the shard again, no message asking for it, since the
	// store holds a reminder of it; its new home finds the reminder there.
	var other *testNode
	for _, n := range tc.live() {
		if n != home {
			other = n
			break
		}
	}
	testutil.Eventually(t, 60*time.Second, "the reminder on another member", func() bool {
		return len(tc.acts.reminders(key)) > 0
	})
	testutil.Eventually(t, 20*time.Second, "the one-shot's deletion", func() bool { return len(remindersOn(t, other, "counter", id)) == 0 })
	got := tc.acts.reminders(key)
	if len(got) != 1 || got[0].node == home.addr() {
		t.Fatalf("delivered %+v: want once, not on the crashed %s", got, home.addr())
	}
}

func TestReminderBadInputChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	n := homeOf(t, tc, "counter", "bad")
	now := time.Now().Add(time.Hour).UnixMilli()
	ctx := context.Background()
	for _, c := range []struct {
		r    Reminder
		want error
		text string
	}{
		{Reminder{Due: now}, ErrInvalidReminder, "empty name"},
		{Reminder{Name: strings.Repeat("n", MaxReminderName+1), Due: now}, ErrInvalidReminder, "at most 128"},
		{Reminder{Name: "x", Due: now, Interval: 999}, ErrInvalidReminder, "at least 1000"},
		{Reminder{Name: "x", Due: now, Interval: -1}, ErrInvalidReminder, "negative interval"},
		{Reminder{Name: "x", Due: -5}, ErrInvalidReminder, "negative due"},
		{Reminder{Name: "x", Due: now, Payload: make([]byte, MaxReminderPayload+1)}, ErrInvalidReminder, "payload"},
		{Reminder{Name: "bad\xff", Due: now}, ErrInvalidReminder, "UTF-8"},
	} {
		err := n.sharding.SetReminder(ctx, "counter", "bad", c.r)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) || ErrorCode(err) != CodeBadRequest {
			t.Errorf("SetReminder(%.40q, interval %d, %d bytes) = %v (code %s), want %v naming %q", c.r.Name, c.r.Interval, len(c.r.Payload), err, ErrorCode(err), c.want, c.text)
		}
	}
	for i := 0; i < MaxRemindersPerEntity; i++ {
		setReminder(t, n, "counter", "bad", Reminder{Name: "r" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Due: now})
	}
	err := n.sharding.SetReminder(ctx, "counter", "bad", Reminder{Name: "one-more", Due: now})
	if !errors.Is(err, ErrTooManyReminders) || ErrorCode(err) != CodeBadRequest {
		t.Fatalf("reminder %d: %v, want ErrTooManyReminders", MaxRemindersPerEntity+1, err)
	}
	// Replacing one by name is no new one.
	setReminder(t, n, "counter", "bad", Reminder{Name: "ra", Due: now + 1})
	if rs := remindersOn(t, n, "counter", "bad"); len(rs) != MaxRemindersPerEntity {
		t.Fatalf("%d reminders, want %d", len(rs), MaxRemindersPerEntity)
	}
	// Not on the entity's home: refused.
	for _, o := range tc.live() {
		if o != n {
			err := o.sharding.SetReminder(ctx, "counter", "bad", Reminder{Name: "elsewhere", Due: now})
			if !errors.Is(err, ErrShardUnavailable) {
				t.Fatalf("SetReminder away from the home: %v, want ErrShardUnavailable", err)
			}
		}
	}
	if rs := remindersOn(t, n, "counter", "bad"); len(rs) != MaxRemindersPerEntity {
		t.Fatalf("%d reminders after refusals, want %d", len(rs), MaxRemindersPerEntity)
	}
}

func TestNextDueSkipsMissedIntervals(t *testing.T) {
	for _, c := range []struct{ due, interval, now, want int64 }{
		{1000, 100, 500, 1100},
		{1000, 100, 1000, 1100},
		{1000, 100, 1050, 1100},
		{1000, 100, 1100, 1200},
		{1000, 100, 1999, 2000},
	} {
		if got := nextDue(c.due, c.interval, c.now); got != c.want {
			t.Errorf("nextDue(%d, %d, %d) = %d, want %d", c.due, c.interval, c.now, got, c.want)
		}
	}
}

func TestReminderMovesWithAGracefulLeave(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore())
	id, home := "", (*testNode)(nil)
	for i := 0; home == nil || home == tc.nodes[0]; i++ {
		id = "g" + strconv.Itoa(i)
		home = homeOf(t, tc, "counter", id)
	}
	key := "counter/" + id
	setReminder(t, home, "counter", id, Reminder{Name: "after", Due: time.Now().Add(3 * time.Second).UnixMilli(), Payload: []byte("moved")})
	tc.stop(home, true) // leaves: its shards are handed off
	tc.waitMembers()
	other := tc.live()[0]
	testutil.Eventually(t, 60*time.Second, "the reminder after the handoff", func() bool { return len(tc.acts.reminders(key)) > 0 })
	testutil.Eventually(t, 20*time.Second, "the one-shot's deletion", func() bool { return len(remindersOn(t, other, "counter", id)) == 0 })
	got := tc.acts.reminders(key)
	if len(got) != 1 || got[0].node == home.addr() || got[0].payload != "moved" {
		t.Fatalf("delivered %+v: want once, not on the member that left (%s)", got, home.addr())
	}
}

// A firing delivered again (as after a crash between its delivery and the store's
// update) carries the same idempotency key: a journaled entity handles it once.
func TestARepeatedFiringIsHandledOnceUnderTheJournal(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := homeOf(t, tc, "counter", "dup")
	due := time.Now().Add(-time.Minute).UnixMilli()
	setReminder(t, n, "counter", "dup", Reminder{Name: "once", Due: due, Payload: []byte("x")})
	testutil.Eventually(t, 20*time.Second, "the reminder", func() bool { return len(tc.acts.reminders("counter/dup")) > 0 })
	again := Message{EntityType: "counter", EntityID: "dup", Payload: []byte("x"), Sender: "once", Kind: KindReminder,
		Tag: uint64(due), IdempotencyKey: reminderIdempotencyKey("once", due)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.sharding.AskMessage(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got := tc.acts.reminders("counter/dup"); len(got) != 1 {
		t.Fatalf("delivered %d times: %+v", len(got), got)
	}
	if c := mustAsk(t, n, "counter", "dup", "get"); c != "1" {
		t.Fatalf("count %s after a repeated firing, want 1", c)
	}
}

// firingLateness reads shardhost.reminders.lateness and shardhost.reminders.late for
// kind: the firings recorded, those over 5 s by the histogram's buckets, the counter,
// and the histogram's largest value (s).
func firingLateness(t *testing.T, reader *sdkmetric.ManualReader, kind string) (count, over5, late uint64, maxSec float64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.String("shardhost.reminder.kind", kind)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "shardhost.reminders.lateness":
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					if v, ok := p.Attributes.Value(want.Key); !ok || v != want.Value {
						continue
					}
					count += p.Count
					for i, b := range p.Bounds {
						if b == 5 {
							for _, c := range p.BucketCounts[i+1:] {
								over5 += c
							}
						}
					}
					if mx, ok := p.Max.Value(); ok {
						maxSec = max(maxSec, mx)
					}
				}
			case "shardhost.reminders.late":
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if v, ok := p.Attributes.Value(want.Key); ok && v == want.Value {
						late += uint64(p.Value)
					}
				}
			}
		}
	}
	return count, over5, late, maxSec
}

// Each firing's lateness is recorded by kind, and those over 5 s are counted late: a
// reminder and a scheduled message due an hour ago, a reminder due in a moment.
func TestLateFiringsAreMeasured(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tc := newTestCluster(t, 1, withSharedStateStore(), withConfig(func(c *Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}))
	n := homeOf(t, tc, "counter", "m")
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	setReminder(t, n, "counter", "m", Reminder{Name: "overdue", Due: hourAgo})
	setReminder(t, n, "counter", "m", Reminder{Name: "soon", Due: time.Now().Add(200 * time.Millisecond).UnixMilli()})
	schedule(t, n, "counter", "m", hourAgo, "append late", "")
	testutil.Eventually(t, 30*time.Second, "both reminders and the scheduled message", func() bool {
		return len(tc.acts.reminders("counter/m")) == 2 && len(tc.acts.scheduledTo("counter/m")) == 1
	})
	testutil.Eventually(t, 30*time.Second, "the firings recorded", func() bool {
		r, _, _, _ := firingLateness(t, reader, "reminder")
		s, _, _, _ := firingLateness(t, reader, "scheduled")
		return r == 2 && s == 1
	})
	count, over5, late, maxSec := firingLateness(t, reader, "reminder")
	if count != 2 || late < 1 || late != over5 || maxSec < 3600 {
		t.Fatalf("reminders: %d recorded, %d over 5 s by the histogram, %d counted late, max %.0f s; want 2, the hour-late one among the late, the counter as the histogram",
			count, over5, late, maxSec)
	}
	count, over5, late, maxSec = firingLateness(t, reader, "scheduled")
	if count != 1 || late != 1 || over5 != 1 || maxSec < 3600 {
		t.Fatalf("scheduled: %d recorded, %d over 5 s, %d late, max %.0f s; want one an hour late", count, over5, late, maxSec)
	}
}

// A type whose entities hang (each firing an ask held for the ask timeout) holds its own
// firing workers only: another type's reminders fire beside it. With the workers shared
// by all types, the hanging type's firings took every one and the other type's reminder
// waited for the hanging asks' timeout.
func TestAHangingTypeDoesNotStopAnotherTypesReminders(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore(), withConfig(func(c *Config) { c.AskTimeout = 10 * time.Minute }))
	n := tc.live()[0]
	release := make(chan struct{})
	entered := make(chan string, 4*reminderWorkers)
	n.factory.onReceive = func(key, msg string) {
		if msg == "hang" {
			entered <- key
			<-release
		}
	}
	t.Cleanup(func() { close(release) }) // before the cluster stops (cleanups run last first)
	now := time.Now().UnixMilli()
	const hanging = 2 * reminderWorkers
	for i := range hanging {
		id := "h" + strconv.Itoa(i)
		mustAsk(t, n, "other", id, "get") // its shard hosted here
		setReminder(t, n, "other", id, Reminder{Name: "r", Due: now, Payload: []byte("hang")})
	}
	// Every firing worker of the type holds a hanging entity.
	seen := map[string]bool{}
	for len(seen) < reminderWorkers {
		select {
		case key := <-entered:
			seen[key] = true
		case <-time.After(time.Minute):
			t.Fatalf("%d of the hanging type's firings started, want %d", len(seen), reminderWorkers)
		}
	}
	mustAsk(t, n, "counter", "free", "get")
	setReminder(t, n, "counter", "free", Reminder{Name: "r", Due: time.Now().UnixMilli(), Payload: []byte("go")})
	testutil.Eventually(t, time.Minute, "the other type's reminder", func() bool { return len(tc.acts.reminders("counter/free")) == 1 })
	if extra := len(entered); extra > 0 {
		t.Fatalf("%d firings of one type under way at once, at most %d", reminderWorkers+extra, reminderWorkers)
	}
}

// TestMemoryStoreAdvanceReminders moves fired reminders on in the in-memory store
// (ReminderAdvancer): an interval's due moves past now, a one-shot goes (the others of
// its entity stay, and its entity and shard go with their last), a reminder whose due
// changed since it fired stays; the due-time index agrees with the records after it;
// an older epoch is refused and changes nothing.
func TestMemoryStoreAdvanceReminders(t *testing.T) {
	ctx := context.Background()
	m := NewMemoryStateStore()
	key := func(id string) EntityKey { return EntityKey{Type: "t", Shard: 1, ID: id} }
	save := func(id string, rs ...Reminder) {
		t.Helper()
		if err := m.SaveReminders(ctx, key(id), 2, rs); err != nil {
			t.Fatal(err)
		}
	}
	save("a", Reminder{Name: "r1", Due: 100, Interval: 1000}, Reminder{Name: "r2", Due: 100, Payload: []byte("p")},
		Reminder{Name: "r3", Due: 500})
	save("b", Reminder{Name: "r1", Due: 200, Interval: 1000})
	save("c", Reminder{Name: "only", Due: 50})
	fired := []EntityReminder{
		{ID: "c", Reminder: Reminder{Name: "only", Due: 50}},
		{ID: "a", Reminder: Reminder{Name: "r1", Due: 100}},
		{ID: "a", Reminder: Reminder{Name: "r2", Due: 100}},
		{ID: "b", Reminder: Reminder{Name: "r1", Due: 150}},   // set anew since: stays
		{ID: "a", Reminder: Reminder{Name: "gone", Due: 100}}, // cancelled since
	}
	if _, err := m.AdvanceReminders(ctx, "t", 1, 1, fired, 2150); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("an older epoch: %v, want ErrStaleEpoch", err)
	}
	if rs, _ := m.LoadReminders(ctx, key("a")); len(rs) != 3 || rs[0].Due != 100 {
		t.Fatalf("after a refused advance: %+v, want the three as they were", rs)
	}
	next, err := m.AdvanceReminders(ctx, "t", 1, 2, fired, 2150)
	if err != nil {
		t.Fatal(err)
	}
	if next != 3100 { // 100 + 3 intervals: the first due after 2150
		t.Fatalf("next = %d, want 3100", next)
	}
	a, _ := m.LoadReminders(ctx, key("a"))
	if len(a) != 2 || a[0].Name != "r1" || a[0].Due != 3100 || a[1].Name != "r3" || a[1].Due != 500 {
		t.Fatalf("a's reminders: %+v, want r1 at 3100 and r3 at 500", a)
	}
	if b, _ := m.LoadReminders(ctx, key("b")); len(b) != 1 || b[0].Due != 200 {
		t.Fatalf("b's reminders: %+v, want r1 at 200 as it was", b)
	}
	if c, _ := m.LoadReminders(ctx, key("c")); c != nil {
		t.Fatalf("c's reminders: %+v, want none", c)
	}
	due, nextDue, err := m.DueReminders(ctx, "t", 1, 5000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, er := range due {
		got = append(got, er.ID+"/"+er.Name+"@"+strconv.FormatInt(er.Due, 10))
	}
	if want := "b/r1@200 a/r3@500 a/r1@3100"; strings.Join(got, " ") != want || nextDue != 0 {
		t.Fatalf("due: %v (next %d), want %s", got, nextDue, want)
	}
	// The last reminder of a shard goes: so does the shard's index.
	if err := m.SaveReminders(ctx, EntityKey{Type: "t", Shard: 2, ID: "x"}, 2, []Reminder{{Name: "once", Due: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AdvanceReminders(ctx, "t", 2, 2, []EntityReminder{{ID: "x", Reminder: Reminder{Name: "once", Due: 10}}}, 600); err != nil {
		t.Fatal(err)
	}
	if sr := m.reminders[shardKey{"t", 2}]; sr != nil {
		t.Fatalf("the store keeps shard 2's reminders: %d entities, want none", len(sr.byID))
	}
}
