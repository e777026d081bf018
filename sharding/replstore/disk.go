// A Store's replica data on this member: one bbolt file, written by one
// goroutine with group commit through a write-ahead log (wal.go).

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
// One goroutine writes: it takes the writes waiting in its queue together, appends
// them to the write-ahead log in one write and one fdatasync (group commit), and
// acknowledges each after it; the bbolt transaction that holds them is committed later
// (wal.go). Writes the log does not take are committed at once, in a transaction and
// an fsync of their own. Reads run beside it, each in a read transaction, once the
// writer has committed what it acknowledged. Safe for concurrent use.
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

	// The write-ahead log (wal.go) and the writer's state: its open transaction (nil:
	// none) and its buckets, the logged writes it holds (pending, in order, to apply
	// again when the transaction has to be rebuilt), their bytes, when the first came,
	// the log entries of the current batch not written yet (walBuf) and the number of
	// the last entry. Only the writer's goroutine touches them once it runs.
	wal          *stateWAL
	tx           *bolt.Tx
	txEB, txRB   *bolt.Bucket
	pending      []*stateWriteReq // unchanged once queued: Save and AppendJournal copy their callers' bytes, a peer's are decoded
	pendingBytes int
	pendingSince time.Time
	walBuf       []byte
	lsn          uint64
	// batchLogged are the ops of the current batch applied in the open transaction
	// since its last commit, and acknowledged only once walBuf is written; batchFrom is
	// the first of d.pending they added.
	batchLogged []int
	batchFrom   int
	// dirty is set while the open transaction holds writes that no commit has: a read
	// is then served by the writer, from that transaction (view).
	dirty atomic.Bool
	// broken is set when the writer could not rebuild its transaction: it refuses
	// every write from then on (the log holds what it acknowledged; an open replays it).
	broken error
	// noFlushAtClose is set by the tests to leave the log as a crash does.
	noFlushAtClose bool
	// flushEvery is walFlushInterval; the tests set it before the first write.
	flushEvery time.Duration
	// marks caches the journal floors and tombstones that the logged writes read or
	// wrote, as the writer's transaction holds them (key: shard prefix and entity ID;
	// stateEntityMarks), so that a journal append need not search the records bucket
	// for the two keys its entity nearly never has. nil: empty. Emptied when the
	// transaction is rebuilt (rolled back), and by every op that is not a logged write
	// (deleteType, dropSynced, a write too large for the log): those change records
	// without keeping it. Only the writer's goroutine touches it.
	marks map[string]stateEntityMark
}

// stateDiskWriteLogInterval is the least time between two log lines of refused writes.
const stateDiskWriteLogInterval = 10 * time.Second

// stateDiskOp is a write waiting for the writer. fn may run twice (after a failed
// batch, each op is retried alone) and reports whether it changed anything. Its
// outcome goes to done, or to notify (called once, on the writer's goroutine or
// close's: it must not block).
type stateDiskOp struct {
	fn func(eb, rb *bolt.Bucket) (changed bool, err error)
	// write, instead of fn, is a write request's (stateWrite.apply); its outcome goes
	// to write.done if set.
	write *stateWrite
	// req, when not nil, is the write request fn applies: the op goes through the
	// write-ahead log. read, instead of fn: a read the writer serves from its open
	// transaction, once the batch's log entries are written (view).
	req    *stateWriteReq
	read   func(eb, rb *bolt.Bucket) error
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
		for _, b := range [][]byte{stateBucketEpochs, stateBucketRecords, stateBucketRing, stateBucketDue} {
			if tx.Bucket(b) != nil {
				continue
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return false, err
			}
			changed = true
			if bytes.Equal(b, stateBucketDue) {
				// A file from before the due index (due.go): built from its records.
				if err := buildDueIndex(tx); err != nil {
					return false, err
				}
			}
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
	var wal *stateWAL
	var lsn uint64
	if err == nil {
		wal, lsn, err = replayWAL(db, dir)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: state store: open %s: %w", sharding.ErrStoreUnavailable, path, err)
	}
	d := &stateDisk{path: path, db: db, storeID: storeID, created: created, ops: make(chan *stateDiskOp, stateDiskQueue),
		g: owner.New(), done: make(chan struct{}), writeLog: obs.LogLimiter{Interval: stateDiskWriteLogInterval},
		wal: wal, lsn: lsn, flushEvery: walFlushInterval}
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
		werr := d.wal.close()
		if err := d.db.Close(); err != nil || werr != nil {
			d.err = fmt.Errorf("%w: state store %s: close: %w", sharding.ErrStoreUnavailable, d.path, errors.Join(err, werr))
		}
	})
	return d.err
}

func (d *stateDisk) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	defer timer.Stop()
	for {
		var first *stateDiskOp
		select {
		case first = <-d.ops:
		case <-timer.C:
			armed = false
			d.refused(d.flush())
			continue
		case <-d.g.Done():
			if d.tx != nil {
				if d.noFlushAtClose {
					_ = d.tx.Rollback() // as a crash leaves it: the log holds the writes
					d.tx = nil
				} else {
					d.refused(d.flush())
				}
			}
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
		d.runBatch(batch)
		if d.tx != nil && (d.pendingBytes >= walFlushBytes || time.Since(d.pendingSince) >= d.flushEvery) {
			d.refused(d.flush())
		}
		switch {
		case d.tx != nil && !armed:
			timer.Reset(d.flushEvery)
			armed = true
		case d.tx == nil && armed:
			timer.Stop()
			armed = false
		}
	}
}

// runBatch runs a batch of ops: the logged writes are applied in the open transaction
// and written to the log together (one write, one fdatasync), the others committed to
// bbolt after it; then each op gets its outcome.
func (d *stateDisk) runBatch(batch []*stateDiskOp) {
	results := make([]error, len(batch))
	d.batchLogged, d.batchFrom = d.batchLogged[:0], len(d.pending)
	var reads []int
	for i, op := range batch {
		switch {
		case op.read != nil:
			reads = append(reads, i)
		case op.req != nil:
			results[i] = d.applyLogged(i, op)
		default:
			// Not logged: committed now, after what the open transaction holds.
			d.marks = nil
			if err := d.flush(); err != nil {
				results[i] = err
				continue
			}
			results[i] = d.commit([]*stateDiskOp{op})
		}
	}
	if len(d.walBuf) > 0 {
		err := d.wal.write(d.walBuf)
		d.walBuf = d.walBuf[:0]
		if err != nil {
			// Not durable: the batch's logged writes are undone, and refused.
			err = fmt.Errorf("write-ahead log: %w", err)
			d.pending = d.pending[:d.batchFrom]
			if rerr := d.rebuild(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			for _, i := range d.batchLogged {
				results[i] = err
			}
		}
	}
	d.batchLogged = d.batchLogged[:0]
	// The reads see every write acknowledged before them, and those of this batch once
	// durable.
	for _, i := range reads {
		if d.tx == nil {
			results[i] = d.viewDB(batch[i].read)
			continue
		}
		results[i] = boltfile.Guard(func() error { return batch[i].read(d.txEB, d.txRB) })
	}
	for i, op := range batch {
		if op.read == nil {
			d.refused(results[i])
		}
		op.finish(results[i])
	}
}

// begin opens the writer's transaction if none is open.
func (d *stateDisk) begin() error {
	if d.broken != nil {
		return d.broken
	}
	if d.tx != nil {
		return nil
	}
	return boltfile.Guard(func() error {
		tx, err := d.db.Begin(true)
		if err != nil {
			return err
		}
		eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
		if eb == nil || rb == nil {
			_ = tx.Rollback()
			return errors.New("buckets missing")
		}
		d.tx, d.txEB, d.txRB = tx, eb, rb
		return nil
	})
}

// applyLogged applies a logged write (batch[i]) in the open transaction, and adds its
// entry to the batch's part of the log if it changed anything.
func (d *stateDisk) applyLogged(i int, op *stateDiskOp) error {
	if err := d.begin(); err != nil {
		return err
	}
	if op.write != nil {
		if d.marks == nil {
			d.marks = map[string]stateEntityMark{}
		}
		op.write.marks = d.marks
	}
	var changed bool
	err := boltfile.Guard(func() (err error) {
		changed, err = op.run(d.txEB, d.txRB)
		return err
	})
	if err != nil {
		// The transaction may hold part of the write: rebuilt without it.
		if rerr := d.rebuild(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	d.batchLogged = append(d.batchLogged, i)
	if !changed {
		return nil
	}
	if len(d.pending) == 0 {
		d.pendingSince = time.Now()
	}
	d.lsn++
	d.pending = append(d.pending, op.req)
	d.pendingBytes += op.size
	d.walBuf = appendWALReqEntry(d.walBuf, d.lsn, op.req)
	d.dirty.Store(true)
	return nil
}

// rebuild rolls the open transaction back and applies the pending writes again in a
// new one. When that fails the writer is broken: it refuses every write (the log keeps
// what it acknowledged, for the next open).
func (d *stateDisk) rebuild() error {
	d.marks = nil // they may hold what the rollback undoes
	if d.tx != nil {
		_ = d.tx.Rollback()
		d.tx = nil
	}
	if len(d.pending) == 0 {
		d.dirty.Store(false)
		return nil
	}
	err := d.begin()
	for _, req := range d.pending {
		if err != nil {
			break
		}
		err = boltfile.Guard(func() error {
			_, err := applyReq(req, d.txEB, d.txRB)
			return err
		})
	}
	if err != nil {
		d.broken = fmt.Errorf("%w: state store %s: the writer's transaction could not be rebuilt (the store needs a restart): %w",
			sharding.ErrStoreUnavailable, d.path, err)
		if d.tx != nil {
			_ = d.tx.Rollback()
			d.tx = nil
		}
		return d.broken
	}
	return nil
}

// flush commits the open transaction (fsynced) with the number of the last log entry
// it holds, then empties the log: the commit holds its entries, and those of the
// current batch not written yet, which need no entry any more.
func (d *stateDisk) flush() error {
	if d.tx == nil {
		return nil
	}
	if len(d.pending) == 0 {
		_ = d.tx.Rollback()
		d.tx = nil
		return nil
	}
	err := boltfile.Guard(func() error {
		ring := d.tx.Bucket(stateBucketRing)
		if ring == nil {
			return errors.New("ring bucket missing")
		}
		if err := ring.Put(stateWALKey, binary.BigEndian.AppendUint64(nil, d.lsn)); err != nil {
			return err
		}
		return d.tx.Commit()
	})
	if err != nil {
		// bbolt rolled it back (or it is unusable): the writes stay acknowledged, in
		// the log, and in a new transaction.
		_ = d.tx.Rollback()
		d.tx = nil
		if rerr := d.rebuild(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("commit: %w", err)
	}
	d.tx = nil
	clear(d.pending)
	d.pending, d.pendingBytes = d.pending[:0], 0
	d.walBuf = d.walBuf[:0]
	d.batchLogged, d.batchFrom = d.batchLogged[:0], 0
	d.dirty.Store(false)
	d.wal.reset()
	return nil
}

// replayWAL opens the log in dir and applies to db, in one commit, its entries after
// the last that db holds; then it empties the log. It returns the log and the number
// of its last entry.
func replayWAL(db *bolt.DB, dir string) (*stateWAL, uint64, error) {
	wal, err := openWAL(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("write-ahead log: %w", err)
	}
	var after uint64
	err = boltfile.View(db, func(tx *bolt.Tx) error {
		if v := tx.Bucket(stateBucketRing).Get(stateWALKey); len(v) == 8 {
			after = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		_ = wal.close()
		return nil, 0, err
	}
	entries, _, last, err := wal.readWAL(after)
	if err == nil && len(entries) > 0 {
		err = boltfile.Update(db, func(tx *bolt.Tx) (bool, error) {
			eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
			for i := range entries {
				if _, err := applyReq(&entries[i].req, eb, rb); err != nil {
					return false, err
				}
			}
			return true, tx.Bucket(stateBucketRing).Put(stateWALKey, binary.BigEndian.AppendUint64(nil, last))
		})
	}
	if err != nil {
		_ = wal.close()
		return nil, 0, fmt.Errorf("write-ahead log: replay: %w", err)
	}
	wal.reset()
	wal.preallocErr = wal.preallocate()
	return wal, max(after, last), nil
}

// run applies the op (fn, or write's apply).
func (op *stateDiskOp) run(eb, rb *bolt.Bucket) (bool, error) {
	if op.write != nil {
		return op.write.apply(eb, rb)
	}
	return op.fn(eb, rb)
}

// finish hands the op its outcome.
func (op *stateDiskOp) finish(err error) {
	if w := op.write; w != nil && w.done != nil {
		w.done(w.outcome(err))
		return
	}
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
			c, err := op.run(eb, rb)
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
	if err := d.queue(op); err != nil {
		return nil, err
	}
	return op, nil
}

// queue queues an op whose outcome goes to its done channel.
func (d *stateDisk) queue(op *stateDiskOp) error {
	select {
	case d.ops <- op:
		return nil
	case <-d.g.Done():
		return errStateClosed
	}
}

// trySubmit queues fn for a write transaction, as submit does, if the queue has room:
// notify gets its outcome once it is on disk (see stateDiskOp). It reports false
// (notify not called) when the queue is full. Errors: errStateClosed (notify not
// called).
func (d *stateDisk) trySubmit(size int, fn func(eb, rb *bolt.Bucket) (bool, error), notify func(error)) (bool, error) {
	return d.tryQueue(&stateDiskOp{fn: fn, size: size, notify: notify})
}

// tryQueue queues an op with a callback, as trySubmit does.
func (d *stateDisk) tryQueue(op *stateDiskOp) (bool, error) {
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
// While the writer holds acknowledged writes no commit has (dirty), fn runs on the
// writer's goroutine, in its open transaction, after the writes queued before it.
func (d *stateDisk) view(fn func(eb, rb *bolt.Bucket) error) error {
	var err error
	if d.dirty.Load() {
		op := &stateDiskOp{read: fn, done: make(chan error, 1)}
		if err = d.queue(op); err == nil {
			err = d.await(op)
		}
	} else {
		err = d.viewDB(fn)
	}
	if err != nil {
		return fmt.Errorf("%w: state store %s: read: %w", sharding.ErrStoreUnavailable, d.path, err)
	}
	return nil
}

// viewDB runs fn in a read transaction of the bbolt file.
func (d *stateDisk) viewDB(fn func(eb, rb *bolt.Bucket) error) error {
	return boltfile.View(d.db, func(tx *bolt.Tx) error {
		eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
		if eb == nil || rb == nil {
			return errors.New("buckets missing")
		}
		return fn(eb, rb)
	})
}

// stateEpochOf returns the epoch stored for a shard, and whether there is an entry.
func stateEpochOf(eb *bolt.Bucket, prefix []byte) (uint64, bool) { return epochValue(eb.Get(prefix)) }

// epochValue reads an epochs entry's value v (nil: none).
func epochValue(v []byte) (uint64, bool) {
	if v == nil {
		return 0, false
	}
	if len(v) != 8 {
		return 0, true
	}
	return binary.BigEndian.Uint64(v), true
}
