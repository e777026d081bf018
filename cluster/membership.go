package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/hashicorp/memberlist"
)

// Errors of membership.
var (
	ErrJoinFailed       = errors.New("cluster: could not join any seed")
	ErrMembershipClosed = errors.New("cluster: membership shut down")
)

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// BindAddr is the gossip address, host:port. The member's Address is this address
	// (or AdvertiseAddr): use a concrete IP, not 0.0.0.0, unless AdvertiseAddr is set.
	BindAddr string
	// AdvertiseAddr is the gossip address other members use, if not BindAddr.
	AdvertiseAddr string
	// UID identifies this incarnation; 0 picks a random one.
	UID UID
	// TransportAddr and APIAddr are published to the other members in the metadata.
	TransportAddr string
	APIAddr       string
	// Roles are published to the other members in the metadata.
	Roles []string
	// StartedAt orders members by age; zero means time.Now() at NewMembership.
	StartedAt time.Time
	// Profile picks memberlist's timing: "lan" (memberlist.DefaultLANConfig: a crash is
	// seen in about 5 s) or "local" (memberlist.DefaultLocalConfig, for one machine).
	Profile string
	// Transport replaces memberlist's UDP/TCP transport, e.g. an InmemGossipNetwork
	// transport in tests. Nil uses the network at BindAddr.
	Transport memberlist.Transport
	// Logger receives memberlist's log at debug level and membership events at info.
	Logger *slog.Logger
}

// DefaultMembershipConfig returns a LAN configuration bound to 127.0.0.1:7946.
func DefaultMembershipConfig() MembershipConfig {
	return MembershipConfig{BindAddr: "127.0.0.1:7946", Profile: "lan"}
}

// Validate reports a configuration that cannot work.
func (c MembershipConfig) Validate() error {
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.BindAddr); err != nil {
			return fmt.Errorf("cluster: bind address: %w", err)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("cluster: advertise address: %w", err)
		}
	}
	if c.Profile != "lan" && c.Profile != "local" {
		return fmt.Errorf("cluster: unknown gossip profile %q (want lan or local)", c.Profile)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// gossipDecMode decodes what arrives by gossip: metadata, named states, broadcasts.
var gossipDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{MaxNestedLevels: 8, MaxArrayElements: 4096, MaxMapPairs: 4096}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// memberMeta is what a member publishes in memberlist's node metadata (≤ 512 bytes).
type memberMeta struct {
	UID           UID      `cbor:"1,keyasint"`
	TransportAddr string   `cbor:"2,keyasint"`
	APIAddr       string   `cbor:"3,keyasint,omitempty"`
	StartedAt     int64    `cbor:"4,keyasint"` // Unix nanoseconds
	Roles         []string `cbor:"5,keyasint,omitempty"`
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	// MemberUp: a member joined and serves.
	MemberUp EventKind = iota + 1
	// MemberRemoved: a member left or was declared dead by memberlist.
	MemberRemoved
)

func (k EventKind) String() string {
	switch k {
	case MemberUp:
		return "member-up"
	case MemberRemoved:
		return "member-removed"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// MemberEvent is a change of membership.
type MemberEvent struct {
	Kind   EventKind
	Member Member
}

// Subscription receives membership events. Events are never blocked on: when C is full
// an event is dropped and counted, so a subscriber that can miss events re-reads
// Members.
type Subscription struct {
	// C delivers the events, in the order they happened.
	C       <-chan MemberEvent
	c       chan MemberEvent
	dropped atomic.Uint64
	m       *Membership
}

// Dropped returns how many events did not fit in C.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription; C is not closed.
func (s *Subscription) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	delete(s.m.subs, s)
}

// StateDelegate lets a layer above membership share small state through memberlist.
// LocalState is sent to a peer in every push-pull exchange (at join, and periodically);
// MergeRemoteState receives what a peer sent, from push-pull or from Broadcast. Both are
// called from memberlist's goroutines, possibly concurrently, and must not block.
type StateDelegate interface {
	LocalState() []byte
	MergeRemoteState(state []byte)
}

// Membership is this process's view of the cluster, on hashicorp/memberlist: who is a
// member, with what address, UID and status. (Convergence, the leader, phi accrual and
// downing belong to the full membership lifecycle; this type is its seam.)
type Membership struct {
	cfg   MembershipConfig
	log   *slog.Logger
	self  Member
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue

	mu      sync.Mutex
	members map[string]Member // by memberlist node name, members that are alive
	subs    map[*Subscription]struct{}
	states  map[string]StateDelegate
	closed  bool
}

// NewMembership starts gossip at cfg.BindAddr as a one-member cluster; Join joins others.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.Profile == "" {
		cfg.Profile = "lan"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UID == 0 {
		cfg.UID = randomUID()
	}
	if cfg.StartedAt.IsZero() {
		cfg.StartedAt = time.Now()
	}
	m := &Membership{
		cfg:     cfg,
		log:     cfg.Logger,
		members: map[string]Member{},
		subs:    map[*Subscription]struct{}{},
		states:  map[string]StateDelegate{},
	}
	var mc *memberlist.Config
	if cfg.Profile == "local" {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	} else {
		host, port, _ := splitHostPort(cfg.BindAddr)
		mc.BindAddr, mc.BindPort = host, port
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	if cfg.AdvertiseAddr != "" {
		host, port, _ := splitHostPort(cfg.AdvertiseAddr)
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	bindName := cfg.AdvertiseAddr
	if bindName == "" {
		bindName = cfg.BindAddr
	}
	mc.Name = uniqueAddress(bindName, cfg.UID)
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Logger = slog.NewLogLogger(cfg.Logger.With("component", "memberlist").Handler(), slog.LevelDebug)
	m.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: mc.RetransmitMult, NumNodes: func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return max(len(m.members), 1)
	}}
	m.self = Member{
		UID:           cfg.UID,
		TransportAddr: cfg.TransportAddr,
		APIAddr:       cfg.APIAddr,
		Roles:         append([]string{}, cfg.Roles...),
		StartedAt:     cfg.StartedAt,
		Status:        StatusUp,
		Reachable:     true,
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster: starting gossip on %s: %w", cfg.BindAddr, err)
	}
	m.mu.Lock()
	m.ml = ml
	m.self.Address = ml.LocalNode().Address()
	m.mu.Unlock()
	return m, nil
}

func randomUID() UID {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err)
		}
		if uid := binary.BigEndian.Uint64(b[:]); uid != 0 {
			return UID(uid)
		}
	}
}

// Self returns this member.
func (m *Membership) Self() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Members returns the members that are alive, sorted by address, this one included.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, mem)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].UID < out[j].UID
	})
	return out
}

// Member returns the live member at a gossip address.
func (m *Membership) Member(address string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range m.members {
		if mem.Address == address {
			return mem, true
		}
	}
	return Member{}, false
}

// Join contacts the seed addresses (host:port) until one answers or ctx ends, retrying
// with a backoff from 100 ms to 2 s, and returns how many members it reached. The error
// wraps ErrJoinFailed, with the last failure.
func (m *Membership) Join(ctx context.Context, seeds []string) (int, error) {
	backoff := 100 * time.Millisecond
	for {
		n, err := m.ml.Join(seeds)
		if n > 0 {
			return n, nil
		}
		m.log.Debug("join attempt failed", "seeds", seeds, "err", err)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w %v: %v", ErrJoinFailed, seeds, err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// Subscribe returns a subscription whose channel holds up to buffer events. The current
// members are delivered first, as MemberUp events, as far as they fit.
func (m *Membership) Subscribe(buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	c := make(chan MemberEvent, buffer)
	s := &Subscription{C: c, c: c, m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range m.members {
		s.deliver(MemberEvent{Kind: MemberUp, Member: mem})
	}
	m.subs[s] = struct{}{}
	return s
}

func (s *Subscription) deliver(e MemberEvent) {
	select {
	case s.c <- e:
	default:
		s.dropped.Add(1)
	}
}

// RegisterState registers a named state delegate. Register before Join so the first
// push-pull already carries the state.
func (m *Membership) RegisterState(name string, d StateDelegate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[name] = d
}

// Broadcast gossips state for the named delegate to every member, best effort (UDP
// gossip, retransmitted a few times; push-pull repairs what is lost). A newer broadcast
// for the same name replaces one still queued. States larger than a gossip packet (about
// 1 KiB) only travel by push-pull.
func (m *Membership) Broadcast(name string, state []byte) {
	msg, err := cbor.Marshal(namedState{Name: name, State: state})
	if err != nil {
		m.log.Error("encoding a broadcast", "name", name, "err", err)
		return
	}
	m.queue.QueueBroadcast(&broadcast{name: name, msg: msg})
}

// Leave tells the other members this one is leaving, waiting up to timeout for the
// message to spread, and then shuts gossip down.
func (m *Membership) Leave(timeout time.Duration) error {
	err := m.ml.Leave(timeout)
	if serr := m.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// Shutdown stops gossip at once, without telling the others (they see a crash).
// It is idempotent.
func (m *Membership) Shutdown() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	return m.ml.Shutdown()
}

func (m *Membership) memberFromNode(n *memberlist.Node) (Member, bool) {
	var meta memberMeta
	if err := gossipDecMode.Unmarshal(n.Meta, &meta); err != nil || meta.UID == 0 {
		m.log.Warn("ignoring a gossip node without shardhost metadata", "node", n.Name, "err", err)
		return Member{}, false
	}
	return Member{
		Address:       n.Address(),
		UID:           meta.UID,
		TransportAddr: meta.TransportAddr,
		APIAddr:       meta.APIAddr,
		Roles:         append([]string{}, meta.Roles...),
		StartedAt:     time.Unix(0, meta.StartedAt),
		Status:        StatusUp,
		Reachable:     true,
	}, true
}

// events adapts Membership to memberlist.EventDelegate. memberlist calls it from its own
// goroutines, one at a time; it never blocks (subscribers have bounded queues).
type events Membership

func (e *events) NotifyJoin(n *memberlist.Node)   { (*Membership)(e).nodeUp(n) }
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).nodeUp(n) }
func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Membership)(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[n.Name]
	if !ok {
		return
	}
	delete(m.members, n.Name)
	mem.Status = StatusRemoved
	mem.Reachable = false
	m.log.Info("member removed", "member", mem.Address, "uid", mem.UID)
	m.publish(MemberEvent{Kind: MemberRemoved, Member: mem})
}

func (m *Membership) nodeUp(n *memberlist.Node) {
	mem, ok := m.memberFromNode(n)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, known := m.members[n.Name]
	m.members[n.Name] = mem
	if !known {
		if mem.UID != m.self.UID {
			m.log.Info("member up", "member", mem.Address, "uid", mem.UID, "transport", mem.TransportAddr)
		}
		m.publish(MemberEvent{Kind: MemberUp, Member: mem})
	}
}

func (m *Membership) publish(e MemberEvent) {
	for s := range m.subs {
		s.deliver(e)
	}
}

// delegate adapts Membership to memberlist.Delegate.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	b, err := cbor.Marshal(memberMeta{
		UID:           m.cfg.UID,
		TransportAddr: m.cfg.TransportAddr,
		APIAddr:       m.cfg.APIAddr,
		StartedAt:     m.cfg.StartedAt.UnixNano(),
		Roles:         m.cfg.Roles,
	})
	if err != nil || len(b) > limit {
		panic(fmt.Sprintf("cluster: member metadata does not fit memberlist's %d bytes (%d, %v)", limit, len(b), err))
	}
	return b
}

type namedState struct {
	Name  string `cbor:"1,keyasint"`
	State []byte `cbor:"2,keyasint"`
}

func (d *delegate) NotifyMsg(b []byte) {
	m := (*Membership)(d)
	var ns namedState
	if err := gossipDecMode.Unmarshal(b, &ns); err != nil {
		m.log.Warn("dropping a malformed gossip message", "err", err)
		return
	}
	m.mu.Lock()
	sd := m.states[ns.Name]
	m.mu.Unlock()
	if sd != nil {
		sd.MergeRemoteState(ns.State)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(join bool) []byte {
	m := (*Membership)(d)
	m.mu.Lock()
	states := make(map[string]StateDelegate, len(m.states))
	for k, v := range m.states {
		states[k] = v
	}
	m.mu.Unlock()
	all := make(map[string][]byte, len(states))
	for name, sd := range states {
		all[name] = sd.LocalState()
	}
	b, err := cbor.Marshal(all)
	if err != nil {
		m.log.Error("encoding local state", "err", err)
		return nil
	}
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	m := (*Membership)(d)
	if len(buf) == 0 {
		return
	}
	var all map[string][]byte
	if err := gossipDecMode.Unmarshal(buf, &all); err != nil {
		m.log.Warn("dropping malformed remote state", "err", err)
		return
	}
	for name, state := range all {
		m.mu.Lock()
		sd := m.states[name]
		m.mu.Unlock()
		if sd != nil {
			sd.MergeRemoteState(state)
		}
	}
}

// broadcast is one queued named state.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*broadcast)
	return ok && o.name == b.name
}
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
