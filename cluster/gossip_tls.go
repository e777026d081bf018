package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shardhost/shardhost/internal/owner"
)

// Gossip over mutual TLS (docs/design.md, "Security").
//
// memberlist's own transport sends its packets (probes, acks, gossip, our heartbeats) as
// UDP datagrams, which TLS cannot protect, and its streams (push-pull, reliable sends,
// joins) over plain TCP. tlsGossipTransport carries both over TLS connections on one TCP
// port, as Grafana's dskit does for memberlist: a connection begins with a TLS handshake
// in which both sides must present a member certificate of the cluster CA (the tls.Config
// decides: pki.MemberTLSConfig), then one byte says what it is:
//
//	'p' a packet connection: the sender's gossip address (1-byte length, then the
//	    address), then packets, each a 4-byte big-endian length and the bytes. One per
//	    peer and direction, kept open while used.
//	's' a stream: handed to memberlist as it is, one per memberlist stream.
//
// The server answers the kind byte with one byte, 'k', once it has accepted the
// client's certificate: under TLS 1.3 the client's handshake ends before the server has
// checked its certificate, so without it a refused client would only see a broken pipe
// later. The dialler waits for it, and a refusal fails the dial with the reason
// ("remote error: tls: bad certificate").
//
// A process without such a certificate exchanges not one byte of gossip with a member:
// it can neither join nor be joined, nor inject membership state. Packets stay best
// effort, as UDP: a full queue or a failed connection drops them.

// tlsGossipConfig configures a tlsGossipTransport.
type tlsGossipConfig struct {
	// BindAddr is the TCP address to listen on, host:port (port 0: any free port).
	BindAddr string
	// TLS is the configuration of both sides of every connection (pki.MemberTLSConfig);
	// required.
	TLS *tls.Config
	// DialTimeout bounds connecting and the TLS handshake of a packet connection.
	// memberlist gives stream dials their own timeout. Default 5 s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds an inbound connection's TLS handshake and first byte.
	// Default 5 s.
	HandshakeTimeout time.Duration
	// MaxPendingConns caps the inbound connections whose handshake has not completed
	// (not yet authenticated); past it new ones are closed at once. Default 64.
	MaxPendingConns int
	// PacketQueueSize is the number of packets queued per peer; past it packets are
	// dropped, as UDP would. Default 1024.
	PacketQueueSize int
	// MaxPacketSize caps one packet, in bytes; a larger one closes its connection.
	// memberlist's packets are about 1400 bytes. Default 64 KiB.
	MaxPacketSize int
	// IdleTimeout closes a peer's outbound packet connection after this long without a
	// packet. Default 1 min.
	IdleTimeout time.Duration
	// Logger receives failed handshakes (warn, at most one a second; debug for the
	// rest) and connection events (debug). Nil: slog.Default().
	Logger *slog.Logger
}

func (c *tlsGossipConfig) defaults() {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.MaxPendingConns <= 0 {
		c.MaxPendingConns = 64
	}
	if c.PacketQueueSize <= 0 {
		c.PacketQueueSize = 1024
	}
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = 64 << 10
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = time.Minute
	}
}

// tlsGossipStats are counters of a tlsGossipTransport since it started.
type tlsGossipStats struct {
	// HandshakeFailures counts inbound and outbound connections whose TLS handshake
	// failed: a peer that is not a member of the cluster, or a broken connection.
	HandshakeFailures uint64
	// RefusedConns counts inbound connections closed at once because MaxPendingConns
	// connections were already handshaking.
	RefusedConns uint64
	// PacketsDropped counts packets not sent (queue full, dial or write failure) or not
	// delivered (memberlist's queue full).
	PacketsDropped uint64
}

const (
	gossipConnPacket byte = 'p'
	gossipConnStream byte = 's'
	gossipConnAck    byte = 'k'
)

// tlsGossipTransport is a memberlist.NodeAwareTransport over mutual TLS: see above.
type tlsGossipTransport struct {
	cfg      tlsGossipConfig
	log      *slog.Logger
	ln       net.Listener
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	// owner runs the accept loop, the inbound connections, the peers' packet writers
	// and their drains; Shutdown closes it (its context aborts dials and handshakes)
	// and waits for them.
	owner   *owner.Group
	pending chan struct{} // a slot per inbound connection handshaking

	mu        sync.Mutex
	closed    bool
	advertise string
	peers     map[string]*gossipPeer
	conns     map[net.Conn]struct{} // open packet connections, both ways

	handshakeFailures, refused, dropped atomic.Uint64
	lastWarn                            atomic.Int64
}

var _ memberlist.NodeAwareTransport = (*tlsGossipTransport)(nil)

type gossipPeer struct {
	addr  string
	queue chan []byte
}

// newTLSGossipTransport listens on cfg.BindAddr and returns the transport.
func newTLSGossipTransport(cfg tlsGossipConfig) (*tlsGossipTransport, error) {
	if cfg.TLS == nil {
		return nil, errors.New("cluster: the TLS configuration of gossip is required")
	}
	cfg.defaults()
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip listen on %s: %w", cfg.BindAddr, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	t := &tlsGossipTransport{
		cfg:       cfg,
		log:       log.With("component", "cluster.gossip-tls", "local", ln.Addr().String()),
		ln:        ln,
		packetCh:  make(chan *memberlist.Packet, 4096),
		streamCh:  make(chan net.Conn),
		owner:     owner.New(),
		pending:   make(chan struct{}, cfg.MaxPendingConns),
		advertise: ln.Addr().String(),
		peers:     map[string]*gossipPeer{},
		conns:     map[net.Conn]struct{}{},
	}
	t.owner.Go(t.acceptLoop)
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *tlsGossipTransport) Addr() net.Addr { return t.ln.Addr() }

// Stats returns the transport's counters.
func (t *tlsGossipTransport) Stats() tlsGossipStats {
	return tlsGossipStats{HandshakeFailures: t.handshakeFailures.Load(), RefusedConns: t.refused.Load(), PacketsDropped: t.dropped.Load()}
}

// FinalAdvertiseAddr implements memberlist.Transport: the given address, or the
// listener's when none is given (which must then be a specific IP).
func (t *tlsGossipTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	var addr net.IP
	if ip != "" {
		if addr = net.ParseIP(ip); addr == nil {
			return nil, 0, fmt.Errorf("cluster: advertise address %q is not an IP", ip)
		}
		if port == 0 {
			port = t.ln.Addr().(*net.TCPAddr).Port
		}
	} else {
		la := t.ln.Addr().(*net.TCPAddr)
		if la.IP.IsUnspecified() {
			return nil, 0, fmt.Errorf("cluster: gossip bound to %s: give an advertise address", la)
		}
		addr, port = la.IP, la.Port
	}
	t.mu.Lock()
	t.advertise = net.JoinHostPort(addr.String(), fmt.Sprint(port))
	t.mu.Unlock()
	return addr, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *tlsGossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport: it queues the packet for the
// peer's packet connection and returns at once. A full queue drops it, as UDP would.
func (t *tlsGossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if len(b) > t.cfg.MaxPacketSize {
		t.dropped.Add(1)
		return now, fmt.Errorf("cluster: %d-byte gossip packet over the cap of %d", len(b), t.cfg.MaxPacketSize)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return now, ErrTransportClosed
	}
	p := t.peers[a.Addr]
	if p == nil {
		p = &gossipPeer{addr: a.Addr, queue: make(chan []byte, t.cfg.PacketQueueSize)}
		t.peers[a.Addr] = p
		t.owner.Go(func() { t.runPeer(p) }) // open: Shutdown marks t closed before closing it
	}
	select {
	case p.queue <- append([]byte(nil), b...):
	default:
		t.dropped.Add(1)
	}
	t.mu.Unlock()
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *tlsGossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *tlsGossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport: a stream is a new TLS
// connection, whose first byte says so.
func (t *tlsGossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	conn, err := t.dial(a.Addr, timeout)
	if err != nil {
		return nil, err
	}
	if err := t.open(conn, []byte{gossipConnStream}, timeout); err != nil {
		closeNow(conn)
		return nil, err
	}
	return conn, nil
}

// open writes a new connection's kind (and header) and waits for the server's
// acceptance, within timeout.
func (t *tlsGossipTransport) open(conn *tls.Conn, header []byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	var ack [1]byte
	if _, err := conn.Write(header); err != nil {
		return fmt.Errorf("cluster: gossip to %s: %w", conn.RemoteAddr(), err)
	}
	if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != gossipConnAck {
		t.handshakeFailures.Add(1)
		if err == nil {
			err = fmt.Errorf("unexpected answer %q", ack[0])
		}
		return fmt.Errorf("cluster: gossip to %s: the peer did not accept this member: %w", conn.RemoteAddr(), err)
	}
	return nil
}

// StreamCh implements memberlist.Transport.
func (t *tlsGossipTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: it stops listening, closes the packet
// connections and waits for its goroutines. Streams handed to memberlist are its own.
func (t *tlsGossipTransport) Shutdown() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	t.owner.Close()
	err := t.ln.Close()
	for _, c := range conns {
		closeNow(c)
	}
	t.owner.Wait()
	return err
}

// closeNow closes a connection without TLS's close_notify, which could block on a peer
// that does not read.
func closeNow(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.NetConn().Close()
	}
	c.Close()
}

func (t *tlsGossipTransport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tlsGossipTransport) untrack(c net.Conn) {
	closeNow(c)
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// dial connects to addr and completes the TLS handshake within timeout.
func (t *tlsGossipTransport) dial(addr string, timeout time.Duration) (*tls.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: t.cfg.TLS}
	ctx, cancel := context.WithTimeout(t.owner.Context(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var opErr *net.OpError
		if !errors.As(err, &opErr) || opErr.Op != "dial" {
			t.handshakeFailures.Add(1)
		}
		return nil, fmt.Errorf("cluster: gossip dial %s: %w", addr, err)
	}
	return c.(*tls.Conn), nil
}

// warn logs a failed handshake at warn level at most once a second, at debug otherwise,
// so that a stream of strangers cannot flood the log.
func (t *tlsGossipTransport) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := t.lastWarn.Load()
	if now-last > int64(time.Second) && t.lastWarn.CompareAndSwap(last, now) {
		t.log.Warn(msg, args...)
		return
	}
	t.log.Debug(msg, args...)
}

// runPeer owns the outbound packet connection to one peer: it dials on demand, writes
// the queued packets, drops them while the peer cannot be reached (for a backoff of
// 100 ms doubling to 2 s), and retires after IdleTimeout without packets.
func (t *tlsGossipTransport) runPeer(p *gossipPeer) {
	var (
		conn      *tls.Conn
		downUntil time.Time
		backoff   time.Duration
		hdr       [4]byte
	)
	defer func() {
		if conn != nil {
			t.untrack(conn)
		}
	}()
	idle := time.NewTimer(t.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-t.owner.Done():
			return
		case <-idle.C:
			t.mu.Lock()
			if len(p.queue) == 0 {
				delete(t.peers, p.addr)
				t.mu.Unlock()
				return
			}
			t.mu.Unlock()
			idle.Reset(t.cfg.IdleTimeout)
		case b := <-p.queue:
			idle.Reset(t.cfg.IdleTimeout)
			if conn == nil {
				if time.Now().Before(downUntil) {
					t.dropped.Add(1)
					continue
				}
				c, err := t.dial(p.addr, t.cfg.DialTimeout)
				if err == nil {
					if !t.track(c) {
						closeNow(c)
						return
					}
					t.mu.Lock()
					self := t.advertise
					t.mu.Unlock()
					if err = t.open(c, append([]byte{gossipConnPacket, byte(len(self))}, self...), t.cfg.DialTimeout); err != nil {
						t.untrack(c)
					}
				}
				if err != nil {
					backoff = min(max(2*backoff, 100*time.Millisecond), 2*time.Second)
					downUntil = time.Now().Add(backoff)
					t.dropped.Add(1)
					if errors.Is(err, context.Canceled) {
						return
					}
					t.warn("gossip packet connection failed", "peer", p.addr, "err", err)
					continue
				}
				conn, backoff = c, 0
				t.owner.GoHeld(func() { t.drain(c) }) // on runPeer, a goroutine of the group
			}
			binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
			conn.SetWriteDeadline(time.Now().Add(t.cfg.DialTimeout))
			if _, err := conn.Write(append(hdr[:], b...)); err != nil {
				t.dropped.Add(1)
				t.log.Debug("gossip packet write failed; reconnecting on the next", "peer", p.addr, "err", err)
				t.untrack(conn)
				conn = nil
			}
		}
	}
}

// drain reads the outbound packet connection, on which the peer never writes, so that
// TLS's post-handshake messages are processed and a closed connection is noticed by the
// next write.
func (t *tlsGossipTransport) drain(c *tls.Conn) {
	io.Copy(io.Discard, c)
}

// acceptLoop accepts connections until Shutdown; past MaxPendingConns connections
// handshaking, a new one is closed at once.
func (t *tlsGossipTransport) acceptLoop() {
	for {
		conn, ok := accept(t.ln, t.owner.Done(), t.log)
		if !ok {
			return
		}
		if !takeSlot(t.pending) {
			t.refused.Add(1)
			t.warn("gossip connection refused: too many handshakes in progress", "remote", conn.RemoteAddr(), "max", cap(t.pending))
			conn.Close()
			continue
		}
		t.owner.GoHeld(func() { t.serve(conn) }) // on the accept loop, a goroutine of the group
	}
}

// serve completes an inbound connection's handshake and reads its kind: a stream goes
// to memberlist, a packet connection is read here.
func (t *tlsGossipTransport) serve(raw net.Conn) {
	released := false
	release := func() {
		if !released {
			released = true
			<-t.pending
		}
	}
	defer release()
	conn := tls.Server(raw, t.cfg.TLS)
	if !t.track(conn) {
		raw.Close()
		return
	}
	handedOff := false
	defer func() {
		if !handedOff {
			t.untrack(conn)
		}
	}()
	conn.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if err := conn.HandshakeContext(t.owner.Context()); err != nil {
		t.handshakeFailures.Add(1)
		t.warn("gossip TLS handshake failed; connection closed", "remote", raw.RemoteAddr(), "err", err)
		return
	}
	var kind [2]byte
	if _, err := io.ReadFull(conn, kind[:1]); err != nil {
		t.log.Debug("gossip connection closed before its kind", "remote", raw.RemoteAddr(), "err", err)
		return
	}
	release()
	accept := func() bool {
		if _, err := conn.Write([]byte{gossipConnAck}); err != nil {
			t.log.Debug("gossip connection closed before its acceptance", "remote", raw.RemoteAddr(), "err", err)
			return false
		}
		return true
	}
	switch kind[0] {
	case gossipConnStream:
		if !accept() {
			return
		}
		conn.SetDeadline(time.Time{})
		t.mu.Lock()
		delete(t.conns, conn) // memberlist's from now on
		t.mu.Unlock()
		handedOff = true
		select {
		case t.streamCh <- conn:
		case <-t.owner.Done():
			closeNow(conn)
		}
	case gossipConnPacket:
		if _, err := io.ReadFull(conn, kind[1:]); err != nil {
			return
		}
		from := make([]byte, kind[1])
		if _, err := io.ReadFull(conn, from); err != nil || !accept() {
			return
		}
		conn.SetDeadline(time.Time{})
		t.readPackets(conn, gossipAddr(from))
	default:
		t.warn("gossip connection of an unknown kind; closed", "remote", raw.RemoteAddr(), "kind", kind[0])
	}
}

// readPackets reads the packets of an inbound packet connection until it ends or
// carries one over MaxPacketSize.
func (t *tlsGossipTransport) readPackets(conn net.Conn, from gossipAddr) {
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > uint32(t.cfg.MaxPacketSize) {
			t.warn("gossip packet of a bad size; connection closed", "from", string(from), "size", n)
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(conn, b); err != nil {
			return
		}
		select {
		case t.packetCh <- &memberlist.Packet{Buf: b, From: from, Timestamp: time.Now()}:
		default:
			t.dropped.Add(1)
		}
	}
}

// gossipAddr is the gossip address a packet connection's sender gave.
type gossipAddr string

func (a gossipAddr) Network() string { return "tcp" }
func (a gossipAddr) String() string  { return string(a) }
