// The encoding of a write request in a write-ahead log entry (wal.go). CBOR, as on the
// wire, cost a deterministic encoding of every logged write on every replica; this
// format is written by hand, in one pass and one allocation-free append:
//
//	format (1 byte, walReqFormat) | uvarint len(Type) | Type | uvarint Shard |
//	uvarint Epoch | Fence (1 byte, 0 or 1) | uvarint count | count records
//
//	record: Kind (1) | flags (1; bit 0: Remember) | uvarint len(ID) | ID |
//	        uvarint Epoch | uvarint Seq | uvarint JSeq | uvarint Floor |
//	        uvarint Xfer | uvarint Size | uvarint len(Data) | Data
//
// A CBOR request (a log written before this format) starts with a map's byte (0xa0 to
// 0xbf), never with walReqFormat: decodeWALReq reads both.

package replstore

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/shardhost/shardhost/internal/binread"
)

// walReqFormat is the first byte of a hand-encoded request.
const walReqFormat = 0x01

// walReqSize bounds the bytes appendWALReq appends for req.
func walReqSize(req *stateWriteReq) int {
	n := 1 + 3*binary.MaxVarintLen64 + 1 + len(req.Type) + binary.MaxVarintLen64
	for i := range req.Records {
		r := &req.Records[i]
		n += 2 + 8*binary.MaxVarintLen64 + len(r.ID) + len(r.Data)
	}
	return n
}

// appendWALReq appends req's encoding to buf.
func appendWALReq(buf []byte, req *stateWriteReq) []byte {
	buf = append(buf, walReqFormat)
	buf = binary.AppendUvarint(buf, uint64(len(req.Type)))
	buf = append(buf, req.Type...)
	buf = binary.AppendUvarint(buf, uint64(req.Shard))
	buf = binary.AppendUvarint(buf, req.Epoch)
	if req.Fence {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(req.Records)))
	for i := range req.Records {
		r := &req.Records[i]
		var flags byte
		if r.Remember {
			flags = 1
		}
		buf = append(buf, r.Kind, flags)
		buf = binary.AppendUvarint(buf, uint64(len(r.ID)))
		buf = append(buf, r.ID...)
		buf = binary.AppendUvarint(buf, r.Epoch)
		buf = binary.AppendUvarint(buf, r.Seq)
		buf = binary.AppendUvarint(buf, r.JSeq)
		buf = binary.AppendUvarint(buf, r.Floor)
		buf = binary.AppendUvarint(buf, r.Xfer)
		buf = binary.AppendUvarint(buf, r.Size)
		buf = binary.AppendUvarint(buf, uint64(len(r.Data)))
		buf = append(buf, r.Data...)
	}
	return buf
}

var errWALReq = errors.New("write-ahead log: a malformed request")

// decodeWALReq reads a logged request back, in either encoding. The records' data
// alias b.
func decodeWALReq(b []byte, req *stateWriteReq) error {
	if len(b) == 0 || b[0] != walReqFormat {
		return decodeState(b, req)
	}
	d := binread.New(b[1:])
	req.Type = string(d.Bytes(math.MaxInt))
	shard := d.Uvarint()
	if shard > math.MaxInt {
		d.Fail("a value out of range")
	}
	req.Shard = int(shard)
	req.Epoch = d.Uvarint()
	switch d.Byte() {
	case 0:
		req.Fence = false
	case 1:
		req.Fence = true
	default:
		d.Fail("a value out of range")
	}
	n := d.Uvarint()
	if n > stateMaxListLen || n > uint64(len(d.B)) {
		return errWALReq
	}
	req.Records = make([]stateRecord, n)
	for i := range req.Records {
		r := &req.Records[i]
		r.Kind = d.Byte()
		switch d.Byte() {
		case 0:
		case 1:
			r.Remember = true
		default:
			d.Fail("a value out of range")
		}
		r.ID = string(d.Bytes(math.MaxInt))
		r.Epoch = d.Uvarint()
		r.Seq = d.Uvarint()
		r.JSeq = d.Uvarint()
		r.Floor = d.Uvarint()
		r.Xfer = d.Uvarint()
		r.Size = d.Uvarint()
		if data := d.Bytes(math.MaxInt); len(data) > 0 {
			r.Data = data
		}
		if d.Err() != nil {
			return errWALReq
		}
	}
	if d.Done() != nil {
		return errWALReq
	}
	return nil
}
