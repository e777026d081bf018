// Package clustertest builds cluster members in memory for tests: each member is a
// cluster.Membership gossiping on a cluster.InmemGossipNetwork and a cluster.Messenger
// on a cluster.InmemNetwork, the two networks shared by the members of a test, which
// cuts links between members, partitions them and heals them.
//
// A Cluster (New) is the harness of a test, after hashicorp/raft's: it starts members,
// each joined to the first live one, waits until they are all up (WaitUp), crashes,
// leaves and restarts them, cuts and heals their links, and stops what is left when the
// test ends. Members use the Tolerant lifecycle unless FastFailureDetection or WithCore
// says otherwise, and a discarding logger unless WithLogger gives one; WithConfig
// changes each member's cluster.MembershipConfig, WithTransportAddrs names their
// transport addresses, and WithClocks gives each member a simulated Clock.
//
// A layer above cluster (the replicator, sharding, a state store) builds its component
// on a Member's Membership and Messenger and registers the component's Close with
// Member.OnStop, which runs before the member's membership and messenger stop. A
// harness with a process lifecycle of its own (the fault schedules in faults/) uses a
// Network and Network.Start alone.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardhost/shardhost/cluster"
)

// Network is the two in-memory networks the members of a test share: gossip (the
// memberships') and frames (the messengers'). Its methods cut and restore links on both
// at once; the networks' own methods cut one (Gossip.DisconnectOneWay) or inject faults
// into frames (Frames.SetFaults). Safe for concurrent use.
type Network struct {
	Gossip *cluster.InmemGossipNetwork
	Frames *cluster.InmemNetwork
}

// NewNetwork returns two empty networks.
func NewNetwork() *Network {
	return &Network{Gossip: cluster.NewInmemGossipNetwork(), Frames: cluster.NewInmemNetwork()}
}

// Addr is where a member is on a Network: its gossip address, host:port (the
// cluster.Member's Address), and its transport address (its TransportAddr).
type Addr struct {
	Gossip    string
	Transport string
}

// Disconnect cuts the links between a and b, both ways, on both networks, until
// Reconnect or Heal.
func (n *Network) Disconnect(a, b Addr) {
	n.Gossip.Disconnect(a.Gossip, b.Gossip)
	n.Frames.Disconnect(a.Transport, b.Transport)
}

// Reconnect restores the links between a and b that Disconnect cut.
func (n *Network) Reconnect(a, b Addr) {
	n.Gossip.Reconnect(a.Gossip, b.Gossip)
	n.Frames.Reconnect(a.Transport, b.Transport)
}

// DisconnectOneWay cuts the links from `from` to `to` on both networks; the other way
// still carries frames and gossip packets, but no gossip stream (push-pull needs both).
func (n *Network) DisconnectOneWay(from, to Addr) {
	n.Gossip.DisconnectOneWay(from.Gossip, to.Gossip)
	n.Frames.DisconnectOneWay(from.Transport, to.Transport)
}

// ReconnectOneWay restores the direction DisconnectOneWay(from, to) cut.
func (n *Network) ReconnectOneWay(from, to Addr) {
	n.Gossip.ReconnectOneWay(from.Gossip, to.Gossip)
	n.Frames.ReconnectOneWay(from.Transport, to.Transport)
}

// Partition cuts every link between two addresses of different groups, both ways, on
// both networks; links within a group, and of addresses in no group, stay as they are.
// Heal undoes it.
func (n *Network) Partition(groups ...[]Addr) {
	for i, g := range groups {
		for _, other := range groups[i+1:] {
			for _, a := range g {
				for _, b := range other {
					n.Disconnect(a, b)
				}
			}
		}
	}
}

// Heal restores every link Disconnect, DisconnectOneWay and Partition cut, on both
// networks (and the frames network's own partition). Faults set by Frames.SetFaults
// stay.
func (n *Network) Heal() {
	n.Gossip.Heal()
	n.Frames.Heal()
}

// Start starts a member at addr: a messenger on the frames network at addr.Transport,
// and a membership on the gossip network at addr.Gossip (a fresh 127.0.0.1:N when
// empty) configured by cfg, whose Transport and TransportAddr it sets; the messenger
// logs to cfg.Logger. The member joins cfg.Seeds, or starts a cluster without them;
// Start does not wait for that (Membership.Join does). It fails, leaving nothing
// running, if addr.Transport is empty or taken, addr.Gossip is taken or malformed, or
// cfg is invalid (cluster.NewMembership's errors).
func (n *Network) Start(addr Addr, cfg cluster.MembershipConfig) (*Member, error) {
	if addr.Transport == "" {
		return nil, errors.New("clustertest: a member needs a transport address")
	}
	msgr, err := cluster.NewMessenger(func(h cluster.FrameHandler) (cluster.Transport, error) {
		return n.Frames.NewTransport(addr.Transport, h)
	}, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("clustertest: messenger at %s: %w", addr.Transport, err)
	}
	var gt *cluster.InmemGossipTransport
	if addr.Gossip == "" {
		gt = n.Gossip.NewTransport()
	} else if gt, err = n.Gossip.NewTransportAt(addr.Gossip); err != nil {
		msgr.Close()
		return nil, fmt.Errorf("clustertest: gossip at %s: %w", addr.Gossip, err)
	}
	cfg.Transport, cfg.TransportAddr = gt, addr.Transport
	ms, err := cluster.NewMembership(cfg)
	if err != nil {
		gt.Shutdown()
		msgr.Close()
		return nil, err
	}
	return &Member{Addr: Addr{Gossip: gt.Addr(), Transport: addr.Transport}, Membership: ms, Messenger: msgr}, nil
}

// Member is a member started by Network.Start or a Cluster: its addresses, membership
// and messenger, and what runs on them (OnStop). Crash and Leave stop it.
type Member struct {
	// Addr is where the member is; Addr.Gossip is also Membership.Self().Address.
	Addr       Addr
	Membership *cluster.Membership
	Messenger  *cluster.Messenger
	// Clock is the member's clock, which its membership core runs on, when its Cluster
	// gives clocks (WithClocks); nil otherwise.
	Clock *Clock
	// Index is the member's place in its Cluster's Members, 0 for Network.Start's.
	Index int

	mu      sync.Mutex
	onStop  []func()
	stopped bool
}

// OnStop registers f to run when the member stops (Crash, Leave, the end of its
// Cluster's test), before its membership and messenger stop: the last registered runs
// first, as deferred calls do. A component built on the member registers its Close.
// Registered on a stopped member, f runs at once.
func (m *Member) OnStop(f func()) {
	m.mu.Lock()
	if !m.stopped {
		m.onStop = append(m.onStop, f)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	f()
}

// Crash stops the member without leaving, as a process that dies: the functions given
// to OnStop run, then its membership shuts down (the others find it unreachable, and
// their split brain resolver downs it) and its messenger closes. Idempotent.
func (m *Member) Crash() { m.stop() }

// Leave leaves the cluster gracefully (Membership.Leave: the leave hooks run, the
// leader moves the member to exiting, then removes it), then stops the member as Crash
// does. It returns Membership.Leave's error.
func (m *Member) Leave(ctx context.Context) error {
	err := m.Membership.Leave(ctx)
	m.stop()
	return err
}

// Stopped reports whether Crash or Leave has stopped the member.
func (m *Member) Stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

func (m *Member) stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	fs := m.onStop
	m.onStop = nil
	m.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	m.Membership.Shutdown()
	m.Messenger.Close()
}
