package replstore

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"
)

// randStateRecord is a record with each field set or empty at random, values across
// the sizes of CBOR's heads.
func randStateRecord(rng *rand.Rand) stateRecord {
	u := func() uint64 {
		switch rng.IntN(5) {
		case 0:
			return 0
		case 1:
			return uint64(rng.IntN(24))
		case 2:
			return uint64(rng.IntN(1 << 16))
		case 3:
			return uint64(rng.Uint32())
		}
		return rng.Uint64()
	}
	r := stateRecord{Kind: uint8(rng.IntN(256)), ID: string(bytes.Repeat([]byte("é"), rng.IntN(20))), Epoch: u(), Seq: u(),
		Remember: rng.IntN(2) == 0, Xfer: u(), JSeq: u(), Floor: u(), Size: u(), Last: u()}
	if rng.IntN(3) > 0 {
		r.Data = make([]byte, rng.IntN(300))
		for i := range r.Data {
			r.Data[i] = byte(rng.Uint32())
		}
	}
	return r
}

func randStateWriteReq(rng *rand.Rand) stateWriteReq {
	req := stateWriteReq{Type: []string{"counter", "t", "", "bank-ü"}[rng.IntN(4)], Shard: rng.IntN(1 << 20), Epoch: rng.Uint64() >> rng.IntN(64),
		Fence: rng.IntN(2) == 0}
	switch rng.IntN(4) {
	case 0: // nil: null
	case 1:
		req.Records = []stateRecord{}
	default:
		for range 1 + rng.IntN(5) {
			req.Records = append(req.Records, randStateRecord(rng))
		}
	}
	return req
}

func randStateReply(rng *rand.Rand) stateReply {
	r := stateReply{Code: uint8(rng.IntN(256)), Epoch: rng.Uint64() >> rng.IntN(64)}
	if rng.IntN(2) == 0 {
		r.Msg = "replica: stale epoch"
	}
	if rng.IntN(2) == 0 {
		r.Store = "0123456789abcdef"
	}
	return r
}

// TestStateCodecMatchesCBOR: the fast path writes the bytes stateEncMode writes, for
// every message it handles, and reads them back as stateDecMode does.
func TestStateCodecMatchesCBOR(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs []any
	for range 300 {
		w := randStateWriteReq(rng)
		msgs = append(msgs, &w)
		var ws stateWritesReq
		if rng.IntN(5) > 0 {
			for range rng.IntN(6) {
				ws.Writes = append(ws.Writes, randStateWriteReq(rng))
			}
		}
		msgs = append(msgs, &ws)
		rep := randStateReply(rng)
		msgs = append(msgs, &rep)
		wr := stateWritesReply{Code: uint8(rng.IntN(3))}
		if rng.IntN(2) == 0 {
			wr.Msg, wr.Store = "busy", "fedcba9876543210"
		}
		for range rng.IntN(4) {
			wr.Results = append(wr.Results, randStateReply(rng))
		}
		msgs = append(msgs, &wr)
	}
	for _, m := range msgs {
		want, err := stateEncMode.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeStateFast(m)
		if !ok {
			t.Fatalf("%T %+v: not on the fast path", m, m)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%T %+v:\nfast %x\ncbor %x", m, m, got, want)
		}
		fast := reflect.New(reflect.TypeOf(m).Elem()).Interface()
		if !decodeStateFast(want, fast) {
			t.Fatalf("%T %x: the fast path does not read it", m, want)
		}
		slow := reflect.New(reflect.TypeOf(m).Elem()).Interface()
		if err := stateDecMode.Unmarshal(want, slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%x:\nfast %+v\ncbor %+v", want, fast, slow)
		}
	}
	// A negative shard (never valid, but encodable) goes to stateEncMode.
	if _, ok := encodeStateFast(&stateWriteReq{Type: "t", Shard: -1}); ok {
		t.Fatal("a negative shard on the fast path")
	}
	if b := encodeState(&stateWriteReq{Type: "t", Shard: -1}); len(b) == 0 {
		t.Fatal("no encoding of a negative shard")
	}
}

// TestStateCodecAltered: an encoding altered anywhere, cut, or extended is read by the
// fast path only as stateDecMode reads it; whatever the fast path refuses, decodeState
// reads as stateDecMode does (or refuses as it does).
func TestStateCodecAltered(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		var ws stateWritesReq
		for range 1 + rng.IntN(3) {
			ws.Writes = append(ws.Writes, randStateWriteReq(rng))
		}
		wr := stateWritesReply{Results: []stateReply{randStateReply(rng), randStateReply(rng)}, Store: "s"}
		for _, m := range []any{&ws, &wr} {
			enc := encodeState(m)
			var variants [][]byte
			for i := range enc {
				for _, x := range []byte{0xff, 0x01, 0x20, 0x80} {
					bad := bytes.Clone(enc)
					bad[i] ^= x
					variants = append(variants, bad)
				}
				variants = append(variants, enc[:i])
			}
			variants = append(variants, append(bytes.Clone(enc), 0))
			for _, b := range variants {
				typ := reflect.TypeOf(m).Elem()
				slow := reflect.New(typ).Interface()
				slowErr := stateDecMode.Unmarshal(b, slow)
				fast := reflect.New(typ).Interface()
				if decodeStateFast(b, fast) {
					if slowErr != nil || !reflect.DeepEqual(fast, slow) {
						t.Fatalf("%x: fast read %+v, cbor %+v, %v", b, fast, slow, slowErr)
					}
				}
				got := reflect.New(typ).Interface()
				err := decodeState(b, got)
				if (err == nil) != (slowErr == nil) || err == nil && !reflect.DeepEqual(got, slow) {
					t.Fatalf("%x: decodeState %+v, %v; cbor %+v, %v", b, got, err, slow, slowErr)
				}
			}
		}
	}
}

// TestStateCodecSharesData: a decoded request's records alias the body (no copy of
// each record's bytes), and a stateWritesReq's writes of one type share its string.
func TestStateCodecSharesData(t *testing.T) {
	ws := stateWritesReq{Writes: []stateWriteReq{
		{Type: "counter", Shard: 1, Epoch: 2, Fence: true, Records: []stateRecord{{Kind: stateKindJournal, ID: "a", Epoch: 2, Seq: 9, JSeq: 1, Data: []byte("abc")}}},
		{Type: "counter", Shard: math.MaxInt32, Epoch: 2, Fence: true, Records: []stateRecord{{Kind: stateKindJournal, ID: "b", Epoch: 2, Seq: 10, JSeq: 4, Data: []byte("def")}}},
	}}
	body := encodeState(&ws)
	var got stateWritesReq
	if err := decodeState(body, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ws) {
		t.Fatalf("got %+v, want %+v", got, ws)
	}
	d := got.Writes[0].Records[0].Data
	if i := bytes.Index(body, []byte("abc")); i < 0 || &body[i] != &d[0] || cap(d) != len(d) {
		t.Fatal("the record's data is a copy, or may grow into the body")
	}
	if a, b := got.Writes[0].Type, got.Writes[1].Type; a != b || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("the writes' types are two strings")
	}
}

// TestStateRecordAppendKey: a record's key appended to a buffer is its key.
func TestStateRecordAppendKey(t *testing.T) {
	prefix := stateShardPrefix("counter", 12)
	buf := []byte("garbage")
	for _, r := range []stateRecord{
		{Kind: stateKindJournal, ID: "e-1", JSeq: 1 << 40},
		{Kind: stateKindFloor, ID: "e-1", Floor: 3},
		{Kind: stateKindGone, ID: ""},
		{Kind: stateKindSnapshot, ID: string(bytes.Repeat([]byte("x"), 300))},
	} {
		buf = r.appendKey(buf[:0], prefix)
		if want := r.key(prefix); !bytes.Equal(buf, want) {
			t.Fatalf("%+v: appended %x, key %x", r, buf, want)
		}
	}
}
