package sharding

import (
	"sync"
	"sync/atomic"

	"github.com/shardhost/shardhost/internal/wirecbor"
)

// The fast path of the two messages of every remote ask, the envelope and its
// wireReply. Encoding and decoding them by reflection (fxamacker/cbor) cost about as
// much CPU as the frames that carry them. The encoders write the bytes encMode writes
// (a test compares them), and the decoders decode exactly those; anything else goes to
// decMode, which accepts or refuses it as before (the package cluster's frame codec
// does the same, and internal/wirecbor says why this keeps the wire format).

// encodeEnvelope is encode(e), without reflection.
func encodeEnvelope(e *envelope) []byte {
	size := 60 + len(e.EntityType) + len(e.EntityID) + len(e.Payload) + len(e.Origin) + len(e.Sender) + len(e.IdempotencyKey)
	for _, c := range e.Chain {
		size += 9 + len(c)
	}
	return appendEnvelope(make([]byte, 0, size), e)
}

// appendEnvelope appends encode(e) to b.
func appendEnvelope(b []byte, e *envelope) []byte {
	n := uint64(2)
	for _, set := range [...]bool{len(e.Payload) > 0, e.Hops != 0, e.Origin != "", e.Epoch != 0,
		e.Sender != "", e.Kind != 0, e.Tag != 0, len(e.Chain) > 0, e.Forwards != 0, e.TimeLeft != 0, e.IdempotencyKey != "",
		e.SenderSeq != 0, e.Acked != 0} {
		if set {
			n++
		}
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = wirecbor.AppendText(append(b, 1), e.EntityType)
	b = wirecbor.AppendText(append(b, 2), e.EntityID)
	if len(e.Payload) > 0 {
		b = wirecbor.AppendBytes(append(b, 3), e.Payload)
	}
	if e.Hops != 0 {
		b = wirecbor.AppendUint(append(b, 5), uint64(e.Hops))
	}
	if e.Origin != "" {
		b = wirecbor.AppendText(append(b, 6), e.Origin)
	}
	if e.Epoch != 0 {
		b = wirecbor.AppendUint(append(b, 7), e.Epoch)
	}
	if e.Sender != "" {
		b = wirecbor.AppendText(append(b, 8), e.Sender)
	}
	if e.Kind != 0 {
		b = wirecbor.AppendUint(append(b, 9), uint64(e.Kind))
	}
	if e.Tag != 0 {
		b = wirecbor.AppendUint(append(b, 10), e.Tag)
	}
	if len(e.Chain) > 0 {
		b = wirecbor.AppendHead(append(b, 11), wirecbor.MajorArray, uint64(len(e.Chain)))
		for _, c := range e.Chain {
			b = wirecbor.AppendText(b, c)
		}
	}
	if e.Forwards != 0 {
		b = wirecbor.AppendUint(append(b, 12), uint64(e.Forwards))
	}
	if e.TimeLeft != 0 {
		b = wirecbor.AppendUint(append(b, 13), e.TimeLeft)
	}
	if e.IdempotencyKey != "" {
		b = wirecbor.AppendText(append(b, 14), e.IdempotencyKey)
	}
	if e.SenderSeq != 0 {
		b = wirecbor.AppendUint(append(b, 15), e.SenderSeq)
	}
	if e.Acked != 0 {
		b = wirecbor.AppendUint(append(b, 16), uint64(e.Acked))
	}
	return b
}

// decodeEnvelope is decode(b, e), but for e.Payload, which may alias b: the caller
// owns b and keeps it unchanged.
func decodeEnvelope(b []byte, e *envelope) error {
	if decodeEnvelopeFast(b, e) {
		return nil
	}
	return decodeCopy(b, e)
}

// decodeEnvelopeFast decodes an envelope as encodeEnvelope writes it: known keys in
// ascending order, values of their field's type and range, no trailing bytes. It
// reports false, with e in any state, for anything else.
func decodeEnvelopeFast(b []byte, e *envelope) bool {
	r := wirecbor.NewReader(b)
	n, ok := r.MapHead()
	if !ok || n > 16 {
		return false
	}
	*e = envelope{}
	var last uint64
	small := func() (uint8, bool) {
		v, ok := r.Uint()
		return uint8(v), ok && v <= 0xff
	}
	for range n {
		k, ok := r.Uint()
		if !ok || k <= last {
			return false
		}
		last = k
		switch k {
		case 1:
			e.EntityType, ok = wireTexts.read(&r)
		case 2:
			e.EntityID, ok = r.Text()
		case 3:
			e.Payload, ok = r.BytesShared()
		case 5:
			e.Hops, ok = small()
		case 6:
			e.Origin, ok = wireTexts.read(&r)
		case 7:
			e.Epoch, ok = r.Uint()
		case 8:
			e.Sender, ok = r.Text()
		case 9:
			var kind uint8
			kind, ok = small()
			e.Kind = MessageKind(kind)
		case 10:
			e.Tag, ok = r.Uint()
		case 11:
			var m int
			if m, ok = r.ArrayHead(); !ok || m == 0 {
				return false
			}
			e.Chain = make([]string, m)
			for i := range e.Chain {
				if e.Chain[i], ok = r.Text(); !ok {
					return false
				}
			}
		case 12:
			e.Forwards, ok = small()
		case 13:
			e.TimeLeft, ok = r.Uint()
		case 14:
			e.IdempotencyKey, ok = r.Text()
		case 15:
			e.SenderSeq, ok = r.Uint()
		case 16:
			e.Acked, ok = small()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return r.Done()
}

// encodeWireReply is encode(w), without reflection.
func encodeWireReply(w *wireReply) []byte {
	return appendWireReply(make([]byte, 0, 24+len(w.Payload)+len(w.Node)+len(w.Code)+len(w.Error)), w)
}

// wireBufs holds the buffers withWireBuf encodes into.
var wireBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// maxPooledWireBuf is the largest buffer withWireBuf gives back to wireBufs, so that a
// large message's buffer does not stay pinned in the pool.
const maxPooledWireBuf = 16 << 10

// withWireBuf gives send what fill appends to a pooled buffer, then takes the buffer
// back: send must not keep it. The messenger's Request.Reply, TellContext and
// RequestAsyncContext do not: a transport encodes the frame before Send returns and
// the caller may reuse its body (cluster.Transport.Send). So a remote ask's envelope
// and its reply cost no allocation of their own.
func withWireBuf(fill func([]byte) []byte, send func([]byte)) {
	bp := wireBufs.Get().(*[]byte)
	b := fill((*bp)[:0])
	send(b)
	if cap(b) <= maxPooledWireBuf {
		*bp = b[:0]
		wireBufs.Put(bp)
	}
}

// replyWire encodes w into a pooled buffer and gives it to send (withWireBuf).
func replyWire(w *wireReply, send func([]byte)) {
	withWireBuf(func(b []byte) []byte { return appendWireReply(b, w) }, send)
}

// appendWireReply appends encode(w) to b.
func appendWireReply(b []byte, w *wireReply) []byte {
	n := uint64(0)
	for _, set := range [...]bool{len(w.Payload) > 0, w.Node != "", w.Code != "", w.Error != ""} {
		if set {
			n++
		}
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	if len(w.Payload) > 0 {
		b = wirecbor.AppendBytes(append(b, 1), w.Payload)
	}
	if w.Node != "" {
		b = wirecbor.AppendText(append(b, 2), w.Node)
	}
	if w.Code != "" {
		b = wirecbor.AppendText(append(b, 3), w.Code)
	}
	if w.Error != "" {
		b = wirecbor.AppendText(append(b, 4), w.Error)
	}
	return b
}

// decodeWireReply is decode(b, w), but for w.Payload, which may alias b: the caller
// owns b and keeps it unchanged.
func decodeWireReply(b []byte, w *wireReply) error {
	if decodeWireReplyFast(b, w) {
		return nil
	}
	return decodeCopy(b, w)
}

// decodeCopy decodes b reflectively into a new T and copies it to v. The reflective
// decoder takes its target as an interface, so that v itself would escape to the heap:
// this way the value a remote ask's envelope or reply is decoded into stays on its
// caller's stack, and only the rare message the fast decoders refuse pays for a copy.
func decodeCopy[T any](b []byte, v *T) error {
	tmp := new(T)
	err := decode(b, tmp)
	*v = *tmp
	return err
}

// decodeWireReplyFast decodes a wireReply as encodeWireReply writes it, or reports
// false.
func decodeWireReplyFast(b []byte, w *wireReply) bool {
	r := wirecbor.NewReader(b)
	n, ok := r.MapHead()
	if !ok || n > 4 {
		return false
	}
	*w = wireReply{}
	var prev uint64
	for range n {
		k, ok := r.Uint()
		if !ok || k <= prev {
			return false
		}
		prev = k
		switch k {
		case 1:
			w.Payload, ok = r.BytesShared()
		case 2:
			w.Node, ok = wireTexts.read(&r)
		case 3:
			w.Code, ok = r.Text()
		case 4:
			w.Error, ok = r.Text()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return r.Done()
}

// wireTexts are the texts that recur in the messages of every remote ask: entity types
// and member addresses.
var wireTexts textIntern

// textInternMax bounds a textIntern, in texts, and textInternMaxLen the texts it
// learns, in bytes.
const (
	textInternMax    = 256
	textInternMaxLen = 128
)

// textIntern hands out one string for each of a bounded set of texts read from the wire,
// so that reading a text seen before allocates nothing. Past textInternMax texts it
// learns no more, nor texts over textInternMaxLen bytes (a stream of new texts costs an
// allocation each, as without it; a peer sending junk fills it with at most 32 KiB). Safe
// for concurrent use: readers load an immutable map, and a new text copies it.
type textIntern struct {
	m atomic.Pointer[map[string]string]
}

// read reads a text string from r (wirecbor.Reader.Text).
func (t *textIntern) read(r *wirecbor.Reader) (string, bool) {
	p, ok := r.TextBytes()
	if !ok {
		return "", false
	}
	old := t.m.Load()
	if old != nil {
		if s, ok := (*old)[string(p)]; ok { // no allocation: the compiler looks up in place
			return s, true
		}
		if len(*old) >= textInternMax {
			return string(p), true
		}
	}
	s := string(p)
	if len(s) > textInternMaxLen {
		return s, true
	}
	var known map[string]string
	if old != nil {
		known = *old
	}
	next := make(map[string]string, 1+len(known))
	for k, v := range known {
		next[k] = v
	}
	next[s] = s
	t.m.CompareAndSwap(old, &next) // lost to another text: this one is learnt next time
	return s, true
}
