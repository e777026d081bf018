package cluster

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// InmemGossipNetwork connects memberlist instances in one process without sockets, for
// deterministic tests: the in-memory twin of memberlist's UDP/TCP transport. Unlike
// memberlist.MockNetwork it is safe to add transports while others gossip, it never
// blocks a sender on a stopped member (packets are dropped, as UDP would), and pairs of
// members can be cut off from each other, both ways or one way.
type InmemGossipNetwork struct {
	mu     sync.RWMutex
	peers  map[string]*InmemGossipTransport
	next   int
	cut    map[[2]string]bool
	oneway map[[2]string]bool // {from, to}
}

// NewInmemGossipNetwork returns an empty network.
func NewInmemGossipNetwork() *InmemGossipNetwork {
	return &InmemGossipNetwork{peers: map[string]*InmemGossipTransport{}, cut: map[[2]string]bool{},
		oneway: map[[2]string]bool{}}
}

// NewTransport returns a transport with a fresh address 127.0.0.1:N (N from 1).
func (n *InmemGossipNetwork) NewTransport() *InmemGossipTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		n.next++
		addr := "127.0.0.1:" + strconv.Itoa(n.next)
		if _, used := n.peers[addr]; !used {
			return n.attach(addr)
		}
	}
}

// NewTransportAt returns a transport at addr (host:port), as a member restarted with a
// fixed bind address has. It fails while another transport holds addr.
func (n *InmemGossipNetwork) NewTransportAt(addr string) (*InmemGossipTransport, error) {
	if _, _, err := splitHostPort(addr); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, used := n.peers[addr]; used {
		return nil, fmt.Errorf("cluster: inmem gossip address %q in use", addr)
	}
	return n.attach(addr), nil
}

// attach makes a transport at addr. n.mu must be held.
func (n *InmemGossipNetwork) attach(addr string) *InmemGossipTransport {
	t := &InmemGossipTransport{
		net:      n,
		addr:     addr,
		packetCh: make(chan *memberlist.Packet, 1024),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
	}
	n.peers[addr] = t
	return t
}

// Disconnect drops everything between the members at gossip addresses a and b, both ways.
func (n *InmemGossipNetwork) Disconnect(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[pairKey(a, b)] = true
}

// Reconnect undoes Disconnect(a, b).
func (n *InmemGossipNetwork) Reconnect(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, pairKey(a, b))
}

// DisconnectOneWay drops the packets from the member at gossip address `from` to the one
// at `to`; packets the other way still flow. A stream (push-pull) needs both directions,
// so neither can dial the other.
func (n *InmemGossipNetwork) DisconnectOneWay(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.oneway[[2]string{from, to}] = true
}

// ReconnectOneWay undoes DisconnectOneWay(from, to).
func (n *InmemGossipNetwork) ReconnectOneWay(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.oneway, [2]string{from, to})
}

// Heal undoes every Disconnect and DisconnectOneWay.
func (n *InmemGossipNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.oneway)
}

// peer returns the transport at `to` if packets flow from `from` to it (and back, if
// both).
func (n *InmemGossipNetwork) peer(from, to string, both bool) (*InmemGossipTransport, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	t, ok := n.peers[to]
	if !ok || n.cut[pairKey(from, to)] || n.oneway[[2]string{from, to}] || (both && n.oneway[[2]string{to, from}]) {
		return nil, fmt.Errorf("cluster: no route from %s to %s", from, to)
	}
	return t, nil
}

// InmemGossipTransport is one member's memberlist transport on an InmemGossipNetwork.
type InmemGossipTransport struct {
	net      *InmemGossipNetwork
	addr     string
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	once     sync.Once
}

var _ memberlist.NodeAwareTransport = (*InmemGossipTransport)(nil)

type inmemAddr string

func (a inmemAddr) Network() string { return "inmem" }
func (a inmemAddr) String() string  { return string(a) }

// Addr returns the transport's address, host:port.
func (t *InmemGossipTransport) Addr() string { return t.addr }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *InmemGossipTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	host, port, err := splitHostPort(t.addr)
	if err != nil {
		return nil, 0, err
	}
	return net.ParseIP(host), port, nil
}

// WriteTo implements memberlist.Transport.
func (t *InmemGossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport. A full or stopped receiver
// drops the packet, as UDP would.
func (t *InmemGossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	dest, err := t.net.peer(t.addr, a.Addr, false)
	if err != nil {
		return now, err
	}
	select {
	case <-dest.done:
	case dest.packetCh <- &memberlist.Packet{Buf: append([]byte(nil), b...), From: inmemAddr(t.addr), Timestamp: now}:
	default:
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *InmemGossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *InmemGossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport with a net.Pipe.
func (t *InmemGossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest, err := t.net.peer(t.addr, a.Addr, true)
	if err != nil {
		return nil, err
	}
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dest.streamCh <- remote:
		return local, nil
	case <-dest.done:
	case <-t.done:
	case <-timer.C:
	}
	local.Close()
	remote.Close()
	return nil, fmt.Errorf("cluster: dialing %s: no answer", a.Addr)
}

// StreamCh implements memberlist.Transport.
func (t *InmemGossipTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// IngestPacket lets memberlist hand over a packet read from a stream.
func (t *InmemGossipTransport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	if shouldClose {
		defer conn.Close()
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, conn); err != nil {
		return fmt.Errorf("cluster: reading a packet: %w", err)
	}
	if buf.Len() < 1 {
		return fmt.Errorf("cluster: packet too short from %s", addr)
	}
	select {
	case t.packetCh <- &memberlist.Packet{Buf: buf.Bytes(), From: addr, Timestamp: now}:
	case <-t.done:
	}
	return nil
}

// Shutdown implements memberlist.Transport: the address is released and senders stop
// blocking on it.
func (t *InmemGossipTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.done)
		t.net.mu.Lock()
		if t.net.peers[t.addr] == t {
			delete(t.net.peers, t.addr)
		}
		t.net.mu.Unlock()
	})
	return nil
}
