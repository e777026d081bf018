package replstore

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
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
