package cluster

import "errors"

// Errors of the node-to-node transport and the messenger. They are wrapped with
// context (peer address, sizes, topic) and matched with errors.Is.
var (
	// ErrTransportClosed is returned by a transport or messenger after Close, and
	// fails every request still pending when a messenger closes.
	ErrTransportClosed = errors.New("cluster: transport closed")
	// ErrFrameTooLarge is returned when a frame's encoding exceeds the configured
	// maximum frame size; on receipt it closes the connection that carried it.
	ErrFrameTooLarge = errors.New("cluster: frame too large")
	// ErrQueueFull is returned by Send when the bounded queue for the destination
	// is full; the frame is dropped and counted.
	ErrQueueFull = errors.New("cluster: send queue full")
	// ErrMalformedFrame is returned for bytes that do not decode to a valid Frame
	// (bad CBOR, unknown kind, decode limits exceeded, zero length prefix).
	ErrMalformedFrame = errors.New("cluster: malformed frame")
	// ErrUnreachable is returned by Send while the transport backs off from a peer
	// it could not dial; the frame is dropped and counted.
	ErrUnreachable = errors.New("cluster: peer unreachable")
	// ErrRemote is wrapped by every error that a remote topic handler replied with
	// (its text is the remote error's).
	ErrRemote = errors.New("cluster: remote error")
	// ErrRequestTimeout is wrapped (together with context.DeadlineExceeded) by the
	// error of a request whose reply did not arrive in time.
	ErrRequestTimeout = errors.New("cluster: request timed out")
	// ErrNotSent is wrapped by the error of a request that never left this member: the
	// transport refused its frame (Send's error: closed, queue full, peer unreachable,
	// too large), the messenger was closed or the request's time was up before it was
	// sent, or the transport dropped the frame before any of it was written (TCP: the
	// peer's address could not be dialled, as when its process is gone). The peer
	// cannot have received it. A request that failed without it (a timeout, a reply
	// that never came, a connection that broke) may have been handled by the peer.
	ErrNotSent = errors.New("cluster: request not sent")
	// ErrInvalidTransportConfig is wrapped by the errors of TCPConfig.Validate.
	ErrInvalidTransportConfig = errors.New("cluster: invalid transport config")
)

// FrameHandler receives every frame that arrives at a transport. It is called from
// the transport's reader goroutine of the sending peer: frames from one peer (over
// one connection) arrive in the order that peer sent them; calls for different peers
// may be concurrent. It must not block for long: hand work off to another goroutine.
// The handler owns f (and f.Body) and may keep them.
type FrameHandler func(f *Frame)

// Transport sends frames to other nodes, addressed by their transport address
// (host:port for TCP), and hands every frame that arrives to its FrameHandler.
// Delivery is at most once: frames may be lost when a peer is down, a connection
// breaks or a queue overflows, and the transport never retransmits. Frames that are
// delivered to one address arrive in the order in which Send was called for it
// (for calls that are ordered by the caller, e.g. made from one goroutine).
type Transport interface {
	// LocalAddr returns the address peers send to, e.g. "10.0.0.5:7947".
	LocalAddr() string
	// Send encodes f and queues it for addr; it returns at once and never waits for
	// the network. If f.From is empty the frame is sent with From = LocalAddr().
	// The caller may reuse f and f.Body after Send returns. Errors wrap
	// ErrTransportClosed, ErrFrameTooLarge, ErrMalformedFrame, ErrQueueFull or
	// ErrUnreachable; a nil error does not mean the frame was delivered.
	Send(addr string, f *Frame) error
	// Close stops every goroutine of the transport and closes every connection,
	// dropping frames still queued. It waits for running FrameHandler calls to
	// return. It is idempotent; later calls return nil.
	Close() error
}

// TransportStats are counters of a transport since it was created. They are read
// with atomics and may be slightly inconsistent with each other.
type TransportStats struct {
	// FramesSent counts frames written to the network (TCP: flushed to the socket;
	// in-memory: queued at the receiver).
	FramesSent uint64
	// FramesReceived counts frames decoded and handed to the FrameHandler.
	FramesReceived uint64
	// FramesDropped counts frames given to Send that never reached the network:
	// queue full, peer unreachable or unknown, disconnected, too large, write or dial
	// failure (the whole failed batch), or still queued at Close.
	FramesDropped uint64
	// Writes counts the batches of frames flushed to the network (TCP: one write
	// to the socket each, in the common case); FramesSent / Writes is the mean batch.
	Writes uint64
	// BytesSent counts bytes of frames sent, including their 4-byte length prefix.
	BytesSent uint64
	// BytesReceived counts bytes of frames received, including the length prefix.
	BytesReceived uint64
	// MalformedFrames counts inbound frames refused as malformed or too large; on TCP
	// each one closes the connection that carried it.
	MalformedFrames uint64
	// ConnectionErrors counts failed dials and failed writes to peers (TCP).
	ConnectionErrors uint64
	// RefusedConnections counts inbound connections closed before they were
	// authenticated: over TCPConfig.MaxPendingConns, a failed TLS handshake, or no
	// frame in time (TCP).
	RefusedConnections uint64
	// BackpressureWaits counts the times a connection's reader waited for a frame in
	// flight to be done before reading on (TCPConfig.MaxFramesInFlight), each counted
	// as the wait begins.
	BackpressureWaits uint64
}
