package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func sampleFrames() []*Frame {
	return []*Frame{
		{Kind: FrameOneWay},
		{Kind: FrameOneWay, From: "10.0.0.1:7947", Topic: "sharding/deliver", Body: []byte{0xa1, 0x01, 0x02}},
		{Kind: FrameRequest, ID: 1, From: "127.0.0.1:1", Topic: "t", Body: []byte("hello")},
		{Kind: FrameRequest, ID: 1<<64 - 1, From: "[::1]:65535", Topic: "ddata/gossip", Body: bytes.Repeat([]byte{7}, 100_000)},
		{Kind: FrameResponse, ID: 42, From: "n:1", Error: "cluster: no handler for topic x"},
		{Kind: FrameResponse, ID: 43, Topic: "ünïcødé/topic", Body: []byte{0}},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, f := range sampleFrames() {
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatalf("EncodeFrame(%+v): %v", f.Kind, err)
		}
		g, err := DecodeFrame(b)
		if err != nil {
			t.Fatalf("DecodeFrame: %v", err)
		}
		if g.Kind != f.Kind || g.ID != f.ID || g.From != f.From || g.Topic != f.Topic ||
			!bytes.Equal(g.Body, f.Body) || g.Error != f.Error {
			t.Fatalf("round trip changed the frame: got %+v, want %+v", g, f)
		}
		if len(g.Body) > 0 {
			// The decoded body must not alias the input.
			b[len(b)-1] ^= 0xff
			if g.Body[len(g.Body)-1] != f.Body[len(f.Body)-1] {
				t.Fatal("decoded Body aliases the encoded bytes")
			}
		}
	}
}

func TestFrameEncodingIsDeterministic(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, f := range sampleFrames() {
		a, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		c := *f
		b, err := EncodeFrame(&c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("same frame, different bytes:\n%x\n%x", a, b)
		}
	}
	// Golden bytes: a map with integer keys in ascending order, shortest forms.
	b, err := EncodeFrame(&Frame{Kind: FrameRequest, ID: 7, From: "a:1", Topic: "t", Body: []byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	const want = "a5" + "0102" + "0207" + "0363613a31" + "046174" + "054101"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding = %s, want %s", got, want)
	}
}

func TestEncodeFrameRejectsInvalid(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, f := range []*Frame{nil, {}, {Kind: 4}, {Kind: 255}} {
		if _, err := EncodeFrame(f); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("EncodeFrame(%v) error = %v, want ErrMalformedFrame", f, err)
		}
	}
}

func TestDecodeFrameMalformed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	valid, err := EncodeFrame(&Frame{Kind: FrameRequest, ID: 9, From: "x:1", Topic: "topic", Body: []byte("body")})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"empty":              "",
		"garbage":            hex.EncodeToString([]byte("this is not cbor at all")),
		"null":               "f6",
		"array":              "8101",
		"integer":            "02",
		"empty map (kind 0)": "a0",
		"kind 0":             "a10100",
		"kind 4":             "a10104",
		"kind 255":           "a10118ff",
		"kind 300":           "a10119012c",
		"negative kind":      "a10120",
		"trailing bytes":     hex.EncodeToString(valid) + "00",
		"duplicate key":      "a201010102",
		"body as text":       "a20101056161",
		"topic as bytes":     "a20101044161",
		"id negative":        "a201010220",
		"invalid utf8":       "a201010461ff",
		"indefinite map":     "bf0101ff",
		"indefinite bytes":   "a20101055f4101ff",
		"tagged":             "c0a10101",
		"nested too deep":    "a20101186381818181818101",
		"too many pairs":     "b1" + strings.Repeat("0101", 17),
		"huge length claim":  "a20101055b7fffffffffffffff",
	}
	for name, h := range cases {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%s: bad test vector: %v", name, err)
		}
		if f, err := DecodeFrame(b); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%s (%x): DecodeFrame = %+v, %v; want ErrMalformedFrame", name, b, f, err)
		}
	}
	for i := range len(valid) {
		if _, err := DecodeFrame(valid[:i]); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("truncated to %d of %d bytes: error %v, want ErrMalformedFrame", i, len(valid), err)
		}
	}
}

func TestDecodeFrameIgnoresUnknownKeys(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// {1: 1, 99: "future"}: a later version may add fields.
	b, _ := hex.DecodeString("a20101186366667574757265")
	f, err := DecodeFrame(b)
	if err != nil || f.Kind != FrameOneWay {
		t.Fatalf("DecodeFrame = %+v, %v; want a one-way frame", f, err)
	}
}

// stream returns the length-prefixed encodings of frames, concatenated.
func stream(t testing.TB, frames ...*Frame) []byte {
	t.Helper()
	var out []byte
	for _, f := range frames {
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

func TestFrameReaderStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	frames := sampleFrames()
	frames = append(frames, &Frame{Kind: FrameOneWay, Body: bytes.Repeat([]byte("z"), 3*frameReadChunk+17)})
	fr := newFrameReader(bytes.NewReader(stream(t, frames...)), DefaultMaxFrameSize)
	for i, want := range frames {
		got, n, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		enc, _ := EncodeFrame(want)
		if n != len(enc)+4 {
			t.Errorf("frame %d: wire size %d, want %d", i, n, len(enc)+4)
		}
		if got.Kind != want.Kind || got.ID != want.ID || !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("frame %d: got %+v", i, got)
		}
	}
	if _, _, err := fr.next(); err != io.EOF {
		t.Fatalf("at end of stream: %v, want io.EOF", err)
	}

	// A frame cut short is an unexpected EOF, not a clean one.
	s := stream(t, frames[2])
	for _, cut := range []int{2, 4, 5, len(s) - 1} {
		_, _, err := newFrameReader(bytes.NewReader(s[:cut]), DefaultMaxFrameSize).next()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("stream cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}

	// A zero length prefix is malformed.
	if _, _, err := newFrameReader(bytes.NewReader([]byte{0, 0, 0, 0, 0xa0}), DefaultMaxFrameSize).next(); !errors.Is(err, ErrMalformedFrame) {
		t.Errorf("zero length: %v, want ErrMalformedFrame", err)
	}
	// A length over the cap is refused.
	big := stream(t, &Frame{Kind: FrameOneWay, Body: make([]byte, 200)})
	if _, _, err := newFrameReader(bytes.NewReader(big), 100).next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("frame over the cap: %v, want ErrFrameTooLarge", err)
	}
}

// allocatedDuring returns the bytes allocated on the heap while fn ran.
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestFrameReaderDoesNotAllocateClaimedSize(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// A prefix claiming 4 GiB - 1 is refused before anything is allocated for it.
	fr := newFrameReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}), DefaultMaxFrameSize)
	var err error
	if n := allocatedDuring(func() { _, _, err = fr.next() }); n > 64<<10 {
		t.Errorf("refusing an oversize prefix allocated %d bytes", n)
	}
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize prefix: %v, want ErrFrameTooLarge", err)
	}

	// A prefix within the cap (8 MiB) followed by a few bytes allocates about what
	// arrived, not what was claimed.
	fr = newFrameReader(bytes.NewReader(append([]byte{0x00, 0x80, 0x00, 0x00}, make([]byte, 100)...)), DefaultMaxFrameSize)
	if n := allocatedDuring(func() { _, _, err = fr.next() }); n > 1<<20 {
		t.Errorf("a truncated 8 MiB frame allocated %d bytes", n)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		if len(fr.Body) > 1000 {
			continue
		}
		b, err := EncodeFrame(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
	f.Add([]byte{0xbf, 0x01, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeFrame(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("error %v does not wrap ErrMalformedFrame", err)
			}
			return
		}
		if !fr.Kind.Valid() {
			t.Fatalf("decoded an invalid kind %d", fr.Kind)
		}
		// Whatever decodes re-encodes, and the canonical form is a fixed point.
		b, err := EncodeFrame(fr)
		if err != nil {
			t.Fatalf("re-encoding a decoded frame: %v", err)
		}
		g, err := DecodeFrame(b)
		if err != nil {
			t.Fatalf("decoding a re-encoded frame: %v", err)
		}
		b2, _ := EncodeFrame(g)
		if !bytes.Equal(b, b2) {
			t.Fatalf("canonical encoding not stable: %x vs %x", b, b2)
		}
	})
}

func FuzzFrameReader(f *testing.F) {
	f.Add(stream(f, sampleFrames()[:3]...))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := newFrameReader(bytes.NewReader(data), 1<<16)
		for range 100 {
			if _, _, err := fr.next(); err != nil {
				return
			}
		}
	})
}
