package cluster

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/internal/owner"
)

// defaultInmemQueueSize is the default number of frames an InmemTransport queues
// for its handler before Send to it fails with ErrQueueFull.
const defaultInmemQueueSize = 8192

// InmemNetwork connects InmemTransports by address inside one process, for tests.
// Frames go through EncodeFrame and DecodeFrame, so size caps and the codec are
// exercised as on TCP. Test controls cut links: Disconnect and Reconnect a pair of
// addresses, DisconnectOneWay and ReconnectOneWay one direction, Partition the network
// into groups, Heal it; SetFaults makes it lose, duplicate, reorder and delay frames.
// The network itself has no goroutines; each transport has one, stopped by its Close
// (a frame held back by Reorder waits on a timer of the runtime's).
//
// All methods are safe for concurrent use.
type InmemNetwork struct {
	mu           sync.RWMutex
	transports   map[string]*InmemTransport
	maxFrameSize int
	queueSize    int
	cut          map[[2]string]bool // disconnected pairs, key sorted
	oneway       map[[2]string]bool // disconnected directions, {from, to}
	groups       map[string]int     // partition group of an address (1-based); nil when healed
	faults       InmemFaults
	rng          *rand.Rand // draws of faults; guarded by mu (write lock)
}

// InmemFaults are faults an InmemNetwork injects into frames between two different
// addresses, each drawn per frame from a generator seeded with Seed. The zero value
// injects none.
type InmemFaults struct {
	// Loss is the probability, in [0, 1], that a frame is dropped silently (counted in
	// the sender's FramesDropped), as when a connection breaks with frames in flight.
	Loss float64
	// Duplicate is the probability, in [0, 1], that a frame is delivered twice.
	Duplicate float64
	// Reorder is the probability, in [0, 1], that a frame is held back for
	// ReorderDelay, so that frames sent after it reach the receiver first.
	Reorder float64
	// ReorderDelay is how long a reordered frame is held back; 0 means 10 ms.
	ReorderDelay time.Duration
	// Delay is added to every frame: the receiver's handler gets a frame no sooner than
	// Delay after Send. It keeps the order of frames.
	Delay time.Duration
	// Seed seeds the draws (math/rand/v2's PCG).
	Seed uint64
}

// NewInmemNetwork returns an empty network with MaxFrameSize DefaultMaxFrameSize
// and a queue of defaultInmemQueueSize (8192) frames per transport.
func NewInmemNetwork() *InmemNetwork {
	return &InmemNetwork{
		transports:   make(map[string]*InmemTransport),
		maxFrameSize: DefaultMaxFrameSize,
		queueSize:    defaultInmemQueueSize,
		cut:          make(map[[2]string]bool),
		oneway:       make(map[[2]string]bool),
	}
}

// SetFaults replaces the faults injected into frames sent from now on (frames already
// queued keep their fate); the zero InmemFaults stops injecting. Probabilities outside
// [0, 1] are clamped.
func (n *InmemNetwork) SetFaults(f InmemFaults) {
	clamp := func(p float64) float64 { return min(max(p, 0), 1) }
	f.Loss, f.Duplicate, f.Reorder = clamp(f.Loss), clamp(f.Duplicate), clamp(f.Reorder)
	if f.ReorderDelay <= 0 {
		f.ReorderDelay = 10 * time.Millisecond
	}
	n.mu.Lock()
	n.faults = f
	n.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	n.mu.Unlock()
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
		owner:   owner.New(),
	}
	n.transports[addr] = t
	t.owner.Go(t.deliverLoop)
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

// DisconnectOneWay cuts the link from one address to another in that direction only:
// frames from `from` to `to` are dropped (including those queued), frames from `to` to
// `from` still flow. Until ReconnectOneWay or Heal.
func (n *InmemNetwork) DisconnectOneWay(from, to string) {
	n.mu.Lock()
	n.oneway[[2]string{from, to}] = true
	n.mu.Unlock()
}

// ReconnectOneWay restores the direction cut by DisconnectOneWay(from, to).
func (n *InmemNetwork) ReconnectOneWay(from, to string) {
	n.mu.Lock()
	delete(n.oneway, [2]string{from, to})
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

// Heal removes the partition and every Disconnect and DisconnectOneWay cut: all
// addresses can talk again. Faults set by SetFaults stay.
func (n *InmemNetwork) Heal() {
	n.mu.Lock()
	n.groups = nil
	clear(n.cut)
	clear(n.oneway)
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
	return !n.cut[pairKey(a, b)] && !n.oneway[[2]string{a, b}]
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
	owner   *owner.Group // runs deliverLoop; Close closes it and waits
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
	size  int       // bytes on the wire, prefix included
	due   time.Time // not handed to the handler before (InmemFaults.Delay); zero: at once
	// notSent learns that the frame was dropped for want of a transport at its address
	// (Frame.notSent).
	notSent notSentListener
}

// LocalAddr returns the transport's address on the network.
func (t *InmemTransport) LocalAddr() string { return t.addr }

// Send encodes f, decodes it back (as the receiving end of a wire would) and queues
// it for the transport at addr. Frames to an unknown or cut-off address are dropped
// silently and counted, like a network would; a messenger's request to an address
// without a transport (one closed: a member gone, as when TCP's dial is refused)
// learns it was not sent (ErrNotSent), one across a cut link does not (as over TCP,
// where it may have reached the peer). Errors: the encoding exceeds the
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
	d := inmemDelivery{src: t, frame: g, size: frameHeaderSize + len(b), notSent: f.notSent}

	// The faults are drawn under the write lock (the generator is not safe for
	// concurrent use); the frame is queued under the read lock below.
	copies, holdBack := 1, time.Duration(0)
	if addr != t.addr {
		n.mu.Lock()
		if f := n.faults; n.rng != nil {
			switch {
			case f.Loss > 0 && n.rng.Float64() < f.Loss:
				copies = 0
			case f.Duplicate > 0 && n.rng.Float64() < f.Duplicate:
				copies = 2
			}
			if f.Reorder > 0 && n.rng.Float64() < f.Reorder {
				holdBack = f.ReorderDelay
			}
			if f.Delay > 0 {
				d.due = time.Now().Add(f.Delay)
			}
		}
		n.mu.Unlock()
	}
	if copies == 0 {
		t.framesDropped.Add(1)
		return nil
	}
	ds := []inmemDelivery{d}
	if copies == 2 {
		// The duplicate is a frame of its own, as decoded twice by a receiver.
		dup := d
		dup.notSent = nil // the first copy may have been handled when this one is dropped
		if dup.frame, err = DecodeFrame(b); err != nil {
			return err
		}
		ds = append(ds, dup)
	}
	if holdBack > 0 {
		// Held back: queued later by a timer, after frames sent meanwhile; enqueue
		// counts a failure then as a drop, as for a frame lost on the way.
		time.AfterFunc(holdBack, func() {
			for _, d := range ds {
				_ = t.enqueue(addr, d)
			}
		})
		return nil
	}
	for _, d := range ds {
		if err := t.enqueue(addr, d); err != nil {
			return err
		}
	}
	return nil
}

// enqueue queues d for the transport at addr, or drops it if the link is cut or no
// transport is there (then d's listener learns it was not sent, once the network's
// lock is let go: a messenger's callback may send).
func (t *InmemTransport) enqueue(addr string, d inmemDelivery) error {
	unsent, err := t.enqueueLocked(addr, d)
	if unsent && d.notSent != nil {
		d.notSent.frameNotSent(fmt.Errorf("cluster: send to %s: no transport at that address: %w", addr, ErrUnreachable))
	}
	return err
}

// enqueueLocked is enqueue under the network's read lock; unsent reports a frame
// dropped because no transport is at addr.
func (t *InmemTransport) enqueueLocked(addr string, d inmemDelivery) (unsent bool, err error) {
	n := t.net
	n.mu.RLock()
	defer n.mu.RUnlock()
	if t.closed {
		t.framesDropped.Add(1)
		return false, fmt.Errorf("cluster: send to %s: %w", addr, ErrTransportClosed)
	}
	dst := n.transports[addr]
	if dst == nil {
		t.framesDropped.Add(1)
		return true, nil
	}
	if !n.connected(t.addr, addr) {
		t.framesDropped.Add(1)
		return false, nil
	}
	select {
	case dst.inbox <- d:
		t.framesSent.Add(1)
		t.bytesSent.Add(uint64(d.size))
		return false, nil
	default:
		t.framesDropped.Add(1)
		return false, fmt.Errorf("cluster: send to %s: %d frames queued: %w", addr, cap(dst.inbox), ErrQueueFull)
	}
}

// deliverLoop hands queued frames to the handler until Close.
func (t *InmemTransport) deliverLoop() {
	for {
		select {
		case <-t.owner.Done():
			return
		case d := <-t.inbox:
			if wait := time.Until(d.due); !d.due.IsZero() && wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-t.owner.Done():
					timer.Stop()
					d.src.framesDropped.Add(1)
					return
				case <-timer.C:
				}
			}
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
		t.owner.Close()
		t.owner.Wait()
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
