// How a write request changes a replica's bbolt buckets: fencing, journal floors,
// a type's deletion and anti-entropy's synced records (the writer in disk.go runs them).

package replstore

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// applyWrite applies a write request (see stateWriteReq) and returns the shard's epoch
// after it. Journal records are checked first (sharding.VerifyJournalRecord): one that
// fails refuses the whole write. A journal record below its entity's floor is dropped;
// a floor deletes the entity's journal records below it. Errors:
// sharding.ErrStaleEpoch (a fenced write older than the shard's epoch: nothing
// written), sharding.ErrCorruptRecord (nothing written), sharding.ErrStoreUnavailable
// (the disk failed).
func (d *stateDisk) applyWrite(req *stateWriteReq) (uint64, error) {
	return d.startWrite(req).wait()
}

// stateWrite is a write request submitted to the disk's writer (startWrite), with
// its op (one allocation for both: op.write is the stateWrite, whose apply the writer
// runs).
type stateWrite struct {
	d      *stateDisk
	req    *stateWriteReq
	prefix []byte // the shard's (stateShardPrefix)
	op     stateDiskOp
	// done, for a write queued by tryWrite, gets its outcome.
	done func(epoch uint64, err error)
	// marks, when not nil, is the writer's cache of floors and tombstones
	// (stateDisk.marks), which apply reads and adds to.
	marks map[string]stateEntityMark
	err   error // a refusal before the op was submitted
	epoch uint64
	stale bool
}

// newStateWrite returns the write of req and its op, of size bytes (op.done or w.done
// are the caller's to set).
func (d *stateDisk) newStateWrite(req *stateWriteReq, size int) *stateWrite {
	w := &stateWrite{d: d, req: req, prefix: stateShardPrefix(req.Type, req.Shard)}
	w.op = stateDiskOp{write: w, size: size}
	if size <= walMaxWrite {
		w.op.req = req
	}
	return w
}

// startWrite checks and submits a write request (applyWrite without the wait): the
// writes started one after the other, then waited for, share the writer's transaction
// and fsync.
func (d *stateDisk) startWrite(req *stateWriteReq) *stateWrite {
	size, err := checkWrite(req)
	if err != nil {
		return &stateWrite{d: d, req: req, err: err}
	}
	w := d.newStateWrite(req, size)
	w.op.done = make(chan error, 1)
	w.err = d.queue(&w.op)
	if w.err != nil {
		w.err = fmt.Errorf("%w: state store %s: write: %w", sharding.ErrStoreUnavailable, d.path, w.err)
	}
	return w
}

// tryWrite checks and queues a write request, as startWrite does, if the writer's
// queue has room, and calls done with its outcome (as applyWrite returns it) once it
// is on disk, or at once if it is refused before. done runs on the writer's goroutine
// (or the caller's, or close's) and must not block. It reports false, done not
// called, when the queue is full.
func (d *stateDisk) tryWrite(req *stateWriteReq, done func(epoch uint64, err error)) bool {
	size, err := checkWrite(req)
	if err != nil {
		done(0, err)
		return true
	}
	w := d.newStateWrite(req, size)
	w.done = done
	queued, err := d.tryQueue(&w.op)
	if err != nil {
		done(0, fmt.Errorf("%w: state store %s: write: %w", sharding.ErrStoreUnavailable, d.path, err))
		return true
	}
	return queued
}

// checkWrite verifies the write's journal records (sharding.VerifyJournalRecord) and
// returns its size, in bytes.
func checkWrite(req *stateWriteReq) (int, error) {
	size := 0
	for i := range req.Records {
		r := &req.Records[i]
		size += len(r.ID) + len(r.Data)
		if r.Kind == stateKindJournal {
			key := sharding.EntityKey{Type: req.Type, Shard: req.Shard, ID: r.ID}
			if err := sharding.VerifyJournalRecord(key, sharding.JournalRecord{Seq: r.JSeq, Data: r.Data}); err != nil {
				return 0, err
			}
		}
	}
	return size, nil
}

// wait returns the write's outcome once it is on disk (see applyWrite).
func (w *stateWrite) wait() (uint64, error) {
	if w.err != nil {
		return 0, w.err
	}
	return w.outcome(w.d.await(&w.op))
}

// outcome is the write's outcome, its op's being err.
func (w *stateWrite) outcome(err error) (uint64, error) {
	req := w.req
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: write: %w", sharding.ErrStoreUnavailable, w.d.path, err)
	}
	if w.stale {
		return w.epoch, fmt.Errorf("%w: epoch %d is older than the replica's %d for %s/%d", sharding.ErrStaleEpoch, req.Epoch, w.epoch, req.Type, req.Shard)
	}
	return w.epoch, nil
}

// apply applies the write in the writer's transaction; it may run twice (stateDiskOp).
func (w *stateWrite) apply(eb, rb *bolt.Bucket) (bool, error) {
	req, prefix := w.req, w.prefix
	eg, rg := boltGetter{b: eb}, boltGetter{b: rb}
	cur, has := epochValue(eg.get(prefix))
	if req.Fence && req.Epoch < cur {
		w.epoch, w.stale = cur, true
		return false, nil
	}
	epoch := max(cur, req.Epoch)
	w.epoch, w.stale = epoch, false
	kb := make([]byte, 0, 128) // the keys looked up and put (bbolt keeps none of them)
	kb = append(kb, 0)
	kb = append(kb, req.Type...)
	var deletedMark uint64
	if v := eg.get(kb); len(v) == 8 && !req.Fence { // stateDeletedKey
		deletedMark = binary.BigEndian.Uint64(v)
	}
	changed := false
	if !has || epoch != cur {
		if err := eb.Put(prefix, binary.BigEndian.AppendUint64(nil, epoch)); err != nil {
			return false, err
		}
		changed = true
	}
	// The journals' floors and the entities' tombstones met in this write, each read
	// once.
	marks := stateEntityMarks{cache: w.marks, prefix: prefix}
	floorOf := func(id string) uint64 {
		m := marks.of(id)
		if !m.floorRead {
			kb = appendStateRecordKey(kb[:0], prefix, stateKindFloor, id)
			if fr, ok := decodeStateRecord(stateKindFloor, id, 0, rg.get(kb)); ok {
				m.floor = fr.Floor
			}
			m.floorRead = true
		}
		return m.floor
	}
	goneOf := func(id string) stateVersion {
		m := marks.of(id)
		if !m.goneRead {
			kb = appendStateRecordKey(kb[:0], prefix, stateKindGone, id)
			if gr, ok := decodeStateRecord(stateKindGone, id, 0, rg.get(kb)); ok {
				m.gone = gr.version()
			}
			m.goneRead = true
		}
		return m.gone
	}
	// Tombstones first: a repair write carries its records in key order, and a journal
	// record written after a deletion must not meet the floor the deletion removes.
	for i := range req.Records {
		r := &req.Records[i]
		if r.Kind != stateKindGone || r.Seq <= deletedMark || !goneOf(r.ID).less(r.version()) {
			continue
		}
		if err := deleteEntityBefore(rb, prefix, r.ID, r.version()); err != nil {
			return false, err
		}
		if err := rb.Put(r.key(prefix), encodeStateValue(r)); err != nil {
			return false, err
		}
		m := marks.of(r.ID)
		m.gone, m.floor, m.floorRead = r.version(), 0, false // the floor was older: deleted
		changed = true
	}
	for i := range req.Records {
		r := &req.Records[i]
		if r.Seq <= deletedMark {
			continue // a copy from before the type's state was deleted (deleteType)
		}
		if r.Kind == stateKindGone {
			continue // applied above
		}
		if r.version().less(goneOf(r.ID)) {
			continue // a copy from before the entity was deleted (stateKindGone)
		}
		if r.Kind == stateKindJournal && r.JSeq < floorOf(r.ID) {
			continue // below the journal's floor: a base holds it
		}
		kb = r.appendKey(kb[:0], prefix)
		k := kb
		switch r.Kind {
		case stateKindJournal:
			if old := rg.get(k); old != nil {
				o, ok := decodeStateRecord(r.Kind, r.ID, r.JSeq, old)
				if ok && !r.newer(&o) && verifyStateJournal(req.Type, req.Shard, &o) == nil {
					continue // the replica's is as new or newer, and intact
				}
			}
		case stateKindFloor:
			if o, ok := decodeStateRecord(r.Kind, r.ID, 0, rg.get(k)); ok && !r.newer(&o) {
				continue
			}
			if err := truncateJournal(rb, prefix, r.ID, r.Floor); err != nil {
				return false, err
			}
			m := marks.of(r.ID) // the floor is r's once it is put below
			m.floor, m.floorRead = max(m.floor, r.Floor), true
		default:
			old := rg.get(k)
			if old != nil {
				if ov, _, _, ok := decodeStateValue(old); ok && !ov.less(r.version()) {
					continue // the replica's is as new or newer
				}
			}
			v := encodeStateValue(r)
			if err := reindexDue(rb, prefix, r.Kind, r.ID, old, v); err != nil {
				return false, err
			}
			if err := rb.Put(k, v); err != nil {
				return false, err
			}
			changed = true
			continue
		}
		if err := rb.Put(k, encodeStateValue(r)); err != nil {
			return false, err
		}
		changed = true
	}
	marks.keep()
	return changed, nil
}

// boltGetter is a bucket's Get through one cursor, moved by each lookup: bbolt's Get
// makes a cursor each time, and its stack, allocations that were most of a write's
// (a journal record's write looks up its shard's epoch, its type's deletion mark, its
// entity's floor and tombstone, and its own key). A Put meanwhile is fine: each lookup
// seeks from the bucket's root.
type boltGetter struct {
	b *bolt.Bucket
	c *bolt.Cursor
}

// get returns the value of key k, nil if there is none (as Bucket.Get).
func (g *boltGetter) get(k []byte) []byte {
	if g.c == nil {
		g.c = g.b.Cursor()
	}
	ck, v := g.c.Seek(k)
	if !bytes.Equal(ck, k) {
		return nil
	}
	return v
}

// stateEntityMark is what a write has read of an entity's journal floor and tombstone.
type stateEntityMark struct {
	floor               uint64
	gone                stateVersion
	floorRead, goneRead bool
}

// stateEntityMarks are the marks of the entities a write touches. Most writes are of
// one entity (a journal append): its mark is kept inline, and a map is made only for a
// second entity. cache, when not nil, is the writer's (stateDisk.marks), keyed by the
// shard's prefix and the entity's ID: a mark starts as the cache has it, and keep puts
// the write's marks back.
type stateEntityMarks struct {
	id     string
	first  stateEntityMark
	others map[string]*stateEntityMark
	used   bool
	cache  map[string]stateEntityMark
	prefix []byte
	ck     []byte // a cache key
}

// stateMarksCap bounds the writer's cache of marks (stateDisk.marks): it is emptied
// when full.
const stateMarksCap = 1 << 16

// of returns id's mark: the cache's, else one with nothing read, the first time.
func (m *stateEntityMarks) of(id string) *stateEntityMark {
	var e *stateEntityMark
	switch {
	case !m.used:
		m.id, m.used = id, true
		e = &m.first
	case id == m.id:
		return &m.first
	default:
		if e = m.others[id]; e != nil {
			return e
		}
		if m.others == nil {
			m.others = map[string]*stateEntityMark{}
		}
		e = &stateEntityMark{}
		m.others[id] = e
	}
	if m.cache != nil {
		m.ck = append(append(m.ck[:0], m.prefix...), id...)
		if c, ok := m.cache[string(m.ck)]; ok {
			*e = c
		}
	}
	return e
}

// keep puts the marks the write read or wrote into the cache.
func (m *stateEntityMarks) keep() {
	if m.cache == nil || !m.used {
		return
	}
	put := func(id string, e *stateEntityMark) {
		if !e.floorRead && !e.goneRead {
			return
		}
		if len(m.cache) >= stateMarksCap {
			clear(m.cache)
		}
		m.ck = append(append(m.ck[:0], m.prefix...), id...)
		m.cache[string(m.ck)] = *e
	}
	put(m.id, &m.first)
	for id, e := range m.others {
		put(id, e)
	}
}

// applyReq applies a write request as its writer's op does: the replay of a logged
// write.
func applyReq(req *stateWriteReq, eb, rb *bolt.Bucket) (bool, error) {
	w := &stateWrite{req: req, prefix: stateShardPrefix(req.Type, req.Shard)}
	return w.apply(eb, rb)
}

// verifyStateJournal checks a journal record of the shard typ/shard
// (sharding.VerifyJournalRecord).
func verifyStateJournal(typ string, shard int, r *stateRecord) error {
	return sharding.VerifyJournalRecord(sharding.EntityKey{Type: typ, Shard: shard, ID: r.ID}, sharding.JournalRecord{Seq: r.JSeq, Data: r.Data})
}

// truncateJournal deletes the entity's journal records below floor: a range of keys.
func truncateJournal(rb *bolt.Bucket, prefix []byte, id string, floor uint64) error {
	jp := stateJournalPrefix(prefix, id)
	end := stateJournalKey(prefix, id, floor)
	var keys [][]byte
	c := rb.Cursor()
	for k, _ := c.Seek(jp); k != nil && bytes.HasPrefix(k, jp) && bytes.Compare(k, end) < 0; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := rb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteEntityBefore deletes the records of the entity id older than ver: its
// snapshot, remember mark, journal floor and journal records (a tombstone at ver,
// stateKindGone, is being applied).
func deleteEntityBefore(rb *bolt.Bucket, prefix []byte, id string, ver stateVersion) error {
	var keys [][]byte
	for _, kind := range []uint8{stateKindSnapshot, stateKindRemember, stateKindFloor} {
		k := stateRecordKey(prefix, kind, id)
		if ov, _, _, ok := decodeStateValue(rb.Get(k)); ok && ov.less(ver) {
			keys = append(keys, k)
		}
	}
	jp := stateJournalPrefix(prefix, id)
	c := rb.Cursor()
	for k, v := c.Seek(jp); k != nil && bytes.HasPrefix(k, jp); k, v = c.Next() {
		if len(k) != len(jp)+8 {
			continue
		}
		// A value that does not decode (a torn copy) has no version: it goes too.
		if ov, _, _, ok := decodeStateValue(v); !ok || ov.less(ver) {
			keys = append(keys, bytes.Clone(k))
		}
	}
	for _, k := range keys {
		if err := rb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// stateDeletedKey is the epochs bucket's key of a type's deletion mark: a zero length
// byte (no shard prefix starts so) and the type.
func stateDeletedKey(typ string) []byte { return append([]byte{0}, typ...) }

// deleteType deletes every record of the type typ, in every shard, keeping the shards'
// epochs, and marks the type deleted up to at least at: an unfenced write (a repair
// from a replica that has not deleted yet, an import) of a record not newer than the
// mark is dropped from then on. It returns the mark, the newest Seq deleted or at, and
// how many records it deleted.
func (d *stateDisk) deleteType(typ string, at uint64) (mark uint64, deleted int, err error) {
	err = d.update(0, func(eb, rb *bolt.Bucket) (bool, error) {
		mark, deleted = at, 0
		if v := eb.Get(stateDeletedKey(typ)); len(v) == 8 {
			mark = max(mark, binary.BigEndian.Uint64(v))
		}
		var prefixes [][]byte
		if err := eb.ForEach(func(k, _ []byte) error {
			if t, _, ok := parseStateShardPrefix(k); ok && t == typ {
				prefixes = append(prefixes, bytes.Clone(k))
			}
			return nil
		}); err != nil {
			return false, err
		}
		for _, prefix := range prefixes {
			c := rb.Cursor()
			var keys [][]byte
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				if ver, _, _, ok := decodeStateValue(v); ok {
					mark = max(mark, ver.Seq)
				}
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := rb.Delete(k); err != nil {
					return false, err
				}
			}
			if err := dropDueShard(rb.Tx(), prefix); err != nil {
				return false, err
			}
			deleted += len(keys)
		}
		return true, eb.Put(stateDeletedKey(typ), binary.BigEndian.AppendUint64(nil, mark))
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%w: state store %s: delete %s: %w", sharding.ErrStoreUnavailable, d.path, typ, err)
	}
	return mark, deleted, nil
}

// raiseEpoch makes the shard's epoch at least epoch (creating its entry) and returns
// it; it writes only if that changes something.
func (d *stateDisk) raiseEpoch(prefix []byte, epoch uint64) (uint64, error) {
	var cur uint64
	var has bool
	if err := d.view(func(eb, rb *bolt.Bucket) error {
		cur, has = stateEpochOf(eb, prefix)
		return nil
	}); err != nil {
		return 0, err
	}
	if has && cur >= epoch {
		return cur, nil
	}
	err := d.update(8, func(eb, rb *bolt.Bucket) (bool, error) {
		c, has := stateEpochOf(eb, prefix)
		if has && c >= epoch {
			cur = c
			return false, nil
		}
		cur = max(c, epoch)
		return true, eb.Put(prefix, binary.BigEndian.AppendUint64(nil, cur))
	})
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: write: %w", sharding.ErrStoreUnavailable, d.path, err)
	}
	return cur, nil
}

// dropSynced deletes the listed records that still have the listed versions, and the
// shard's epoch entry if no record of it is left. It returns how many it deleted.
func (d *stateDisk) dropSynced(prefix []byte, entries []stateRecord) (int, error) {
	dropped := 0
	err := d.update(0, func(eb, rb *bolt.Bucket) (bool, error) {
		dropped = 0
		for i := range entries {
			e := &entries[i]
			k := e.key(prefix)
			v := rb.Get(k)
			if v == nil {
				continue
			}
			if r, ok := decodeStateRecord(e.Kind, e.ID, e.JSeq, v); ok && !r.sameAs(e) {
				continue // written since the replicas acknowledged
			}
			if err := reindexDue(rb, prefix, e.Kind, e.ID, v, nil); err != nil {
				return false, err
			}
			if err := rb.Delete(k); err != nil {
				return false, err
			}
			dropped++
		}
		if k, _ := rb.Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			return dropped > 0, nil
		}
		if eb.Get(prefix) == nil {
			return dropped > 0, nil
		}
		return true, eb.Delete(prefix)
	})
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: drop: %w", sharding.ErrStoreUnavailable, d.path, err)
	}
	return dropped, nil
}
