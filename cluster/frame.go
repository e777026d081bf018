package cluster

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/fxamacker/cbor/v2"
)

// FrameKind tells what a Frame is: a one-way message, a request or a response.
type FrameKind uint8

// The kinds of frames. Any other value is malformed.
const (
	// FrameOneWay is a message that expects no reply.
	FrameOneWay FrameKind = 1
	// FrameRequest is a message whose receiver answers with a FrameResponse carrying
	// the same ID.
	FrameRequest FrameKind = 2
	// FrameResponse answers the FrameRequest with the same ID.
	FrameResponse FrameKind = 3
)

// String returns "one-way", "request", "response" or "FrameKind(n)".
func (k FrameKind) String() string {
	switch k {
	case FrameOneWay:
		return "one-way"
	case FrameRequest:
		return "request"
	case FrameResponse:
		return "response"
	default:
		return fmt.Sprintf("FrameKind(%d)", uint8(k))
	}
}

// Valid reports whether k is one of FrameOneWay, FrameRequest and FrameResponse.
func (k FrameKind) Valid() bool { return k >= FrameOneWay && k <= FrameResponse }

// Frame is one node-to-node message, CBOR-encoded (deterministic core encoding,
// integer keys). On a stream each frame is preceded by its length as a 4-byte
// big-endian unsigned integer.
type Frame struct {
	// Kind is the kind of frame; it must be valid.
	Kind FrameKind `cbor:"1,keyasint"`
	// ID is the request ID; a response carries its request's ID. Zero for one-way.
	ID uint64 `cbor:"2,keyasint,omitempty"`
	// From is the sender's transport address, so a receiver can reply.
	From string `cbor:"3,keyasint,omitempty"`
	// Topic names the handler that gets the frame, e.g. "sharding/deliver".
	Topic string `cbor:"4,keyasint,omitempty"`
	// Body is the opaque payload of the topic (itself CBOR, encoded by the caller).
	Body []byte `cbor:"5,keyasint,omitempty"`
	// Error is a response's error text, empty on success.
	Error string `cbor:"6,keyasint,omitempty"`
	// Trace is the sender's trace context, as its propagators wrote it (W3C
	// traceparent and tracestate, baggage, ...); empty when the sender was not tracing.
	Trace map[string]string `cbor:"7,keyasint,omitempty"`

	// slot is the frame's place among its connection's frames in flight, set by the
	// TCP transport for requests and one-way frames (TCPConfig.MaxFramesInFlight); it
	// points to slotv, so that a frame and its slot are one allocation.
	slot  *frameSlot
	slotv frameSlot
	// notSent, set by the messenger on a request it sends, learns that the transport
	// dropped the frame before any of it left this process.
	notSent notSentListener
}

// notSentListener learns that a frame given to Send without an error was dropped before
// any of it left this process (TCP: the peer's address could not be dialled; in memory:
// no transport at the address), so that its peer cannot have received it. The
// transports of this package call it at most once per frame, from any goroutine (the
// caller of Send among them), holding none of their locks; it must not block. A frame
// dropped after some of it may have left (a failed write, a partition, a loss) is not
// reported: its fate is unknown.
type notSentListener interface {
	frameNotSent(err error)
}

// Hold keeps the frame counted among its connection's frames in flight
// (TCPConfig.MaxFramesInFlight) after the FrameHandler returns, until the returned
// function is called; without Hold it stops counting when the handler returns. Call it
// from the FrameHandler, and call the function once the frame's work is over (the
// messenger does when a request is answered); later calls do nothing. For a frame that
// no transport counts it returns a function that does nothing.
func (f *Frame) Hold() (release func()) {
	if f.slot == nil {
		return func() {}
	}
	f.slot.held = true
	return f.slot.release
}

// frameSlot is a frame's share of its connection's in-flight budget.
type frameSlot struct {
	held bool   // set by Hold, on the reader's goroutine
	done uint32 // 1 once released; atomic (not an atomic.Bool, so that a Frame copies)
	in   *inflight
	n    int64 // bytes
}

// release gives the share back; later calls do nothing.
func (s *frameSlot) release() {
	if atomic.CompareAndSwapUint32(&s.done, 0, 1) {
		s.in.bytes.Release(s.n)
		s.in.frames.Release(1)
	}
}

const (
	// DefaultMaxFrameSize is the default cap on one frame's encoding: 8 MiB.
	DefaultMaxFrameSize = 8 << 20
	// frameHeaderSize is the size of the length prefix of a frame on a stream.
	frameHeaderSize = 4
	// maxFrameSizeLimit is the largest MaxFrameSize a config may ask for: 1 GiB.
	maxFrameSizeLimit = 1 << 30
	// frameReadChunk is the largest body a frameReader reads into its reused buffer;
	// larger bodies are read into a buffer grown as bytes arrive, so a peer cannot
	// make the reader allocate more than about twice what it actually sent.
	frameReadChunk = 64 << 10
)

// frameEncMode and frameDecMode are the frame codec. They are immutable after
// package initialisation and safe for concurrent use.
var (
	frameEncMode = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	frameDecMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
			MaxNestedLevels:  4,
			MaxArrayElements: 16,
			MaxMapPairs:      16,
			IndefLength:      cbor.IndefLengthForbidden,
			TagsMd:           cbor.TagsForbidden,
			UTF8:             cbor.UTF8RejectInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// EncodeFrame returns the deterministic CBOR encoding of f (without the length
// prefix): the same frame always encodes to the same bytes. It returns an error
// wrapping ErrMalformedFrame if f is nil or its Kind is not valid.
func EncodeFrame(f *Frame) ([]byte, error) {
	if f == nil {
		return nil, fmt.Errorf("cluster: encode nil frame: %w", ErrMalformedFrame)
	}
	if !f.Kind.Valid() {
		return nil, fmt.Errorf("cluster: encode frame of kind %v: %w", f.Kind, ErrMalformedFrame)
	}
	size := 24 + len(f.From) + len(f.Topic) + len(f.Body) + len(f.Error) // heads: 1 + 2 + 9 + 4×3
	if b, ok := appendFrame(make([]byte, 0, size), f); ok {
		return b, nil
	}
	b, err := frameEncMode.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode frame: %v: %w", err, ErrMalformedFrame)
	}
	return b, nil
}

// DecodeFrame decodes one frame from b, which holds exactly one CBOR map (no length
// prefix, no trailing bytes). The frame does not alias b. Every failure (bad or
// truncated CBOR, wrong types, duplicate keys, decode limits, invalid Kind) returns
// an error wrapping ErrMalformedFrame. Unknown map keys are ignored, so later
// versions may add fields.
func DecodeFrame(b []byte) (*Frame, error) { return decodeFrame(b, nil) }

// decodeFrame is DecodeFrame with the text cache of a connection (nil for none).
func decodeFrame(b []byte, tc *textCache) (*Frame, error) {
	if f, ok := decodeFrameFast(b, tc); ok {
		return f, nil
	}
	f := new(Frame)
	if err := frameDecMode.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("cluster: decode frame: %v: %w", err, ErrMalformedFrame)
	}
	if !f.Kind.Valid() {
		return nil, fmt.Errorf("cluster: decode frame of kind %v: %w", f.Kind, ErrMalformedFrame)
	}
	return f, nil
}

// checkFrameLength checks a frame length (from a length prefix or an encoding)
// against the cap maxSize, in bytes.
func checkFrameLength(n uint64, maxSize int) error {
	if n == 0 {
		return fmt.Errorf("cluster: frame of length 0: %w", ErrMalformedFrame)
	}
	if n > uint64(maxSize) {
		return fmt.Errorf("cluster: frame of %d bytes exceeds the maximum of %d: %w", n, maxSize, ErrFrameTooLarge)
	}
	return nil
}

// frameReader reads length-prefixed frames from a stream. It is used by one
// goroutine at a time.
type frameReader struct {
	r       *bufio.Reader
	maxSize int
	hdr     [frameHeaderSize]byte
	buf     []byte // reused for bodies up to frameReadChunk bytes
	texts   textCache
}

func newFrameReader(r io.Reader, maxSize int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, frameReadChunk), maxSize: maxSize}
}

// next reads the next frame and returns it with its size on the wire (prefix
// included). It returns io.EOF at a clean end of stream between frames, an error
// wrapping ErrFrameTooLarge or ErrMalformedFrame for a bad prefix or frame (the
// claimed size is never allocated before it is checked), and the read error
// otherwise. After an error the stream is unusable.
func (fr *frameReader) next() (*Frame, int, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:])
	if err := checkFrameLength(uint64(n), fr.maxSize); err != nil {
		return nil, 0, err
	}
	body, err := fr.readBody(int(n))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	f, err := decodeFrame(body, &fr.texts)
	if err != nil {
		return nil, 0, err
	}
	return f, frameHeaderSize + int(n), nil
}

// readBody reads n bytes. Small bodies go into the reused buffer; large ones into
// a buffer that grows (doubling) only as bytes arrive.
func (fr *frameReader) readBody(n int) ([]byte, error) {
	if n <= frameReadChunk {
		if cap(fr.buf) < n {
			fr.buf = make([]byte, frameReadChunk)
		}
		b := fr.buf[:n]
		_, err := io.ReadFull(fr.r, b)
		return b, err
	}
	b := make([]byte, 0, frameReadChunk)
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), len(b)))
		}
		end := min(n, cap(b))
		if _, err := io.ReadFull(fr.r, b[len(b):end]); err != nil {
			return nil, err
		}
		b = b[:end]
	}
	return b, nil
}

// putFrameHeader writes the length prefix of a frame of n bytes into hdr.
func putFrameHeader(hdr *[frameHeaderSize]byte, n int) {
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
}
