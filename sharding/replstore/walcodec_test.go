package replstore

import (
	"reflect"
	"testing"
)

// TestWALReqCodec: a request reads back as it was written, from the hand-written
// encoding and from CBOR (logs written before it); a cut or altered encoding is refused.
func TestWALReqCodec(t *testing.T) {
	reqs := []*stateWriteReq{
		{Type: "counter", Shard: 7, Epoch: 3, Fence: true, Records: []stateRecord{
			{Kind: stateKindJournal, ID: "e-1", Epoch: 3, Seq: 1 << 62, JSeq: 12, Data: []byte("record")},
			{Kind: stateKindFloor, ID: "e-1", Epoch: 3, Seq: 99, Floor: 10},
			{Kind: stateKindRemember, ID: "e-2", Epoch: 2, Seq: 5, Remember: true},
			{Kind: stateKindSnapshot, ID: "e-3", Epoch: 1, Seq: 6, Data: []byte{0, 1, 2}, Xfer: 4, Size: 3},
		}},
		{Type: "t", Shard: 0, Epoch: 0, Records: nil},
	}
	for _, req := range reqs {
		enc := appendWALReq(nil, req)
		if len(enc) > walReqSize(req) {
			t.Fatalf("%d bytes encoded, bound %d", len(enc), walReqSize(req))
		}
		for name, b := range map[string][]byte{"hand": enc, "cbor": encodeState(req)} {
			var got stateWriteReq
			if err := decodeWALReq(b, &got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := *req
			if len(want.Records) == 0 {
				want.Records, got.Records = nil, nil
			}
			if !reflect.DeepEqual(&got, &want) {
				t.Fatalf("%s: got %+v, want %+v", name, got, want)
			}
		}
		for n := 1; n < len(enc); n++ {
			var got stateWriteReq
			if err := decodeWALReq(enc[:n], &got); err == nil {
				t.Fatalf("a cut at %d of %d bytes decoded", n, len(enc))
			}
		}
		var got stateWriteReq
		if err := decodeWALReq(append(enc[:len(enc):len(enc)], 0), &got); err == nil {
			t.Fatal("a trailing byte decoded")
		}
	}
	// Any byte altered: refused or read, never a panic (the entry's CRC refuses
	// altered entries before this decode).
	enc := appendWALReq(nil, reqs[0])
	for i := range enc {
		bad := append([]byte(nil), enc...)
		bad[i] ^= 0xff
		var got stateWriteReq
		_ = decodeWALReq(bad, &got)
	}
}
