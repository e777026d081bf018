package cluster

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// randomFrame returns a frame without a trace context whose fields are empty or not at
// random, with IDs and lengths around the boundaries of CBOR's head sizes.
func randomFrame(rng *rand.Rand) *Frame {
	pick := func(vals ...uint64) uint64 { return vals[rng.IntN(len(vals))] }
	text := func() string {
		n := int(pick(0, 0, 1, 23, 24, 255, 256, 300))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		if n > 2 && rng.IntN(4) == 0 {
			copy(b, "é") // multi-byte UTF-8
		}
		return string(b)
	}
	f := &Frame{
		Kind:  FrameKind(1 + rng.IntN(3)),
		ID:    pick(0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32-1, 1<<32, 1<<64-1, rng.Uint64()),
		From:  text(),
		Topic: text(),
		Error: text(),
	}
	if n := int(pick(0, 1, 23, 24, 70000)); n > 0 || rng.IntN(2) == 0 {
		f.Body = make([]byte, n)
		for i := range f.Body {
			f.Body[i] = byte(rng.Uint32())
		}
	}
	return f
}

// TestAppendFrameMatchesReflectiveEncoder checks that the hand-written encoder writes the
// bytes of the reflective deterministic encoder (what older members send and expect),
// for frames across every head size.
func TestAppendFrameMatchesReflectiveEncoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	frames := sampleFrames()
	for range 2000 {
		frames = append(frames, randomFrame(rng))
	}
	for i, f := range frames {
		want, err := frameEncMode.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendFrame(nil, f)
		if !ok {
			t.Fatalf("frame %d: appendFrame refused a frame without trace", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d %+v:\n got %x\nwant %x", i, f, got, want)
		}
	}
	if _, ok := appendFrame(nil, &Frame{Kind: FrameRequest, Trace: map[string]string{"traceparent": "x"}}); ok {
		t.Fatal("appendFrame encoded a trace map; the reflective encoder sorts it")
	}
}

// decodeReflective is DecodeFrame without the fast path.
func decodeReflective(b []byte) (*Frame, error) {
	f := new(Frame)
	if err := frameDecMode.Unmarshal(b, f); err != nil {
		return nil, err
	}
	if !f.Kind.Valid() {
		return nil, fmt.Errorf("kind %v: %w", f.Kind, ErrMalformedFrame)
	}
	return f, nil
}

// checkFastDecode fails t unless the fast decoder either declines b or decodes it to
// exactly what the reflective decoder makes of it.
func checkFastDecode(t *testing.T, b []byte) {
	t.Helper()
	var tc textCache
	for range 2 { // the second time from the text cache
		got, ok := decodeFrameFast(b, &tc)
		if !ok {
			return
		}
		want, err := decodeReflective(b)
		if err != nil {
			t.Fatalf("fast path accepted %x, which the reflective decoder refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%x: fast path %+v, reflective %+v", b, got, want)
		}
	}
}

// TestDecodeFrameFastMatchesReflectiveDecoder decodes encoded frames, and those bytes
// truncated and with single bytes changed, by both decoders.
func TestDecodeFrameFastMatchesReflectiveDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for range 3000 {
		f := randomFrame(rng)
		if len(f.Body) > 1000 {
			f.Body = f.Body[:rng.IntN(100)]
		}
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := decodeFrameFast(b, nil); ok {
			accepted++
			if g.Kind != f.Kind || g.ID != f.ID || g.From != f.From || g.Topic != f.Topic ||
				!bytes.Equal(g.Body, f.Body) || g.Error != f.Error {
				t.Fatalf("round trip changed %+v into %+v", f, g)
			}
		}
		checkFastDecode(t, b)
		checkFastDecode(t, b[:rng.IntN(len(b))])
		c := bytes.Clone(b)
		c[rng.IntN(len(c))] = byte(rng.Uint32())
		checkFastDecode(t, c)
	}
	if accepted != 3000 {
		t.Fatalf("the fast path took %d of 3000 frames it encoded itself", accepted)
	}
	for _, b := range [][]byte{
		{0xa1, 0x01, 0x19, 0x01, 0x00},       // Kind 256 overflows uint8
		{0xa2, 0x01, 0x01, 0x01, 0x01},       // duplicate key
		{0xa2, 0x02, 0x01, 0x01, 0x01},       // keys out of order
		{0xa2, 0x01, 0x01, 0x07, 0xa0},       // trace map
		{0xa2, 0x01, 0x01, 0x09, 0x01},       // unknown key
		{0xa2, 0x01, 0x01, 0x03, 0x61, 0xff}, // invalid UTF-8
		{0xbf, 0x01, 0x01, 0xff},             // indefinite length
		{0xa1, 0x01, 0x18, 0x02},             // non-minimal Kind
		{0xa2, 0x01, 0x01, 0x05, 0x40},       // empty body
		{0xa1, 0x01, 0x01, 0x00},             // trailing byte
	} {
		checkFastDecode(t, b)
	}
}

func FuzzDecodeFrameFast(f *testing.F) {
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
	f.Add([]byte{0xa2, 0x01, 0x01, 0x05, 0x40})
	f.Fuzz(func(t *testing.T, data []byte) { checkFastDecode(t, data) })
}

// TestTCPPooledBuffersKeepFrames has several goroutines send frames of different sizes
// (pooled send buffers are reused between them, and a large one is not pooled) and
// checks that every frame arrives with its own body, in each sender's order.
func TestTCPPooledBuffersKeepFrames(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const senders, each = 4, 500
	var mu sync.Mutex
	next := make(map[string]int)
	var bad []string
	done := make(chan struct{})
	received := 0
	rx := newTestTCP(t, func(f *Frame) {
		mu.Lock()
		defer mu.Unlock()
		i := next[f.Topic]
		next[f.Topic]++
		if want := bodyOf(f.Topic, i); !bytes.Equal(f.Body, want) {
			bad = append(bad, fmt.Sprintf("%s #%d: %d bytes, want %d", f.Topic, i, len(f.Body), len(want)))
		}
		if received++; received == senders*each {
			close(done)
		}
	})
	defer rx.Close()
	tx := newTestTCP(t, func(*Frame) {})
	defer tx.Close()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := fmt.Sprintf("sender-%d", s)
			for i := range each {
				if err := tx.Send(rx.LocalAddr(), &Frame{Kind: FrameOneWay, Topic: topic, Body: bodyOf(topic, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d frames", received, senders*each)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d frames changed, first: %s", len(bad), bad[0])
	}
}

// bodyOf is the body of the i-th frame on topic: its own bytes, of a size that varies
// from a few bytes to more than outFrameMaxPooled.
func bodyOf(topic string, i int) []byte {
	n := 1 + (i*37)%600
	if i%97 == 0 {
		n = outFrameMaxPooled + 100
	}
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i + k + len(topic))
	}
	return b
}

// TestFrameCodecKnowsEveryField fails when a field is added to Frame: appendFrame and
// decodeFrameFast must learn it, or it would be dropped silently.
func TestFrameCodecKnowsEveryField(t *testing.T) {
	typ := reflect.TypeOf(Frame{})
	var tags []string
	for i := range typ.NumField() {
		tags = append(tags, typ.Field(i).Tag.Get("cbor"))
	}
	const want = "1,keyasint 2,keyasint,omitempty 3,keyasint,omitempty 4,keyasint,omitempty 5,keyasint,omitempty 6,keyasint,omitempty 7,keyasint,omitempty   " // and slot, slotv, notSent (not sent)
	if got := strings.Join(tags, " "); got != want {
		t.Errorf("Frame's fields changed (%q): teach frame_codec.go the change, then this test", got)
	}
}
