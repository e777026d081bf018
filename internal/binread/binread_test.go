package binread

import (
	"encoding/binary"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestReadsWhatWasWritten(t *testing.T) {
	b := []byte{7}
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = append(b, 1, 2)
	r := New(b)
	if r.Byte() != 7 || r.Uvarint() != 300 || r.Varint() != -5 || string(r.Bytes(10)) != "abc" || string(r.Fixed(2)) != "\x01\x02" {
		t.Fatal("read other values than written")
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
}

func TestFailuresStick(t *testing.T) {
	r := New(binary.AppendUvarint(nil, 100))
	if r.Bytes(10) != nil || r.Err() == nil {
		t.Fatal("a field over its limit was read")
	}
	if r.Byte() != 0 || r.Uvarint() != 0 {
		t.Fatal("reads after a failure returned values")
	}
	if New([]byte{1}).Done() == nil {
		t.Fatal("a byte left over is not a failure")
	}
	if New([]byte{0x80}).Uvarint(); New([]byte{0x80}).Err() != nil {
		t.Fatal("a new reader has a failure")
	}
	r = New([]byte{0x80})
	r.Uvarint()
	if r.Err() == nil {
		t.Fatal("a truncated varint was read")
	}
}
