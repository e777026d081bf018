package replstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// jrec returns record seq of key's journal, its payload text.
func jrec(key sharding.EntityKey, seq uint64, text string) sharding.JournalRecord {
	e := sharding.JournalEntry{Seq: seq, Time: time.UnixMilli(1_700_000_000_000 + int64(seq)), Sender: "test", Payload: []byte(text)}
	return sharding.JournalRecord{Seq: seq, Data: e.Encode(key)}
}

// jrecs returns records from..to of key's journal, with payloads prefix+seq.
func jrecs(key sharding.EntityKey, from, to uint64, prefix string) []sharding.JournalRecord {
	var out []sharding.JournalRecord
	for seq := from; seq <= to; seq++ {
		out = append(out, jrec(key, seq, fmt.Sprint(prefix, seq)))
	}
	return out
}

func ssAppend(tb testing.TB, n *ssNode, key sharding.EntityKey, epoch uint64, recs ...sharding.JournalRecord) {
	tb.Helper()
	if err := n.store.AppendJournal(ssCtx(tb), key, epoch, recs); err != nil {
		tb.Fatalf("append %d records to %v via %s: %v", len(recs), key, n.transport, err)
	}
}

// journalText renders records as "seq:payload".
func journalText(tb testing.TB, key sharding.EntityKey, recs []sharding.JournalRecord) []string {
	tb.Helper()
	var out []string
	for _, r := range recs {
		e, err := sharding.DecodeJournalEntry(key, r)
		if err != nil {
			tb.Fatalf("record %d of %v: %v", r.Seq, key, err)
		}
		out = append(out, fmt.Sprintf("%d:%s", r.Seq, e.Payload))
	}
	return out
}

// ssJournal checks that n reads key's journal from from as want ("seq:payload").
func ssJournal(tb testing.TB, n *ssNode, key sharding.EntityKey, from uint64, want ...string) {
	tb.Helper()
	got, err := n.store.ReadJournal(ssCtx(tb), key, from, 0)
	if err != nil {
		tb.Fatalf("read %v from %d via %s: %v", key, from, n.transport, err)
	}
	if texts := journalText(tb, key, got); !slices.Equal(texts, want) {
		tb.Fatalf("read %v from %d via %s: %v, want %v", key, from, n.transport, texts, want)
	}
}

// ssDiskJournal reads key's journal on n's own disk: the intact records as
// "seq:payload", the JSeqs of the corrupt copies, and the floor (0: none).
func ssDiskJournal(tb testing.TB, n *ssNode, key sharding.EntityKey) (texts []string, corrupt []uint64, floor uint64) {
	tb.Helper()
	p, err := n.store.disk.journalPage(key, 0, 0, 1<<30)
	if err != nil {
		tb.Fatalf("reading the journal of %v on %s: %v", key, n.transport, err)
	}
	var recs []sharding.JournalRecord
	for _, r := range p.records {
		recs = append(recs, sharding.JournalRecord{Seq: r.JSeq, Data: r.Data})
	}
	for _, r := range p.corrupt {
		corrupt = append(corrupt, r.JSeq)
	}
	if p.floor != nil {
		floor = p.floor.Floor
	}
	return journalText(tb, key, recs), corrupt, floor
}

// waitDiskJournal waits until every node's disk holds exactly want of key's journal
// (intact), no corrupt copy, and the floor.
func waitDiskJournal(tb testing.TB, nodes []*ssNode, key sharding.EntityKey, floor uint64, want ...string) {
	tb.Helper()
	testutil.EventuallyNil(tb, 30*time.Second, fmt.Sprintf("the journal of %v on %d members", key, len(nodes)), func() error {
		for _, n := range nodes {
			texts, corrupt, f := ssDiskJournal(tb, n, key)
			if !slices.Equal(texts, want) || len(corrupt) > 0 || f != floor {
				return fmt.Errorf("%s holds %v, corrupt %v, floor %d; want %v, floor %d", n.transport, texts, corrupt, f, want, floor)
			}
		}
		return nil
	})
}

// spoil rewrites the stored value of record jseq of key's journal on n's disk with
// fn's result, through a bbolt transaction of its own (a torn write or a flipped bit on
// the member's disk).
func spoil(tb testing.TB, n *ssNode, key sharding.EntityKey, jseq uint64, fn func(v []byte) []byte) {
	tb.Helper()
	err := n.store.disk.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(stateBucketRecords)
		k := stateJournalKey(stateShardPrefix(key.Type, key.Shard), key.ID, jseq)
		v := rb.Get(k)
		if v == nil {
			return fmt.Errorf("no record %d", jseq)
		}
		return rb.Put(k, fn(bytes.Clone(v)))
	})
	if err != nil {
		tb.Fatalf("spoiling record %d of %v on %s: %v", jseq, key, n.transport, err)
	}
}

// flipByte flips a bit of a record's encoding, past the value's header.
func flipByte(v []byte) []byte {
	v[stateValueHeader+3] ^= 0x10
	return v
}

// TestJournalCorruptCopyIsRepaired: a record whose copy on one replica's disk fails its
// checksum (a flipped bit, a torn value) is not returned by that replica; a read
// returns the intact copy of another and repairs the spoilt one, which that replica's
// disk then holds intact. With no intact copy anywhere, the read fails with
// sharding.ErrCorruptRecord and returns nothing.
func TestJournalCorruptCopyIsRepaired(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "spoilt"}
	ssAppend(t, c.nodes[0], key, 1, jrecs(key, 1, 4, "r")...)
	all := []string{"1:r1", "2:r2", "3:r3", "4:r4"}
	waitDiskJournal(t, c.nodes, key, 0, all...)

	x, y := c.nodes[1], c.nodes[2]
	spoil(t, x, key, 2, flipByte)
	spoil(t, x, key, 3, func(v []byte) []byte { return v[:5] }) // torn: not even a header
	if texts, corrupt, _ := ssDiskJournal(t, x, key); !slices.Equal(corrupt, []uint64{2, 3}) || len(texts) != 2 {
		t.Fatalf("the spoilt replica reads %v, corrupt %v", texts, corrupt)
	}
	// Read through the spoilt replica, cut off from y: the majority is x and the one
	// other replica.
	c.network.Frames.Disconnect(x.transport, y.transport)
	ssJournal(t, x, key, 1, all...)
	c.network.Frames.Reconnect(x.transport, y.transport)
	waitDiskJournal(t, c.nodes, key, 0, all...)

	// Spoilt on every replica: no read returns it.
	for _, n := range c.nodes {
		spoil(t, n, key, 4, flipByte)
	}
	for _, n := range c.nodes {
		got, err := n.store.ReadJournal(ssCtx(t), key, 1, 0)
		if !errors.Is(err, sharding.ErrCorruptRecord) || got != nil {
			t.Fatalf("read via %s of a record spoilt everywhere: %d records, %v; want ErrCorruptRecord", n.transport, len(got), err)
		}
		// The records before it read, when asked for alone.
		got, err = n.store.ReadJournal(ssCtx(t), key, 1, 3)
		if err != nil || !slices.Equal(journalText(t, key, got), all[:3]) {
			t.Fatalf("read via %s of the 3 records before it: %v, %v", n.transport, journalText(t, key, got), err)
		}
	}
	// A new owner that writes the record again mends it.
	ssAppend(t, c.nodes[2], key, 2, jrec(key, 4, "r4 again"))
	ssJournal(t, c.nodes[1], key, 1, "1:r1", "2:r2", "3:r3", "4:r4 again")
}

// A replica refuses a write of a corrupt journal record with a reply code that is
// sharding.ErrCorruptRecord on the writer, and writes none of the write's records.
func TestJournalReplicaRefusesACorruptRecord(t *testing.T) {
	c := newSSCluster(t, 2, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "refused"}
	good, bad := jrec(key, 1, "good"), jrec(key, 2, "bad")
	bad.Data[4] ^= 1
	from, to := c.nodes[0], c.nodes[1]
	peer := from.store.ringView().replica(to.addr(), "")
	req := &stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 1, Fence: true, Records: []stateRecord{
		{Kind: stateKindJournal, ID: key.ID, JSeq: 1, Epoch: 1, Seq: 1, Data: good.Data},
		{Kind: stateKindJournal, ID: key.ID, JSeq: 2, Epoch: 1, Seq: 1, Data: bad.Data},
	}}
	if err := from.store.writeTo(ssCtx(t), peer, req); !errors.Is(err, sharding.ErrCorruptRecord) {
		t.Fatalf("a write of a corrupt record to a peer: %v, want ErrCorruptRecord", err)
	}
	// Misfiled: another entity's record, or under another sequence number.
	req.Records = []stateRecord{{Kind: stateKindJournal, ID: "other", JSeq: 1, Epoch: 1, Seq: 1, Data: good.Data}}
	if err := from.store.writeTo(ssCtx(t), peer, req); !errors.Is(err, sharding.ErrCorruptRecord) {
		t.Fatalf("a write of another entity's record to a peer: %v, want ErrCorruptRecord", err)
	}
	if texts, corrupt, _ := ssDiskJournal(t, to, key); len(texts)+len(corrupt) > 0 {
		t.Fatalf("the replica wrote %v (corrupt %v)", texts, corrupt)
	}
}

// A record that reached one replica of three (an append that failed: two replicas cut
// off) is not durable: a read whose majority holds it nowhere does not return it, and
// a read that returns it has first written it to a majority, so that every later read
// returns it too.
func TestJournalRecordOfAMinorityIsReturnedOnlyOnceDurable(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 4, ID: "minority"}
	ssAppend(t, c.nodes[0], key, 1, jrec(key, 1, "acked"))
	waitDiskJournal(t, c.nodes, key, 0, "1:acked")
	w, a, b := c.nodes[0], c.nodes[1], c.nodes[2]
	c.network.Frames.Disconnect(w.transport, a.transport)
	c.network.Frames.Disconnect(w.transport, b.transport)
	if err := w.store.AppendJournal(ssCtx(t), key, 1, []sharding.JournalRecord{jrec(key, 2, "unacked")}); !errors.Is(err, sharding.ErrStoreUnavailable) {
		t.Fatalf("an append that reached one replica of three: %v, want ErrStoreUnavailable", err)
	}
	texts, _, _ := ssDiskJournal(t, w, key)
	if !slices.Equal(texts, []string{"1:acked", "2:unacked"}) {
		t.Fatalf("the writer's replica holds %v", texts)
	}
	// a and b, a majority without w, do not hold it.
	ssJournal(t, a, key, 1, "1:acked")
	if texts, _, _ := ssDiskJournal(t, a, key); len(texts) != 1 {
		t.Fatalf("a read without the record wrote it: a holds %v", texts)
	}
	// w and a, a majority with w (w is cut off from b): the read returns the record,
	// having written it to a majority.
	c.network.Frames.Reconnect(w.transport, a.transport)
	ssJournal(t, w, key, 1, "1:acked", "2:unacked")
	holders := 0
	for _, n := range c.nodes {
		if texts, _, _ := ssDiskJournal(t, n, key); slices.Contains(texts, "2:unacked") {
			holders++
		}
	}
	if holders < 2 {
		t.Fatalf("a read returned a record that %d replica(s) of 3 hold", holders)
	}
	c.network.Frames.Reconnect(w.transport, b.transport)
	for _, n := range c.nodes {
		ssJournal(t, n, key, 1, "1:acked", "2:unacked")
	}
}

// A truncation that one replica missed is not undone: anti-entropy from that replica
// does not bring the records below the floor back to the others, and gives it the
// floor, whereupon it drops them; a read through it does not return them.
func TestJournalTruncationIsNotUndoneByAReplicaThatMissedIt(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 6, ID: "truncated"}
	ssAppend(t, c.nodes[0], key, 1, jrecs(key, 1, 6, "r")...)
	waitDiskJournal(t, c.nodes, key, 0, "1:r1", "2:r2", "3:r3", "4:r4", "5:r5", "6:r6")
	a, b, missed := c.nodes[0], c.nodes[1], c.nodes[2]
	c.network.Frames.Disconnect(missed.transport, a.transport)
	c.network.Frames.Disconnect(missed.transport, b.transport)
	if err := a.store.TruncateJournal(ssCtx(t), key, 1, 4); err != nil {
		t.Fatal(err)
	}
	kept := []string{"4:r4", "5:r5", "6:r6"}
	waitDiskJournal(t, []*ssNode{a, b}, key, 4, kept...)
	c.network.Frames.Reconnect(missed.transport, a.transport)
	c.network.Frames.Reconnect(missed.transport, b.transport)
	if texts, _, floor := ssDiskJournal(t, missed, key); len(texts) != 6 || floor != 0 {
		t.Fatalf("the cut-off replica holds %v, floor %d", texts, floor)
	}
	// Its anti-entropy pass offers its records to the others: they take none below
	// their floor.
	if err := missed.store.Repair(ssCtx(t)); err != nil {
		t.Fatalf("repair: %v", err)
	}
	for _, n := range []*ssNode{a, b} {
		if texts, _, floor := ssDiskJournal(t, n, key); !slices.Equal(texts, kept) || floor != 4 {
			t.Fatalf("after the pass of the replica that missed the truncation, %s holds %v, floor %d", n.transport, texts, floor)
		}
	}
	// Theirs gives it the floor.
	if err := a.store.Repair(ssCtx(t)); err != nil {
		t.Fatalf("repair: %v", err)
	}
	waitDiskJournal(t, c.nodes, key, 4, kept...)
	for _, n := range c.nodes {
		ssJournal(t, n, key, 1, kept...)
	}
	// A former owner's append below the floor is dropped, above it lands.
	ssAppend(t, missed, key, 1, jrec(key, 3, "late"), jrec(key, 4, "r4 again"))
	ssJournal(t, b, key, 1, "4:r4 again", "5:r5", "6:r6")
}

// Before the floor reaches the replica that missed it, a read through that replica
// (its majority: itself and one that has the floor) leaves out what lies below the
// floor, and writes the floor to it.
func TestJournalReadAppliesTheHighestFloor(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 8, ID: "floored"}
	ssAppend(t, c.nodes[0], key, 1, jrecs(key, 1, 5, "r")...)
	waitDiskJournal(t, c.nodes, key, 0, "1:r1", "2:r2", "3:r3", "4:r4", "5:r5")
	a, b, missed := c.nodes[0], c.nodes[1], c.nodes[2]
	c.network.Frames.Disconnect(missed.transport, a.transport)
	c.network.Frames.Disconnect(missed.transport, b.transport)
	if err := a.store.TruncateJournal(ssCtx(t), key, 1, 3); err != nil {
		t.Fatal(err)
	}
	c.network.Frames.Reconnect(missed.transport, b.transport)
	ssJournal(t, missed, key, 1, "3:r3", "4:r4", "5:r5")
	ssJournal(t, missed, key, 4, "4:r4", "5:r5")
	c.network.Frames.Reconnect(missed.transport, a.transport)
	waitDiskJournal(t, c.nodes, key, 3, "3:r3", "4:r4", "5:r5")
}

// A replica down during appends (killed, downed, then back on its data directory)
// catches up through anti-entropy: once the ring admits it again, its disk holds every
// record appended while it was away, and reads through it return them.
func TestJournalReplicaDownDuringAppendsCatchesUp(t *testing.T) {
	lc := cluster.DefaultLocalCoreConfig()
	lc.FailureDetector.AcceptableHeartbeatPause = 3 * time.Second
	lc.SBRStableAfter = 3 * time.Second
	c := newSSCluster(t, 3, lc, func(cfg *Config) { cfg.RepairInterval = 300 * time.Millisecond })
	keys := []sharding.EntityKey{{Type: "counter", Shard: 1, ID: "a"}, {Type: "counter", Shard: 2, ID: "b"}, {Type: "other", Shard: 1, ID: "c"}}
	for _, key := range keys {
		ssAppend(t, c.nodes[0], key, 1, jrecs(key, 1, 2, "before")...)
	}
	down := c.nodes[2]
	c.kill(down)
	for _, key := range keys {
		ssAppend(t, c.nodes[0], key, 1, jrecs(key, 3, 4, "while down")...)
		ssAppend(t, c.nodes[1], key, 1, jrecs(key, 5, 6, "while down")...)
	}
	if err := c.nodes[0].store.TruncateJournal(ssCtx(t), keys[0], 1, 2); err != nil {
		t.Fatal(err)
	}
	c.waitGone(down.addr())
	for _, key := range keys[1:] {
		ssAppend(t, c.nodes[1], key, 1, jrec(key, 7, "while gone7"))
	}
	back := c.restart(down)
	c.waitUp()
	want := func(key sharding.EntityKey) (uint64, []string) {
		var out []string
		floor := uint64(0)
		if key == keys[0] {
			floor = 2
		}
		for seq := max(floor, 1); seq <= 7; seq++ {
			switch {
			case seq <= 2:
				out = append(out, fmt.Sprintf("%d:before%d", seq, seq))
			case seq <= 6:
				out = append(out, fmt.Sprintf("%d:while down%d", seq, seq))
			case key != keys[0]:
				out = append(out, fmt.Sprintf("%d:while gone%d", seq, seq))
			}
		}
		return floor, out
	}
	for _, key := range keys {
		floor, texts := want(key)
		waitDiskJournal(t, []*ssNode{back}, key, floor, texts...)
		ssJournal(t, back, key, 1, texts...)
	}
}

// Journals and floors move with their shards when the ring changes: members that join
// take the journals of the shards that now rank them among the first K, members pushed
// out drop them, and reads through the new members return them.
func TestJournalsMoveWithTheirShards(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = 200 * time.Millisecond })
	type journal struct {
		floor uint64
		texts []string
	}
	journals := map[sharding.EntityKey]journal{}
	for shard := 0; shard < 12; shard++ {
		key := sharding.EntityKey{Type: "counter", Shard: shard, ID: fmt.Sprint("j-", shard)}
		ssAppend(t, c.nodes[shard%3], key, 1, jrecs(key, 1, 4, "r")...)
		j := journal{texts: []string{"1:r1", "2:r2", "3:r3", "4:r4"}}
		if shard%2 == 0 {
			if err := c.nodes[0].store.TruncateJournal(ssCtx(t), key, 1, 3); err != nil {
				t.Fatal(err)
			}
			j = journal{floor: 3, texts: j.texts[2:]}
		}
		journals[key] = j
	}
	c.start(t.TempDir())
	c.start(t.TempDir())
	c.waitUp()
	moved := 0
	for key, j := range journals {
		testutil.EventuallyNil(t, 60*time.Second, fmt.Sprintf("the journal of %v on exactly its first 3 members", key), func() error {
			reps := c.ranking(key)[:3]
			for _, n := range c.live() {
				texts, corrupt, floor := ssDiskJournal(t, n, key)
				if slices.Contains(reps, n.addr()) {
					if !slices.Equal(texts, j.texts) || len(corrupt) > 0 || floor != j.floor {
						return fmt.Errorf("replica %s holds %v, floor %d; want %v, floor %d", n.transport, texts, floor, j.texts, j.floor)
					}
				} else if len(texts)+len(corrupt) > 0 || floor != 0 {
					return fmt.Errorf("%s, no replica, still holds %v, floor %d", n.transport, texts, floor)
				}
			}
			return nil
		})
		for _, n := range c.nodes[3:] {
			if texts, _, _ := ssDiskJournal(t, n, key); len(texts) > 0 {
				moved++
			}
			ssJournal(t, n, key, 1, j.texts...)
		}
	}
	if moved == 0 {
		t.Fatal("no journal moved to the new members")
	}
}

// BenchmarkAppendJournal appends one record (a 100-byte payload) at a time to the
// journals of many entities, from their owners spread over three members on the
// in-memory network, each replica on its own bbolt file, fsynced: serially, and from
// many goroutines at once (each owning its own entities), over many shards or few
// (appends of one shard's entities to one replica can share a request). ns/op is the
// wall time per append over all goroutines; appends/s the throughput; cpu-µs/op the
// process's CPU time per append (the three members together).
func BenchmarkAppendJournal(b *testing.B) {
	c := newSSCluster(b, 3, clustertest.Tolerant(), func(cfg *Config) {
		cfg.RequestTimeout = 10 * time.Second
		cfg.RepairInterval = time.Hour // appends alone: no pass over the journals they grow
	})
	payload := bytes.Repeat([]byte("p"), 100)
	run := func(b *testing.B, writers, shards int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Value
		per := b.N / writers
		cpu, cpuOK := testutil.ProcessCPU()
		b.ResetTimer()
		for w := 0; w < writers; w++ {
			n := per
			if w < b.N%writers {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := next.Add(1)
				node := c.nodes[int(g)%len(c.nodes)]
				// 16 entities per writer, round robin, one record each time.
				var keys [16]sharding.EntityKey
				var seqs [16]uint64
				for k := range keys {
					id := int(g)*16 + k
					keys[k] = sharding.EntityKey{Type: "bench", Shard: id % shards, ID: fmt.Sprint("e-", id)}
				}
				for i := 0; i < n; i++ {
					k := i % len(keys)
					seqs[k]++
					e := sharding.JournalEntry{Seq: seqs[k], Time: time.UnixMilli(1), Payload: payload}
					rec := sharding.JournalRecord{Seq: seqs[k], Data: e.Encode(keys[k])}
					if err := node.store.AppendJournal(context.Background(), keys[k], 1, []sharding.JournalRecord{rec}); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		if end, _ := testutil.ProcessCPU(); cpuOK && b.N > 0 {
			b.ReportMetric(float64((end-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		}
	}
	for _, bc := range []struct {
		writers, shards int
	}{{1, 100}, {16, 100}, {64, 100}, {64, 4}, {256, 100}} {
		b.Run(fmt.Sprintf("writers=%d/shards=%d", bc.writers, bc.shards), func(b *testing.B) { run(b, bc.writers, bc.shards) })
	}
}

// A coalesced request (state/writes) applies each of its writes as state/write would,
// each with its own outcome: a stale fence refuses its write alone, a corrupt record
// its write alone, the others land. Many appends at once through one replica's pipe all
// land.
func TestCoalescedWritesKeepTheirOwnOutcomes(t *testing.T) {
	c := newSSCluster(t, 2, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	from, to := c.nodes[0], c.nodes[1]
	a := sharding.EntityKey{Type: "counter", Shard: 1, ID: "a"}
	b := sharding.EntityKey{Type: "counter", Shard: 2, ID: "b"}
	if _, err := to.store.disk.applyWrite(&stateWriteReq{Type: "counter", Shard: 2, Epoch: 5, Fence: true}); err != nil {
		t.Fatal(err)
	}
	rec := func(key sharding.EntityKey, seq uint64, text string) stateRecord {
		return stateRecord{Kind: stateKindJournal, ID: key.ID, JSeq: seq, Epoch: 1, Seq: seq, Data: jrec(key, seq, text).Data}
	}
	spoilt := rec(a, 2, "spoilt")
	spoilt.Data[3] ^= 1
	req := &stateWritesReq{Writes: []stateWriteReq{
		{Type: "counter", Shard: 1, Epoch: 1, Fence: true, Records: []stateRecord{rec(a, 1, "one")}},
		{Type: "counter", Shard: 2, Epoch: 1, Fence: true, Records: []stateRecord{rec(b, 1, "stale")}},
		{Type: "counter", Shard: 1, Epoch: 1, Fence: true, Records: []stateRecord{spoilt}},
		{Type: "counter", Shard: 1, Epoch: 1, Fence: true, Records: []stateRecord{{Kind: stateKindSnapshot, ID: "x", Xfer: 9}}},
		{Type: "counter", Shard: 2, Epoch: 5, Fence: true, Records: []stateRecord{rec(b, 1, "fresh")}},
	}}
	var reply stateWritesReply
	if err := from.store.call(ssCtx(t), from.store.ringView().replica(to.addr(), ""), topicStateWrites, req, &reply); err != nil {
		t.Fatal(err)
	}
	var codes []uint8
	for _, r := range reply.Results {
		codes = append(codes, r.Code)
	}
	if want := []uint8{stateCodeOK, stateCodeStale, stateCodeCorrupt, stateCodeBad, stateCodeOK}; !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v (%+v)", codes, want, reply.Results)
	}
	if texts, _, _ := ssDiskJournal(t, to, a); !slices.Equal(texts, []string{"1:one"}) {
		t.Fatalf("a's journal: %v", texts)
	}
	if texts, _, _ := ssDiskJournal(t, to, b); !slices.Equal(texts, []string{"1:fresh"}) {
		t.Fatalf("b's journal: %v", texts)
	}

	// Through the pipe: many writers at once, each its outcome.
	peer := from.store.ringView().replica(to.addr(), "")
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := sharding.EntityKey{Type: "counter", Shard: 2 + w%2, ID: fmt.Sprint("p", w)}
			epoch := uint64(5)
			if key.Shard == 3 {
				epoch = 1
			}
			r := rec(key, 1, fmt.Sprint("w", w))
			r.Epoch = epoch
			err := from.store.writePiped(peer, &stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: epoch, Fence: true, Records: []stateRecord{r}})
			if err != nil {
				errs <- fmt.Errorf("writer %d: %w", w, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := to.store.disk.applyWrite(&stateWriteReq{Type: "counter", Shard: 3, Epoch: 7, Fence: true}); err != nil {
		t.Fatal(err)
	}
	stale := rec(sharding.EntityKey{Type: "counter", Shard: 3, ID: "late"}, 1, "late")
	if err := from.store.writePiped(peer, &stateWriteReq{Type: "counter", Shard: 3, Epoch: 1, Fence: true, Records: []stateRecord{stale}}); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a stale write through the pipe: %v, want ErrStaleEpoch", err)
	}
	for w := 0; w < 64; w++ {
		key := sharding.EntityKey{Type: "counter", Shard: 2 + w%2, ID: fmt.Sprint("p", w)}
		if texts, _, _ := ssDiskJournal(t, to, key); !slices.Equal(texts, []string{fmt.Sprintf("1:w%d", w)}) {
			t.Fatalf("%v on the replica: %v", key, texts)
		}
	}
	// A pipe with nothing to send ends (its goroutine, and its entry).
	testutil.Eventually(t, 10*time.Second, "the pipes with nothing to send ended", func() bool {
		from.store.pipesMu.Lock()
		defer from.store.pipesMu.Unlock()
		return len(from.store.pipes) == 0
	})
}

// A journal larger than a message is read in pages, each from a majority, merged where
// the replicas' pages end apart (one replica lacks records the others hold); from and
// limit hold across pages; a record over ChunkSize is refused.
func TestJournalReadsInPages(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) {
		cfg.RepairInterval = time.Hour
		cfg.ChunkSize = 1 << 10 // three of these records a page
	})
	key := sharding.EntityKey{Type: "counter", Shard: 5, ID: "paged"}
	pad := string(bytes.Repeat([]byte("."), 280))
	text := func(seq uint64) string { return fmt.Sprintf("%d:r%d%s", seq, seq, pad) }
	padded := func(from, to uint64) []sharding.JournalRecord {
		var out []sharding.JournalRecord
		for seq := from; seq <= to; seq++ {
			out = append(out, jrec(key, seq, fmt.Sprintf("r%d%s", seq, pad)))
		}
		return out
	}
	want := func(from, to uint64) []string {
		var out []string
		for seq := from; seq <= to; seq++ {
			out = append(out, text(seq))
		}
		return out
	}
	a, b, lag := c.nodes[0], c.nodes[1], c.nodes[2]
	ssAppend(t, a, key, 1, padded(1, 10)...) // in four writes of ChunkSize
	waitDiskJournal(t, c.nodes, key, 0, want(1, 10)...)
	c.network.Frames.Disconnect(a.transport, lag.transport)
	for seq := uint64(11); seq <= 20; seq++ {
		ssAppend(t, a, key, 1, padded(seq, seq)...)
	}
	c.network.Frames.Reconnect(a.transport, lag.transport)
	// Through the lagging replica and a (not b): its pages stop at 10, a's go on.
	c.network.Frames.Disconnect(lag.transport, b.transport)
	ssJournal(t, lag, key, 1, want(1, 20)...)
	// The read wrote what it returned from a alone to a majority: lag has it now.
	if texts, _, _ := ssDiskJournal(t, lag, key); !slices.Equal(texts, want(1, 20)) {
		t.Fatalf("the lagging replica holds %d records after the read", len(texts))
	}
	c.network.Frames.Reconnect(lag.transport, b.transport)
	got, err := b.store.ReadJournal(ssCtx(t), key, 5, 7)
	if err != nil || !slices.Equal(journalText(t, key, got), want(5, 11)) {
		t.Fatalf("read from 5, limit 7: %d records, %v", len(got), err)
	}
	if err := a.store.TruncateJournal(ssCtx(t), key, 1, 8); err != nil {
		t.Fatal(err)
	}
	got, err = lag.store.ReadJournal(ssCtx(t), key, 1, 4)
	if err != nil || !slices.Equal(journalText(t, key, got), want(8, 11)) {
		t.Fatalf("read from 1, limit 4, after truncation at 8: %d records, %v", len(got), err)
	}
	ssJournal(t, b, key, 19, want(19, 20)...)
	big := jrec(key, 21, string(bytes.Repeat([]byte("x"), 1<<10)))
	if err := a.store.AppendJournal(ssCtx(t), key, 1, []sharding.JournalRecord{big}); !errors.Is(err, sharding.ErrStateTooLarge) {
		t.Fatalf("append of a record over ChunkSize: %v, want ErrStateTooLarge", err)
	}
}

// The records a read returns are the caller's: the repairs the read queued for a
// replica behind carry copies, so the lagging replica gets them intact even though the
// caller overwrote what it got at once.
func TestJournalReadRepairOutlivesTheCallersBuffers(t *testing.T) {
	c := newSSCluster(t, 3, clustertest.Tolerant(), func(cfg *Config) { cfg.RepairInterval = time.Hour })
	key := sharding.EntityKey{Type: "counter", Shard: 2, ID: "mine"}
	w, lag := c.nodes[0], c.nodes[2]
	c.network.Frames.Disconnect(w.transport, lag.transport)
	ssAppend(t, w, key, 1, jrecs(key, 1, 5, "r")...)
	c.network.Frames.Reconnect(w.transport, lag.transport)
	got, err := w.store.ReadJournal(ssCtx(t), key, 1, 0)
	if err != nil || len(got) != 5 {
		t.Fatalf("read: %d records, %v", len(got), err)
	}
	for _, r := range got {
		clear(r.Data)
	}
	waitDiskJournal(t, c.nodes, key, 0, "1:r1", "2:r2", "3:r3", "4:r4", "5:r5")
}
