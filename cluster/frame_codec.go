package cluster

import "github.com/shardhost/shardhost/internal/wirecbor"

// The frame codec's fast path. Every frame is encoded and decoded on the path of every
// remote ask; doing it by reflection (fxamacker/cbor) took about a third of the CPU of
// a request round trip over loopback (BenchmarkMessengerRequestTCPParallel's profile).
// appendFrame writes the same bytes as frameEncMode (a test compares them), and
// decodeFrameFast decodes the frames it writes; anything else — a trace map, unknown
// keys, keys out of order, non-minimal or unusual encodings, invalid values — goes to
// frameDecMode, which accepts or refuses it as before.

// appendFrame appends the deterministic CBOR encoding of f, whose Kind is valid, to b.
// It returns ok = false for a frame with a trace context, which frameEncMode encodes
// (its map's keys must be sorted).
func appendFrame(b []byte, f *Frame) ([]byte, bool) {
	if len(f.Trace) > 0 {
		return b, false
	}
	n := uint64(1)
	if f.ID != 0 {
		n++
	}
	if f.From != "" {
		n++
	}
	if f.Topic != "" {
		n++
	}
	if len(f.Body) > 0 {
		n++
	}
	if f.Error != "" {
		n++
	}
	b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
	b = append(b, 1)
	b = wirecbor.AppendUint(b, uint64(f.Kind))
	if f.ID != 0 {
		b = append(b, 2)
		b = wirecbor.AppendUint(b, f.ID)
	}
	if f.From != "" {
		b = append(b, 3)
		b = wirecbor.AppendText(b, f.From)
	}
	if f.Topic != "" {
		b = append(b, 4)
		b = wirecbor.AppendText(b, f.Topic)
	}
	if len(f.Body) > 0 {
		b = append(b, 5)
		b = wirecbor.AppendBytes(b, f.Body)
	}
	if f.Error != "" {
		b = append(b, 6)
		b = wirecbor.AppendText(b, f.Error)
	}
	return b, true
}

// textCache remembers the last From and Topic a connection's reader decoded, so that a
// stream of frames from one peer on a few topics does not allocate them anew.
type textCache struct{ from, topic string }

// decodeFrameFast decodes a frame as appendFrame writes it: a map of at most 6 pairs
// with keys 1 to 6 in ascending order, each value of its field's type and range, a
// valid Kind and no trailing bytes. It returns ok = false for anything else. tc may be
// nil.
func decodeFrameFast(b []byte, tc *textCache) (*Frame, bool) {
	r := wirecbor.NewReader(b)
	n, ok := r.MapHead()
	if !ok || n > 6 {
		return nil, false
	}
	if tc == nil {
		tc = &textCache{}
	}
	f := new(Frame)
	var last uint64
	for range n {
		k, ok := r.Uint()
		if !ok || k <= last {
			return nil, false
		}
		last = k
		switch k {
		case 1:
			v, ok := r.Uint()
			if !ok || v > 0xff {
				return nil, false
			}
			f.Kind = FrameKind(v)
		case 2:
			if f.ID, ok = r.Uint(); !ok {
				return nil, false
			}
		case 3:
			if f.From, ok = r.TextCached(&tc.from); !ok {
				return nil, false
			}
		case 4:
			if f.Topic, ok = r.TextCached(&tc.topic); !ok {
				return nil, false
			}
		case 5:
			if f.Body, ok = r.Bytes(); !ok {
				return nil, false
			}
		case 6:
			if f.Error, ok = r.Text(); !ok {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	if !r.Done() || !f.Kind.Valid() {
		return nil, false
	}
	return f, true
}
