// A Store's replica data on this member: one bbolt file, written by one
// goroutine with group commit.

package replstore

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/internal/boltfile"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// stateDisk is a member's replica data: a bbolt file (layout in wire.go).
// One goroutine writes: it commits the writes waiting in its queue together, in one
// transaction and one fsync (group commit), and acknowledges each after the fsync.
// Reads run beside it, each in a read transaction. Safe for concurrent use.
type stateDisk struct {
	path string
	db   *bolt.DB
	// storeID names this file's data: 16 hex digits chosen at random when the file is
	// created, kept in the ring bucket. A member restarted on an empty directory (its
	// disk lost) has a new one: the others tell its replicas from those it had
	// (ring.go).
	storeID string
	// created: the file had taken no part in a cluster when the store opened it: this
	// process made it, or one that never saw another member and answered no member's
	// request did (a first seed whose join failed opens it twice, cmd/shardhost's
	// startMember), its stateNewKey still set. Fixed at open; noteInCluster clears
	// the key.
	created bool
	// inCluster is set once the file has lost stateNewKey (noteInCluster), or never
	// had it.
	inCluster   atomic.Bool
	inClusterMu sync.Mutex // serializes noteInCluster's write
	ops         chan *stateDiskOp
	// g owns the writer (run); its closing stops it. done is closed when run has
	// returned: await's sign that no queued op will be written any more.
	g    *owner.Group
	done chan struct{}
	once sync.Once
	err  error
	// submitMu guards closed, and the queueing of an op with a callback (trySubmit):
	// close fails the ops left in the queue once closed is set, so that every
	// callback is called.
	submitMu sync.Mutex
	closed   bool
	// log receives an error line when the disk refuses a write (a full disk, say): at
	// most one per writeLog's interval, with the count of those suppressed since the
	// last. Nil: none (the offline tools). Set before the first write.
	log      *slog.Logger
	writeLog obs.LogLimiter
}

// stateDiskWriteLogInterval is the least time between two log lines of refused writes.
const stateDiskWriteLogInterval = 10 * time.Second

// stateDiskOp is a write waiting for the writer. fn may run twice (after a failed
// batch, each op is retried alone) and reports whether it changed anything. Its
// outcome goes to done, or to notify (called once, on the writer's goroutine or
// close's: it must not block).
type stateDiskOp struct {
	fn     func(eb, rb *bolt.Bucket) (changed bool, err error)
	size   int
	done   chan error
	notify func(error)
}

const (
	stateDiskQueue      = 256
	stateDiskBatchOps   = 256
	stateDiskBatchBytes = 16 << 20
)

// openStateDisk opens (or creates) the data file in dir, creating dir with mode 0o700
// and the file with mode 0o600. Errors wrap sharding.ErrStoreUnavailable: the directory
// cannot be made, another store holds the file (its lock is not taken within 1 s), the
// file is not a valid bbolt file.
func openStateDisk(dir string) (*stateDisk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: state store: create directory: %w", sharding.ErrStoreUnavailable, err)
	}
	path := filepath.Join(dir, FileName)
	_, statErr := os.Stat(path)
	var db *bolt.DB
	err := boltfile.Guard(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
		return err
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		err = fmt.Errorf("directory %s is in use by another store: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: state store: open %s: %w", sharding.ErrStoreUnavailable, path, err)
	}
	var storeID string
	created := false
	err = boltfile.Update(db, func(tx *bolt.Tx) (bool, error) {
		changed := false
		for _, b := range [][]byte{stateBucketEpochs, stateBucketRecords, stateBucketRing} {
			if tx.Bucket(b) != nil {
				continue
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return false, err
			}
			changed = true
		}
		rb := tx.Bucket(stateBucketRing)
		if v := rb.Get(stateStoreIDKey); len(v) > 0 {
			storeID = string(v)
			created = rb.Get(stateNewKey) != nil
			return changed, nil
		}
		// A new file (or one written before files had an ID).
		storeID = newStateStoreID()
		if errors.Is(statErr, os.ErrNotExist) {
			created = true
			if err := rb.Put(stateNewKey, []byte{1}); err != nil {
				return false, err
			}
		}
		return true, rb.Put(stateStoreIDKey, []byte(storeID))
	})
	if err == nil && errors.Is(statErr, os.ErrNotExist) {
		err = boltfile.SyncDir(dir)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: state store: open %s: %w", sharding.ErrStoreUnavailable, path, err)
	}
	d := &stateDisk{path: path, db: db, storeID: storeID, created: created, ops: make(chan *stateDiskOp, stateDiskQueue),
		g: owner.New(), done: make(chan struct{}), writeLog: obs.LogLimiter{Interval: stateDiskWriteLogInterval}}
	d.inCluster.Store(!created)
	d.g.Go(d.run)
	return d, nil
}

// noteInCluster records on disk that the file takes part in a cluster (its member saw
// another, or is about to answer a member's request): a store opened on it later is
// not created, and its member, alone or among members none of which has a confirmed
// ring, does not found a new cluster (ring.go). A no-op once done. Errors
// wrap sharding.ErrStoreUnavailable; a request about to be answered must then fail.
func (d *stateDisk) noteInCluster() error {
	if d.inCluster.Load() {
		return nil
	}
	d.inClusterMu.Lock()
	defer d.inClusterMu.Unlock()
	if d.inCluster.Load() {
		return nil
	}
	if err := d.updateRing("noting the file in a cluster", func(b *bolt.Bucket) error { return b.Delete(stateNewKey) }); err != nil {
		return err
	}
	d.inCluster.Store(true)
	return nil
}

// newStateStoreID returns a store ID: 16 hex digits from crypto/rand.
func newStateStoreID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// close stops the writer (writes still queued fail) and closes the file. Idempotent.
func (d *stateDisk) close() error {
	d.once.Do(func() {
		d.g.Close()
		d.g.Wait()
		// The ops still queued fail: those awaited (await sees done closed), and
		// those with a callback, which no op joins once closed is set.
		d.submitMu.Lock()
		d.closed = true
		for drained := false; !drained; {
			select {
			case op := <-d.ops:
				op.finish(errStateClosed)
			default:
				drained = true
			}
		}
		d.submitMu.Unlock()
		if err := d.db.Close(); err != nil {
			d.err = fmt.Errorf("%w: state store %s: close: %w", sharding.ErrStoreUnavailable, d.path, err)
		}
	})
	return d.err
}

func (d *stateDisk) run() {
	defer close(d.done)
	for {
		var first *stateDiskOp
		select {
		case first = <-d.ops:
		case <-d.g.Done():
			return
		}
		batch, size := []*stateDiskOp{first}, first.size
	fill:
		for len(batch) < stateDiskBatchOps && size < stateDiskBatchBytes {
			select {
			case op := <-d.ops:
				batch = append(batch, op)
				size += op.size
			default:
				break fill
			}
		}
		err := d.commit(batch)
		if err != nil && len(batch) > 1 {
			for _, op := range batch { // one op's failure must not fail the others
				err := d.commit([]*stateDiskOp{op})
				d.refused(err)
				op.finish(err)
			}
			continue
		}
		d.refused(err)
		for _, op := range batch {
			op.finish(err)
		}
	}
}

// finish hands the op its outcome.
func (op *stateDiskOp) finish(err error) {
	if op.notify != nil {
		op.notify(err)
		return
	}
	op.done <- err
}

// refused logs a write the disk refused (err not nil). The writer gets the error too,
// but a replica's refusal is hidden from the entity whose save the other replicas made
// (a majority is enough): this line is how the member's operator learns that its copies
// fall behind, and why (found by TestDockerFullDataDirectory: a member whose data
// directory was full refused every write without a word).
func (d *stateDisk) refused(err error) {
	if err == nil || d.log == nil {
		return
	}
	if suppressed, ok := d.writeLog.Allow("write", time.Now()); ok {
		d.log.Error("state store: this member's disk refused a write: its replicas of entity state fall behind until it accepts writes again",
			"file", d.path, "err", err, "suppressed", suppressed)
	}
}

// commit runs the ops in one transaction, committed (and fsynced) unless none changed
// anything.
func (d *stateDisk) commit(batch []*stateDiskOp) error {
	return boltfile.Update(d.db, func(tx *bolt.Tx) (bool, error) {
		eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
		if eb == nil || rb == nil {
			return false, errors.New("buckets missing")
		}
		changed := false
		for _, op := range batch {
			c, err := op.fn(eb, rb)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	})
}

// update runs fn in a write transaction (shared with other writes) and returns once it
// is on disk.
func (d *stateDisk) update(size int, fn func(eb, rb *bolt.Bucket) (bool, error)) error {
	op, err := d.submit(size, fn)
	if err != nil {
		return err
	}
	return d.await(op)
}

// submit queues fn for a write transaction (shared with other writes); await waits
// until it is on disk. Ops submitted one after the other, then awaited, share a
// transaction and its fsync when the writer finds them queued together.
func (d *stateDisk) submit(size int, fn func(eb, rb *bolt.Bucket) (bool, error)) (*stateDiskOp, error) {
	op := &stateDiskOp{fn: fn, size: size, done: make(chan error, 1)}
	select {
	case d.ops <- op:
		return op, nil
	case <-d.g.Done():
		return nil, errStateClosed
	}
}

// trySubmit queues fn for a write transaction, as submit does, if the queue has room:
// notify gets its outcome once it is on disk (see stateDiskOp). It reports false
// (notify not called) when the queue is full. Errors: errStateClosed (notify not
// called).
func (d *stateDisk) trySubmit(size int, fn func(eb, rb *bolt.Bucket) (bool, error), notify func(error)) (bool, error) {
	op := &stateDiskOp{fn: fn, size: size, notify: notify}
	d.submitMu.Lock()
	defer d.submitMu.Unlock()
	if d.closed {
		return false, errStateClosed
	}
	select {
	case d.ops <- op:
		return true, nil
	default:
		return false, nil
	}
}

// await waits for a submitted op's outcome.
func (d *stateDisk) await(op *stateDiskOp) error {
	select {
	case err := <-op.done:
		return err
	case <-d.done:
		select {
		case err := <-op.done:
			return err
		default:
			return errStateClosed
		}
	}
}

// saveRing writes the ring's record (ring.go) and returns once it is on
// disk (bbolt fsyncs the commit). It runs beside the writer's transactions: bbolt
// serializes writers. Errors wrap sharding.ErrStoreUnavailable.
func (d *stateDisk) saveRing(rec *stateRingRecord) error {
	return d.updateRing("saving the ring", func(b *bolt.Bucket) error { return b.Put(stateRingKey, encodeState(rec)) })
}

// updateRing runs fn on the ring bucket in a write transaction of its own, beside the
// writer's (bbolt serializes writers), and returns once it is on disk. what names the
// change in the error. Errors: errStateClosed after close; others wrap
// sharding.ErrStoreUnavailable.
func (d *stateDisk) updateRing(what string, fn func(b *bolt.Bucket) error) error {
	select {
	case <-d.g.Done():
		return errStateClosed
	default:
	}
	err := boltfile.Update(d.db, func(tx *bolt.Tx) (bool, error) {
		b := tx.Bucket(stateBucketRing)
		if b == nil {
			return false, errors.New("ring bucket missing")
		}
		return true, fn(b)
	})
	if err != nil {
		return fmt.Errorf("%w: state store %s: %s: %w", sharding.ErrStoreUnavailable, d.path, what, err)
	}
	return nil
}

// loadRing reads the ring's record; nil if none was saved (a new directory, or one
// written before the ring was kept on disk).
func (d *stateDisk) loadRing() (*stateRingRecord, error) {
	var rec *stateRingRecord
	err := boltfile.View(d.db, func(tx *bolt.Tx) error {
		b := tx.Bucket(stateBucketRing)
		if b == nil {
			return nil
		}
		v := b.Get(stateRingKey)
		if v == nil {
			return nil
		}
		rec = &stateRingRecord{}
		return decodeState(v, rec)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: state store %s: reading the ring: %w", sharding.ErrStoreUnavailable, d.path, err)
	}
	return rec, nil
}

// view runs fn in a read transaction. Errors wrap sharding.ErrStoreUnavailable.
func (d *stateDisk) view(fn func(eb, rb *bolt.Bucket) error) error {
	err := boltfile.View(d.db, func(tx *bolt.Tx) error {
		eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
		if eb == nil || rb == nil {
			return errors.New("buckets missing")
		}
		return fn(eb, rb)
	})
	if err != nil {
		return fmt.Errorf("%w: state store %s: read: %w", sharding.ErrStoreUnavailable, d.path, err)
	}
	return nil
}

// stateEpochOf returns the epoch stored for a shard, and whether there is an entry.
func stateEpochOf(eb *bolt.Bucket, prefix []byte) (uint64, bool) {
	v := eb.Get(prefix)
	if v == nil {
		return 0, false
	}
	if len(v) != 8 {
		return 0, true
	}
	return binary.BigEndian.Uint64(v), true
}

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

// stateWrite is a write request submitted to the disk's writer (startWrite).
type stateWrite struct {
	d     *stateDisk
	req   *stateWriteReq
	op    *stateDiskOp
	err   error // a refusal before the op was submitted
	epoch uint64
	stale bool
}

// startWrite checks and submits a write request (applyWrite without the wait): the
// writes started one after the other, then waited for, share the writer's transaction
// and fsync.
func (d *stateDisk) startWrite(req *stateWriteReq) *stateWrite {
	w := &stateWrite{d: d, req: req}
	prefix := stateShardPrefix(req.Type, req.Shard)
	size, err := w.check()
	if err != nil {
		w.err = err
		return w
	}
	w.op, w.err = d.submit(size, func(eb, rb *bolt.Bucket) (bool, error) { return w.apply(prefix, eb, rb) })
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
	w := &stateWrite{d: d, req: req}
	size, err := w.check()
	if err != nil {
		done(0, err)
		return true
	}
	prefix := stateShardPrefix(req.Type, req.Shard)
	queued, err := d.trySubmit(size, func(eb, rb *bolt.Bucket) (bool, error) { return w.apply(prefix, eb, rb) },
		func(err error) { done(w.outcome(err)) })
	if err != nil {
		done(0, fmt.Errorf("%w: state store %s: write: %w", sharding.ErrStoreUnavailable, d.path, err))
		return true
	}
	return queued
}

// check verifies the write's journal records (sharding.VerifyJournalRecord) and
// returns its size, in bytes.
func (w *stateWrite) check() (int, error) {
	req := w.req
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
	return w.outcome(w.d.await(w.op))
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
func (w *stateWrite) apply(prefix []byte, eb, rb *bolt.Bucket) (bool, error) {
	req := w.req
	cur, has := stateEpochOf(eb, prefix)
	if req.Fence && req.Epoch < cur {
		w.epoch, w.stale = cur, true
		return false, nil
	}
	epoch := max(cur, req.Epoch)
	w.epoch, w.stale = epoch, false
	var deletedMark uint64
	if v := eb.Get(stateDeletedKey(req.Type)); len(v) == 8 && !req.Fence {
		deletedMark = binary.BigEndian.Uint64(v)
	}
	changed := false
	if !has || epoch != cur {
		if err := eb.Put(prefix, binary.BigEndian.AppendUint64(nil, epoch)); err != nil {
			return false, err
		}
		changed = true
	}
	var floors map[string]uint64 // the journals' floors met in this write
	floorOf := func(id string) uint64 {
		f, ok := floors[id]
		if !ok {
			if fr, ok := decodeStateRecord(stateKindFloor, id, 0, rb.Get(stateRecordKey(prefix, stateKindFloor, id))); ok {
				f = fr.Floor
			}
			if floors == nil {
				floors = map[string]uint64{}
			}
			floors[id] = f
		}
		return f
	}
	for i := range req.Records {
		r := &req.Records[i]
		if r.Seq <= deletedMark {
			continue // a copy from before the type's state was deleted (deleteType)
		}
		k := r.key(prefix)
		switch r.Kind {
		case stateKindJournal:
			if r.JSeq < floorOf(r.ID) {
				continue // below the journal's floor: a base holds it
			}
			if old := rb.Get(k); old != nil {
				o, ok := decodeStateRecord(r.Kind, r.ID, r.JSeq, old)
				if ok && !r.newer(&o) && verifyStateJournal(req.Type, req.Shard, &o) == nil {
					continue // the replica's is as new or newer, and intact
				}
			}
		case stateKindFloor:
			if o, ok := decodeStateRecord(r.Kind, r.ID, 0, rb.Get(k)); ok && !r.newer(&o) {
				continue
			}
			if err := truncateJournal(rb, prefix, r.ID, r.Floor); err != nil {
				return false, err
			}
			if floors == nil {
				floors = map[string]uint64{}
			}
			floors[r.ID] = max(floors[r.ID], r.Floor)
		default:
			if old := rb.Get(k); old != nil {
				if ov, _, _, ok := decodeStateValue(old); ok && !ov.less(r.version()) {
					continue // the replica's is as new or newer
				}
			}
		}
		if err := rb.Put(k, encodeStateValue(r)); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
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
