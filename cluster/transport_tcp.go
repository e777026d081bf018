package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/shardhost/shardhost/internal/owner"
)

// TCPConfig configures a TCPTransport. Start from DefaultTCPConfig (or
// DefaultLocalTCPConfig in tests) and change what you need.
type TCPConfig struct {
	// BindAddr is the host:port to listen on. Port 0 picks a free port; LocalAddr
	// then reports the real one.
	BindAddr string
	// AdvertiseAddr is the host:port that peers dial to reach this node, sent as the
	// From of every frame. Empty means the listener's address, which requires
	// BindAddr to name a specific IP (not 0.0.0.0 or ::).
	AdvertiseAddr string
	// MaxFrameSize caps one frame's CBOR encoding, in bytes (the length prefix is
	// not counted). Larger outbound frames fail with ErrFrameTooLarge; a larger
	// inbound length prefix closes the connection. All nodes should agree on it.
	MaxFrameSize int
	// SendQueueSize is the number of frames queued per peer before Send fails with
	// ErrQueueFull. Bigger absorbs longer bursts (and stalls) at the cost of memory:
	// the queue is allocated at SendQueueSize × 8 bytes per peer.
	SendQueueSize int
	// DialTimeout bounds connecting to a peer, and each TLS handshake (outbound and
	// inbound) when TLSConfig is set.
	DialTimeout time.Duration
	// WriteTimeout bounds writing one batch of frames to a peer; a peer that does not
	// read for that long has its connection closed and the batch dropped.
	WriteTimeout time.Duration
	// IdleTimeout is how long a peer's outbound connection and writer goroutine live
	// without traffic before they are closed; they are re-created on demand. The
	// connection closes between one and two IdleTimeouts after the last frame.
	IdleTimeout time.Duration
	// RedialBackoff is how long Sends to a peer that could not be dialled fail with
	// ErrUnreachable before the next dial; it doubles on each consecutive failure
	// up to MaxRedialBackoff and resets on a successful dial.
	RedialBackoff time.Duration
	// MaxRedialBackoff caps RedialBackoff's doubling.
	MaxRedialBackoff time.Duration
	// MaxPendingConns caps the inbound connections not authenticated yet: whose TLS
	// handshake has not completed or, without TLS, that have not carried a whole frame.
	// Past it a new connection is closed at once. Such a connection gets DialTimeout to
	// complete its handshake, and WriteTimeout for its first frame without TLS.
	MaxPendingConns int
	// MaxFramesInFlight caps, per inbound connection, the requests and one-way frames
	// given to the FrameHandler and not done yet: a frame is done when the handler
	// returns, or, if the handler called Frame.Hold (the messenger does for requests),
	// when the hold is released (a request answered). At the cap the connection's reader
	// stops reading until a frame is done: the peer's writes stall (TCP back-pressure)
	// rather than queues growing, and past its WriteTimeout it drops the batch.
	// Responses are not counted.
	MaxFramesInFlight int
	// MaxBytesInFlight caps the bytes of those frames per connection, the same way (a
	// frame larger than the cap counts as the cap).
	MaxBytesInFlight int
	// TLSConfig, if set, makes every connection TLS: the listener serves with it and
	// dials use it as the client config (set Certificates, RootCAs, ClientCAs and
	// ClientAuth = tls.RequireAndVerifyClientCert for mutual TLS). ServerName is
	// taken from the dialled address when empty. Nil means plain TCP.
	TLSConfig *tls.Config
	// Logger receives connection events: dial failures (warn for the first of a
	// streak, then debug), a peer reachable again (info), write failures and
	// malformed inbound frames (warn), connects and idle closes (debug). Nil:
	// slog.Default().
	Logger *slog.Logger
}

// DefaultTCPConfig returns a configuration for a LAN: port 7947 on all interfaces
// (so AdvertiseAddr must be set), 8 MiB frames, 65536 frames queued per peer, 5 s
// dial and 10 s write timeouts, 1 min idle timeout, redial backoff 100 ms to 5 s, 64
// connections authenticating at once, 1024 frames and 64 MiB in flight per
// connection.
func DefaultTCPConfig() TCPConfig {
	return TCPConfig{
		BindAddr:          "0.0.0.0:7947",
		MaxFrameSize:      DefaultMaxFrameSize,
		SendQueueSize:     65536,
		DialTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		RedialBackoff:     100 * time.Millisecond,
		MaxRedialBackoff:  5 * time.Second,
		MaxPendingConns:   64,
		MaxFramesInFlight: 1024,
		MaxBytesInFlight:  64 << 20,
	}
}

// DefaultLocalTCPConfig returns a configuration for tests and single-machine
// clusters: a free port on 127.0.0.1, 1 s dial and 2 s write timeouts, redial
// backoff 10 ms to 200 ms, otherwise as DefaultTCPConfig.
func DefaultLocalTCPConfig() TCPConfig {
	c := DefaultTCPConfig()
	c.BindAddr = "127.0.0.1:0"
	c.DialTimeout = time.Second
	c.WriteTimeout = 2 * time.Second
	c.RedialBackoff = 10 * time.Millisecond
	c.MaxRedialBackoff = 200 * time.Millisecond
	return c
}

// Validate checks the configuration. Its errors wrap ErrInvalidTransportConfig.
func (c TCPConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cluster: TCPConfig."+format+": %w", append(args, ErrInvalidTransportConfig)...)
	}
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return bad("BindAddr %q: %v", c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		if _, port, err := net.SplitHostPort(c.AdvertiseAddr); err != nil {
			return bad("AdvertiseAddr %q: %v", c.AdvertiseAddr, err)
		} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return bad("AdvertiseAddr %q: bad port", c.AdvertiseAddr)
		}
	}
	switch {
	case c.MaxFrameSize <= 0 || c.MaxFrameSize > maxFrameSizeLimit:
		return bad("MaxFrameSize %d out of range (1 B to 1 GiB)", c.MaxFrameSize)
	case c.SendQueueSize <= 0:
		return bad("SendQueueSize %d must be positive", c.SendQueueSize)
	case c.DialTimeout <= 0:
		return bad("DialTimeout %v must be positive", c.DialTimeout)
	case c.WriteTimeout <= 0:
		return bad("WriteTimeout %v must be positive", c.WriteTimeout)
	case c.IdleTimeout <= 0:
		return bad("IdleTimeout %v must be positive", c.IdleTimeout)
	case c.RedialBackoff <= 0:
		return bad("RedialBackoff %v must be positive", c.RedialBackoff)
	case c.MaxRedialBackoff < c.RedialBackoff:
		return bad("MaxRedialBackoff %v is below RedialBackoff %v", c.MaxRedialBackoff, c.RedialBackoff)
	case c.MaxPendingConns <= 0 || c.MaxFramesInFlight <= 0 || c.MaxBytesInFlight <= 0:
		return bad("MaxPendingConns %d, MaxFramesInFlight %d and MaxBytesInFlight %d must be positive",
			c.MaxPendingConns, c.MaxFramesInFlight, c.MaxBytesInFlight)
	}
	return nil
}

const (
	// tcpWriteBufferSize is the size of a peer's bufio.Writer, in bytes.
	tcpWriteBufferSize = 64 << 10
	// tcpMaxBatch is the most frames written before a flush.
	tcpMaxBatch = 1024
	// tcpMinBatchBytes is the batch size, in bytes, below which a writer that finds
	// its queue empty yields once before flushing, to let more frames in.
	tcpMinBatchBytes = 1024
)

// TCPTransport is the Transport of a real cluster: one persistent outbound TCP
// connection per peer address, created on the first Send and owned by a writer
// goroutine that drains the peer's bounded queue and batches writes (it flushes
// when the queue is momentarily empty, having yielded once to the goroutines about
// to send if the batch is under tcpMinBatchBytes, after tcpMaxBatch frames, or when
// its buffer is full); one reader goroutine per inbound connection calls the
// FrameHandler. Replies travel over the replier's own outbound connection to the
// requester's From address.
//
// When dialling a peer fails, the frames in hand are dropped and, for a backoff
// (RedialBackoff doubling to MaxRedialBackoff), Send to that peer fails at once
// with ErrUnreachable; the next Send after it dials again. A messenger's request
// among the dropped frames learns it was not sent (ErrNotSent). When writing fails,
// the batch is dropped, the connection closed, and the next frame re-dials (the
// batch's requests are not told: some of it may have reached the peer). A
// malformed or oversize inbound frame closes only the connection that carried it.
//
// All methods are safe for concurrent use.
type TCPTransport struct {
	cfg     TCPConfig
	addr    string
	handler FrameHandler
	log     *slog.Logger
	ln      net.Listener

	// owner runs the accept loop, the peers' writers, the outbound connections'
	// watchers and the inbound connections' readers; Close closes it (its context
	// aborts dials and handshakes, its Done stops the writers and the accept loop) and
	// waits for them.
	owner *owner.Group
	once  sync.Once

	mu      sync.RWMutex
	closed  bool
	peers   map[string]*tcpPeer
	conns   map[net.Conn]struct{} // every open connection, inbound and outbound
	pending chan struct{}         // a slot per inbound connection not authenticated yet

	framesSent, framesReceived, framesDropped atomic.Uint64
	writes                                    atomic.Uint64
	bytesSent, bytesReceived, malformed       atomic.Uint64
	connErrors, refused, backpressure         atomic.Uint64
}

var _ Transport = (*TCPTransport)(nil)

// tcpPeer is the outbound side of one peer address: its queue of encoded frames
// and its writer goroutine.
type tcpPeer struct {
	addr  string
	queue chan *outFrame
	// downUntil is the UnixNano time until which Sends fail with ErrUnreachable;
	// 0 when the peer is not backing off.
	downUntil atomic.Int64
}

// tcpOutConn is an outbound connection owned by a peer's writer goroutine.
type tcpOutConn struct {
	conn net.Conn
	w    *bufio.Writer
	dead chan struct{} // closed when the watcher sees the connection end
}

// NewTCPTransport validates cfg, listens on cfg.BindAddr at once, and returns a
// transport that hands every inbound frame to h. It fails if cfg is invalid, h is
// nil, the address cannot be bound, or the advertise address cannot be derived.
func NewTCPTransport(cfg TCPConfig, h FrameHandler) (*TCPTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("cluster: NewTCPTransport: nil FrameHandler: %w", ErrInvalidTransportConfig)
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %s: %w", cfg.BindAddr, err)
	}
	addr := cfg.AdvertiseAddr
	if addr == "" {
		tcpAddr, ok := ln.Addr().(*net.TCPAddr)
		if !ok || tcpAddr.IP.IsUnspecified() {
			_ = ln.Close()
			return nil, fmt.Errorf("cluster: TCPConfig.AdvertiseAddr is required when BindAddr %q has no specific IP: %w",
				cfg.BindAddr, ErrInvalidTransportConfig)
		}
		addr = tcpAddr.String()
	}
	if cfg.TLSConfig != nil {
		ln = tls.NewListener(ln, cfg.TLSConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	t := &TCPTransport{
		cfg:     cfg,
		addr:    addr,
		handler: h,
		log:     log.With("component", "cluster.transport", "local", addr),
		ln:      ln,
		owner:   owner.New(),
		peers:   make(map[string]*tcpPeer),
		conns:   make(map[net.Conn]struct{}),
		pending: make(chan struct{}, cfg.MaxPendingConns),
	}
	t.owner.Go(t.acceptLoop)
	return t, nil
}

// LocalAddr returns the address peers send to: AdvertiseAddr, or the listener's
// address (with the real port when BindAddr used port 0).
func (t *TCPTransport) LocalAddr() string { return t.addr }

// Send encodes f and queues it for the writer of addr, starting that writer (and
// its connection) if needed. It never blocks on the network. Errors: the frame's
// encoding exceeds MaxFrameSize (ErrFrameTooLarge), its Kind is invalid
// (ErrMalformedFrame), the transport is closed (ErrTransportClosed), the peer's
// queue is full (ErrQueueFull), or addr is empty or the peer is backing off after
// a failed dial (ErrUnreachable). Every failed frame is counted in FramesDropped.
func (t *TCPTransport) Send(addr string, f *Frame) error {
	if f != nil && f.From == "" {
		g := *f
		g.From = t.addr
		f = &g
	}
	b, err := encodeOutFrame(f)
	if err != nil {
		t.framesDropped.Add(1)
		return err
	}
	b.notSent = f.notSent
	if n := len(b.b) - frameHeaderSize; n > t.cfg.MaxFrameSize {
		b.free()
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %d-byte frame exceeds MaxFrameSize %d: %w",
			addr, n, t.cfg.MaxFrameSize, ErrFrameTooLarge)
	}

	if addr == "" {
		b.free()
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to an empty address: %w", ErrUnreachable)
	}

	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %w", addr, ErrTransportClosed)
	}
	p := t.peers[addr]
	if p != nil {
		err = t.enqueue(p, b)
		t.mu.RUnlock()
		return err
	}
	t.mu.RUnlock()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %w", addr, ErrTransportClosed)
	}
	if p = t.peers[addr]; p == nil {
		p = &tcpPeer{addr: addr, queue: make(chan *outFrame, t.cfg.SendQueueSize)}
		t.peers[addr] = p
		t.owner.Go(func() { t.runPeer(p) }) // open: Close marks t closed before closing it
	}
	return t.enqueue(p, b)
}

// enqueue puts b on p's queue without blocking. It is called with t.mu held (read
// or write), so that a writer retiring for idleness never strands a frame.
func (t *TCPTransport) enqueue(p *tcpPeer, b *outFrame) error {
	if until := p.downUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		b.free()
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: backing off after a failed dial: %w", p.addr, ErrUnreachable)
	}
	select {
	case p.queue <- b:
		return nil
	default:
		b.free()
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %d frames queued: %w", p.addr, cap(p.queue), ErrQueueFull)
	}
}

// Close stops the listener, every writer and reader goroutine, closes every
// connection and waits for all goroutines (including running FrameHandler calls)
// to return. Frames still queued are dropped and counted. It is idempotent; it
// returns the listener's close error, if any, from the first call.
func (t *TCPTransport) Close() error {
	var err error
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]net.Conn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()

		t.owner.Close()
		if cerr := t.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("cluster: close listener: %w", cerr)
		}
		for _, c := range conns {
			if tc, ok := c.(*tls.Conn); ok {
				// Skip the close_notify alert, which could block on a stuck peer.
				_ = tc.NetConn().Close()
			}
			_ = c.Close()
		}
		t.owner.Wait()

		var dropped int
		for _, p := range t.peers {
			dropped += len(p.queue)
		}
		if dropped > 0 {
			t.framesDropped.Add(uint64(dropped))
			t.log.Debug("transport closed with frames queued", "dropped", dropped)
		}
	})
	return err
}

// Stats returns the transport's counters.
func (t *TCPTransport) Stats() TransportStats {
	return TransportStats{
		FramesSent:      t.framesSent.Load(),
		FramesReceived:  t.framesReceived.Load(),
		FramesDropped:   t.framesDropped.Load(),
		Writes:          t.writes.Load(),
		BytesSent:       t.bytesSent.Load(),
		BytesReceived:   t.bytesReceived.Load(),
		MalformedFrames: t.malformed.Load(),

		ConnectionErrors:   t.connErrors.Load(),
		RefusedConnections: t.refused.Load(),
		BackpressureWaits:  t.backpressure.Load(),
	}
}

// track registers an open connection so that Close can close it. It returns false
// (and the caller must close c) if the transport is closed.
func (t *TCPTransport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (t *TCPTransport) untrack(c net.Conn) {
	_ = c.Close()
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// runPeer is the writer goroutine of one peer: it owns the peer's outbound
// connection and drains its queue until Close, or until it has been idle for
// IdleTimeout with an empty queue.
func (t *TCPTransport) runPeer(p *tcpPeer) {
	var (
		c       *tcpOutConn
		backoff time.Duration
		active  = true
	)
	defer func() {
		if c != nil {
			t.untrack(c.conn)
		}
	}()
	idle := time.NewTicker(t.cfg.IdleTimeout)
	defer idle.Stop()

	for {
		var dead <-chan struct{}
		if c != nil {
			dead = c.dead
		}
		select {
		case <-t.owner.Done():
			return
		case <-dead:
			t.log.Debug("peer closed the connection", "peer", p.addr)
			t.untrack(c.conn)
			c = nil
		case <-idle.C:
			if !active && t.retire(p) {
				t.log.Debug("closing idle connection", "peer", p.addr)
				return
			}
			active = false
		case b := <-p.queue:
			active = true
			if until := p.downUntil.Load(); until != 0 {
				if time.Now().UnixNano() < until {
					b.drop(fmt.Errorf("cluster: send to %s: backing off after a failed dial: %w", p.addr, ErrUnreachable))
					t.framesDropped.Add(1) // queued just before the backoff began
					continue
				}
			}
			if c == nil {
				var err error
				if c, err = t.dial(p.addr); err != nil {
					t.connErrors.Add(1)
					// The backoff first: a sender told of its dropped frame (drop) finds
					// its next Send refused.
					backoff = min(max(2*backoff, t.cfg.RedialBackoff), t.cfg.MaxRedialBackoff)
					p.downUntil.Store(time.Now().Add(backoff).UnixNano())
					b.drop(err)
					n := 1 + drainQueue(p.queue, err)
					t.framesDropped.Add(uint64(n))
					level := slog.LevelWarn // once per streak of failures, then debug
					if backoff > t.cfg.RedialBackoff {
						level = slog.LevelDebug
					}
					select {
					case <-t.owner.Done():
					default:
						t.log.Log(t.owner.Context(), level, "dial failed; dropping frames and backing off",
							"peer", p.addr, "dropped", n, "backoff", backoff, "err", err)
					}
					continue
				}
				if backoff > 0 {
					t.log.Info("peer reachable again", "peer", p.addr)
				}
				backoff = 0
				p.downUntil.Store(0)
			}
			if err := t.writeBatch(c, p, b); err != nil {
				t.connErrors.Add(1)
				t.untrack(c.conn)
				c = nil
			}
		}
	}
}

// retire removes p from the peer map if no frame is queued and it is not backing
// off, under the write lock so that no Send can enqueue to it afterwards. It
// reports whether p was removed.
func (t *TCPTransport) retire(p *tcpPeer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p.queue) > 0 || t.closed {
		return false
	}
	if until := p.downUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return false // keep the backoff state until it runs out
	}
	if t.peers[p.addr] == p {
		delete(t.peers, p.addr)
	}
	return true
}

// drainQueue empties q without blocking, dropping its frames unsent for err, and
// returns how many frames it removed.
func drainQueue(q chan *outFrame, err error) int {
	for n := 0; ; n++ {
		select {
		case b := <-q:
			b.drop(err)
		default:
			return n
		}
	}
}

// dial connects to addr (with TLS if configured), registers the connection and
// starts its watcher.
func (t *TCPTransport) dial(addr string) (*tcpOutConn, error) {
	d := &net.Dialer{Timeout: t.cfg.DialTimeout}
	var (
		conn net.Conn
		err  error
	)
	if t.cfg.TLSConfig != nil {
		td := &tls.Dialer{NetDialer: d, Config: t.cfg.TLSConfig}
		conn, err = td.DialContext(t.owner.Context(), "tcp", addr)
	} else {
		conn, err = d.DialContext(t.owner.Context(), "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if !t.track(conn) {
		_ = conn.Close()
		return nil, ErrTransportClosed
	}
	c := &tcpOutConn{
		conn: conn,
		w:    bufio.NewWriterSize(conn, tcpWriteBufferSize),
		dead: make(chan struct{}),
	}
	t.owner.GoHeld(func() { t.watch(c) }) // dial runs on a writer, a goroutine of the group
	t.log.Debug("connected", "peer", addr)
	return c, nil
}

// watch blocks reading the outbound connection, on which the peer never writes, so
// that it notices at once when the peer closes it (or it is closed locally), and
// the writer re-dials for the next frame rather than writing into a dead socket.
func (t *TCPTransport) watch(c *tcpOutConn) {
	var b [1]byte
	_, _ = c.conn.Read(b[:])
	close(c.dead)
}

// writeBatch writes first and then every frame already queued (up to tcpMaxBatch)
// into the connection's buffer, and flushes. On error the whole batch is counted
// as dropped and the error returned; the caller closes the connection.
func (t *TCPTransport) writeBatch(c *tcpOutConn, p *tcpPeer, first *outFrame) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout)); err != nil {
		t.framesDropped.Add(1)
		first.drop(err) // nothing of it written
		return err
	}
	var (
		frames, bytes int
		yielded       bool
		err           error
	)
	for b := first; ; {
		frames++
		bytes += len(b.b)
		_, err = c.w.Write(b.b)
		b.free()
		if err != nil {
			break
		}
		if frames == tcpMaxBatch {
			break
		}
		select {
		case b = <-p.queue:
			continue
		default:
		}
		if !yielded && c.w.Buffered() < tcpMinBatchBytes {
			// A small batch: let the goroutines that are about to send run first, once,
			// so that one write carries their frames too (grpc-go's loopyWriter does
			// the same). A write to a socket costs far more CPU than a frame.
			yielded = true
			runtime.Gosched()
			select {
			case b = <-p.queue:
				continue
			default:
			}
		}
		break
	}
	if err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		t.framesDropped.Add(uint64(frames))
		select {
		case <-t.owner.Done():
		default:
			t.log.Warn("write failed; dropping batch and closing the connection",
				"peer", p.addr, "dropped", frames, "err", err)
		}
		return err
	}
	t.framesSent.Add(uint64(frames))
	t.bytesSent.Add(uint64(bytes))
	t.writes.Add(1)
	return nil
}

// acceptLoop accepts inbound connections until Close, starting a reader for each.
func (t *TCPTransport) acceptLoop() {
	for {
		conn, ok := accept(t.ln, t.owner.Done(), t.log)
		if !ok {
			return
		}
		if !takeSlot(t.pending) {
			t.refused.Add(1)
			t.log.Debug("connection refused: too many connections authenticating", "remote", conn.RemoteAddr(), "max", cap(t.pending))
			_ = conn.Close()
			continue
		}
		if !t.track(conn) {
			<-t.pending
			_ = conn.Close()
			return
		}
		t.owner.GoHeld(func() { t.readLoop(conn) }) // on the accept loop, a goroutine of the group
	}
}

// accept returns the next connection of ln, retrying failures (out of file
// descriptors and the like) with a backoff of 5 ms doubling to 1 s as net/http does,
// and false once ln is closed or stop is.
func accept(ln net.Listener, stop <-chan struct{}, log *slog.Logger) (net.Conn, bool) {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err == nil {
			return conn, true
		}
		select {
		case <-stop:
			return nil, false
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, false
		}
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		log.Warn("accept failed; retrying", "err", err, "delay", delay)
		timer := time.NewTimer(delay)
		select {
		case <-stop:
			timer.Stop()
			return nil, false
		case <-timer.C:
		}
	}
}

// takeSlot takes a slot of sem without waiting; false if there is none.
func takeSlot(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// readLoop reads frames from one inbound connection and hands them to the handler
// until the connection ends or carries a bad frame. The connection holds a pending slot
// until it is authenticated (TLS handshake done, or a first whole frame without TLS),
// and each request or one-way frame a share of the connection's in-flight budget until
// it is done.
func (t *TCPTransport) readLoop(conn net.Conn) {
	defer t.untrack(conn)
	pending := true
	authenticated := func() {
		if pending {
			pending = false
			<-t.pending
		}
	}
	defer authenticated()
	remote := conn.RemoteAddr().String()
	if tc, ok := conn.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(t.owner.Context(), t.cfg.DialTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			t.refused.Add(1)
			t.log.Warn("TLS handshake failed; closing connection", "remote", remote, "err", err)
			return
		}
		authenticated()
	} else {
		_ = conn.SetReadDeadline(time.Now().Add(t.cfg.WriteTimeout))
	}
	t.log.Debug("accepted connection", "remote", remote)
	inflight := newInflight(t.cfg.MaxFramesInFlight, t.cfg.MaxBytesInFlight)
	fr := newFrameReader(conn, t.cfg.MaxFrameSize)
	for {
		f, n, err := fr.next()
		if err != nil {
			switch {
			case errors.Is(err, ErrMalformedFrame) || errors.Is(err, ErrFrameTooLarge):
				t.malformed.Add(1)
				t.log.Warn("bad inbound frame; closing connection", "remote", remote, "err", err)
			case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
				t.log.Debug("inbound connection closed", "remote", remote)
			case pending && errors.Is(err, os.ErrDeadlineExceeded):
				t.refused.Add(1)
				t.log.Debug("inbound connection sent no frame in time; closed", "remote", remote)
			default:
				t.log.Debug("inbound connection failed", "remote", remote, "err", err)
			}
			return
		}
		if pending {
			_ = conn.SetReadDeadline(time.Time{})
			authenticated()
		}
		t.framesReceived.Add(1)
		t.bytesReceived.Add(uint64(n))
		if f.Kind == FrameResponse {
			t.handler(f)
			continue
		}
		slot := &f.slotv
		if err := inflight.acquire(t.owner.Context(), n, slot, &t.backpressure); err != nil {
			return // closing
		}
		f.slot = slot
		t.handler(f)
		if !slot.held {
			slot.release()
		}
	}
}

// inflight is one connection's budget of frames and bytes in flight.
type inflight struct {
	frames, bytes *semaphore.Weighted
	maxBytes      int64
}

func newInflight(frames, bytes int) *inflight {
	return &inflight{frames: semaphore.NewWeighted(int64(frames)), bytes: semaphore.NewWeighted(int64(bytes)), maxBytes: int64(bytes)}
}

// acquire takes a frame's share of the budget into s, waiting while the budget is
// spent, until ctx ends. A wait is counted in waits as it begins (once per frame), so
// that the count shows a reader stopped while it waits.
func (b *inflight) acquire(ctx context.Context, size int, s *frameSlot, waits *atomic.Uint64) error {
	n := min(int64(size), b.maxBytes)
	waited := false
	if !b.frames.TryAcquire(1) {
		waited = true
		waits.Add(1)
		if err := b.frames.Acquire(ctx, 1); err != nil {
			return err
		}
	}
	if !b.bytes.TryAcquire(n) {
		if !waited {
			waits.Add(1)
		}
		if err := b.bytes.Acquire(ctx, n); err != nil {
			b.frames.Release(1)
			return err
		}
	}
	s.in, s.n = b, n
	return nil
}

// outFrame is a frame on its way to a peer: its length prefix and encoding, in a
// buffer taken from outFramePool by Send and given back once the writer has copied it
// into the connection's buffer (or dropped it), so that sending a frame allocates
// nothing; and who learns if it is dropped before any of it is written (Frame.notSent).
type outFrame struct {
	b       []byte
	notSent notSentListener
}

// drop gives o back, dropped before any of it was written to the network for err,
// and tells its listener, if it has one.
func (o *outFrame) drop(err error) {
	l := o.notSent
	o.free()
	if l != nil {
		l.frameNotSent(err)
	}
}

// outFramePool holds outFrames whose buffers are at most outFrameMaxPooled bytes.
var outFramePool = sync.Pool{New: func() any { return &outFrame{b: make([]byte, 0, 512)} }}

// outFrameMaxPooled is the largest buffer given back to outFramePool, in bytes: larger
// ones (big frames are rare) are left to the collector.
const outFrameMaxPooled = 64 << 10

// encodeOutFrame encodes f with its length prefix into a pooled outFrame. Its errors
// are EncodeFrame's.
func encodeOutFrame(f *Frame) (*outFrame, error) {
	if f == nil || !f.Kind.Valid() {
		_, err := EncodeFrame(f) // the error
		return nil, err
	}
	o := outFramePool.Get().(*outFrame)
	b := append(o.b[:0], 0, 0, 0, 0)
	b, ok := appendFrame(b, f)
	if !ok {
		enc, err := EncodeFrame(f)
		if err != nil {
			o.free()
			return nil, err
		}
		b = append(b, enc...)
	}
	putFrameHeader((*[frameHeaderSize]byte)(b), len(b)-frameHeaderSize)
	o.b = b
	return o, nil
}

// free gives o back to the pool; o must not be used afterwards.
func (o *outFrame) free() {
	o.notSent = nil
	if cap(o.b) > outFrameMaxPooled {
		return
	}
	o.b = o.b[:0]
	outFramePool.Put(o)
}
