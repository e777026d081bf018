package replstore

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// dueIndexMismatch compares a replica file's due index with its reminder records: the
// index must hold exactly one key per distinct due time of each reminder record (due.go).
// It returns what differs ("" if nothing) and how many keys the index holds.
func dueIndexMismatch(tb testing.TB, d *stateDisk) (string, int) {
	tb.Helper()
	want, got := map[string]bool{}, map[string]bool{}
	err := d.view(func(eb, rb *bolt.Bucket) error {
		tx := rb.Tx()
		c := rb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n, w := binary.Uvarint(k)
			plen := w + int(n) + 8
			if w <= 0 || len(k) <= plen || k[plen] != stateKindSnapshot {
				continue
			}
			id, ok := strings.CutPrefix(string(k[plen+1:]), sharding.ReminderIDPrefix)
			if !ok {
				continue
			}
			for _, due := range recordDues(v) {
				want[string(dueKey(k[:plen], due, id))] = true
			}
		}
		return tx.Bucket(stateBucketDue).ForEach(func(k, _ []byte) error {
			got[string(k)] = true
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	var diff []string
	for k := range want {
		if !got[k] {
			diff = append(diff, fmt.Sprintf("missing %q", k))
		}
	}
	for k := range got {
		if !want[k] {
			diff = append(diff, fmt.Sprintf("stale %q", k))
		}
	}
	slices.Sort(diff)
	return strings.Join(diff, "; "), len(got)
}

// checkDueIndex fails the test if the file's due index and its records disagree, or
// if the index does not hold wantKeys keys (-1: any number).
func checkDueIndex(tb testing.TB, what string, d *stateDisk, wantKeys int) {
	tb.Helper()
	diff, n := dueIndexMismatch(tb, d)
	if diff != "" {
		tb.Fatalf("%s: the due index disagrees with the records: %s", what, diff)
	}
	if wantKeys >= 0 && n != wantKeys {
		tb.Fatalf("%s: the due index holds %d keys, want %d", what, n, wantKeys)
	}
}

// reminderRecord is the snapshot record of id's reminders, due at dues.
func reminderRecord(tb testing.TB, id string, epoch, seq uint64, dues ...int64) stateRecord {
	tb.Helper()
	var rs []sharding.Reminder
	for i, due := range dues {
		rs = append(rs, sharding.Reminder{Name: fmt.Sprintf("r%d", i), Due: due})
	}
	var data []byte
	if len(rs) > 0 {
		var err error
		if data, err = cbor.Marshal(rs); err != nil {
			tb.Fatal(err)
		}
	}
	return stateRecord{Kind: stateKindSnapshot, ID: sharding.ReminderIDPrefix + id, Epoch: epoch, Seq: seq, Data: data}
}

// The due index follows every change of the reminder records on a replica: writes, a
// newer version, an older one (a repair's, dropped), a deletion, a handover's drop, a
// type's deletion, the write-ahead log's replay, an import, and a file from before the
// index (built when it opens); and a due page reads it from the earliest.
func TestDueIndexFollowsTheRecords(t *testing.T) {
	dir := t.TempDir()
	d, err := openStateDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.close() }()
	write := func(typ string, shard int, fence bool, recs ...stateRecord) {
		t.Helper()
		if _, err := d.applyWrite(&stateWriteReq{Type: typ, Shard: shard, Epoch: 1, Fence: fence, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	write("t", 1, true, reminderRecord(t, "a", 1, 1, 300, 100, 300), reminderRecord(t, "b", 1, 2, 200),
		stateRecord{Kind: stateKindSnapshot, ID: "a", Epoch: 1, Seq: 3, Data: []byte("an entity's state, not indexed")})
	write("t", 2, true, reminderRecord(t, "c", 1, 4, 50))
	write("u", 1, true, reminderRecord(t, "d", 1, 5, 10, 20))
	checkDueIndex(t, "after the writes", d, 2+1+1+2)

	page := func(shard int, before int64, limit int) string {
		t.Helper()
		es, next, _, err := d.duePage(stateShardPrefix("t", shard), before, limit)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%v next %d", es, next)
	}
	if got, want := page(1, 250, 10), "[{100 a} {200 b}] next 300"; got != want {
		t.Fatalf("due page: %s, want %s", got, want)
	}
	if got, want := page(1, 1000, 1), "[{100 a}] next 200"; got != want {
		t.Fatalf("due page of 1: %s, want %s", got, want)
	}

	// A newer version moves a's dues; an older one (a stale replica's repair) changes
	// nothing; an empty record (the reminders deleted) drops b's.
	write("t", 1, true, reminderRecord(t, "a", 1, 10, 400))
	write("t", 1, false, reminderRecord(t, "a", 1, 9, 1, 2, 3))
	write("t", 1, true, reminderRecord(t, "b", 1, 11))
	checkDueIndex(t, "after a move, a stale repair and a deletion", d, 1+1+2)
	if got, want := page(1, 1000, 10), "[{400 a}] next 0"; got != want {
		t.Fatalf("due page: %s, want %s", got, want)
	}

	// A handover's drop of shard t/2's records, then the type u's deletion.
	sum, err := d.summary(stateShardPrefix("t", 2), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.dropSynced(stateShardPrefix("t", 2), sum.entries); err != nil {
		t.Fatal(err)
	}
	checkDueIndex(t, "after a handover's drop", d, 1+2)
	if _, _, err := d.deleteType("u", 0); err != nil {
		t.Fatal(err)
	}
	checkDueIndex(t, "after the type's deletion", d, 1)

	// A crash: the log's writes replayed at the next open.
	write("t", 3, true, reminderRecord(t, "e", 1, 20, 70, 80))
	d.noFlushAtClose = true
	d.close()
	if d, err = openStateDisk(dir); err != nil {
		t.Fatal(err)
	}
	checkDueIndex(t, "after the log's replay", d, 1+2)

	// A file from before the index: built when it opens.
	d.close()
	db, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(stateBucketDue) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if d, err = openStateDisk(dir); err != nil {
		t.Fatal(err)
	}
	checkDueIndex(t, "after a build at open", d, 1+2)

	// An import (shardhost state import): the records it writes are indexed.
	im, err := NewDirImporter([]MemberDir{{Addr: "m1", Dir: t.TempDir()}, {Addr: "m2", Dir: t.TempDir()}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	rec := reminderRecord(t, "f", 0, 1, 900, 950)
	if err := im.ImportShard(&sharding.StoredShard{Type: "t", Shard: 4, Snapshots: []sharding.StoredSnapshot{{ID: rec.ID, Seq: 1, State: rec.Data}}}); err != nil {
		t.Fatal(err)
	}
	for addr, id := range im.disks {
		checkDueIndex(t, "after an import on "+addr, id, 2)
	}
}

// Across members: the due read answers from the replicas' indexes, and each member's
// index agrees with its records after a write, after a replica's crash (the next member
// of the shard's order gets the records by repair, a handover round settles the ring)
// and after the type's deletion.
func TestDueRemindersThroughRepairHandoverAndDeletion(t *testing.T) {
	lc := cluster.DefaultLocalCoreConfig()
	lc.FailureDetector.AcceptableHeartbeatPause = 3 * time.Second
	lc.SBRStableAfter = 3 * time.Second
	c := newSSCluster(t, 5, lc, func(cfg *Config) {
		cfg.RepairInterval = 300 * time.Millisecond
	})
	const typ, shard = "remind", 5
	ids := []string{"a", "b", "c"}
	recKey := sharding.EntityKey{Type: typ, Shard: shard, ID: sharding.ReminderIDPrefix + "a"}
	reps := c.replicas(recKey, 3)
	w := c.others(reps...)[0]
	for i, id := range ids {
		rs := []sharding.Reminder{{Name: "x", Due: int64(100 * (i + 1))}, {Name: "y", Due: 10_000 + int64(i)}}
		if err := w.store.SaveReminders(ssCtx(t), sharding.EntityKey{Type: typ, Shard: shard, ID: id}, 1, rs); err != nil {
			t.Fatal(err)
		}
	}
	// Every member reads the same due reminders; every replica's index agrees with its
	// records and holds the 6 dues.
	check := func(what string, wantKeys int) {
		t.Helper()
		// Eventually: a read right after a replica's crash may find the store
		// unavailable until the ring settles.
		testutil.EventuallyNil(t, 60*time.Second, what+": the due read and the replicas' indexes", func() error {
			for _, n := range c.live() {
				due, next, err := n.store.DueReminders(ssCtx(t), typ, shard, 250, 10)
				if err != nil {
					return fmt.Errorf("DueReminders via %s: %w", n.addr(), err)
				}
				var got []string
				for _, er := range due {
					got = append(got, fmt.Sprintf("%s/%s@%d", er.ID, er.Name, er.Due))
				}
				if want := "a/x@100 b/x@200"; strings.Join(got, " ") != want || next != 300 {
					t.Fatalf("%s: due via %s: %v next %d, want %s next 300", what, n.addr(), got, next, want)
				}
			}
			held := 0
			for _, n := range c.live() {
				diff, keys := dueIndexMismatch(t, n.store.disk)
				if diff != "" {
					return fmt.Errorf("%s: %s", n.addr(), diff)
				}
				if keys > 0 {
					held++
					if keys != wantKeys {
						return fmt.Errorf("%s holds %d keys, want %d", n.addr(), keys, wantKeys)
					}
				}
			}
			if held != 3 {
				return fmt.Errorf("%d members hold the shard's index, want 3", held)
			}
			return nil
		})
	}
	check("after the writes", 6)

	c.kill(reps[0])
	c.waitGone(reps[0].addr())
	check("after a replica's crash", 6)

	if err := w.store.DeleteType(ssCtx(t), typ); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.live() {
		checkDueIndex(t, "after the type's deletion on "+n.addr(), n.store.disk, 0)
		due, next, err := n.store.DueReminders(ssCtx(t), typ, shard, 1<<40, 10)
		if err != nil || len(due) != 0 || next != 0 {
			t.Fatalf("after the type's deletion, via %s: %v next %d %v, want none", n.addr(), due, next, err)
		}
	}
}
