// The replicated store's data of a stopped cluster, read and written without a
// cluster: `shardhost state export` and `import` for the built-in store.

package replstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/shardhost/shardhost/internal/boltfile"
	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ExportDirs reads the replicated store's data in the given directories (each a
// member's state directory, <data-dir>/state, holding FileName) and calls fn with
// each shard that holds snapshots, remembered entities or journals, in (type, shard)
// order. It merges the replicas as a read would: each entity's newest snapshot version,
// each entity's newest remember or forget mark, each journal record's newest version
// (an intact copy) at or above the journal's highest floor, the newest epoch. Errors:
// sharding.ErrCorruptRecord for a journal record with no intact copy of its newest
// version in any directory. The members must be
// stopped: a directory in use by a running member fails within 1 s. Every member's
// directory should be given: a shard whose replicas are all left out is missing from
// the export. fn owns the shard it gets.
func ExportDirs(dirs []string, fn func(*sharding.StoredShard) error) error {
	var dbs []*bolt.DB
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	type ref struct {
		typ   string
		shard int
	}
	seen := map[ref]bool{}
	var refs []ref
	for _, dir := range dirs {
		path := filepath.Join(dir, FileName)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("replstore: state export: %w", err)
		}
		if fi, err := os.Stat(filepath.Join(dir, walFileName)); err == nil && fi.Size() > 0 {
			// A member stopped without committing its write-ahead log (killed): an
			// open replays it into the file.
			d, err := openStateDisk(dir)
			if err != nil {
				return fmt.Errorf("replstore: state export: %w", err)
			}
			if err := d.close(); err != nil {
				return fmt.Errorf("replstore: state export: %w", err)
			}
		}
		var db *bolt.DB
		err := boltfile.Guard(func() (err error) {
			db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
			return err
		})
		if errors.Is(err, bolterrors.ErrTimeout) {
			err = fmt.Errorf("in use by a running member (stop the cluster first): %w", err)
		}
		if err != nil {
			return fmt.Errorf("replstore: state export: open %s: %w", path, err)
		}
		dbs = append(dbs, db)
		err = viewState(db, func(eb, rb *bolt.Bucket) error {
			return eb.ForEach(func(k, v []byte) error {
				if typ, shard, ok := parseStateShardPrefix(k); ok && !seen[ref{typ, shard}] {
					seen[ref{typ, shard}] = true
					refs = append(refs, ref{typ, shard})
				}
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("replstore: state export: %s: %w", path, err)
		}
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].typ != refs[j].typ {
			return refs[i].typ < refs[j].typ
		}
		return refs[i].shard < refs[j].shard
	})
	for _, r := range refs {
		sh, err := mergeShard(dbs, r.typ, r.shard)
		if err != nil {
			return fmt.Errorf("replstore: state export: %s/%d: %w", r.typ, r.shard, err)
		}
		if sh.Empty() {
			continue
		}
		if err := fn(sh); err != nil {
			return err
		}
	}
	return nil
}

func viewState(db *bolt.DB, fn func(eb, rb *bolt.Bucket) error) error {
	return boltfile.View(db, func(tx *bolt.Tx) error {
		eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
		if eb == nil || rb == nil {
			return errors.New("not a state store file: buckets missing")
		}
		return fn(eb, rb)
	})
}

// mergeShard reads a shard from every file and keeps the newest version of each
// record: of each snapshot and mark, of each journal record (an intact copy: one that
// fails sharding.VerifyJournalRecord is passed over, and a record whose newest version
// has no intact copy in any file fails the export with sharding.ErrCorruptRecord), and
// each journal's highest floor, below which its records are left out.
func mergeShard(dbs []*bolt.DB, typ string, shard int) (*sharding.StoredShard, error) {
	prefix := stateShardPrefix(typ, shard)
	type rec struct {
		ver      stateVersion
		remember bool
		data     []byte
	}
	type jkey struct {
		id   string
		jseq uint64
	}
	snaps, marks := map[string]rec{}, map[string]rec{}
	journal := map[jkey]stateRecord{}  // the newest intact copy
	newest := map[jkey]stateVersion{}  // the newest version, intact or not
	floors := map[string]stateRecord{} // the highest floor
	gones := map[string]stateVersion{} // the newest tombstone (stateKindGone)
	var epoch uint64
	for _, db := range dbs {
		err := viewState(db, func(eb, rb *bolt.Bucket) error {
			if e, ok := stateEpochOf(eb, prefix); ok {
				epoch = max(epoch, e)
			}
			c := rb.Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				kind, id, jseq, ok := splitStateRecordKey(prefix, k)
				if !ok {
					continue
				}
				switch kind {
				case stateKindJournal:
					jk := jkey{id, jseq}
					r, ok := decodeStateRecord(kind, id, jseq, v)
					if !ok {
						continue
					}
					if cur, ok := newest[jk]; !ok || cur.less(r.version()) {
						newest[jk] = r.version()
					}
					if verifyStateJournal(typ, shard, &r) != nil {
						continue
					}
					if cur, ok := journal[jk]; !ok || r.newer(&cur) {
						r.Data = bytes.Clone(r.Data)
						journal[jk] = r
					}
					continue
				case stateKindFloor:
					if r, ok := decodeStateRecord(kind, id, 0, v); ok {
						if cur, ok := floors[id]; !ok || r.newer(&cur) {
							floors[id] = r
						}
					}
					continue
				case stateKindGone:
					if ver, _, _, ok := decodeStateValue(v); ok && gones[id].less(ver) {
						gones[id] = ver
					}
					continue
				}
				ver, remember, data, ok := decodeStateValue(v)
				if !ok {
					continue
				}
				m := snaps
				if kind == stateKindRemember {
					m = marks
				} else if kind != stateKindSnapshot {
					continue
				}
				if cur, ok := m[id]; !ok || cur.ver.less(ver) {
					m[id] = rec{ver, remember, bytes.Clone(data)}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// What a file that missed an entity's deletion holds of it is gone.
	for id, g := range gones {
		if r, ok := snaps[id]; ok && r.ver.less(g) {
			delete(snaps, id)
		}
		if r, ok := marks[id]; ok && r.ver.less(g) {
			delete(marks, id)
		}
		if f, ok := floors[id]; ok && f.version().less(g) {
			delete(floors, id)
		}
	}
	for jk, v := range newest {
		if v.less(gones[jk.id]) {
			delete(newest, jk)
		}
	}
	sh := &sharding.StoredShard{Type: typ, Shard: shard, Epoch: epoch}
	for id, r := range snaps {
		st := r.data
		if st == nil {
			st = []byte{}
		}
		sh.Snapshots = append(sh.Snapshots, sharding.StoredSnapshot{ID: id, Epoch: r.ver.Epoch, Seq: r.ver.Seq, State: st})
	}
	for id, r := range marks {
		if r.remember {
			sh.Remembered = append(sh.Remembered, id)
		}
	}
	journals := map[string]*sharding.StoredJournal{}
	for jk, v := range newest {
		if f, ok := floors[jk.id]; ok && jk.jseq < f.Floor {
			continue
		}
		r, ok := journal[jk]
		if !ok || r.version().less(v) {
			return nil, fmt.Errorf("%w: %s/%d/%q #%d: no intact copy of its newest version in any file", sharding.ErrCorruptRecord, typ, shard, jk.id, jk.jseq)
		}
		j := journals[jk.id]
		if j == nil {
			j = &sharding.StoredJournal{ID: jk.id}
			journals[jk.id] = j
		}
		j.Records = append(j.Records, sharding.JournalRecord{Seq: jk.jseq, Data: r.Data})
	}
	for id, f := range floors {
		j := journals[id]
		if j == nil {
			j = &sharding.StoredJournal{ID: id}
			journals[id] = j
		}
		j.Floor = f.Floor
	}
	for _, j := range journals {
		sh.Journals = append(sh.Journals, *j)
	}
	sh.Sort()
	return sh, nil
}

// MemberDir is a member of the cluster an import is for: its address (the --bind
// gossip address it will start with: the replicated store ranks replicas by it) and
// its state directory (<data-dir>/state).
type MemberDir struct {
	Addr string
	Dir  string
}

// DirImporter writes shards into the replicated store's files of a stopped
// cluster, each shard on the replicas that a running store would choose among the
// given members: the first Replicas of the shard's priority order by address. A
// cluster started on those addresses and directories reads it at once; one started
// elsewhere ranks its replicas anew, and its anti-entropy moves the data to them
// (reads may miss it until then).
//
// Imported records are written at epoch 0 (snapshots' sequence numbers kept; journal
// records and floors at version (0, 1)): an import
// starts a new history of allocations, and any write of the restarted cluster (epoch
// 1 or more) supersedes them and passes the fence. The directories must hold no
// state yet.
type DirImporter struct {
	members  []MemberDir
	addrs    []string
	replicas int
	disks    map[string]*stateDisk
}

// NewDirImporter opens (creating them if absent) the members' state
// directories. Errors: a directory in use by a running member, one that already holds
// state, a repeated address, replicas out of [1, 64].
func NewDirImporter(members []MemberDir, replicas int) (*DirImporter, error) {
	if len(members) == 0 {
		return nil, errors.New("replstore: state import: no member")
	}
	if replicas < 1 || replicas > 64 {
		return nil, fmt.Errorf("replstore: state import: replicas %d out of range [1, 64]", replicas)
	}
	im := &DirImporter{members: members, replicas: replicas, disks: map[string]*stateDisk{}}
	for _, m := range members {
		if m.Addr == "" || m.Dir == "" {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: member %q needs an address and a directory", m.Addr+"="+m.Dir)
		}
		if _, dup := im.disks[m.Addr]; dup {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: member address %s given twice", m.Addr)
		}
		d, err := openStateDisk(m.Dir)
		if err != nil {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: %w", err)
		}
		im.disks[m.Addr] = d
		im.addrs = append(im.addrs, m.Addr)
		shards, err := d.shards()
		if err != nil {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: %w", err)
		}
		if len(shards) > 0 {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: %s already holds state of %d shards: import into empty directories", m.Dir, len(shards))
		}
	}
	// Each directory gets the ring of the members, as a cluster stopped whole would
	// have saved it: the members started on them take each other for the cluster. A
	// directory with no ring that a member did not make itself is one that was in a
	// cluster before, and its member would wait for a member with a confirmed ring
	// (ring.go).
	addrs := slices.Sorted(slices.Values(im.addrs))
	stores := make([]string, len(addrs))
	for i, a := range addrs {
		stores[i] = im.disks[a].storeID
	}
	for _, m := range members {
		if err := im.disks[m.Addr].saveRing(&stateRingRecord{Self: m.Addr, Admitted: addrs, Stores: stores}); err != nil {
			im.Close()
			return nil, fmt.Errorf("replstore: state import: saving the ring in %s: %w", m.Dir, err)
		}
	}
	return im, nil
}

// Replicas returns the members (addresses) that hold the shard's data.
func (im *DirImporter) Replicas(typ string, shard int) []string {
	return sharding.PriorityAllocationStrategy{Type: typ}.Top(shard, im.addrs, im.replicas)
}

// ImportShard writes the shard on its replicas, durably (fsynced) before it returns.
func (im *DirImporter) ImportShard(sh *sharding.StoredShard) error {
	if err := sh.Validate(); err != nil {
		return fmt.Errorf("replstore: state import: %w", err)
	}
	var batches [][]stateRecord
	var cur []stateRecord
	size := 0
	add := func(r stateRecord) {
		if len(cur) > 0 && (len(cur) >= stateMaxWriteRecords || size+len(r.Data) > stateDiskBatchBytes) {
			batches, cur, size = append(batches, cur), nil, 0
		}
		cur = append(cur, r)
		size += len(r.Data)
	}
	for _, sn := range sh.Snapshots {
		data := sn.State
		if data == nil {
			data = []byte{}
		}
		add(stateRecord{Kind: stateKindSnapshot, ID: sn.ID, Seq: max(sn.Seq, 1), Data: data})
	}
	for _, id := range sh.Remembered {
		add(stateRecord{Kind: stateKindRemember, ID: id, Seq: 1, Remember: true})
	}
	for _, j := range sh.Journals {
		if j.Floor > 1 {
			add(stateRecord{Kind: stateKindFloor, ID: j.ID, Seq: 1, Floor: j.Floor})
		}
		for _, r := range j.Records {
			add(stateRecord{Kind: stateKindJournal, ID: j.ID, Seq: 1, JSeq: r.Seq, Data: r.Data})
		}
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	for _, addr := range im.Replicas(sh.Type, sh.Shard) {
		for _, recs := range batches {
			if _, err := im.disks[addr].applyWrite(&stateWriteReq{Type: sh.Type, Shard: sh.Shard, Records: recs}); err != nil {
				return fmt.Errorf("replstore: state import: %s/%d on %s: %w", sh.Type, sh.Shard, addr, err)
			}
		}
	}
	return nil
}

// Close closes the files.
func (im *DirImporter) Close() error {
	var errs []error
	for _, d := range im.disks {
		errs = append(errs, d.close())
	}
	return errors.Join(errs...)
}
