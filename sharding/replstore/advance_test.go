package replstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/sharding"
)

// AdvanceReminders moves the fired reminders of many entities of a shard on in one
// write: an interval's due past now, a one-shot out, an entity left without any
// forgotten; a reminder set anew after the due read read it (through this store, which
// then keeps no copy of the record) is left as the set wrote it; every replica's due
// index follows; a stale epoch is refused and changes nothing; without the due read's
// copy of a record, the write back reads it.
func TestAdvanceRemindersAcrossReplicas(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	const typ, shard = "remind", 3
	home, other := c.nodes[0].store, c.nodes[1].store
	key := func(id string) sharding.EntityKey { return sharding.EntityKey{Type: typ, Shard: shard, ID: id} }
	sets := map[string][]sharding.Reminder{
		"a": {{Name: "i", Due: 100, Interval: 60_000, Payload: []byte("p")}, {Name: "o", Due: 200}, {Name: "z", Due: 9_000}},
		"b": {{Name: "x", Due: 150}},
		"c": {{Name: "i", Due: 120, Interval: 60_000}},
		"d": {{Name: "i", Due: 130, Interval: 60_000}},
	}
	for id, rs := range sets {
		if err := home.SaveReminders(ssCtx(t), key(id), 1, rs); err != nil {
			t.Fatal(err)
		}
	}
	// The stale epoch first: nothing changes.
	due, next, err := home.DueReminders(sharding.WithReadEpoch(ssCtx(t), 1), typ, shard, 250, 100)
	if err != nil || len(due) != 5 || next != 9_000 {
		t.Fatalf("due read: %v next %d %v, want 5 due, next 9000", due, next, err)
	}
	if _, ok := home.fired.take(typ, shard, "b", 0); ok {
		t.Fatal("a record kept at epoch 1 is taken at epoch 0")
	}
	if _, err := home.AdvanceReminders(ssCtx(t), typ, shard, 0, due, 250); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("advance at a stale epoch: %v, want ErrStaleEpoch", err)
	}
	for _, n := range c.nodes {
		for id, rs := range sets {
			got, err := n.store.LoadReminders(ssCtx(t), key(id))
			if err != nil || !slices.EqualFunc(got, rs, reminderEqual) {
				t.Fatalf("after a stale advance, %s via %s: %v %v, want %v", id, n.addr(), got, err, rs)
			}
		}
	}

	// The due read keeps what it read; c is set anew after it.
	if due, _, err = home.DueReminders(sharding.WithReadEpoch(ssCtx(t), 1), typ, shard, 250, 100); err != nil || len(due) != 5 {
		t.Fatalf("due read: %v %v", due, err)
	}
	if n := len(home.fired.m); n != 4 {
		t.Fatalf("the due read kept %d records, want 4", n)
	}
	setC := []sharding.Reminder{{Name: "i", Due: 5_000, Interval: 60_000}}
	if err := home.SaveReminders(ssCtx(t), key("c"), 1, setC); err != nil {
		t.Fatal(err)
	}
	if _, ok := home.fired.take(typ, shard, "c", 1); ok {
		t.Fatal("the record of c is kept after a write of it")
	}

	next, err = home.AdvanceReminders(ssCtx(t), typ, shard, 1, due, 250)
	if err != nil || next != 60_100 {
		t.Fatalf("advance: next %d %v, want 60100", next, err)
	}
	want := map[string][]sharding.Reminder{
		"a": {{Name: "i", Due: 60_100, Interval: 60_000, Payload: []byte("p")}, {Name: "z", Due: 9_000}},
		"c": setC,
		"d": {{Name: "i", Due: 60_130, Interval: 60_000}},
	}
	for _, n := range c.nodes {
		for _, id := range []string{"a", "b", "c", "d"} {
			got, err := n.store.LoadReminders(ssCtx(t), key(id))
			if err != nil || !slices.EqualFunc(got, want[id], reminderEqual) {
				t.Fatalf("%s via %s: %v %v, want %v", id, n.addr(), got, err, want[id])
			}
		}
		ids, err := n.store.Remembered(ssCtx(t), typ, shard)
		if err != nil {
			t.Fatal(err)
		}
		if got, w := strings.Join(ids, ","), strings.Join([]string{sharding.ReminderIDPrefix + "a", sharding.ReminderIDPrefix + "c", sharding.ReminderIDPrefix + "d"}, ","); got != w {
			t.Fatalf("remembered via %s: %q, want %q", n.addr(), got, w)
		}
		checkDueIndex(t, "after the advance on "+n.addr(), n.store.disk, 4)
	}
	if n := len(home.fired.m); n != 0 {
		t.Fatalf("%d records kept after their write back, want none", n)
	}
	due, next, err = home.DueReminders(sharding.WithReadEpoch(ssCtx(t), 1), typ, shard, 250, 100)
	if err != nil || len(due) != 0 || next != 5_000 {
		t.Fatalf("due read after the advance: %v next %d %v, want none, next 5000", due, next, err)
	}

	// Without a kept record (a write back after the due read's records were dropped),
	// the write back reads the record.
	if due, _, err = home.DueReminders(sharding.WithReadEpoch(ssCtx(t), 1), typ, shard, 10_000, 100); err != nil || len(due) != 2 {
		t.Fatalf("due read: %v %v", due, err)
	}
	clear(home.fired.m)
	if next, err = home.AdvanceReminders(ssCtx(t), typ, shard, 1, due, 10_000); err != nil || next != 65_000 {
		t.Fatalf("advance without kept records: next %d %v, want 65000", next, err)
	}
	got, err := other.LoadReminders(ssCtx(t), key("a"))
	if w := []sharding.Reminder{{Name: "i", Due: 60_100, Interval: 60_000, Payload: []byte("p")}}; err != nil || !slices.EqualFunc(got, w, reminderEqual) {
		t.Fatalf("a: %v %v, want %v", got, err, w)
	}
}

func reminderEqual(a, b sharding.Reminder) bool {
	return a.Name == b.Name && a.Due == b.Due && a.Interval == b.Interval && string(a.Payload) == string(b.Payload)
}

// A due read keeps a record only if no write of it started since the read began.
func TestFiredRecordsForgetWrites(t *testing.T) {
	var f firedRecords
	f.m = map[firedKey]*firedRecord{}
	rs := [][]sharding.Reminder{{{Name: "x", Due: 1, Payload: []byte("p")}}, {{Name: "y", Due: 2}}}
	tok := f.begin("t", 1, 5, []string{"a", "b"})
	f.forget(&stateWriteReq{Type: "t", Shard: 1, Records: []stateRecord{{ID: sharding.ReminderIDPrefix + "a"}, {ID: "b"}}})
	f.keep("t", 1, tok, []string{"a", "b"}, rs)
	if _, ok := f.take("t", 1, "a", 5); ok {
		t.Fatal("a record written during its read is kept")
	}
	rs[1][0].Name = "changed by the caller"
	got, ok := f.take("t", 1, "b", 5)
	if !ok || len(got) != 1 || got[0].Name != "y" {
		t.Fatalf("b: %v %v, want its record as read", got, ok)
	}
	if _, ok := f.take("t", 1, "b", 5); ok {
		t.Fatal("a record taken twice")
	}
	// A later read replaces an earlier one's record, which is then not kept.
	tok1 := f.begin("t", 1, 5, []string{"a"})
	tok2 := f.begin("t", 1, 5, []string{"a"})
	f.keep("t", 1, tok1, []string{"a"}, rs[:1])
	if _, ok := f.take("t", 1, "a", 5); ok {
		t.Fatal("an earlier read's record kept over a later read under way")
	}
	f.keep("t", 1, tok2, []string{"a"}, rs[:1])
	if _, ok := f.take("t", 1, "a", 6); ok {
		t.Fatal("a record taken at another epoch")
	}
	if got, ok := f.take("t", 1, "a", 5); !ok || fmt.Sprint(got[0].Due) != "1" {
		t.Fatalf("a: %v %v", got, ok)
	}
}

// A type deleted between a due read and the write back of its firings stays deleted:
// the write back does not write the record the due read kept.
func TestAdvanceRemindersAfterTheTypesDeletion(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	const typ, shard = "remind", 3
	home := c.nodes[0].store
	key := sharding.EntityKey{Type: typ, Shard: shard, ID: "a"}
	if err := home.SaveReminders(ssCtx(t), key, 1, []sharding.Reminder{{Name: "i", Due: 100, Interval: 60_000}, {Name: "z", Due: 9_000}}); err != nil {
		t.Fatal(err)
	}
	due, _, err := home.DueReminders(sharding.WithReadEpoch(ssCtx(t), 1), typ, shard, 250, 100)
	if err != nil || len(due) != 1 {
		t.Fatalf("due read: %v %v", due, err)
	}
	if err := c.nodes[1].store.DeleteType(ssCtx(t), typ); err != nil {
		t.Fatal(err)
	}
	if _, err := home.AdvanceReminders(ssCtx(t), typ, shard, 1, due, 250); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		if got, err := n.store.LoadReminders(ssCtx(t), key); err != nil || len(got) != 0 {
			t.Fatalf("after the type's deletion and a write back, via %s: %v %v, want none", n.addr(), got, err)
		}
		checkDueIndex(t, "after the type's deletion on "+n.addr(), n.store.disk, 0)
	}
}
