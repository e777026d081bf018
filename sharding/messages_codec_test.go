package sharding

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/shardhost/shardhost/internal/wirecbor"
)

func randomText(rng *rand.Rand) string {
	n := []int{0, 0, 1, 5, 23, 24, 300}[rng.IntN(7)]
	s := strings.Repeat("x", n)
	if n > 2 && rng.IntN(3) == 0 {
		s = "ü" + s[2:]
	}
	return s
}

func randomUint(rng *rand.Rand) uint64 {
	return []uint64{0, 0, 1, 23, 24, 255, 256, 1 << 32, 1<<64 - 1, rng.Uint64()}[rng.IntN(10)]
}

func randomEnvelope(rng *rand.Rand) envelope {
	e := envelope{EntityType: randomText(rng), EntityID: randomText(rng), Hops: uint8(randomUint(rng)),
		Origin: randomText(rng), Epoch: randomUint(rng), Sender: randomText(rng), Kind: MessageKind(rng.IntN(4)),
		Tag: randomUint(rng), Forwards: uint8(randomUint(rng)), TimeLeft: randomUint(rng),
		SenderSeq: randomUint(rng), Acked: uint8(rng.IntN(2))}
	if rng.IntN(2) == 0 {
		e.IdempotencyKey = randomText(rng)
	}
	if n := rng.IntN(30); n > 0 {
		e.Payload = bytes.Repeat([]byte{byte(n)}, n*n)
	}
	for range rng.IntN(3) {
		e.Chain = append(e.Chain, randomText(rng))
	}
	return e
}

func randomWireReply(rng *rand.Rand) wireReply {
	w := wireReply{Node: randomText(rng), Code: randomText(rng), Error: randomText(rng)}
	if n := rng.IntN(30); n > 0 {
		w.Payload = bytes.Repeat([]byte{byte(n)}, n*n)
	}
	return w
}

// TestEnvelopeCodecMatchesReflective checks that the hand-written encoders write what
// encMode writes (what older members send and expect), and that the fast decoders,
// given those bytes, truncated or with a byte changed, either decline them or decode
// exactly what decMode decodes.
func TestEnvelopeCodecMatchesReflective(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		env := randomEnvelope(rng)
		b := encodeEnvelope(&env)
		if want := encode(env); !bytes.Equal(b, want) {
			t.Fatalf("envelope %d %+v:\n got %x\nwant %x", i, env, b, want)
		}
		var back envelope
		if !decodeEnvelopeFast(b, &back) || !reflect.DeepEqual(back, env) {
			t.Fatalf("envelope %d: fast decode of its own encoding gave %+v, want %+v", i, back, env)
		}
		for _, in := range mutations(rng, b) {
			var fast, slow envelope
			if !decodeEnvelopeFast(in, &fast) {
				continue
			}
			if err := decode(in, &slow); err != nil {
				t.Fatalf("fast path accepted %x, which decMode refuses: %v", in, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%x: fast %+v, reflective %+v", in, fast, slow)
			}
		}

		w := randomWireReply(rng)
		b = encodeWireReply(&w)
		if want := encode(w); !bytes.Equal(b, want) {
			t.Fatalf("reply %d %+v:\n got %x\nwant %x", i, w, b, want)
		}
		for _, in := range append(mutations(rng, b), b) {
			var fast, slow wireReply
			if !decodeWireReplyFast(in, &fast) {
				continue
			}
			if err := decode(in, &slow); err != nil {
				t.Fatalf("fast path accepted %x, which decMode refuses: %v", in, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%x: fast %+v, reflective %+v", in, fast, slow)
			}
		}
	}
	// What only the reflective decoder takes: the old trace context key (4) is ignored.
	old := []byte{0xa3, 0x01, 0x61, 't', 0x02, 0x61, 'i', 0x04, 0x61, 'x'}
	var env envelope
	if decodeEnvelopeFast(old, &env) {
		t.Fatal("the fast path decoded an unknown key")
	}
	if err := decodeEnvelope(old, &env); err != nil || env.EntityType != "t" || env.EntityID != "i" {
		t.Fatalf("decodeEnvelope of an envelope with key 4: %+v, %v", env, err)
	}
	if err := decodeEnvelope([]byte{0xa1, 0x01, 0x61, 0xff}, &env); err == nil {
		t.Fatal("decodeEnvelope took invalid UTF-8")
	}
}

// TestEnvelopeCarriesTheTimeLeft: an ask's deadline crosses members as the time it had
// left (key 13, nanoseconds); both decoders read it back, and an envelope without a
// deadline encodes as before, without the key (what older members send and expect).
func TestEnvelopeCarriesTheTimeLeft(t *testing.T) {
	env := envelope{EntityType: "counter", EntityID: "c-1", Payload: []byte("inc"), TimeLeft: uint64(200 * time.Millisecond)}
	b := encodeEnvelope(&env)
	if want := encode(env); !bytes.Equal(b, want) {
		t.Fatalf("encodeEnvelope: %x, want %x", b, want)
	}
	if !bytes.Contains(b, []byte{0x0d, 0x1a, 0x0b, 0xeb, 0xc2, 0x00}) { // 13: 200,000,000
		t.Fatalf("%x lacks key 13 with 200 ms in nanoseconds", b)
	}
	var fast, slow envelope
	if !decodeEnvelopeFast(b, &fast) || fast.TimeLeft != env.TimeLeft {
		t.Fatalf("fast decode: %+v", fast)
	}
	if err := decode(b, &slow); err != nil || slow.TimeLeft != env.TimeLeft {
		t.Fatalf("reflective decode: %+v, %v", slow, err)
	}
	env.TimeLeft = 0
	if b := encodeEnvelope(&env); bytes.Contains(b, []byte{0x0d}) || b[0] != 0xa3 {
		t.Fatalf("an envelope without a deadline: %x, want three keys and no 13", b)
	}
}

// mutations returns b truncated and b with one byte changed.
func mutations(rng *rand.Rand, b []byte) [][]byte {
	c := bytes.Clone(b)
	c[rng.IntN(len(c))] = byte(rng.Uint32())
	return [][]byte{b[:rng.IntN(len(b))], c}
}

func FuzzEnvelopeFastDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5 {
		env := randomEnvelope(rng)
		f.Add(encodeEnvelope(&env))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast, slow envelope
		if !decodeEnvelopeFast(in, &fast) {
			return
		}
		if err := decode(in, &slow); err != nil {
			t.Fatalf("fast path accepted %x, which decMode refuses: %v", in, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%x: fast %+v, reflective %+v", in, fast, slow)
		}
	})
}

// TestCodecKnowsEveryField fails when a field is added to envelope or wireReply: the
// hand-written codec (messages_codec.go) must learn it, or it would drop it silently.
func TestCodecKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{envelope{}, "1,keyasint 2,keyasint 3,keyasint,omitempty 5,keyasint,omitempty 6,keyasint,omitempty 7,keyasint,omitempty 8,keyasint,omitempty 9,keyasint,omitempty 10,keyasint,omitempty 11,keyasint,omitempty 12,keyasint,omitempty 13,keyasint,omitempty 14,keyasint,omitempty 15,keyasint,omitempty 16,keyasint,omitempty"},
		{wireReply{}, "1,keyasint,omitempty 2,keyasint,omitempty 3,keyasint,omitempty 4,keyasint,omitempty"},
	} {
		typ := reflect.TypeOf(tc.v)
		var tags []string
		for i := range typ.NumField() {
			tags = append(tags, typ.Field(i).Tag.Get("cbor"))
		}
		if got := strings.Join(tags, " "); got != tc.want {
			t.Errorf("%s's fields changed (%s): teach messages_codec.go the change, then this test", typ, got)
		}
	}
}

// TestRemoteAskMessagesDecodeWithoutCopies: the envelope and reply of a remote ask
// decode with one allocation, the entity ID's (the type, the members' addresses and
// the payloads cost none), and the decoded values are right.
func TestRemoteAskMessagesDecodeWithoutCopies(t *testing.T) {
	env := envelope{EntityType: "counter", EntityID: "c-17", Payload: []byte("inc"), Origin: "10.0.0.1:7947", Epoch: 3, Hops: 1}
	decodesWithAllocs(t, "decodeEnvelope", encodeEnvelope(&env), decodeEnvelope, env, 1)
	w := wireReply{Payload: []byte("42"), Node: "10.0.0.2:7947"}
	decodesWithAllocs(t, "decodeWireReply", encodeWireReply(&w), decodeWireReply, w, 0)
}

// TestRemoteAskDecodeTargetsStayOnTheStack: the value a remote ask's envelope or reply
// is decoded into can live on its caller's stack (the reflective fallback decodes into
// a copy, not into it): a local decoded into costs no allocation of its own.
func TestRemoteAskDecodeTargetsStayOnTheStack(t *testing.T) {
	eb := encodeEnvelope(&envelope{EntityType: "counter", EntityID: "c-17", Payload: []byte("inc"), Origin: "10.0.0.1:7947", Epoch: 3, Hops: 1})
	var id string
	if n := testing.AllocsPerRun(100, func() {
		var e envelope
		if err := decodeEnvelope(eb, &e); err != nil {
			t.Fatal(err)
		}
		id = e.EntityID
	}); n != 1 || id != "c-17" {
		t.Errorf("decodeEnvelope into a local: %v allocations (want 1, the entity ID's), ID %q", n, id)
	}
	wb := encodeWireReply(&wireReply{Payload: []byte("42"), Node: "10.0.0.2:7947"})
	var node string
	if n := testing.AllocsPerRun(100, func() {
		var w wireReply
		if err := decodeWireReply(wb, &w); err != nil {
			t.Fatal(err)
		}
		node = w.Node
	}); n != 0 || node != "10.0.0.2:7947" {
		t.Errorf("decodeWireReply into a local: %v allocations (want 0), node %q", n, node)
	}
	// The fallback still decodes what the fast decoder refuses (keys out of order).
	var e envelope
	if err := decodeEnvelope([]byte{0xa2, 0x02, 0x61, 'i', 0x01, 0x61, 't'}, &e); err != nil || e.EntityType != "t" || e.EntityID != "i" {
		t.Fatalf("decodeEnvelope of keys out of order: %+v, %v", e, err)
	}
}

// TestReplyWireGivesTheEncodingFromAPooledBuffer: replyWire hands send the bytes
// encodeWireReply makes, for small and large replies and errors alike, and a small
// reply costs no allocation (the race detector's pools drop buffers at random).
func TestReplyWireGivesTheEncodingFromAPooledBuffer(t *testing.T) {
	for _, w := range []wireReply{
		{Payload: []byte("42"), Node: "10.0.0.2:7947"},
		{Code: CodeUnavailable, Error: "no", Node: "10.0.0.2:7947"},
		{Payload: bytes.Repeat([]byte("x"), maxPooledWireBuf+1)},
		{},
	} {
		want := encodeWireReply(&w)
		for range 3 { // the second and third from a buffer used before
			var got []byte
			replyWire(&w, func(b []byte) { got = append([]byte(nil), b...) })
			if !bytes.Equal(got, want) {
				t.Fatalf("replyWire(%+v) sent %x, want %x", w, got, want)
			}
		}
	}
	if raceEnabled {
		return
	}
	w := wireReply{Payload: []byte("42"), Node: "10.0.0.2:7947"}
	n := 0
	if a := testing.AllocsPerRun(100, func() { replyWire(&w, func(b []byte) { n += len(b) }) }); a != 0 {
		t.Errorf("replyWire: %v allocations, want 0", a)
	}
}

// TestAppendEnvelopeInAPooledBufferIsItsEncoding: an envelope appended to a buffer
// withWireBuf used before is encodeEnvelope's bytes, and costs no allocation (the race
// detector's pools drop buffers at random): shardRegion.forward sends a remote ask's envelope
// from there.
func TestAppendEnvelopeInAPooledBufferIsItsEncoding(t *testing.T) {
	for _, e := range []envelope{
		{EntityType: "counter", EntityID: "r1", Payload: []byte("inc"), Hops: 1, Epoch: 7, Tag: 3},
		{EntityType: "t", EntityID: "i", Origin: "10.0.0.1:7947", Sender: "a/b", Chain: []string{"a/b", "c/d"}, Forwards: 2, Kind: 1},
		{EntityType: "t", EntityID: "big", Payload: bytes.Repeat([]byte("x"), maxPooledWireBuf+1)},
	} {
		want := encodeEnvelope(&e)
		for range 3 {
			var got []byte
			withWireBuf(func(b []byte) []byte { return appendEnvelope(b, &e) }, func(b []byte) { got = append([]byte(nil), b...) })
			if !bytes.Equal(got, want) {
				t.Fatalf("appendEnvelope(%+v) sent %x, want %x", e, got, want)
			}
		}
	}
	if raceEnabled {
		return
	}
	e := envelope{EntityType: "counter", EntityID: "r1", Payload: []byte("inc"), Hops: 1, Epoch: 7}
	n := 0
	if a := testing.AllocsPerRun(100, func() {
		withWireBuf(func(b []byte) []byte { return appendEnvelope(b, &e) }, func(b []byte) { n += len(b) })
	}); a != 0 {
		t.Errorf("withWireBuf(appendEnvelope): %v allocations, want 0", a)
	}
}

// decodesWithAllocs checks that decode gives want from b, with allocs allocations.
func decodesWithAllocs[T any](t *testing.T, name string, b []byte, decode func([]byte, *T) error, want T, allocs float64) {
	t.Helper()
	var got T
	if err := decode(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: %+v, %v; want %+v", name, got, err, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = decode(b, &got) }); n != allocs {
		t.Errorf("%s: %v allocations, want %v", name, n, allocs)
	}
}

// TestTextInternIsBounded: a textIntern learns at most textInternMax texts of at most
// textInternMaxLen bytes, and reads every text right past its bounds.
func TestTextInternIsBounded(t *testing.T) {
	var ti textIntern
	read := func(s string) string {
		r := wirecbor.NewReader(wirecbor.AppendText(nil, s))
		got, ok := ti.read(&r)
		if !ok || got != s {
			t.Fatalf("read %q: %q, %v", s, got, ok)
		}
		return got
	}
	long := strings.Repeat("l", textInternMaxLen+1)
	read(long)
	for i := range textInternMax + 10 {
		read(fmt.Sprintf("t%d", i))
	}
	m := *ti.m.Load()
	if len(m) != textInternMax {
		t.Fatalf("learnt %d texts, want %d", len(m), textInternMax)
	}
	if _, ok := m[long]; ok {
		t.Fatal("learnt a text over textInternMaxLen")
	}
	if a, b := read("t5"), read("t5"); unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("a learnt text read twice gave two strings")
	}
	if _, ok := ti.read(&wirecbor.Reader{}); ok {
		t.Fatal("read of nothing succeeded")
	}
}
