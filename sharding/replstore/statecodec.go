// The fast path of the protocol's codec for the messages every journal append sends:
// state/write and state/writes requests and their replies. Encoding them by reflection
// (fxamacker/cbor) was a good part of a journaled ask's CPU, on the sender and on each
// replica. These functions write the same bytes as stateEncMode (a test compares them),
// so the wire is unchanged and members of any version read each other; and they decode
// what they write, anything else (keys out of order, unknown keys, unusual encodings)
// going to stateDecMode, which accepts or refuses it as before.

package replstore

import (
	"math"

	"github.com/shardhost/shardhost/internal/wirecbor"
)

// appendStateRecord appends r's CBOR encoding (a map with keys 1 to 11, the omitempty
// ones left out when empty) to b.
func appendStateRecord(b []byte, r *stateRecord) []byte {
	n := uint64(4)
	for _, present := range [...]bool{r.Remember, len(r.Data) > 0, r.Xfer != 0, r.JSeq != 0, r.Floor != 0, r.Size != 0, r.Last != 0} {
		if present {
			n++
		}
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = append(b, 1)
	b = wirecbor.AppendUint(b, uint64(r.Kind))
	b = append(b, 2)
	b = wirecbor.AppendText(b, r.ID)
	b = append(b, 3)
	b = wirecbor.AppendUint(b, r.Epoch)
	b = append(b, 4)
	b = wirecbor.AppendUint(b, r.Seq)
	if r.Remember {
		b = append(b, 5)
		b = wirecbor.AppendBool(b, true)
	}
	if len(r.Data) > 0 {
		b = append(b, 6)
		b = wirecbor.AppendBytes(b, r.Data)
	}
	for _, f := range [...]struct {
		key byte
		v   uint64
	}{{7, r.Xfer}, {8, r.JSeq}, {9, r.Floor}, {10, r.Size}, {11, r.Last}} {
		if f.v != 0 {
			b = append(b, f.key)
			b = wirecbor.AppendUint(b, f.v)
		}
	}
	return b
}

// stateWriteReqSize bounds the bytes of req's encoding.
func stateWriteReqSize(req *stateWriteReq) int {
	n := 32 + len(req.Type)
	for i := range req.Records {
		n += 80 + len(req.Records[i].ID) + len(req.Records[i].Data)
	}
	return n
}

// appendStateWriteReq appends req's CBOR encoding to b; ok is false for a request the
// fast path does not write (a negative shard: CBOR's negative integers).
func appendStateWriteReq(b []byte, req *stateWriteReq) ([]byte, bool) {
	if req.Shard < 0 {
		return b, false
	}
	n := uint64(4)
	if req.Fence {
		n++
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = append(b, 1)
	b = wirecbor.AppendText(b, req.Type)
	b = append(b, 2)
	b = wirecbor.AppendUint(b, uint64(req.Shard))
	b = append(b, 3)
	b = wirecbor.AppendUint(b, req.Epoch)
	if req.Fence {
		b = append(b, 4)
		b = wirecbor.AppendBool(b, true)
	}
	b = append(b, 5)
	if req.Records == nil {
		return wirecbor.AppendNull(b), true
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorArray, uint64(len(req.Records)))
	for i := range req.Records {
		b = appendStateRecord(b, &req.Records[i])
	}
	return b, true
}

// appendStateWritesReq appends req's CBOR encoding to b (ok: as appendStateWriteReq).
func appendStateWritesReq(b []byte, req *stateWritesReq) ([]byte, bool) {
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, 1)
	b = append(b, 1)
	if req.Writes == nil {
		return wirecbor.AppendNull(b), true
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorArray, uint64(len(req.Writes)))
	for i := range req.Writes {
		var ok bool
		if b, ok = appendStateWriteReq(b, &req.Writes[i]); !ok {
			return b, false
		}
	}
	return b, true
}

// appendStateReply appends r's CBOR encoding to b.
func appendStateReply(b []byte, r *stateReply) []byte {
	n := uint64(1)
	if r.Msg != "" {
		n++
	}
	if r.Epoch != 0 {
		n++
	}
	if r.Store != "" {
		n++
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = append(b, 1)
	b = wirecbor.AppendUint(b, uint64(r.Code))
	if r.Msg != "" {
		b = append(b, 2)
		b = wirecbor.AppendText(b, r.Msg)
	}
	if r.Epoch != 0 {
		b = append(b, 3)
		b = wirecbor.AppendUint(b, r.Epoch)
	}
	if r.Store != "" {
		b = append(b, 15)
		b = wirecbor.AppendText(b, r.Store)
	}
	return b
}

// appendStateWritesReply appends r's CBOR encoding to b.
func appendStateWritesReply(b []byte, r *stateWritesReply) []byte {
	n := uint64(1)
	if r.Msg != "" {
		n++
	}
	if len(r.Results) > 0 {
		n++
	}
	if r.Store != "" {
		n++
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = append(b, 1)
	b = wirecbor.AppendUint(b, uint64(r.Code))
	if r.Msg != "" {
		b = append(b, 2)
		b = wirecbor.AppendText(b, r.Msg)
	}
	if len(r.Results) > 0 {
		b = append(b, 3)
		b = wirecbor.AppendHead(b, wirecbor.MajorArray, uint64(len(r.Results)))
		for i := range r.Results {
			b = appendStateReply(b, &r.Results[i])
		}
	}
	if r.Store != "" {
		b = append(b, 15)
		b = wirecbor.AppendText(b, r.Store)
	}
	return b
}

// encodeStateFast encodes v if it is a message of the fast path; ok is false if not.
func encodeStateFast(v any) ([]byte, bool) {
	switch m := v.(type) {
	case *stateWritesReq:
		n := 8
		for i := range m.Writes {
			n += stateWriteReqSize(&m.Writes[i])
		}
		return appendStateWritesReq(make([]byte, 0, n), m)
	case *stateWriteReq:
		return appendStateWriteReq(make([]byte, 0, stateWriteReqSize(m)), m)
	case *stateWritesReply:
		n := 24 + len(m.Msg) + len(m.Store)
		for i := range m.Results {
			n += 32 + len(m.Results[i].Msg) + len(m.Results[i].Store)
		}
		return appendStateWritesReply(make([]byte, 0, n), m), true
	case *stateReply:
		return appendStateReply(make([]byte, 0, 32+len(m.Msg)+len(m.Store)), m), true
	}
	return nil, false
}

// decodeStateFast decodes b into v if v is a message of the fast path and b is
// encoded as the fast path writes it (each map's keys ascending, each value of its
// field's type and range, no trailing bytes); it reports false, v unchanged, for
// anything else. The records' data alias b.
func decodeStateFast(b []byte, v any) bool {
	r := wirecbor.NewReader(b)
	var ok bool
	switch m := v.(type) {
	case *stateWritesReq:
		var out stateWritesReq
		if ok = readStateWritesReq(&r, &out) && r.Done(); ok {
			*m = out
		}
	case *stateWriteReq:
		var out stateWriteReq
		var typ string
		if ok = readStateWriteReq(&r, &out, &typ) && r.Done(); ok {
			*m = out
		}
	case *stateWritesReply:
		var out stateWritesReply
		if ok = readStateWritesReply(&r, &out) && r.Done(); ok {
			*m = out
		}
	case *stateReply:
		var out stateReply
		if ok = readStateReply(&r, &out) && r.Done(); ok {
			*m = out
		}
	}
	return ok
}

// readCount reads an array's head of at most stateMaxListLen items, or a null (nil:
// false).
func readCount(r *wirecbor.Reader) (n int, null, ok bool) {
	if r.Null() {
		return 0, true, true
	}
	n, ok = r.ArrayHead()
	return n, false, ok && n <= stateMaxListLen
}

func readStateRecord(r *wirecbor.Reader, rec *stateRecord) bool {
	return r.Fields(23, func(k uint64) bool {
		var ok bool
		switch k {
		case 1:
			var v uint64
			v, ok = r.Uint()
			ok = ok && v <= math.MaxUint8
			rec.Kind = uint8(v)
		case 2:
			rec.ID, ok = r.Text()
		case 3:
			rec.Epoch, ok = r.Uint()
		case 4:
			rec.Seq, ok = r.Uint()
		case 5:
			rec.Remember, ok = r.Bool()
		case 6:
			rec.Data, ok = r.BytesShared()
		case 7:
			rec.Xfer, ok = r.Uint()
		case 8:
			rec.JSeq, ok = r.Uint()
		case 9:
			rec.Floor, ok = r.Uint()
		case 10:
			rec.Size, ok = r.Uint()
		case 11:
			rec.Last, ok = r.Uint()
		}
		return ok
	})
}

// readStateWriteReq reads a write request; typ is the last type read, whose string
// the next request of the same type shares.
func readStateWriteReq(r *wirecbor.Reader, req *stateWriteReq, typ *string) bool {
	return r.Fields(23, func(k uint64) bool {
		var ok bool
		switch k {
		case 1:
			req.Type, ok = r.TextCached(typ)
		case 2:
			var v uint64
			v, ok = r.Uint()
			ok = ok && v <= math.MaxInt
			req.Shard = int(v)
		case 3:
			req.Epoch, ok = r.Uint()
		case 4:
			req.Fence, ok = r.Bool()
		case 5:
			var n int
			var null bool
			if n, null, ok = readCount(r); !ok || null {
				return ok
			}
			req.Records = make([]stateRecord, n)
			for i := range req.Records {
				if !readStateRecord(r, &req.Records[i]) {
					return false
				}
			}
		}
		return ok
	})
}

func readStateWritesReq(r *wirecbor.Reader, req *stateWritesReq) bool {
	var typ string
	return r.Fields(23, func(k uint64) bool {
		if k != 1 {
			return false
		}
		n, null, ok := readCount(r)
		if !ok || null {
			return ok
		}
		req.Writes = make([]stateWriteReq, n)
		for i := range req.Writes {
			if !readStateWriteReq(r, &req.Writes[i], &typ) {
				return false
			}
		}
		return true
	})
}

func readStateReply(r *wirecbor.Reader, rep *stateReply) bool {
	return r.Fields(23, func(k uint64) bool {
		var ok bool
		switch k {
		case 1:
			var v uint64
			v, ok = r.Uint()
			ok = ok && v <= math.MaxUint8
			rep.Code = uint8(v)
		case 2:
			rep.Msg, ok = r.Text()
		case 3:
			rep.Epoch, ok = r.Uint()
		case 15:
			rep.Store, ok = r.Text()
		}
		return ok
	})
}

func readStateWritesReply(r *wirecbor.Reader, rep *stateWritesReply) bool {
	return r.Fields(23, func(k uint64) bool {
		var ok bool
		switch k {
		case 1:
			var v uint64
			v, ok = r.Uint()
			ok = ok && v <= math.MaxUint8
			rep.Code = uint8(v)
		case 2:
			rep.Msg, ok = r.Text()
		case 3:
			var n int
			var null bool
			if n, null, ok = readCount(r); !ok || null {
				return ok
			}
			rep.Results = make([]stateReply, n)
			for i := range rep.Results {
				if !readStateReply(r, &rep.Results[i]) {
					return false
				}
			}
		case 15:
			rep.Store, ok = r.Text()
		}
		return ok
	})
}
