// A Store's replica data on this member: one bbolt file, written by one
// goroutine with group commit through a write-ahead log (wal.go).

package replstore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/internal/boltfile"
	"github.com/shardhost/shardhost/internal/obs"
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
	stop        chan struct{}
	done        chan struct{}
	once        sync.Once
	err         error
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
	pending      [][]byte // encoded write requests
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
}

// stateDiskWriteLogInterval is the least time between two log lines of refused writes.
const stateDiskWriteLogInterval = 10 * time.Second

// stateDiskOp is a write waiting for the writer. fn may run twice (after a failed
// batch, each op is retried alone) and reports whether it changed anything. Its
// outcome goes to done, or to notify (called once, on the writer's goroutine or
// close's: it must not block).
type stateDiskOp struct {
	fn func(eb, rb *bolt.Bucket) (changed bool, err error)
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
		stop: make(chan struct{}), done: make(chan struct{}), writeLog: obs.LogLimiter{Interval: stateDiskWriteLogInterval},
		wal: wal, lsn: lsn, flushEvery: walFlushInterval}
	d.inCluster.Store(!created)
	go d.run()
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
		close(d.stop)
		<-d.done
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
		case <-d.stop:
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
	var changed bool
	err := boltfile.Guard(func() (err error) {
		changed, err = op.fn(d.txEB, d.txRB)
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
	enc := encodeState(op.req)
	d.pending = append(d.pending, enc)
	d.pendingBytes += op.size
	d.walBuf = appendWALEntry(d.walBuf, d.lsn, enc)
	d.dirty.Store(true)
	return nil
}

// rebuild rolls the open transaction back and applies the pending writes again in a
// new one. When that fails the writer is broken: it refuses every write (the log keeps
// what it acknowledged, for the next open).
func (d *stateDisk) rebuild() error {
	if d.tx != nil {
		_ = d.tx.Rollback()
		d.tx = nil
	}
	if len(d.pending) == 0 {
		d.dirty.Store(false)
		return nil
	}
	err := d.begin()
	for _, enc := range d.pending {
		if err != nil {
			break
		}
		var req stateWriteReq
		if err = decodeState(enc, &req); err != nil {
			break
		}
		err = boltfile.Guard(func() error {
			_, err := applyReq(&req, d.txEB, d.txRB)
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
	if err == nil {
		wal.reset()
		err = wal.preallocate()
	}
	if err != nil {
		_ = wal.close()
		return nil, 0, fmt.Errorf("write-ahead log: replay: %w", err)
	}
	return wal, max(after, last), nil
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
	case <-d.stop:
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
	case <-d.stop:
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
	w.op = &stateDiskOp{fn: func(eb, rb *bolt.Bucket) (bool, error) { return w.apply(prefix, eb, rb) }, size: size,
		done: make(chan error, 1)}
	if size <= walMaxWrite {
		w.op.req = req
	}
	w.err = d.queue(w.op)
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
	op := &stateDiskOp{fn: func(eb, rb *bolt.Bucket) (bool, error) { return w.apply(prefix, eb, rb) }, size: size,
		notify: func(err error) { done(w.outcome(err)) }}
	if size <= walMaxWrite {
		op.req = req
	}
	queued, err := d.tryQueue(op)
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

// applyReq applies a write request as its writer's op does: the replay of a logged
// write.
func applyReq(req *stateWriteReq, eb, rb *bolt.Bucket) (bool, error) {
	w := &stateWrite{req: req}
	return w.apply(stateShardPrefix(req.Type, req.Shard), eb, rb)
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

// record returns a record with its data (a copy).
func (d *stateDisk) record(prefix []byte, kind uint8, id string) (stateRecord, bool, error) {
	return d.recordOf(prefix, &stateRecord{Kind: kind, ID: id})
}

// recordOf returns the record named by ref (its kind, ID and JSeq) with its data (a
// copy).
func (d *stateDisk) recordOf(prefix []byte, ref *stateRecord) (stateRecord, bool, error) {
	var rec stateRecord
	var found bool
	err := d.view(func(eb, rb *bolt.Bucket) error {
		r, ok := decodeStateRecord(ref.Kind, ref.ID, ref.JSeq, rb.Get(ref.key(prefix)))
		if ok {
			found = true
			rec = r
			if r.Kind != stateKindFloor {
				rec.Data = append([]byte{}, r.Data...)
			}
		}
		return nil
	})
	return rec, found, err
}

// stateJournalPage is a page of an entity's journal on one replica (see
// stateJournalReply).
type stateJournalPage struct {
	records []stateRecord // intact, with their data (copies)
	corrupt []stateRecord // versions only
	floor   *stateRecord
	more    bool
	through uint64
	shard   uint64 // the replica's epoch of the shard
}

// journalPage reads key's journal from from (and its floor): its records in JSeq
// order, each checked with sharding.VerifyJournalRecord (a copy that fails goes to
// corrupt, without data), stopping before limit records (0: no limit) or budget bytes
// of data (at least one record).
func (d *stateDisk) journalPage(key sharding.EntityKey, from uint64, limit, budget int) (stateJournalPage, error) {
	prefix := stateShardPrefix(key.Type, key.Shard)
	var p stateJournalPage
	err := d.view(func(eb, rb *bolt.Bucket) error {
		p = stateJournalPage{}
		p.shard, _ = stateEpochOf(eb, prefix)
		start := max(from, 1)
		if fr, ok := decodeStateRecord(stateKindFloor, key.ID, 0, rb.Get(stateRecordKey(prefix, stateKindFloor, key.ID))); ok {
			p.floor = &fr
			start = max(start, fr.Floor)
		}
		jp := stateJournalPrefix(prefix, key.ID)
		n, size := 0, 0
		c := rb.Cursor()
		for k, v := c.Seek(stateJournalKey(prefix, key.ID, start)); k != nil && bytes.HasPrefix(k, jp); k, v = c.Next() {
			if len(k) != len(jp)+8 {
				continue
			}
			jseq := binary.BigEndian.Uint64(k[len(jp):])
			r, ok := decodeStateRecord(stateKindJournal, key.ID, jseq, v)
			if n > 0 && ((limit > 0 && n >= limit) || size+len(r.Data) > budget) {
				p.more = true
				return nil
			}
			n++
			p.through = jseq
			if !ok || verifyStateJournal(key.Type, key.Shard, &r) != nil {
				// A torn or corrupt copy: its version if it has one (a value that does not
				// decode has none: any copy elsewhere is newer).
				p.corrupt = append(p.corrupt, stateRecord{Kind: stateKindJournal, ID: key.ID, JSeq: jseq, Epoch: r.Epoch, Seq: r.Seq})
				continue
			}
			size += len(r.Data)
			r.Data = bytes.Clone(r.Data)
			p.records = append(p.records, r)
		}
		return nil
	})
	return p, err
}

// read returns a snapshot's version and size and a copy of at most max bytes of it
// from off (none if off is past its end), and the shard's epoch (0 if none).
func (d *stateDisk) read(prefix []byte, id string, off, maxBytes int) (ver stateVersion, size int, data []byte, found bool, shardEpoch uint64, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		shardEpoch, _ = stateEpochOf(eb, prefix)
		v, _, all, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, stateKindSnapshot, id)))
		if !ok {
			return nil
		}
		ver, size, found = v, len(all), true
		if off <= len(all) {
			data = append([]byte{}, all[off:off+min(maxBytes, len(all)-off)]...)
		}
		return nil
	})
	return
}

// rememberedPage returns the remember marks of a shard whose IDs sort after after, in
// ID order, stopping before limit records or budget bytes (at least one record);
// more: some are left.
func (d *stateDisk) rememberedPage(prefix []byte, after string, budget, limit int) (recs []stateRecord, more bool, err error) {
	kp := append(bytes.Clone(prefix), stateKindRemember)
	start := append(bytes.Clone(kp), after...)
	err = d.view(func(eb, rb *bolt.Bucket) error {
		recs, more = nil, false
		size := 0
		c := rb.Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, kp); k, v = c.Next() {
			id := string(k[len(kp):])
			if id == after {
				continue
			}
			ver, remember, _, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			if len(recs) > 0 && (len(recs) >= limit || size+len(id)+32 > budget) {
				more = true
				return nil
			}
			recs = append(recs, stateRecord{Kind: stateKindRemember, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Remember: remember})
			size += len(id) + 32
		}
		return nil
	})
	return recs, more, err
}

// entitiesPage returns the entities of a shard whose IDs begin with idPrefix and sort
// after after, in ID order, stopping before limit records or budget bytes (at least
// one): a stateKindSnapshot record with its Size for an entity with a snapshot, a
// stateKindJournal record for one with journal records only. The host's delta records
// (sharding.DeltaIDPrefix) are not entities. more: some are left.
func (d *stateDisk) entitiesPage(prefix []byte, after, idPrefix string, budget, limit int) (recs []stateRecord, more bool, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		recs, more = nil, false
		wanted := func(id string) bool {
			return id > after && strings.HasPrefix(id, idPrefix) && !strings.HasPrefix(id, sharding.DeltaIDPrefix)
		}
		c := rb.Cursor()
		// Snapshots, in ID order: at most limit+1 of them.
		var snaps []stateRecord
		kp := append(bytes.Clone(prefix), stateKindSnapshot)
		for k, v := c.Seek(append(bytes.Clone(kp), max(after, idPrefix)...)); k != nil && bytes.HasPrefix(k, kp) && len(snaps) <= limit; k, v = c.Next() {
			id := string(k[len(kp):])
			if !strings.HasPrefix(id, idPrefix) && id > idPrefix {
				break // past the prefix's range
			}
			if !wanted(id) {
				continue
			}
			ver, _, data, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			snaps = append(snaps, stateRecord{Kind: stateKindSnapshot, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Size: uint64(len(data))})
		}
		// Journals, keyed by ID length first: every ID once (a seek past its records),
		// then sorted.
		var journals []string
		jp := append(bytes.Clone(prefix), stateKindJournal)
		for k, _ := c.Seek(jp); k != nil && bytes.HasPrefix(k, jp); {
			_, id, _, ok := splitStateRecordKey(prefix, k)
			if !ok {
				k, _ = c.Next()
				continue
			}
			if wanted(id) {
				journals = append(journals, id)
			}
			past := binary.AppendUvarint(bytes.Clone(jp), uint64(len(id)))
			past = append(append(past, id...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			k, _ = c.Seek(past)
		}
		slices.Sort(journals)
		size := 0
		i, j := 0, 0
		for i < len(snaps) || j < len(journals) {
			var r stateRecord
			switch {
			case j == len(journals) || i < len(snaps) && snaps[i].ID <= journals[j]:
				r = snaps[i]
				if j < len(journals) && journals[j] == r.ID {
					j++
				}
				i++
			default:
				r = stateRecord{Kind: stateKindJournal, ID: journals[j]}
				j++
			}
			if len(recs) > 0 && (len(recs) >= limit || size+r.listedSize() > budget) {
				more = true
				return nil
			}
			recs = append(recs, r)
			size += r.listedSize()
		}
		return nil
	})
	return recs, more, err
}

// stateSummary digests a shard's records on one member: its epoch, its record count,
// and a SHA-256 over (kind, ID, epoch, seq, and a journal record's JSeq or a floor's
// floor) of each record in key order, which two members holding the same versions
// compute alike. entries lists the versions.
type stateSummary struct {
	epoch   uint64
	count   int
	hash    []byte
	entries []stateRecord
}

// summary digests a shard's records, listing their versions if withEntries.
func (d *stateDisk) summary(prefix []byte, withEntries bool) (stateSummary, error) {
	var sum stateSummary
	err := d.view(func(eb, rb *bolt.Bucket) error {
		sum = stateSummary{}
		sum.epoch, _ = stateEpochOf(eb, prefix)
		h := sha256.New()
		var buf []byte
		c := rb.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			kind, id, jseq, ok := splitStateRecordKey(prefix, k)
			if !ok {
				continue
			}
			r, ok := decodeStateRecord(kind, id, jseq, v)
			if !ok {
				continue
			}
			buf = append(buf[:0], kind)
			buf = binary.AppendUvarint(buf, uint64(len(id)))
			buf = append(buf, id...)
			buf = binary.BigEndian.AppendUint64(buf, r.Epoch)
			buf = binary.BigEndian.AppendUint64(buf, r.Seq)
			switch kind { // journals' records only: others digest as before journals
			case stateKindJournal:
				buf = binary.BigEndian.AppendUint64(buf, jseq)
			case stateKindFloor:
				buf = binary.BigEndian.AppendUint64(buf, r.Floor)
			}
			h.Write(buf)
			sum.count++
			if withEntries {
				sum.entries = append(sum.entries, stateRecord{Kind: kind, ID: id, Epoch: r.Epoch, Seq: r.Seq, JSeq: jseq, Floor: r.Floor})
			}
		}
		sum.hash = h.Sum(nil)
		return nil
	})
	return sum, err
}

// needs returns the indexes of the records this member lacks or holds older: a journal
// record below its entity's floor here is not needed, and one whose copy here is
// corrupt is.
func (d *stateDisk) needs(typ string, shard int, recs []stateRecord) ([]int, error) {
	prefix := stateShardPrefix(typ, shard)
	var need []int
	err := d.view(func(eb, rb *bolt.Bucket) error {
		need = nil
		for i := range recs {
			r := &recs[i]
			if r.Kind == stateKindJournal {
				if fr, ok := decodeStateRecord(stateKindFloor, r.ID, 0, rb.Get(stateRecordKey(prefix, stateKindFloor, r.ID))); ok && r.JSeq < fr.Floor {
					continue
				}
			}
			o, ok := decodeStateRecord(r.Kind, r.ID, r.JSeq, rb.Get(r.key(prefix)))
			if !ok || r.newer(&o) || (r.Kind == stateKindJournal && verifyStateJournal(typ, shard, &o) != nil) {
				need = append(need, i)
			}
		}
		return nil
	})
	return need, err
}

// shards lists the shards this member stores (those with an epoch entry).
func (d *stateDisk) shards() ([]stateShardRef, error) {
	var out []stateShardRef
	err := d.view(func(eb, rb *bolt.Bucket) error {
		out = nil
		return eb.ForEach(func(k, v []byte) error {
			if typ, shard, ok := parseStateShardPrefix(k); ok {
				out = append(out, stateShardRef{typ, shard})
			}
			return nil
		})
	})
	return out, err
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
