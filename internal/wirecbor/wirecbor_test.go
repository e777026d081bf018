package wirecbor

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// TestHeadsRoundTrip writes heads at each size boundary (RFC 8949 §3: arguments below
// 24 in the initial byte, then 1, 2, 4 and 8 bytes) and reads them back.
func TestHeadsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{
		{0, "00"}, {23, "17"}, {24, "1818"}, {255, "18ff"}, {256, "190100"},
		{65535, "19ffff"}, {65536, "1a00010000"}, {1<<32 - 1, "1affffffff"},
		{1 << 32, "1b0000000100000000"}, {1<<64 - 1, "1bffffffffffffffff"},
	} {
		b := AppendUint(nil, tc.n)
		if got := hex.EncodeToString(b); got != tc.want {
			t.Errorf("AppendUint(%d) = %s, want %s", tc.n, got, tc.want)
		}
		r := NewReader(b)
		if n, ok := r.Uint(); !ok || n != tc.n || !r.Done() {
			t.Errorf("Uint of %x = %d, %v, done %v", b, n, ok, r.Done())
		}
	}
}

func TestStringsAndContainers(t *testing.T) {
	var b []byte
	b = AppendHead(b, MajorMap, 2)
	b = AppendText(b, "héllo")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendHead(b, MajorArray, 1)
	b = AppendText(b, "")
	r := NewReader(b)
	if n, ok := r.MapHead(); !ok || n != 2 {
		t.Fatalf("MapHead = %d, %v", n, ok)
	}
	var last string
	if s, ok := r.TextCached(&last); !ok || s != "héllo" || last != "héllo" {
		t.Fatalf("TextCached = %q, %v (last %q)", s, ok, last)
	}
	p, ok := r.Bytes()
	if !ok || !bytes.Equal(p, []byte{1, 2, 3}) {
		t.Fatalf("Bytes = %x, %v", p, ok)
	}
	p[0] = 9
	if b[len(b)-5] != 1 { // the copy does not alias the input
		t.Fatal("Bytes aliases its input")
	}
	if n, ok := r.ArrayHead(); !ok || n != 1 {
		t.Fatalf("ArrayHead = %d, %v", n, ok)
	}
	if s, ok := r.Text(); !ok || s != "" || !r.Done() {
		t.Fatalf("Text = %q, %v, done %v", s, ok, r.Done())
	}
}

// TestReaderRefuses checks what the Reader leaves to the reflective decoder.
func TestReaderRefuses(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":              {},
		"truncated argument": {0x19, 0x01},
		"reserved info":      {0x1c},
		"indefinite map":     {0xbf},
		"string past end":    {0x63, 'a', 'b'},
		"invalid UTF-8":      {0x62, 0xc3, 0x28},
		"negative integer":   {0x20},
		"count past end":     {0x85, 0x01},
	} {
		r := NewReader(b)
		var ok bool
		switch {
		case len(b) > 0 && b[0]>>5 == MajorText:
			_, ok = r.Text()
		case len(b) > 0 && b[0]>>5 == MajorArray:
			_, ok = r.ArrayHead()
		case len(b) > 0 && b[0]>>5 == MajorMap:
			_, ok = r.MapHead()
		default:
			_, ok = r.Uint()
		}
		if ok {
			t.Errorf("%s (%x): read", name, b)
		}
	}
	var last string
	r := NewReader([]byte{0x62, 0xc3, 0x28})
	if _, ok := r.TextCached(&last); ok {
		t.Error("TextCached read invalid UTF-8")
	}
}

// TestSharedReads: TextBytes and BytesShared return the input's bytes in place (and
// BytesShared a slice that cannot append into what follows), and refuse what Text and
// Bytes refuse.
func TestSharedReads(t *testing.T) {
	b := AppendBytes(AppendText(nil, "héllo"), []byte{1, 2, 3})
	b = AppendText(b, "after")
	r := NewReader(b)
	text, ok := r.TextBytes()
	if !ok || string(text) != "héllo" || &text[0] != &b[1] {
		t.Fatalf("TextBytes = %q, %v (in place: %v)", text, ok, ok && &text[0] == &b[1])
	}
	p, ok := r.BytesShared()
	if !ok || !bytes.Equal(p, []byte{1, 2, 3}) || cap(p) != 3 {
		t.Fatalf("BytesShared = %v, %v, cap %d", p, ok, cap(p))
	}
	p[0] = 9
	if b[1+len("héllo")+1] != 9 {
		t.Fatal("BytesShared copied")
	}
	if s, ok := r.Text(); !ok || s != "after" || !r.Done() {
		t.Fatalf("then Text = %q, %v", s, ok)
	}
	bad := NewReader([]byte{0x61, 0xff})
	if _, ok := bad.TextBytes(); ok {
		t.Fatal("TextBytes took invalid UTF-8")
	}
	notBytes := NewReader(AppendText(nil, "x"))
	if _, ok := notBytes.BytesShared(); ok {
		t.Fatal("BytesShared took a text string")
	}
}

func TestBoolAndNull(t *testing.T) {
	b := AppendNull(AppendBool(AppendBool(nil, true), false))
	if string(b) != "\xf5\xf4\xf6" {
		t.Fatalf("encoded %x", b)
	}
	r := NewReader(b)
	if r.Null() {
		t.Fatal("Null read a bool")
	}
	if v, ok := r.Bool(); !ok || !v {
		t.Fatalf("Bool = %v, %v", v, ok)
	}
	if v, ok := r.Bool(); !ok || v {
		t.Fatalf("Bool = %v, %v", v, ok)
	}
	if _, ok := r.Bool(); ok {
		t.Fatal("Bool read null")
	}
	r = NewReader(b[2:])
	if !r.Null() || !r.Done() {
		t.Fatal("Null did not read null")
	}
	if _, ok := r.Bool(); ok {
		t.Fatal("Bool read past the end")
	}
}

// Fields reads a map of ascending integer keys up to its bound, and refuses one out of
// order, over the bound, or whose value the field cannot read.
func TestFields(t *testing.T) {
	enc := func(keys ...uint64) []byte {
		b := AppendHead(nil, MajorMap, uint64(len(keys)))
		for _, k := range keys {
			b = AppendUint(b, k)
			b = AppendUint(b, k*10)
		}
		return b
	}
	read := func(b []byte, max uint64) (map[uint64]uint64, bool) {
		got := map[uint64]uint64{}
		r := NewReader(b)
		ok := r.Fields(max, func(k uint64) bool {
			v, ok := r.Uint()
			got[k] = v
			return ok
		})
		return got, ok
	}
	if got, ok := read(enc(1, 3, 7), 23); !ok || len(got) != 3 || got[3] != 30 || got[7] != 70 {
		t.Fatalf("ascending keys: %v %v", got, ok)
	}
	for name, b := range map[string][]byte{
		"out of order": enc(3, 1),
		"repeated":     enc(2, 2),
		"over the max": enc(1, 24),
		"zero":         enc(0),
		"cut":          enc(1, 2)[:4],
		"not a map":    AppendUint(nil, 5),
	} {
		if _, ok := read(b, 23); ok {
			t.Errorf("%s: read", name)
		}
	}
}
