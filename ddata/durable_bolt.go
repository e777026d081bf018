package ddata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/shardhost/shardhost/internal/boltfile"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// BoltFileName is the name of a BoltStore's database file inside its directory.
const BoltFileName = "ddata.db"

// boltLockTimeout bounds how long OpenBoltStore waits for the database file's lock: a
// store already open on the directory (in another process, or in this one) makes Open
// fail after this long instead of hanging.
const boltLockTimeout = time.Second

// boltBucket is the one bucket that holds the entries.
var boltBucket = []byte("ddata")

// BoltStore is the DurableStore on disk: a bbolt database, one file BoltFileName
// ("ddata.db") under a directory, the entries in one bucket. Each Store is one bbolt
// read-write transaction, fsynced before it returns (bbolt's NoSync stays false), so a
// Store that returned nil survives a crash of the process or of the machine; a Store
// that failed wrote nothing. Writes are serialised (one writer at a time, each paying
// its own fsync: a few milliseconds on a disk, see BenchmarkBoltStore), reads run beside
// them. The database file holds an exclusive lock while open: one BoltStore per
// directory, across processes.
//
// Keys are 1 to 32 KiB bytes, any bytes; values up to 2 GiB - 2. A nil value deletes,
// an empty non-nil value is stored as a value. Errors wrap ErrStoreFailure.
//
// A BoltStore is safe for concurrent use; its zero value is not usable, call
// OpenBoltStore.
type BoltStore struct {
	path string

	mu     sync.RWMutex // held for reading by Load and Store, for writing by Close
	db     *bolt.DB
	closed bool
}

var _ DurableStore = (*BoltStore)(nil)

// OpenBoltStore opens the BoltStore in dir, creating dir (mode 0o700) and its database
// file BoltFileName (mode 0o600) when absent; a new file starts empty. An existing file's
// structure is checked before bbolt opens it for writing (verifyBoltFile), which reads
// the whole file once: BenchmarkBoltStoreOpenLoad measures a restart.
//
// It fails with an error wrapping ErrStoreFailure, and never panics, when dir is empty,
// when the directory cannot be created or the file opened, when another store holds the
// directory (its file lock is not acquired within 1 s; the error says the directory is
// in use), and when the file is not a valid store (the error says so: corrupt,
// truncated, or not a bbolt file; moving it aside starts the member with no durable
// data). bbolt checksums only its meta pages: a flipped byte inside a key or a value,
// which leaves the structure sound, is not detected here (the replicator's decoder sees
// it when it decodes the entry).
func OpenBoltStore(dir string) (*BoltStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: open bolt store: empty directory", ErrStoreFailure)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: open bolt store: create directory: %w", ErrStoreFailure, err)
	}
	path := filepath.Join(dir, BoltFileName)
	fi, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)

	if statErr == nil && fi.Size() > 0 {
		// Check the file first. bbolt reads its freelist when it opens a file for
		// writing, before a caller can check anything, and a panic or fault there would
		// also leave the file locked: its memory map holds the lock, and bbolt has not
		// returned the handle that unmaps it.
		if err := checkBoltFile(path); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, false)
	if err != nil {
		return nil, err
	}
	if err := boltfile.Update(db, func(tx *bolt.Tx) (bool, error) {
		if tx.Bucket(boltBucket) != nil {
			return false, nil // rolled back: nothing written, nothing synced
		}
		_, err := tx.CreateBucket(boltBucket)
		return true, err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: open bolt store %s: create bucket: %w", ErrStoreFailure, path, err)
	}
	if created {
		if err := boltfile.SyncDir(dir); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("%w: open bolt store %s: sync directory: %w", ErrStoreFailure, path, err)
		}
	}
	return &BoltStore{path: path, db: db}, nil
}

// openBolt opens the database file at path, read-only (with a shared lock) or for
// writing (with an exclusive lock, creating the file), and classifies the errors. A
// panic or memory fault in bbolt (on a corrupt file that verifyBoltFile let through)
// becomes an error too; the file is closed, but if bbolt had mapped it, the map and the
// lock it holds stay until the process exits.
func openBolt(path string, readOnly bool) (db *bolt.DB, err error) {
	var file *os.File
	opts := &bolt.Options{
		Timeout:  boltLockTimeout,
		ReadOnly: readOnly,
		NoSync:   false, // Store returns after fsync
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			db, err = nil, corruptError(path, fmt.Errorf("panic: %v", r))
		}
	}()

	db, err = bolt.Open(path, 0o600, opts)
	var pathErr *fs.PathError
	var errno syscall.Errno
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: open bolt store %s: directory %s is in use by another store (its file lock was not acquired within %v): %w",
			ErrStoreFailure, path, filepath.Dir(path), boltLockTimeout, err)
	case errors.As(err, &pathErr), errors.As(err, &errno):
		return nil, fmt.Errorf("%w: open bolt store %s: %w", ErrStoreFailure, path, err)
	default: // bbolt's verdicts on the file: invalid, checksum, version, too small...
		return nil, corruptError(path, err)
	}
}

// checkBoltFile checks an existing database file before bbolt opens it for writing (see
// verifyBoltFile). It holds the file's shared lock meanwhile, through a read-only bbolt
// open, which reads only the checksummed meta pages: no writer changes the file under
// the check.
func checkBoltFile(path string) error {
	db, err := openBolt(path, true)
	if err != nil {
		return err
	}
	defer db.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: open bolt store %s: %w", ErrStoreFailure, path, err)
	}
	if err := verifyBoltFile(data); err != nil {
		return corruptError(path, err)
	}
	return nil
}

// walkBolt calls fn with every entry of the bucket b, in key order. Open verified the
// file's structure; as a second line, since a corrupt element offset or length would
// make a key or value point anywhere in memory, every key and value must lie inside the
// mapped file (or, for an inline bucket, which bbolt may copy to the heap, be no longer
// than a page), keys must be non-empty and strictly ascending, and no value may be a
// nested bucket. fn must not keep k or v after it returns.
func walkBolt(tx *bolt.Tx, b *bolt.Bucket, fn func(k, v []byte)) error {
	info := tx.DB().Info()
	lo, hi := info.Data, info.Data+uintptr(tx.Size())
	inline := b.Root() == 0
	within := func(p []byte) bool {
		if len(p) == 0 {
			return true
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		if start >= lo && start < hi {
			return uintptr(len(p)) <= hi-start
		}
		return inline && len(p) <= info.PageSize
	}
	var prev []byte
	return b.ForEach(func(k, v []byte) error {
		switch {
		case !within(k) || len(k) == 0 || len(k) > maxDurableKeyLen:
			return fmt.Errorf("corrupt key (%d bytes) after %q", len(k), prev)
		case !within(v):
			return fmt.Errorf("corrupt value (%d bytes) of key %q", len(v), k)
		case prev != nil && bytes.Compare(prev, k) >= 0:
			return fmt.Errorf("keys out of order: %q after %q", k, prev)
		case v == nil:
			return fmt.Errorf("unexpected nested bucket %q", k)
		}
		fn(k, v)
		prev = k
		return nil
	})
}

// corruptError is the error of a database file that is not a valid store.
func corruptError(path string, err error) error {
	return fmt.Errorf("%w: open bolt store %s: not a valid store (corrupt, truncated, or not a bbolt file; move it aside to start without durable data): %w",
		ErrStoreFailure, path, err)
}

// Path returns the database file's path: dir/ddata.db.
func (s *BoltStore) Path() string { return s.path }

// Load returns every stored entry, key → bytes, read in one read transaction (a
// consistent snapshot, even while Store runs). The map and the values are copies owned
// by the caller; values are never nil (an empty value loads as an empty non-nil slice).
// Errors wrap ErrStoreFailure: after Close, or when the file turns out corrupt.
func (s *BoltStore) Load() (map[string][]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("bolt store %s: %w", s.path, errStoreClosed)
	}
	var out map[string][]byte
	err := boltfile.View(s.db, func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		out = make(map[string][]byte)
		// bbolt's slices point into its memory map, valid only inside the
		// transaction: copy.
		return walkBolt(tx, b, func(k, v []byte) {
			out[string(k)] = append(make([]byte, 0, len(v)), v...)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: bolt store %s: load: %w", ErrStoreFailure, s.path, err)
	}
	return out, nil
}

// Store writes the entries in one bbolt transaction and returns once it is committed and
// fsynced: all of them or, on error, none. A nil value deletes its key (deleting an
// absent key is not an error); any other value, empty included, is stored. The caller
// keeps its map and slices (bbolt copies them into its pages before Store returns), but
// must not change them during the call. An empty map writes nothing and syncs nothing.
//
// Errors wrap ErrStoreFailure: a key empty or longer than 32 KiB, after Close, a full
// disk or an I/O error (then nothing was written).
func (s *BoltStore) Store(entries map[string][]byte) error {
	if err := checkDurableEntries(entries); err != nil {
		return fmt.Errorf("bolt store %s: %w", s.path, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("bolt store %s: %w", s.path, errStoreClosed)
	}
	if len(entries) == 0 {
		return nil
	}
	// In key order: bbolt appends to its B+tree pages most cheaply in order.
	keys := slices.Sorted(maps.Keys(entries))
	err := boltfile.Guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(boltBucket)
			if b == nil {
				return errors.New("bucket missing")
			}
			for _, k := range keys {
				var err error
				if v := entries[k]; v == nil {
					err = b.Delete([]byte(k))
				} else {
					err = b.Put([]byte(k), v)
				}
				if err != nil {
					return fmt.Errorf("key %q: %w", k, err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("%w: bolt store %s: store %d entries: %w", ErrStoreFailure, s.path, len(entries), err)
	}
	return nil
}

// Close closes the database file and releases its lock, waiting for Load and Store
// calls under way. Idempotent: later calls return nil. Load and Store after Close fail
// with an error wrapping ErrStoreFailure.
func (s *BoltStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("%w: bolt store %s: close: %w", ErrStoreFailure, s.path, err)
	}
	return nil
}

// bbolt's file format (version 2, unchanged since 2014; go.etcd.io/bbolt/internal/common),
// read by verifyBoltFile. Integers are in the machine's byte order.
const (
	boltPageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize    = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	boltMetaSize       = 56 // magic, version, pageSize, flags u32; root bucket {pgid, sequence}, freelist, pgid, txid u64; then checksum u64
	boltBucketHeader   = 16 // a bucket's value: root pgid u64, sequence u64, then its inline page when root is 0

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01 // a leaf element that is a bucket

	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltNoFreelist = ^uint64(0)
)

// boltMeta is a meta page's content.
type boltMeta struct {
	pageSize, root, freelist, hwm, txid uint64
}

// boltFile is a database file's bytes under verification.
type boltFile struct {
	data []byte
	ps   uint64 // page size
	hwm  uint64 // high water mark: the pages in use are 0 to hwm-1
	seen []bool // pages met so far, per page ID
}

// verifyBoltFile checks the structure of a bbolt file holding a BoltStore, read into
// data, before bbolt maps it. bbolt trusts its pages (only the meta pages carry a
// checksum): a corrupt offset, count or page ID makes it panic, read outside its map,
// loop, or allocate without bound, and it reads its freelist as it opens a file for
// writing, before a caller could check anything. So, as bbolt's tx.Check does (which
// cannot be used: it reads on a goroutine of its own, where a memory fault is fatal),
// every page reachable from the newest valid meta page must be in the file, reached
// once, of the right type, with its elements inside it, its keys in order and inside
// the bounds its parent gives, the root bucket holding only the ddata bucket, that
// bucket holding no nested bucket, and the freelist naming only pages in range that
// nothing reaches. A check in plain Go on a byte slice: no panic, whatever data is.
func verifyBoltFile(data []byte) error {
	m, err := pickBoltMeta(data)
	if err != nil {
		return err
	}
	if m.hwm < 2 || m.hwm > uint64(len(data))/m.pageSize {
		return fmt.Errorf("truncated: %d bytes, its meta page says %d pages of %d", len(data), m.hwm, m.pageSize)
	}
	f := &boltFile{data: data, ps: m.pageSize, hwm: m.hwm, seen: make([]bool, m.hwm)}
	f.seen[0], f.seen[1] = true, true
	if m.freelist == boltNoFreelist {
		return errors.New("no freelist page (written with NoFreelistSync)")
	}
	freePage, err := f.page(m.freelist, boltFreelistPage)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	// The root bucket holds the ddata bucket, or nothing yet.
	err = f.walk(m.root, nil, nil, func(flags uint32, k, v []byte) error {
		if flags != boltBucketLeaf || string(k) != string(boltBucket) {
			return fmt.Errorf("not a ddata store: root entry %q (flags %#x)", k, flags)
		}
		return f.verifyBucket(v)
	})
	if err != nil {
		return err
	}
	return f.verifyFreelist(freePage)
}

// pickBoltMeta returns the valid meta page with the highest transaction ID, as bbolt
// does: the other one may be a commit cut short.
func pickBoltMeta(data []byte) (boltMeta, error) {
	m0, err0 := parseBoltMeta(data, 0)
	off := uint64(os.Getpagesize()) // where bbolt looks when meta 0 is invalid
	if err0 == nil {
		off = m0.pageSize
	}
	m1, err1 := parseBoltMeta(data, off)
	switch {
	case err0 != nil && err1 != nil:
		return boltMeta{}, fmt.Errorf("no valid meta page: %w; %w", err0, err1)
	case err1 != nil || (err0 == nil && m0.txid >= m1.txid):
		return m0, nil
	default:
		return m1, nil
	}
}

// parseBoltMeta reads and checks the meta page at byte offset off.
func parseBoltMeta(data []byte, off uint64) (boltMeta, error) {
	if off > uint64(len(data)) || uint64(len(data))-off < boltPageHeaderSize+boltMetaSize+8 {
		return boltMeta{}, errors.New("meta page past the end")
	}
	b := data[off+boltPageHeaderSize:]
	le := binary.NativeEndian
	h := fnv.New64a()
	h.Write(b[:boltMetaSize])
	switch {
	case le.Uint32(b[0:]) != boltMagic:
		return boltMeta{}, errors.New("meta page: bad magic")
	case le.Uint32(b[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("meta page: version %d, want %d", le.Uint32(b[4:]), boltVersion)
	case le.Uint64(b[boltMetaSize:]) != h.Sum64():
		return boltMeta{}, errors.New("meta page: bad checksum")
	}
	m := boltMeta{
		pageSize: uint64(le.Uint32(b[8:])),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		hwm:      le.Uint64(b[40:]),
		txid:     le.Uint64(b[48:]),
	}
	if m.pageSize < 1024 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("meta page: page size %d", m.pageSize)
	}
	return m, nil
}

// page returns the bytes of page id and its overflow pages, after checking that they are
// in range, reached for the first time, and of type flags.
func (f *boltFile) page(id uint64, flags uint16) ([]byte, error) {
	if id < 2 || id >= f.hwm {
		return nil, fmt.Errorf("page %d: out of range [2, %d)", id, f.hwm)
	}
	p := f.data[id*f.ps:]
	le := binary.NativeEndian
	if got := le.Uint64(p); got != id {
		return nil, fmt.Errorf("page %d: says it is page %d", id, got)
	}
	if got := le.Uint16(p[8:]); got != flags {
		return nil, fmt.Errorf("page %d: type %#x, want %#x", id, got, flags)
	}
	n := 1 + uint64(le.Uint32(p[12:]))
	if n > f.hwm-id {
		return nil, fmt.Errorf("page %d: %d overflow pages past the end", id, n-1)
	}
	for i := id; i < id+n; i++ {
		if f.seen[i] {
			return nil, fmt.Errorf("page %d: reached twice", i)
		}
		f.seen[i] = true
	}
	return p[:n*f.ps], nil
}

// walk checks the B+tree whose root is page id and calls leaf with every leaf element in
// order. Every key lies in [lo, hi) (nil: unbounded); a branch element's key bounds its
// subtree, as bbolt's Check demands.
func (f *boltFile) walk(id uint64, lo, hi []byte, leaf func(flags uint32, k, v []byte) error) error {
	if id < 2 || id >= f.hwm {
		return fmt.Errorf("page %d: out of range [2, %d)", id, f.hwm)
	}
	flags := binary.NativeEndian.Uint16(f.data[id*f.ps+8:])
	if flags != boltBranchPage {
		p, err := f.page(id, boltLeafPage)
		if err != nil {
			return err
		}
		return walkBoltLeaf(p, lo, hi, leaf)
	}
	p, err := f.page(id, boltBranchPage)
	if err != nil {
		return err
	}
	count := int(binary.NativeEndian.Uint16(p[10:]))
	if count == 0 {
		return fmt.Errorf("page %d: empty branch", id)
	}
	keys := make([][]byte, count)
	children := make([]uint64, count)
	for i := range count {
		e, k, _, err := boltElement(p, i, false)
		if err != nil {
			return fmt.Errorf("page %d: %w", id, err)
		}
		if (lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) ||
			(i > 0 && bytes.Compare(keys[i-1], k) >= 0) {
			return fmt.Errorf("page %d: branch key %q out of order", id, k)
		}
		keys[i], children[i] = k, binary.NativeEndian.Uint64(e[8:])
	}
	for i, child := range children {
		clo, chi := keys[i], hi
		if i == 0 {
			clo = lo // bbolt's first branch key may lag behind deletes
		}
		if i+1 < count {
			chi = keys[i+1]
		}
		if err := f.walk(child, clo, chi, leaf); err != nil {
			return err
		}
	}
	return nil
}

// walkBoltLeaf checks the leaf page p (a page of the file, or a bucket's inline page)
// and calls leaf with its elements in order; their keys are non-empty, strictly
// ascending, and in [lo, hi).
func walkBoltLeaf(p, lo, hi []byte, leaf func(flags uint32, k, v []byte) error) error {
	var prev []byte
	for i := range int(binary.NativeEndian.Uint16(p[10:])) {
		e, k, v, err := boltElement(p, i, true)
		if err != nil {
			return err
		}
		if len(k) == 0 || (prev != nil && bytes.Compare(prev, k) >= 0) ||
			(lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			return fmt.Errorf("leaf key %q out of order", k)
		}
		if err := leaf(binary.NativeEndian.Uint32(e), k, v); err != nil {
			return err
		}
		prev = k
	}
	return nil
}

// boltElement returns element i of page p, its key and, on a leaf, its value, checking
// that all lie inside p. An element's key starts pos bytes after the element itself.
func boltElement(p []byte, i int, isLeaf bool) (e, k, v []byte, err error) {
	start := uint64(boltPageHeaderSize + i*boltElementSize)
	if start+boltElementSize > uint64(len(p)) {
		return nil, nil, nil, fmt.Errorf("element %d past the end of its page", i)
	}
	e = p[start : start+boltElementSize]
	le := binary.NativeEndian
	var pos, ksize, vsize uint64
	if isLeaf {
		pos, ksize, vsize = uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
	} else {
		pos, ksize = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:]))
	}
	kstart := start + pos
	if kstart+ksize+vsize > uint64(len(p)) {
		return nil, nil, nil, fmt.Errorf("element %d: key and value past the end of its page", i)
	}
	return e, p[kstart : kstart+ksize], p[kstart+ksize : kstart+ksize+vsize], nil
}

// verifyBucket checks the ddata bucket, whose header (and inline page) is v: every
// element an entry, not a nested bucket, its key at most 32 KiB.
func (f *boltFile) verifyBucket(v []byte) error {
	entry := func(flags uint32, k, _ []byte) error {
		if flags != 0 {
			return fmt.Errorf("unexpected nested bucket %q", k)
		}
		if len(k) > maxDurableKeyLen {
			return fmt.Errorf("key of %d bytes", len(k))
		}
		return nil
	}
	if len(v) < boltBucketHeader {
		return errors.New("bucket header cut short")
	}
	if root := binary.NativeEndian.Uint64(v); root != 0 {
		return f.walk(root, nil, nil, entry)
	}
	inline := v[boltBucketHeader:]
	if len(inline) < boltPageHeaderSize || binary.NativeEndian.Uint16(inline[8:]) != boltLeafPage {
		return errors.New("bad inline bucket page")
	}
	return walkBoltLeaf(inline, nil, nil, entry)
}

// verifyFreelist checks the freelist page p: every free page ID in range, listed once,
// and reached by nothing.
func (f *boltFile) verifyFreelist(p []byte) error {
	le := binary.NativeEndian
	ids := p[boltPageHeaderSize:]
	count := uint64(le.Uint16(p[10:]))
	if count == 0xFFFF { // the count is the first element
		count, ids = le.Uint64(ids), ids[8:]
	}
	if count > uint64(len(ids))/8 {
		return fmt.Errorf("freelist: %d IDs past the end of its page", count)
	}
	for i := range count {
		id := le.Uint64(ids[i*8:])
		if id < 2 || id >= f.hwm {
			return fmt.Errorf("freelist: page %d out of range [2, %d)", id, f.hwm)
		}
		if f.seen[id] {
			return fmt.Errorf("freelist: page %d is free and in use, or listed twice", id)
		}
		f.seen[id] = true
	}
	return nil
}
