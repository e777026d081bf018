package replstore

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// Export merges the members' files as a read would: the newest version of each
// snapshot and mark wins, forgotten entities are left out, shards with nothing are
// skipped; import places each shard on its first K members by priority order, at
// epoch 0, into empty directories only.
func TestStateDirsExportAndImport(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
	write := func(dir string, req *stateWriteReq) {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		if _, err := d.applyWrite(req); err != nil {
			t.Fatal(err)
		}
	}
	snap := func(id string, epoch, seq uint64, data string) stateRecord {
		return stateRecord{Kind: stateKindSnapshot, ID: id, Epoch: epoch, Seq: seq, Data: []byte(data)}
	}
	mark := func(id string, epoch, seq uint64, remember bool) stateRecord {
		return stateRecord{Kind: stateKindRemember, ID: id, Epoch: epoch, Seq: seq, Remember: remember}
	}
	// Replica a has the newest "x", b the newest "y"; c missed a forget of "gone".
	write(dirs[0], &stateWriteReq{Type: "t", Shard: 1, Epoch: 3, Records: []stateRecord{snap("x", 3, 5, "x new"), snap("y", 2, 9, "y old"),
		mark("x", 3, 1, true), mark("gone", 3, 7, false)}})
	write(dirs[1], &stateWriteReq{Type: "t", Shard: 1, Epoch: 3, Records: []stateRecord{snap("x", 3, 4, "x old"), snap("y", 3, 1, "y new"),
		mark("gone", 3, 7, false)}})
	write(dirs[2], &stateWriteReq{Type: "t", Shard: 1, Epoch: 2, Records: []stateRecord{snap("x", 2, 99, "x older epoch"),
		mark("gone", 2, 1, true), mark("kept", 2, 1, true)}})
	// A shard whose only record is a forget: nothing to export.
	write(dirs[2], &stateWriteReq{Type: "t", Shard: 2, Epoch: 1, Records: []stateRecord{mark("z", 1, 1, false)}})
	write(dirs[0], &stateWriteReq{Type: "a", Shard: 0, Epoch: 1, Records: []stateRecord{snap("e", 1, 1, "")}})

	var got []*sharding.StoredShard
	var digest sharding.StateDigest
	if err := ExportDirs(dirs, func(sh *sharding.StoredShard) error {
		got = append(got, sh)
		return digest.Add(sh)
	}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sh := range got {
		line := fmt.Sprintf("%s/%d@%d:", sh.Type, sh.Shard, sh.Epoch)
		for _, sn := range sh.Snapshots {
			line += fmt.Sprintf(" %s=%q", sn.ID, sn.State)
		}
		lines = append(lines, line+" remembered "+strings.Join(sh.Remembered, ","))
	}
	want := []string{`a/0@1: e="" remembered `, `t/1@3: x="x new" y="y new" remembered kept,x`}
	if !slices.Equal(lines, want) {
		t.Fatalf("export:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if digest.Shards != 2 || digest.Snapshots != 3 || digest.Remembered != 2 {
		t.Fatalf("digest %s", &digest)
	}

	// Import onto four members, three replicas each.
	var members []MemberDir
	for i := 0; i < 4; i++ {
		members = append(members, MemberDir{Addr: fmt.Sprintf("10.0.0.%d:7946", i+1), Dir: filepath.Join(root, fmt.Sprint("new", i))})
	}
	im, err := NewDirImporter(members, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range got {
		if err := im.ImportShard(sh); err != nil {
			t.Fatal(err)
		}
	}
	placed := map[string][]string{}
	for _, sh := range got {
		placed[fmt.Sprint(sh.Type, sh.Shard)] = im.Replicas(sh.Type, sh.Shard)
	}
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	var addrs, stores []string
	for _, m := range members {
		d, err := openStateDisk(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		addrs, stores = append(addrs, m.Addr), append(stores, d.storeID)
		d.close()
	}
	for _, m := range members {
		d, err := openStateDisk(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		// The ring of the members, as a cluster stopped whole saves it: without one,
		// the members started on these directories would wait for a confirmed ring.
		if rec, err := d.loadRing(); err != nil || rec == nil || rec.Self != m.Addr || rec.Unconfirmed ||
			!slices.Equal(rec.Admitted, addrs) || !slices.Equal(rec.Stores, stores) {
			t.Fatalf("the ring in %s: %+v, %v; want the members %v with store IDs %v", m.Dir, rec, err, addrs, stores)
		}
		for _, sh := range got {
			rec, found, err := d.record(stateShardPrefix(sh.Type, sh.Shard), stateKindSnapshot, sh.Snapshots[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if should := slices.Contains(placed[fmt.Sprint(sh.Type, sh.Shard)], m.Addr); found != should {
				t.Fatalf("%s/%d on %s: found %v, replicas %v", sh.Type, sh.Shard, m.Addr, found, placed[fmt.Sprint(sh.Type, sh.Shard)])
			}
			if found && (rec.Epoch != 0 || string(rec.Data) != string(sh.Snapshots[0].State)) {
				t.Fatalf("imported record %+v", rec)
			}
		}
		d.close()
	}
	var back sharding.StateDigest
	var newDirs []string
	for _, m := range members {
		newDirs = append(newDirs, m.Dir)
	}
	if err := ExportDirs(newDirs, back.Add); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(&digest) {
		t.Fatalf("read back %s, exported %s", &back, &digest)
	}
	if _, err := NewDirImporter(members, 3); err == nil || !strings.Contains(err.Error(), "already holds state") {
		t.Fatalf("an import into directories with state: %v", err)
	}
	if _, err := NewDirImporter([]MemberDir{members[0], members[0]}, 3); err == nil {
		t.Fatal("a repeated member was accepted")
	}
}

// Export carries journals: per record the newest version of which a file holds an
// intact copy, each journal's highest floor, none of its records below it; a record
// whose newest version no file holds intact fails the export. Import writes them on
// the shard's replicas, and reading the new directories back exports the same.
func TestStateDirsExportAndImportJournals(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
	x, y := sharding.EntityKey{Type: "t", Shard: 1, ID: "x"}, sharding.EntityKey{Type: "t", Shard: 1, ID: "y"}
	jr := func(key sharding.EntityKey, seq, epoch, ver uint64, text string) stateRecord {
		return stateRecord{Kind: stateKindJournal, ID: key.ID, JSeq: seq, Epoch: epoch, Seq: ver, Data: jrec(key, seq, text).Data}
	}
	write := func(dir string, recs ...stateRecord) {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		if _, err := d.applyWrite(&stateWriteReq{Type: "t", Shard: 1, Epoch: 2, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	spoilIn := func(dir string, key sharding.EntityKey, seq uint64) {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		if err := d.db.Update(func(tx *bolt.Tx) error {
			k := stateJournalKey(stateShardPrefix(key.Type, key.Shard), key.ID, seq)
			v := bytes.Clone(tx.Bucket(stateBucketRecords).Get(k))
			return tx.Bucket(stateBucketRecords).Put(k, flipByte(v))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// a: x 1..4; b: x 1..4, its 3 spoilt, and y 1; c: x 2 newer, x's floor 2, and a
	// snapshot of z.
	write(dirs[0], jr(x, 1, 1, 10, "x1"), jr(x, 2, 1, 10, "x2"), jr(x, 3, 1, 10, "x3"), jr(x, 4, 1, 10, "x4"))
	write(dirs[1], jr(x, 1, 1, 10, "x1"), jr(x, 2, 1, 10, "x2"), jr(x, 3, 1, 10, "x3"), jr(x, 4, 1, 10, "x4"), jr(y, 1, 2, 3, "y1"))
	spoilIn(dirs[1], x, 3)
	write(dirs[2], jr(x, 2, 2, 5, "x2 new"), stateRecord{Kind: stateKindFloor, ID: x.ID, Floor: 2, Epoch: 2, Seq: 6},
		stateRecord{Kind: stateKindSnapshot, ID: "z", Epoch: 2, Seq: 1, Data: []byte("z")})

	var got []*sharding.StoredShard
	var digest sharding.StateDigest
	if err := ExportDirs(dirs, func(sh *sharding.StoredShard) error {
		got = append(got, sh)
		return digest.Add(sh)
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Snapshots) != 1 || len(got[0].Journals) != 2 {
		t.Fatalf("export: %+v", got)
	}
	if err := got[0].Validate(); err != nil {
		t.Fatalf("the exported shard: %v", err)
	}
	var lines []string
	for _, j := range got[0].Journals {
		key := sharding.EntityKey{Type: "t", Shard: 1, ID: j.ID}
		lines = append(lines, fmt.Sprintf("%s floor %d: %v", j.ID, j.Floor, journalText(t, key, j.Records)))
	}
	want := []string{"x floor 2: [2:x2 new 3:x3 4:x4]", "y floor 0: [1:y1]"}
	if !slices.Equal(lines, want) {
		t.Fatalf("journals:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if digest.JournalRecords != 4 {
		t.Fatalf("digest %s", &digest)
	}

	var members []MemberDir
	for i := 0; i < 4; i++ {
		members = append(members, MemberDir{Addr: fmt.Sprintf("10.0.0.%d:7946", i+1), Dir: filepath.Join(root, fmt.Sprint("new", i))})
	}
	im, err := NewDirImporter(members, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.ImportShard(got[0]); err != nil {
		t.Fatal(err)
	}
	placed := im.Replicas("t", 1)
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	var newDirs []string
	for _, m := range members {
		newDirs = append(newDirs, m.Dir)
		d, err := openStateDisk(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.journalPage(x, 0, 0, 1<<20)
		d.close()
		if err != nil {
			t.Fatal(err)
		}
		if should := slices.Contains(placed, m.Addr); should != (len(p.records) == 3 && p.floor != nil && p.floor.Floor == 2) ||
			!should && (len(p.records) > 0 || p.floor != nil) {
			t.Fatalf("x's journal on %s: %d records, floor %+v; replicas %v", m.Addr, len(p.records), p.floor, placed)
		}
		for _, r := range p.records {
			if r.Epoch != 0 {
				t.Fatalf("imported record %+v", r)
			}
		}
	}
	var back sharding.StateDigest
	if err := ExportDirs(newDirs, back.Add); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(&digest) {
		t.Fatalf("read back %s, exported %s", &back, &digest)
	}

	// The one intact copy of x's record 3 spoilt too: the export fails.
	spoilIn(dirs[0], x, 3)
	if err := ExportDirs(dirs, func(*sharding.StoredShard) error { return nil }); !errors.Is(err, sharding.ErrCorruptRecord) {
		t.Fatalf("export with no intact copy of a record: %v, want ErrCorruptRecord", err)
	}
}
