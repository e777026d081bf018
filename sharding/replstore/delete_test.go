package replstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
)

// A replica that missed an entity's deletion (DeleteEntity acknowledged by the other
// two) brings nothing back: reads through it see no state, its anti-entropy pass finds
// nothing the others need, and the others' pass gives it the tombstone, which deletes
// its old copies; a write after the deletion starts the entity anew.
func TestDeletedEntityIsNotRepairedBack(t *testing.T) {
	c := newSSCluster(t, 4, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	ctx := ssCtx(t)
	key := sharding.EntityKey{Type: "counter", Shard: 5, ID: "idle"}
	near := sharding.EntityKey{Type: "counter", Shard: 5, ID: "near"}
	reps := c.replicas(key, 3)
	w := c.others(reps...)[0]
	third := reps[2]
	for _, k := range []sharding.EntityKey{key, near} {
		ssSave(t, w, k, 1, []byte("old"))
		if err := w.store.Remember(ctx, k, 1, true); err != nil {
			t.Fatal(err)
		}
	}
	ssAppend(t, w, key, 1, jrecs(key, 1, 3, "r")...)
	if err := w.store.TruncateJournal(ctx, key, 1, 2); err != nil {
		t.Fatal(err)
	}
	c.waitPlaced(key, []byte("old"))
	testutil.EventuallyNil(t, 60*time.Second, "the journal on the third replica", func() error {
		if texts, _, floor := ssDiskJournal(t, third, key); len(texts) != 2 || floor != 2 {
			return fmt.Errorf("%v, floor %d", texts, floor)
		}
		if r, ok := ssLocalRecord(t, third, stateKindRemember, key); !ok || !r.Remember {
			return errors.New("no remember mark")
		}
		return nil
	})

	c.network.Frames.Disconnect(w.transport, third.transport)
	if err := w.store.DeleteEntity(ctx, key, 0); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("delete at an older epoch: %v, want ErrStaleEpoch", err)
	}
	if err := w.store.DeleteEntity(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	c.network.Frames.Reconnect(w.transport, third.transport)
	if _, ok := ssLocalRecord(t, third, stateKindSnapshot, key); !ok {
		t.Fatal("the third replica has no old snapshot: it did not miss the delete")
	}
	if _, ok := ssLocalRecord(t, third, stateKindGone, key); ok {
		t.Fatal("the third replica has the tombstone: it did not miss the delete")
	}
	for _, n := range reps[:2] {
		if _, ok := ssLocalRecord(t, n, stateKindSnapshot, key); ok {
			t.Fatalf("%s kept the snapshot it deleted", n.transport)
		}
	}

	// The stale replica's pass: the others need nothing of what it holds older than
	// their tombstone, and it is in sync with them.
	if err := third.store.Repair(ctx); err != nil {
		t.Fatalf("the stale replica's repair pass: %v", err)
	}
	for _, n := range reps[:2] {
		if _, ok := ssLocalRecord(t, n, stateKindSnapshot, key); ok {
			t.Fatalf("the stale replica's repair brought the snapshot back to %s", n.transport)
		}
		if texts, _, floor := ssDiskJournal(t, n, key); len(texts) != 0 || floor != 0 {
			t.Fatalf("the stale replica's repair brought the journal back to %s: %v, floor %d", n.transport, texts, floor)
		}
	}
	// Reads through the stale replica: nothing.
	for _, n := range []*ssNode{third, w} {
		if _, err := n.store.Load(ctx, key); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("load via %s after the delete: %v, want ErrNoState", n.transport, err)
		}
		ssJournal(t, n, key, 1)
		ssRemembered(t, n, key.Type, key.Shard, "near")
		if _, err := n.store.StatOne(ctx, key); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("stat via %s after the delete: %v, want ErrNoState", n.transport, err)
		}
		got, _, err := n.store.ListStates(ctx, sharding.StateListing{Type: key.Type, Shards: 8, Limit: 10})
		if err != nil || len(got) != 1 || got[0].Key != near {
			t.Fatalf("listing via %s after the delete: %v %v, want %v alone", n.transport, got, err, near)
		}
		ssLoad(t, n, near, []byte("old"))
	}
	// The others' pass gives the stale replica the tombstone: its old copies go.
	if err := reps[0].store.Repair(ctx); err != nil {
		t.Fatalf("repair pass: %v", err)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the stale replica's copies deleted", func() error {
		if _, ok := ssLocalRecord(t, third, stateKindSnapshot, key); ok {
			return errors.New("its snapshot is still there")
		}
		if texts, _, floor := ssDiskJournal(t, third, key); len(texts) != 0 || floor != 0 {
			return fmt.Errorf("its journal is still there: %v, floor %d", texts, floor)
		}
		if _, ok := ssLocalRecord(t, third, stateKindGone, key); !ok {
			return errors.New("it has no tombstone")
		}
		return nil
	})
	if r, ok := ssLocalRecord(t, third, stateKindRemember, key); !ok || r.Remember {
		t.Fatalf("the stale replica's remember mark after repair: %+v %v, want a forget mark", r, ok)
	}
	if _, ok := ssLocalRecord(t, third, stateKindSnapshot, near); !ok {
		t.Fatal("the neighbour's snapshot went too")
	}

	// Written anew: a snapshot and a journal from record 1, below the old floor.
	ssSave(t, w, key, 2, []byte("fresh"))
	ssAppend(t, w, key, 2, jrec(key, 1, "x"))
	for _, n := range c.live() {
		ssLoad(t, n, key, []byte("fresh"))
		ssJournal(t, n, key, 1, "1:x")
	}
}

// On one replica's disk: a tombstone deletes the entity's older records, an older
// copy that arrives later (an unfenced repair write) is dropped and not needed, and a
// newer record lands.
func TestTombstoneDropsOlderCopies(t *testing.T) {
	d, err := openStateDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	key := sharding.EntityKey{Type: "t", Shard: 1, ID: "e"}
	prefix := stateShardPrefix(key.Type, key.Shard)
	old := []stateRecord{
		{Kind: stateKindSnapshot, ID: "e", Epoch: 3, Seq: 10, Data: []byte("old")},
		{Kind: stateKindRemember, ID: "e", Epoch: 3, Seq: 11, Remember: true},
		{Kind: stateKindJournal, ID: "e", Epoch: 3, Seq: 12, JSeq: 4, Data: jrec(key, 4, "j").Data},
		{Kind: stateKindFloor, ID: "e", Epoch: 3, Seq: 13, Floor: 4},
	}
	if _, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 3, Fence: true, Records: old}); err != nil {
		t.Fatal(err)
	}
	gone := stateRecord{Kind: stateKindGone, ID: "e", Epoch: 3, Seq: 20}
	if _, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 3, Records: []stateRecord{gone}}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, r := range old {
			if _, found, err := d.recordOf(prefix, &r); err != nil || found {
				t.Fatalf("%s: record of kind %d found (%v)", when, r.Kind, err)
			}
		}
	}
	check("after the tombstone")
	if need, err := d.needs(key.Type, key.Shard, old); err != nil || len(need) != 0 {
		t.Fatalf("older copies needed: %v %v", need, err)
	}
	if _, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 3, Records: old}); err != nil {
		t.Fatal(err)
	}
	check("after a repair of older copies")
	// An older tombstone changes nothing; a newer record lands, below the old floor.
	newer := stateRecord{Kind: stateKindJournal, ID: "e", Epoch: 3, Seq: 21, JSeq: 1, Data: jrec(key, 1, "n").Data}
	if _, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 3, Records: []stateRecord{{Kind: stateKindGone, ID: "e", Epoch: 3, Seq: 5}, newer}}); err != nil {
		t.Fatal(err)
	}
	if r, found, err := d.recordOf(prefix, &newer); err != nil || !found || r.Seq != 21 {
		t.Fatalf("the newer record: %+v %v %v", r, found, err)
	}
	if g, found, err := d.record(prefix, stateKindGone, "e"); err != nil || !found || g.Seq != 20 {
		t.Fatalf("the tombstone: %+v %v %v, want seq 20", g, found, err)
	}
	if need, err := d.needs(key.Type, key.Shard, []stateRecord{newer, {Kind: stateKindGone, ID: "e", Epoch: 4, Seq: 1}}); err != nil || len(need) != 1 || need[0] != 1 {
		t.Fatalf("needs of a newer tombstone: %v %v, want [1]", need, err)
	}
}

// One write of the records of several entities: each entity's floor and tombstone
// apply to its own records, those already on disk and those of the write before them.
func TestWriteOfSeveralEntities(t *testing.T) {
	d, err := openStateDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	const typ, shard = "t", 1
	prefix := stateShardPrefix(typ, shard)
	j := func(id string, jseq, seq uint64) stateRecord {
		key := sharding.EntityKey{Type: typ, Shard: shard, ID: id}
		return stateRecord{Kind: stateKindJournal, ID: id, Epoch: 2, Seq: seq, JSeq: jseq, Data: jrec(key, jseq, id).Data}
	}
	first := []stateRecord{
		{Kind: stateKindFloor, ID: "a", Epoch: 2, Seq: 1, Floor: 5},
		{Kind: stateKindGone, ID: "c", Epoch: 2, Seq: 10},
	}
	if _, err := d.applyWrite(&stateWriteReq{Type: typ, Shard: shard, Epoch: 2, Fence: true, Records: first}); err != nil {
		t.Fatal(err)
	}
	write := []stateRecord{
		j("a", 3, 20), // below a's floor on disk: dropped
		j("b", 1, 21), // kept
		{Kind: stateKindFloor, ID: "b", Epoch: 2, Seq: 22, Floor: 3},
		j("b", 2, 23), // below b's floor of this write: dropped
		j("a", 6, 24), // kept
		j("c", 1, 9),  // older than c's tombstone: dropped
		j("c", 2, 25), // newer: kept
		j("b", 4, 26), // kept
		j("a", 4, 27), // below a's floor: dropped
		{Kind: stateKindGone, ID: "d", Epoch: 2, Seq: 30},
		j("d", 1, 28), // older than d's tombstone of this write: dropped
	}
	if _, err := d.applyWrite(&stateWriteReq{Type: typ, Shard: shard, Epoch: 2, Fence: true, Records: write}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true, false, true, false, true, true, false, true, false} {
		r := &write[i]
		got, found, err := d.recordOf(prefix, r)
		if err != nil {
			t.Fatal(err)
		}
		if kept := found && got.sameAs(r); kept != want {
			t.Errorf("record %d (%s kind %d #%d): kept %v, want %v", i, r.ID, r.Kind, r.JSeq, kept, want)
		}
	}
	if _, found, _ := d.recordOf(prefix, &write[1]); found {
		t.Error("b #1 outlived b's floor of 3")
	}
}

// The writer's cache of floors and tombstones follows its transaction across writes:
// a floor or tombstone written by one write holds for the next, and one that an op
// outside the log removes (deleteType) holds no more.
func TestWriterMarksFollowTheTransaction(t *testing.T) {
	d, err := openStateDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	const typ, shard = "t", 1
	prefix := stateShardPrefix(typ, shard)
	key := sharding.EntityKey{Type: typ, Shard: shard, ID: "e"}
	j := func(jseq, seq uint64) stateRecord {
		return stateRecord{Kind: stateKindJournal, ID: "e", Epoch: 2, Seq: seq, JSeq: jseq, Data: jrec(key, jseq, "x").Data}
	}
	write := func(recs ...stateRecord) {
		t.Helper()
		if _, err := d.applyWrite(&stateWriteReq{Type: typ, Shard: shard, Epoch: 2, Fence: true, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(r stateRecord, want bool) {
		t.Helper()
		got, found, err := d.recordOf(prefix, &r)
		if err != nil {
			t.Fatal(err)
		}
		if k := found && got.sameAs(&r); k != want {
			t.Fatalf("#%d (seq %d): kept %v, want %v", r.JSeq, r.Seq, k, want)
		}
	}
	write(j(9, 1)) // reads e's marks: none
	write(stateRecord{Kind: stateKindFloor, ID: "e", Epoch: 2, Seq: 2, Floor: 5})
	below, above := j(3, 3), j(6, 4)
	write(below, above)
	kept(below, false)
	kept(above, true)
	write(stateRecord{Kind: stateKindGone, ID: "e", Epoch: 2, Seq: 100})
	older, newer, underOldFloor := j(7, 50), j(8, 101), j(2, 102)
	write(older, newer, underOldFloor)
	kept(older, false)
	kept(newer, true)
	kept(underOldFloor, true) // the tombstone deleted the floor
	if _, _, err := d.deleteType(typ, 0); err != nil {
		t.Fatal(err)
	}
	afterDelete := j(1, 90) // older than the deleted tombstone: a fenced write lands
	write(afterDelete)
	kept(afterDelete, true)
}
