package replstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// walDisk opens a disk in dir whose writer commits only at a read's barrier or a
// write that the log does not take (never on its timer during the test).
func walDisk(t *testing.T, dir string) *stateDisk {
	t.Helper()
	d, err := openStateDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	d.flushEvery = time.Hour
	return d
}

// walAppend writes journal record seq of key at epoch, fenced, as one write (one log
// entry).
func walAppend(t *testing.T, d *stateDisk, key sharding.EntityKey, epoch, seq uint64) error {
	t.Helper()
	r := jrec(key, seq, "m")
	_, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: epoch, Fence: true,
		Records: []stateRecord{{Kind: stateKindJournal, ID: key.ID, JSeq: seq, Epoch: epoch, Seq: seq, Data: r.Data}}})
	return err
}

// crash stops the disk as a kill does: its open transaction is not committed, its
// log stays.
func crash(t *testing.T, d *stateDisk) {
	t.Helper()
	d.noFlushAtClose = true
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
}

// diskJournal lists the JSeqs of key's intact records on d, and its corrupt ones.
func diskJournal(t *testing.T, d *stateDisk, key sharding.EntityKey) (seqs, corrupt []uint64) {
	t.Helper()
	p, err := d.journalPage(key, 0, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.records {
		seqs = append(seqs, r.JSeq)
	}
	for _, r := range p.corrupt {
		corrupt = append(corrupt, r.JSeq)
	}
	return seqs, corrupt
}

// boltJournal lists the JSeqs of key's records and the shard's epoch in the bbolt file
// of dir alone (no log replayed).
func boltJournal(t *testing.T, dir string, key sharding.EntityKey) (seqs []uint64, epoch uint64) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	prefix := stateShardPrefix(key.Type, key.Shard)
	err = viewState(db, func(eb, rb *bolt.Bucket) error {
		epoch, _ = stateEpochOf(eb, prefix)
		jp := stateJournalPrefix(prefix, key.ID)
		c := rb.Cursor()
		for k, _ := c.Seek(jp); k != nil && len(k) == len(jp)+8 && string(k[:len(jp)]) == string(jp); k, _ = c.Next() {
			_, _, jseq, _ := splitStateRecordKey(prefix, k)
			seqs = append(seqs, jseq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs, epoch
}

// walEntries counts the entries of the log in dir that a replay would apply on a file
// that holds none.
func walEntries(t *testing.T, dir string) int {
	t.Helper()
	w, err := openWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	entries, _, _, err := w.readWAL(0)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Acknowledged writes that only the write-ahead log holds (the writer's transaction
// not committed when the process dies) are in the store after it opens again: the
// journal's records, the epoch a fence raised; a stale write stays refused, and the
// log is emptied once its entries are committed.
func TestWALReplaysAcknowledgedWritesAfterACrash(t *testing.T) {
	dir := t.TempDir()
	key := sharding.EntityKey{Type: "t", Shard: 3, ID: "e"}
	d := walDisk(t, dir)
	for seq := uint64(1); seq <= 3; seq++ {
		if err := walAppend(t, d, key, 1, seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := walAppend(t, d, key, 2, 4); err != nil {
		t.Fatal(err)
	}
	if err := walAppend(t, d, key, 1, 5); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a write at epoch 1 after one at 2: %v, want ErrStaleEpoch", err)
	}
	crash(t, d)
	if seqs, epoch := boltJournal(t, dir, key); len(seqs) != 0 || epoch != 0 {
		t.Fatalf("the bbolt file holds records %v, epoch %d before the replay: the writes did not wait in the log", seqs, epoch)
	}
	if n := walEntries(t, dir); n != 4 {
		t.Fatalf("the log holds %d entries after 4 writes that changed something", n)
	}

	d = walDisk(t, dir)
	defer d.close()
	if d.dirty.Load() {
		t.Fatal("the replayed writes wait in the writer's transaction: the open did not commit them")
	}
	var epoch uint64
	if err := d.view(func(eb, rb *bolt.Bucket) error {
		epoch, _ = stateEpochOf(eb, stateShardPrefix(key.Type, key.Shard))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seqs, _ := diskJournal(t, d, key); !slices.Equal(seqs, []uint64{1, 2, 3, 4}) || epoch != 2 {
		t.Fatalf("after the replay the file holds %v, epoch %d; want 1..4, epoch 2", seqs, epoch)
	}
	if err := walAppend(t, d, key, 1, 5); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a write at epoch 1 after the replay: %v, want ErrStaleEpoch", err)
	}
	// The entries' numbers go on after the replayed ones.
	if err := walAppend(t, d, key, 2, 5); err != nil {
		t.Fatal(err)
	}
	if seqs, corrupt := diskJournal(t, d, key); !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5}) || len(corrupt) > 0 {
		t.Fatalf("journal %v, corrupt %v; want 1..5", seqs, corrupt)
	}
}

// A log whose last entry is torn (the process died during its append, which was never
// acknowledged) or whose entry fails its checksum (a flipped bit) replays the entries
// before it and drops the rest; the store opens.
func TestWALTornOrCorruptTailIsDropped(t *testing.T) {
	zero := func(b []byte) []byte {
		clear(b)
		return b
	}
	// Each spoils the log of three entries, end the end of the third.
	for _, tc := range []struct {
		name  string
		spoil func(data []byte, end int) []byte
		want  []uint64
	}{
		{"torn", func(data []byte, end int) []byte { zero(data[end-5 : end]); return data }, []uint64{1, 2}},
		{"cut short", func(data []byte, end int) []byte { return data[:end-5] }, []uint64{1, 2}},
		{"half a header", func(data []byte, end int) []byte {
			zero(data[end-walEntryLen(t, data, 2)+7 : end])
			return data
		}, []uint64{1, 2}},
		{"flipped bit", func(data []byte, end int) []byte {
			data[walEntryLen(t, data, 0)+walHeader+3] ^= 0x20 // in the second entry's request
			return data
		}, []uint64{1}},
		{"garbage after", func(data []byte, end int) []byte {
			copy(data[end:], []byte{0xff, 0xee, 0, 0, 7, 7, 7, 7, 1})
			return data
		}, []uint64{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			key := sharding.EntityKey{Type: "t", Shard: 1, ID: "e"}
			d := walDisk(t, dir)
			for seq := uint64(1); seq <= 3; seq++ {
				if err := walAppend(t, d, key, 1, seq); err != nil {
					t.Fatal(err)
				}
			}
			crash(t, d)
			path := filepath.Join(dir, walFileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			end := walEntryLen(t, data, 0) + walEntryLen(t, data, 1) + walEntryLen(t, data, 2)
			if err := os.WriteFile(path, tc.spoil(data, end), 0o600); err != nil {
				t.Fatal(err)
			}
			d = walDisk(t, dir)
			defer d.close()
			if seqs, corrupt := diskJournal(t, d, key); !slices.Equal(seqs, tc.want) || len(corrupt) > 0 {
				t.Fatalf("journal %v, corrupt %v; want %v", seqs, corrupt, tc.want)
			}
		})
	}
}

// walEntryLen returns the length of entry k (from 0) of a log.
func walEntryLen(t *testing.T, data []byte, k int) int {
	t.Helper()
	off := 0
	for i := 0; ; i++ {
		if len(data)-off < walHeader {
			t.Fatalf("the log has no entry %d", k)
		}
		n := walHeader + int(uint32(data[off])|uint32(data[off+1])<<8|uint32(data[off+2])<<16|uint32(data[off+3])<<24)
		if i == k {
			return n
		}
		off += n
	}
}

// A read sees every acknowledged write though the writer has not committed it: the
// writer serves it from its open transaction, which the read leaves open.
func TestWALReadSeesAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	key := sharding.EntityKey{Type: "t", Shard: 1, ID: "e"}
	d := walDisk(t, dir)
	defer d.close()
	for seq := uint64(1); seq <= 2; seq++ {
		if err := walAppend(t, d, key, 1, seq); err != nil {
			t.Fatal(err)
		}
		if seqs, _ := diskJournal(t, d, key); len(seqs) != int(seq) {
			t.Fatalf("after write %d the journal reads %v", seq, seqs)
		}
	}
	if !d.dirty.Load() {
		t.Fatal("a read committed the writer's transaction")
	}
}

// A write too large for the log is committed to the bbolt file at once, after the
// logged writes the writer's transaction holds: a crash then needs no replay for them.
func TestWALLargeWriteCommitsWhatWasLoggedBeforeIt(t *testing.T) {
	dir := t.TempDir()
	key := sharding.EntityKey{Type: "t", Shard: 2, ID: "e"}
	d := walDisk(t, dir)
	if err := walAppend(t, d, key, 1, 1); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, walMaxWrite+1)
	if _, err := d.applyWrite(&stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: 1, Fence: true,
		Records: []stateRecord{{Kind: stateKindSnapshot, ID: key.ID, Epoch: 1, Seq: 9, Data: big}}}); err != nil {
		t.Fatal(err)
	}
	if d.dirty.Load() {
		t.Fatal("the logged write waits in the writer's transaction after a write committed at once")
	}
	crash(t, d)
	if seqs, epoch := boltJournal(t, dir, key); !slices.Equal(seqs, []uint64{1}) || epoch != 1 {
		t.Fatalf("the bbolt file holds records %v, epoch %d; want 1, epoch 1", seqs, epoch)
	}
}

// The export of a killed member's directory holds the writes its log alone held: the
// export replays the log first.
func TestWALExportOfAKilledMembersDirectory(t *testing.T) {
	dir := t.TempDir()
	key := sharding.EntityKey{Type: "t", Shard: 4, ID: "e"}
	d := walDisk(t, dir)
	for seq := uint64(1); seq <= 2; seq++ {
		if err := walAppend(t, d, key, 1, seq); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, d)
	var got []uint64
	if err := ExportDirs([]string{dir}, func(sh *sharding.StoredShard) error {
		for _, j := range sh.Journals {
			for _, r := range j.Records {
				got = append(got, r.Seq)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("exported records %v, want 1 and 2", got)
	}
}

// TestWALFailedAppendRebuildsTheTransaction: a batch whose log append fails is refused
// and undone, and the writer's transaction is rebuilt from the writes it had
// acknowledged: they stay readable, the next write is taken, and a crash then loses
// none of the acknowledged ones.
func TestWALFailedAppendRebuildsTheTransaction(t *testing.T) {
	dir := t.TempDir()
	d := walDisk(t, dir)
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "e"}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := walAppend(t, d, key, 1, seq); err != nil {
			t.Fatal(err)
		}
	}
	// The log's file swapped for one opened read-only: the next append fails. The
	// write request's channel orders these assignments before the writer reads them.
	good := d.wal.f
	ro, err := os.Open(filepath.Join(dir, walFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	d.wal.f = ro
	if err := walAppend(t, d, key, 1, 4); err == nil {
		t.Fatal("a write whose log append failed was acknowledged")
	}
	d.wal.f = good
	if err := walAppend(t, d, key, 1, 5); err != nil {
		t.Fatal(err)
	}
	if seqs, corrupt := diskJournal(t, d, key); !slices.Equal(seqs, []uint64{1, 2, 3, 5}) || len(corrupt) > 0 {
		t.Fatalf("after the failed append: records %v, corrupt %v; want [1 2 3 5]", seqs, corrupt)
	}
	crash(t, d)
	d = walDisk(t, dir)
	defer d.close()
	if seqs, _ := diskJournal(t, d, key); !slices.Equal(seqs, []uint64{1, 2, 3, 5}) {
		t.Fatalf("after a crash and the log's replay: records %v, want [1 2 3 5]", seqs)
	}
}
