// The write-ahead log in front of a member's bbolt file. A bbolt commit rewrites every
// page it touches and fsyncs twice: done for each batch of writes, it was most of a
// journal append's cost (bench/README.md, "The journal"). Instead, the disk's writer
// applies the writes of a batch to a write transaction it keeps open, appends them to
// the log (one write, one fdatasync) and acknowledges them; it commits the transaction
// (fsynced, as every bbolt commit) only now and then: after walFlushInterval, past
// walFlushBytes of writes, and before a write that does not go through the log. A read
// meanwhile, which must see what was acknowledged, is served by the writer from its
// open transaction. So a commit carries the writes of many
// batches, and the file on disk is always one bbolt committed whole. The commit records
// the number of the last log entry it holds (the ring bucket's "wal" key) and empties
// the log. An open replays the log's entries after that number (the writes are
// deterministic, so a replay gives what the writer had), commits them and empties it.
//
// The log's file is preallocated (walPrealloc) and written from its start again after
// each commit. Its entries: length (4 bytes, little-endian, of the request), CRC-32C of the
// entry's number and request (4), number (8, little-endian, strictly increasing), and
// the write request (walcodec.go; CBOR, as on the wire, in logs
// written before it). A replay stops at the first entry that is
// incomplete (a torn write: the process died during the append, which was never
// acknowledged), fails its checksum, does not decode, or whose number does not exceed the one before
// (the zeros of the preallocated file, or an entry of an earlier log left after the
// new ones): what follows is dropped, and the
// other replicas hold it (repair brings it back).

package replstore

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// walFileName is the name of the write-ahead log in a store's directory, beside FileName.
const walFileName = "state.wal"

const (
	// walFlushInterval is the longest a write waits in the writer's open transaction
	// for its bbolt commit (it is durable in the log meanwhile).
	walFlushInterval = 250 * time.Millisecond
	// walFlushBytes: the writer commits once its open transaction holds this many bytes
	// of writes.
	walFlushBytes = 8 << 20
	// walMaxWrite: a write request larger than this is not logged: it is committed to
	// bbolt (after the open transaction), as before the log.
	walMaxWrite = 256 << 10
	// walMaxEntry bounds the request of an entry a replay reads (a logged write's data
	// is at most walMaxWrite, its encoding a little more): a larger length is garbage.
	walMaxEntry = 4 * walMaxWrite
	// walHeader is the bytes of an entry before its request.
	walHeader = 16
	// walPrealloc is the size the log's file is given at open, in zeros: an append
	// within it overwrites allocated blocks, so that its fdatasync writes the data
	// alone, not the file's new size (a journal commit of the file system).
	walPrealloc = 4 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// stateWAL is the open log file. Used by the disk's writer only (and by open and the
// tests, before and after it runs).
type stateWAL struct {
	f   *os.File
	off int64
	// preallocErr is why the file could not be preallocated at open (nil: it was);
	// the store logs it.
	preallocErr error
}

// openWAL opens (or creates) the log in dir.
func openWAL(dir string) (*stateWAL, error) {
	f, err := os.OpenFile(filepath.Join(dir, walFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &stateWAL{f: f}, nil
}

// appendWALReqEntry appends an entry of number lsn holding req (appendWALReq) to buf.
func appendWALReqEntry(buf []byte, lsn uint64, req *stateWriteReq) []byte {
	start := len(buf)
	buf = slices.Grow(buf, walHeader+walReqSize(req))
	buf = append(buf, make([]byte, walHeader)...)
	buf = appendWALReq(buf, req)
	h, body := buf[start:start+walHeader], buf[start+walHeader:]
	binary.LittleEndian.PutUint32(h[0:], uint32(len(body)))
	binary.LittleEndian.PutUint64(h[8:], lsn)
	c := crc32.Update(0, walCRC, h[8:16])
	binary.LittleEndian.PutUint32(h[4:], crc32.Update(c, walCRC, body))
	return buf
}

// walEntry is a decoded entry of the log.
type walEntry struct {
	lsn uint64
	req stateWriteReq
}

// readWAL reads the log's intact entries from its start, and the offset where they end
// (what follows is torn, corrupt or left from an earlier log). after is the number of
// the last entry the bbolt file holds: entries up to it are read (to check the order)
// but not returned.
func (w *stateWAL) readWAL(after uint64) (entries []walEntry, end int64, last uint64, err error) {
	data, err := io.ReadAll(io.NewSectionReader(w.f, 0, 1<<62))
	if err != nil {
		return nil, 0, 0, err
	}
	off := 0
	for len(data)-off >= walHeader {
		h := data[off : off+walHeader]
		n := int(binary.LittleEndian.Uint32(h[0:]))
		lsn := binary.LittleEndian.Uint64(h[8:])
		if n > walMaxEntry || len(data)-off-walHeader < n || lsn <= last {
			break
		}
		req := data[off+walHeader : off+walHeader+n]
		c := crc32.Update(0, walCRC, h[8:16])
		if crc32.Update(c, walCRC, req) != binary.LittleEndian.Uint32(h[4:]) {
			break
		}
		var e walEntry
		if lsn > after {
			if decodeWALReq(req, &e.req) != nil {
				break
			}
			e.lsn = lsn
			entries = append(entries, e)
		}
		last = lsn
		off += walHeader + n
	}
	return entries, int64(off), last, nil
}

// write appends buf to the log and fdatasyncs it.
func (w *stateWAL) write(buf []byte) error {
	if _, err := w.f.WriteAt(buf, w.off); err != nil {
		return err
	}
	w.off += int64(len(buf))
	return fdatasync(w.f)
}

// reset empties the log: the bbolt file holds its entries. The next entries overwrite
// them from the file's start; those left behind the new ones are not read again, their
// numbers being lower.
func (w *stateWAL) reset() { w.off = 0 }

// preallocate gives the file walPrealloc bytes (zeros) if it has fewer, and syncs it.
// A disk without room for them (a small volume) keeps the file at its size (what was
// written of the zeros is cut off again, to leave the room to the bbolt file) and
// returns the error: the log works without preallocation, its appends growing the
// file, and each of their fdatasyncs then writes the file's size too.
func (w *stateWAL) preallocate() error {
	fi, err := w.f.Stat()
	if err != nil || fi.Size() >= walPrealloc {
		return err
	}
	if _, err := w.f.WriteAt(make([]byte, walPrealloc-fi.Size()), fi.Size()); err != nil {
		return errors.Join(err, w.f.Truncate(fi.Size()))
	}
	return w.f.Sync()
}

func (w *stateWAL) close() error { return w.f.Close() }
