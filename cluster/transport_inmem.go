package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultInmemQueueSize is the default number of frames an InmemTransport queues
// for its handler before Send to it fails with ErrQueueFull.
const DefaultInmemQueueSize = 8192

// InmemNetwork connects InmemTransports by address inside one process, for tests.
// Frames go through EncodeFrame and DecodeFrame, so size caps and the codec are
// exercised as on TCP. Test controls cut links: Disconnect and Reconnect a pair of
// addresses, Partition the network into groups, Heal it. The network itself has no
// goroutines; each transport has one, stopped by its Close.
//
// All methods are safe for concurrent use.
type InmemNetwork struct {
	mu           sync.RWMutex
	transports   map[string]*InmemTransport
	maxFrameSize int
	queueSize    int
	cut          map[[2]string]bool // disconnected pairs, key sorted
	groups       map[string]int     // partition group of an address (1-based); nil when healed
}

// NewInmemNetwork returns an empty network with MaxFrameSize DefaultMaxFrameSize
// and a queue of DefaultInmemQueueSize frames per transport.
func NewInmemNetwork() *InmemNetwork {
	return &InmemNetwork{
		transports:   make(map[string]*InmemTransport),
		maxFrameSize: DefaultMaxFrameSize,
		queueSize:    DefaultInmemQueueSize,
		cut:          make(map[[2]string]bool),
	}
}

// SetMaxFrameSize sets the cap on one frame's encoding, in bytes, for frames sent
// from now on; larger frames fail with ErrFrameTooLarge. Values below 1 are
// ignored.
func (n *InmemNetwork) SetMaxFrameSize(bytes int) {
	if bytes < 1 {
		return
	}
	n.mu.Lock()
	n.maxFrameSize = bytes
	n.mu.Unlock()
}

// SetQueueSize sets the queue length, in frames, of transports created from now
// on. Values below 1 are ignored.
func (n *InmemNetwork) SetQueueSize(frames int) {
	if frames < 1 {
		return
	}
	n.mu.Lock()
	n.queueSize = frames
	n.mu.Unlock()
}

// NewTransport attaches a transport at addr whose frames go to h. It fails if addr
// is empty or in use, or h is nil.
func (n *InmemNetwork) NewTransport(addr string, h FrameHandler) (*InmemTransport, error) {
	if addr == "" || h == nil {
		return nil, fmt.Errorf("cluster: inmem transport needs an address and a handler: %w", ErrInvalidTransportConfig)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.transports[addr]; ok {
		return nil, fmt.Errorf("cluster: inmem address %q in use: %w", addr, ErrInvalidTransportConfig)
	}
	t := &InmemTransport{
		net:     n,
		addr:    addr,
		handler: h,
		inbox:   make(chan inmemDelivery, n.queueSize),
		done:    make(chan struct{}),
	}
	n.transports[addr] = t
	t.wg.Add(1)
	go t.deliverLoop()
	return t, nil
}

// Disconnect cuts the link between a and b in both directions: frames between them
// are dropped silently (and counted) until Reconnect or Heal, including frames
// already queued but not yet handed to the handler.
func (n *InmemNetwork) Disconnect(a, b string) {
	n.mu.Lock()
	n.cut[pairKey(a, b)] = true
	n.mu.Unlock()
}

// Reconnect restores the link between a and b cut by Disconnect. It does not undo a
// partition.
func (n *InmemNetwork) Reconnect(a, b string) {
	n.mu.Lock()
	delete(n.cut, pairKey(a, b))
	n.mu.Unlock()
}

// Partition splits the network into groups: two addresses can exchange frames only
// if they are in the same group, and addresses named in no group form one more
// group of their own. It replaces any earlier partition; Disconnect cuts still
// apply within groups.
func (n *InmemNetwork) Partition(groups ...[]string) {
	g := make(map[string]int)
	for i, group := range groups {
		for _, addr := range group {
			g[addr] = i + 1
		}
	}
	n.mu.Lock()
	n.groups = g
	n.mu.Unlock()
}

// Heal removes the partition and every Disconnect cut: all addresses can talk again.
func (n *InmemNetwork) Heal() {
	n.mu.Lock()
	n.groups = nil
	clear(n.cut)
	n.mu.Unlock()
}

// connected reports whether frames flow from a to b. n.mu must be held.
func (n *InmemNetwork) connected(a, b string) bool {
	if a == b {
		return true
	}
	if n.groups != nil && n.groups[a] != n.groups[b] {
		return false
	}
	return !n.cut[pairKey(a, b)]
}

func pairKey(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// InmemTransport is a Transport on an InmemNetwork. Send never calls a handler on
// the caller's goroutine: each transport queues frames for its handler (bounded,
// ErrQueueFull) and one goroutine per transport calls the handler, so frames from
// one sender arrive in the order sent, and handler calls are never concurrent.
type InmemTransport struct {
	net     *InmemNetwork
	addr    string
	handler FrameHandler
	inbox   chan inmemDelivery
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	closed  bool // guarded by net.mu

	framesSent, framesReceived, framesDropped atomic.Uint64
	bytesSent, bytesReceived                  atomic.Uint64
}

var _ Transport = (*InmemTransport)(nil)

// inmemDelivery is a frame queued for a transport's handler.
type inmemDelivery struct {
	src   *InmemTransport // the sender, for connectivity checks and drop counts
	frame *Frame
	size  int // bytes on the wire, prefix included
}

// LocalAddr returns the transport's address on the network.
func (t *InmemTransport) LocalAddr() string { return t.addr }

// Send encodes f, decodes it back (as the receiving end of a wire would) and queues
// it for the transport at addr. Frames to an unknown or cut-off address are dropped
// silently and counted, like a network would. Errors: the encoding exceeds the
// network's max frame size (ErrFrameTooLarge), Kind is invalid (ErrMalformedFrame),
// this transport is closed (ErrTransportClosed), or the receiver's queue is full
// (ErrQueueFull).
func (t *InmemTransport) Send(addr string, f *Frame) error {
	if f != nil && f.From == "" {
		g := *f
		g.From = t.addr
		f = &g
	}
	b, err := EncodeFrame(f)
	if err != nil {
		t.framesDropped.Add(1)
		return err
	}
	n := t.net
	n.mu.RLock()
	maxSize := n.maxFrameSize
	n.mu.RUnlock()
	if len(b) > maxSize {
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %d-byte frame exceeds max frame size %d: %w", addr, len(b), maxSize, ErrFrameTooLarge)
	}
	g, err := DecodeFrame(b)
	if err != nil {
		t.framesDropped.Add(1)
		return err
	}
	d := inmemDelivery{src: t, frame: g, size: frameHeaderSize + len(b)}

	n.mu.RLock()
	defer n.mu.RUnlock()
	if t.closed {
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %w", addr, ErrTransportClosed)
	}
	dst := n.transports[addr]
	if dst == nil || !n.connected(t.addr, addr) {
		t.framesDropped.Add(1)
		return nil
	}
	select {
	case dst.inbox <- d:
		t.framesSent.Add(1)
		t.bytesSent.Add(uint64(d.size))
		return nil
	default:
		t.framesDropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %d frames queued: %w", addr, cap(dst.inbox), ErrQueueFull)
	}
}

// deliverLoop hands queued frames to the handler until Close.
func (t *InmemTransport) deliverLoop() {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case d := <-t.inbox:
			t.net.mu.RLock()
			ok := t.net.connected(d.src.addr, t.addr)
			t.net.mu.RUnlock()
			if !ok {
				d.src.framesDropped.Add(1)
				continue
			}
			t.framesReceived.Add(1)
			t.bytesReceived.Add(uint64(d.size))
			t.handler(d.frame)
		}
	}
}

// Close detaches the transport from the network (its address becomes free), stops
// its goroutine and waits for a running handler call to return. Queued frames are
// dropped. It is idempotent and returns nil.
func (t *InmemTransport) Close() error {
	t.once.Do(func() {
		n := t.net
		n.mu.Lock()
		t.closed = true
		if n.transports[t.addr] == t {
			delete(n.transports, t.addr)
		}
		n.mu.Unlock()
		close(t.done)
		t.wg.Wait()
		for {
			select {
			case d := <-t.inbox:
				d.src.framesDropped.Add(1)
				continue
			default:
			}
			break
		}
	})
	return nil
}

// Stats returns the transport's counters. FramesDropped counts frames this
// transport sent that were dropped anywhere: at Send, at delivery (link cut
// meanwhile), or still queued when the receiver closed.
func (t *InmemTransport) Stats() TransportStats {
	return TransportStats{
		FramesSent:     t.framesSent.Load(),
		FramesReceived: t.framesReceived.Load(),
		FramesDropped:  t.framesDropped.Load(),
		BytesSent:      t.bytesSent.Load(),
		BytesReceived:  t.bytesReceived.Load(),
	}
}
