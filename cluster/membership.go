package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/hashicorp/memberlist"
	"go.opentelemetry.io/otel/metric"

	"github.com/shardhost/shardhost/internal/netaddr"
	"github.com/shardhost/shardhost/internal/owner"
)

// Errors of membership.
var (
	ErrJoinFailed       = errors.New("cluster: could not join the cluster")
	errMalformedGossip  = errors.New("cluster: malformed membership gossip")
	ErrMembershipClosed = errors.New("cluster: membership shut down")
	ErrExited           = errors.New("cluster: this member is out of the cluster")
	ErrNoSuchMember     = errors.New("cluster: no such member")
	ErrBadGossipKey     = errors.New("cluster: gossip key must be 16, 24 or 32 bytes")
	// ErrBadMemberName: a MembershipConfig.Name that CheckMemberName refuses.
	ErrBadMemberName = errors.New("cluster: bad member name")
)

// StateDelegate lets a layer above membership share small state through memberlist.
// LocalState is sent to a peer in every push-pull exchange (at join, and periodically);
// MergeRemoteState receives what a peer sent, from push-pull or from Broadcast. Both are
// called from memberlist's goroutines, possibly concurrently, and must not block.
type StateDelegate interface {
	LocalState() []byte
	MergeRemoteState(state []byte)
}

// LeaveHook runs on a leaving member before the leader may move it to exiting: the
// sharding layer hands its shards off here. It should return within ctx.
type LeaveHook func(ctx context.Context) error

// Membership is this member's part in the cluster's membership: the lifecycle of the
// cluster specification (a Core) run by one goroutine, its messages carried by
// hashicorp/memberlist (streams for state, datagrams for heartbeats and status, push-pull
// for anti-entropy, the keyring for encryption). It is safe for concurrent use.
type Membership struct {
	cfg   MembershipConfig
	log   *slog.Logger
	self  UniqueAddress
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue

	inbox chan Message
	cmds  chan func(*Core)
	owner *owner.Group // owns the goroutines; Shutdown closes it
	done  chan struct{}
	sends chan struct{} // bounds the reliable sends in flight

	view          atomic.Pointer[View]
	ticks         atomic.Uint64                             // the core's ticks whose view is published (tests wait on them)
	phi           atomic.Pointer[map[UniqueAddress]float64] // of the monitored members, at the last tick
	leaderChanges metric.Int64Counter
	wire          atomic.Pointer[gossipWire]
	joinErr       atomic.Pointer[error] // the last failure to reach the seeds
	tlsGossip     *tlsGossipTransport   // when gossip runs over mutual TLS
	keyring       *memberlist.Keyring   // when gossip is encrypted
	hookOnce      sync.Once

	clock     *forwardClock // the core's clock when MembershipConfig.Now is set
	subMu     sync.Mutex
	subs      map[*Subscription]struct{}
	statesMu  sync.Mutex
	states    map[string]StateDelegate
	hooks     []LeaveHook
	closeOnce sync.Once
	// shutMu orders memberlist's Leave before its Shutdown (memberlist panics on a
	// Leave after Shutdown); shut is set once Shutdown has begun.
	shutMu sync.Mutex
	shut   bool
}

// NewMembership starts this member: gossip on BindAddr and the membership core, which
// joins the seeds (or starts a new cluster). Join waits for the outcome.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.Profile == "" {
		cfg.Profile = "lan"
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.Lifecycle.HeartbeatInterval == 0 {
		lc := DefaultCoreConfig()
		lc.Roles = cfg.Lifecycle.Roles
		cfg.Lifecycle = lc
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
	m := &Membership{
		cfg:    cfg,
		log:    cfg.Logger,
		inbox:  make(chan Message, 1024),
		cmds:   make(chan func(*Core), 64),
		owner:  owner.New(),
		done:   make(chan struct{}),
		sends:  make(chan struct{}, 32),
		subs:   map[*Subscription]struct{}{},
		states: map[string]StateDelegate{},
	}
	for name, d := range cfg.States {
		m.states[name] = d
	}
	if cfg.Now != nil {
		m.clock = &forwardClock{read: cfg.Now}
	}
	var mc *memberlist.Config
	if cfg.Profile == "local" {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
		if _, inmem := cfg.Transport.(*InmemGossipTransport); inmem {
			// Nothing leaves the process: compressing push-pull state (LZW) would only
			// cost CPU, ~13% of a fault-harness run's profile (faults/).
			mc.EnableCompression = false
		}
	} else {
		host, port, _ := splitHostPort(cfg.BindAddr)
		mc.BindAddr, mc.BindPort = host, port
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
		if cfg.TLS != nil {
			tt, err := newTLSGossipTransport(tlsGossipConfig{BindAddr: cfg.BindAddr, TLS: cfg.TLS, Logger: cfg.Logger})
			if err != nil {
				return nil, err
			}
			mc.Transport, m.tlsGossip = tt, tt
		}
	}
	if cfg.AdvertiseAddr != "" {
		host, port, _ := splitHostPort(cfg.AdvertiseAddr)
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	if len(cfg.GossipKey) > 0 {
		kr, err := memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKey)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadGossipKey, err)
		}
		mc.Keyring, m.keyring = kr, kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	name := cfg.AdvertiseAddr
	if name == "" {
		name = cfg.BindAddr
	}
	mc.Name = uniqueAddress(name, cfg.UID)
	mc.Delegate = (*delegate)(m)
	mc.Logger = slog.NewLogLogger(cfg.Logger.With("component", "memberlist").Handler(), slog.LevelDebug)
	m.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: mc.RetransmitMult, NumNodes: func() int {
		if v := m.view.Load(); v != nil && len(v.Members) > 0 {
			return len(v.Members)
		}
		return 1
	}}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if tt, ok := mc.Transport.(*tlsGossipTransport); ok {
			tt.Shutdown()
		}
		return nil, fmt.Errorf("cluster: starting gossip on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	m.self = UniqueAddress{Address: ml.LocalNode().Address(), UID: cfg.UID}

	lc := cfg.Lifecycle
	lc.Self = m.self
	lc.Roles = append([]string(nil), cfg.Roles...)
	lc.TransportAddr, lc.APIAddr, lc.Name = cfg.TransportAddr, cfg.APIAddr, cfg.Name
	lc.Seeds = append([]string(nil), cfg.Seeds...)
	lc.WaitForLeaveHooks = true
	if lc.RandomSeed == 0 {
		lc.RandomSeed = int64(cfg.UID)
	}
	core, err := NewCore(lc)
	if err != nil {
		ml.Shutdown()
		return nil, err
	}
	m.view.Store(&View{Self: m.self})
	m.instrument()
	m.owner.Go(func() { m.run(core) })
	if len(cfg.Seeds) > 0 {
		m.owner.Go(m.discover)
	}
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

// discover joins memberlist's own gossip (the carrier of push-pull state and
// broadcasts) through the seeds, retrying until this member is in the cluster or
// membership stops. A seed that answered may still not bring it in: it was this member
// itself (a seed list shared by every member), or a seed that stopped before it welcomed
// this member (a first seed that gave up joining the others and started again to form
// the cluster); so seeds are contacted again until a welcome arrives.
func (m *Membership) discover() {
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if m.view.Load().Joined {
			return
		}
		n, err := m.ml.Join(m.cfg.Seeds)
		if n > 0 {
			m.joinErr.Store(nil)
		}
		if n == 0 && err != nil {
			m.joinErr.Store(&err)
			if attempt == 0 || attempt%20 == 0 {
				m.log.Warn("cannot reach the seeds yet; retrying", "seeds", m.cfg.Seeds, "err", err)
			}
		}
		select {
		case <-m.owner.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// run owns the core: it ticks it, feeds it messages and commands, sends what it returns
// and publishes its view.
func (m *Membership) run(core *Core) {
	defer close(m.done)
	tick := time.NewTicker(m.cfg.TickInterval)
	defer tick.Stop()
	prev := View{Self: m.self}
	var lastVersion vectorClock
	publish := func() {
		v := core.View()
		m.view.Store(&v)
		if w, ok := core.gossipWire(); ok {
			m.wire.Store(&w)
			if w.Version.Compare(lastVersion) != orderSame {
				lastVersion = w.Version
				m.broadcastChange(w)
			}
		}
		m.publishDiff(prev, v)
		prev = v
	}
	publish()
	for {
		var outs []Outbound
		ticked := false
		select {
		case <-m.owner.Done():
			return
		case now := <-tick.C:
			ticked = true
			if m.clock != nil {
				now = m.clock.now()
			}
			outs = core.Tick(now)
			m.maintainGossipPeers(prev)
			phi := core.MonitoredPhi(now)
			m.phi.Store(&phi)
		case msg := <-m.inbox:
			outs = core.Step(m.Now(), msg)
		case cmd := <-m.cmds:
			cmd(core)
		}
		for _, o := range outs {
			m.send(o)
		}
		publish()
		if ticked {
			m.ticks.Add(1)
		}
	}
}

// broadcastChange queues a changed state on memberlist's broadcast queue, which
// piggybacks it on memberlist's own gossip to a few members per round (retransmitted
// log(N) times). A state too large for a datagram is left to the gossip rounds.
func (m *Membership) broadcastChange(w gossipWire) {
	state, err := cbor.Marshal(w)
	if err != nil || len(state) > maxBroadcastState {
		return
	}
	b, err := encodeUserMsg(userMsgState, namedState{Name: membershipState, State: state})
	if err != nil {
		return
	}
	m.queue.QueueBroadcast(&broadcast{name: membershipState, msg: b})
}

// maxBroadcastState is the largest membership state sent as a broadcast, in bytes:
// memberlist's datagrams are about 1400 bytes.
const maxBroadcastState = 1200

// maintainGossipPeers keeps memberlist's own member list (which carries push-pull and
// broadcasts) in step with the cluster: members memberlist lost, for instance after a
// partition healed, are joined again.
func (m *Membership) maintainGossipPeers(v View) {
	if !v.Joined || len(v.Members) == memberlistSize(m.ml) {
		return
	}
	known := map[string]bool{}
	for _, n := range m.ml.Members() {
		known[n.Name] = true
	}
	var missing []string
	for _, mem := range v.Members {
		if mem.Reachable && !known[mem.UniqueAddress()] && mem.Address != m.self.Address {
			missing = append(missing, mem.Address)
		}
	}
	if len(missing) > 0 && m.trySend() {
		m.owner.GoHeld(func() { // on run's goroutine
			defer func() { <-m.sends }()
			m.ml.Join(missing)
		})
	}
}

func memberlistSize(ml *memberlist.Memberlist) int { return ml.NumMembers() }

func (m *Membership) trySend() bool {
	select {
	case m.sends <- struct{}{}:
		return true
	default:
		return false
	}
}

// send carries one core message: datagrams for heartbeats and status (never blocking),
// a stream for state (on a bounded number of goroutines; over the bound it is dropped,
// as the next gossip round repairs it).
func (m *Membership) send(o Outbound) {
	if o.To.Address == "" {
		return
	}
	b, err := encodeUserMsg(userMsgMembership, o.Msg)
	if err != nil {
		m.log.Error("encoding a membership message", "err", err)
		return
	}
	addr := memberlist.Address{Addr: o.To.Address}
	if o.To.UID != 0 {
		addr.Name = o.To.String()
	}
	if !o.Reliable {
		if err := m.ml.SendToAddress(addr, b); err != nil {
			m.log.Debug("membership datagram not sent", "to", o.To, "err", err)
		}
		return
	}
	if !m.trySend() {
		m.log.Debug("membership stream dropped: too many in flight", "to", o.To)
		return
	}
	m.owner.GoHeld(func() { // send runs on run's goroutine
		defer func() { <-m.sends }()
		host, port, err := splitHostPort(addr.Addr)
		if err != nil {
			return
		}
		ip := net.ParseIP(host)
		if ip == nil {
			// A seed given by name (--join n1:7946): looked up at each join
			// attempt, since the name may move to another address (a restarted
			// container).
			if ip, err = netaddr.LookupIP(host); err != nil {
				m.log.Debug("membership stream not sent", "to", o.To, "err", err)
				return
			}
		}
		node := &memberlist.Node{Name: addr.Name, Addr: ip, Port: uint16(port)}
		if err := m.ml.SendReliable(node, b); err != nil {
			m.log.Debug("membership stream not sent", "to", o.To, "err", err)
		}
	})
}

// publishDiff turns the difference between two views into events.
func (m *Membership) publishDiff(prev, next View) {
	var events []MemberEvent
	before := map[UniqueAddress]Member{}
	for _, mem := range prev.Members {
		before[mem.Node()] = mem
	}
	after := map[UniqueAddress]bool{}
	for _, mem := range next.Members {
		after[mem.Node()] = true
		old, existed := before[mem.Node()]
		if !existed || old.Status != mem.Status {
			kind := map[MemberStatus]EventKind{StatusJoining: MemberJoined, StatusUp: MemberUp, StatusLeaving: MemberLeft,
				StatusExiting: MemberExited, StatusDown: MemberDowned}[mem.Status]
			if kind != 0 {
				events = append(events, MemberEvent{Kind: kind, Member: mem})
			}
		}
		if existed && old.Reachable != mem.Reachable {
			kind := ReachableMember
			if !mem.Reachable {
				kind = UnreachableMember
			}
			events = append(events, MemberEvent{Kind: kind, Member: mem})
		}
	}
	for node, mem := range before {
		if !after[node] {
			mem.Status, mem.Reachable = StatusRemoved, false
			events = append(events, MemberEvent{Kind: MemberRemoved, Member: mem})
		}
	}
	if prev.Leader != next.Leader {
		if next.HasLeader {
			m.leaderChanges.Add(context.Background(), 1)
		}
		var leader Member
		for _, mem := range next.Members {
			if mem.Node() == next.Leader {
				leader = mem
			}
		}
		events = append(events, MemberEvent{Kind: LeaderChanged, Member: leader})
	}
	if prev.Converged != next.Converged {
		events = append(events, MemberEvent{Kind: ConvergenceChanged, Converged: next.Converged})
	}
	if !prev.Exited && next.Exited {
		events = append(events, MemberEvent{Kind: SelfExited, Reason: next.ExitReason})
		if next.ExitReason == ReasonLeft { // a leave asked for: expected
			m.log.Info("this member left the cluster")
		} else {
			m.log.Warn("this member is out of the cluster", "reason", next.ExitReason)
		}
	}
	if self, ok := m.selfIn(next); ok && self.Status == StatusLeaving {
		m.hookOnce.Do(func() { m.runLeaveHooks() })
	}
	for _, e := range events {
		if e.Kind != SelfExited && e.Kind != ConvergenceChanged {
			m.log.Info("membership: "+e.Kind.String(), memberEventAttrs(e)...)
		}
	}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for s := range m.subs {
		for _, e := range events {
			s.deliver(e)
		}
	}
}

// memberEventAttrs are the attributes of e's log record: its member's address, UID
// and status, or leader=none for a LeaderChanged to no leader (a zero Member, whose
// UID and status would print as 0000000000000000 and status(0)).
func memberEventAttrs(e MemberEvent) []any {
	if e.Kind == LeaderChanged && e.Member.Address == "" {
		return []any{"leader", "none"}
	}
	return []any{"member", e.Member.Address, "uid", e.Member.UID, "status", e.Member.Status}
}

func (m *Membership) selfIn(v View) (Member, bool) {
	for _, mem := range v.Members {
		if mem.Node() == m.self {
			return mem, true
		}
	}
	return Member{}, false
}

// runLeaveHooks runs the leave hooks on a goroutine and then tells the core this member
// is ready to exit. It starts when the member sees itself leaving, whoever asked.
func (m *Membership) runLeaveHooks() {
	m.statesMu.Lock()
	hooks := append([]LeaveHook(nil), m.hooks...)
	m.statesMu.Unlock()
	m.owner.Go(func() {
		ctx, cancel := context.WithTimeout(m.owner.Context(), 30*time.Second)
		defer cancel()
		for _, h := range hooks {
			if err := h(ctx); err != nil {
				m.log.Warn("leave hook failed; leaving anyway", "err", err)
			}
		}
		m.do(func(c *Core) { c.ReadyToExit() })
	})
}

// do runs f on the core's goroutine and waits for it; false if membership has stopped.
func (m *Membership) do(f func(*Core)) bool {
	ran := make(chan struct{})
	select {
	case m.cmds <- func(c *Core) { f(c); close(ran) }:
	case <-m.done:
		return false
	}
	select {
	case <-ran:
		return true
	case <-m.done:
		return false
	}
}

// Self returns this member as the current view has it (status joining until the
// cluster has taken it in).
func (m *Membership) Self() Member {
	if mem, ok := m.selfIn(*m.view.Load()); ok {
		return mem
	}
	return Member{Address: m.self.Address, UID: m.self.UID, TransportAddr: m.cfg.TransportAddr, APIAddr: m.cfg.APIAddr, Name: m.cfg.Name,
		Roles: append([]string{}, m.cfg.Roles...), Status: StatusJoining, Reachable: true}
}

// View returns the current picture of the cluster: members, leader, convergence.
func (m *Membership) View() View { return *m.view.Load() }

// Now reads the clock the membership core runs on (MembershipConfig.Now): the clock of
// View.MajorityContact, against which a hosting lease is measured. Without a Now hook
// it is time.Now.
func (m *Membership) Now() time.Time {
	if m.clock != nil {
		return m.clock.now()
	}
	return time.Now()
}

// Since is Now().Sub(t), with one read of the monotonic clock (time.Since) where Now
// makes two, when there is no Now hook: the hosting lease is checked twice for every
// message an entity handles.
func (m *Membership) Since(t time.Time) time.Duration {
	if m.clock != nil {
		return m.clock.now().Sub(t)
	}
	return time.Since(t)
}

// forwardClock passes on every advance of a clock and none of its steps back: a
// reading before the previous one leaves the time where it was, and the readings after
// it advance from there. The core measures intervals (heartbeats, gossip rounds, the
// failure detector, the resolver's stable-after, the majority contact), which a clock
// set back would stall or stretch; time.Now's monotonic reading never steps back
// either. A step forward is passed on: to the core, a pause of that length.
type forwardClock struct {
	read func() time.Time
	mu   sync.Mutex
	last time.Time // the latest reading of read
	cur  time.Time // the time passed on
}

func (c *forwardClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.read()
	switch {
	case c.cur.IsZero():
		c.cur = r
	case r.After(c.last):
		c.cur = c.cur.Add(r.Sub(c.last))
	}
	c.last = r
	return c.cur
}

// Members returns the members (every status but removed), sorted by address.
func (m *Membership) Members() []Member { return append([]Member(nil), m.view.Load().Members...) }

// Member returns the member at a gossip address. If two incarnations are listed (a
// restarted process whose old incarnation is not removed yet), the one in the earlier
// lifecycle status is returned: the live one (View.Member, O(log members)).
func (m *Membership) Member(address string) (Member, bool) { return m.view.Load().Member(address) }

// Join waits until this member is in the cluster (welcomed by a seed, or the first
// member), or ctx ends. The error wraps ErrJoinFailed.
func (m *Membership) Join(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		v := m.view.Load()
		if v.Joined {
			return nil
		}
		select {
		case <-ctx.Done():
			if last := m.joinErr.Load(); last != nil {
				return fmt.Errorf("%w through %v: %v (last attempt: %v)", ErrJoinFailed, m.cfg.Seeds, ctx.Err(), oneLineErr(*last))
			}
			return fmt.Errorf("%w through %v: %v", ErrJoinFailed, m.cfg.Seeds, ctx.Err())
		case <-m.done:
			return ErrMembershipClosed
		case <-t.C:
		}
	}
}

// WaitUp waits until this member's status is up, or ctx ends.
func (m *Membership) WaitUp(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if self, ok := m.selfIn(*m.view.Load()); ok && self.Status == StatusUp {
			return nil
		}
		if m.view.Load().Exited {
			return ErrExited
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not up: %w", ctx.Err())
		case <-m.done:
			return ErrMembershipClosed
		case <-t.C:
		}
	}
}

// Subscribe returns a subscription whose channel holds up to buffer events. The current
// members are delivered first, as MemberUp (or their status's) events, as far as they fit.
func (m *Membership) Subscribe(buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	c := make(chan MemberEvent, buffer)
	s := &Subscription{C: c, c: c, m: m}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for _, mem := range m.view.Load().Members {
		if mem.Status == StatusUp {
			s.deliver(MemberEvent{Kind: MemberUp, Member: mem})
		}
	}
	m.subs[s] = struct{}{}
	return s
}

// RegisterState registers a named state delegate. It takes part in push-pulls from now
// on; to be in the first one, at join, give it in MembershipConfig.States.
func (m *Membership) RegisterState(name string, d StateDelegate) {
	m.statesMu.Lock()
	defer m.statesMu.Unlock()
	m.states[name] = d
}

// RegisterLeaveHook adds a hook that runs when this member leaves, before it exits.
func (m *Membership) RegisterLeaveHook(h LeaveHook) {
	m.statesMu.Lock()
	defer m.statesMu.Unlock()
	m.hooks = append(m.hooks, h)
}

// Broadcast gossips state for the named delegate to every member, best effort (UDP
// gossip, retransmitted a few times; push-pull repairs what is lost). A newer broadcast
// for the same name replaces one still queued. States larger than a gossip packet (about
// 1 KiB) only travel by push-pull.
func (m *Membership) Broadcast(name string, state []byte) {
	b, err := encodeUserMsg(userMsgState, namedState{Name: name, State: state})
	if err != nil {
		m.log.Error("encoding a broadcast", "name", name, "err", err)
		return
	}
	m.queue.QueueBroadcast(&broadcast{name: name, msg: b})
}

// LeaveMember marks the member at address leaving; it hands off and exits. The error
// wraps ErrNoSuchMember if no member there can leave.
func (m *Membership) LeaveMember(address string) error {
	ok := false
	if !m.do(func(c *Core) { ok = c.Leave(address) }) {
		return ErrMembershipClosed
	}
	if !ok {
		return fmt.Errorf("%w: no joining or up member at %s", ErrNoSuchMember, address)
	}
	return nil
}

// DownMember marks the member at address down: an operator's decision. The error wraps
// ErrNoSuchMember if there is none.
func (m *Membership) DownMember(address string) error {
	ok := false
	if !m.do(func(c *Core) { ok = c.Down(address) }) {
		return ErrMembershipClosed
	}
	if !ok {
		return fmt.Errorf("%w: no member to down at %s", ErrNoSuchMember, address)
	}
	return nil
}

// Leave leaves the cluster gracefully: this member becomes leaving, its leave hooks
// run, the leader moves it to exiting and then removes it. It waits for that (or ctx),
// then shuts gossip down.
func (m *Membership) Leave(ctx context.Context) error {
	if v := m.view.Load(); v.Joined && !v.Exited {
		m.do(func(c *Core) { c.Leave(m.self.Address) })
		t := time.NewTicker(20 * time.Millisecond)
	wait:
		for {
			if m.view.Load().Exited {
				break
			}
			select {
			case <-ctx.Done():
				break wait
			case <-m.done:
				break wait
			case <-t.C:
			}
		}
		t.Stop()
	}
	// Tell every reachable member the final state (this member exiting), and wait for
	// the sends a little, so that nobody waits for news of it; then stop.
	var outs []Outbound
	m.do(func(c *Core) { outs = c.gossipToAll() })
	m.sendAndWait(outs, time.Second)
	m.shutMu.Lock()
	if !m.shut { // not shut down meanwhile (a downed member's exit, a concurrent Shutdown)
		_ = m.ml.Leave(500 * time.Millisecond)
	}
	m.shutMu.Unlock()
	return m.Shutdown()
}

// sendAndWait sends messages on streams and waits for them, at most timeout. The sends
// run on the membership's goroutines: one that outlasts the wait is waited for by
// Shutdown, as send's are.
func (m *Membership) sendAndWait(outs []Outbound, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, o := range outs {
		b, err := encodeUserMsg(userMsgMembership, o.Msg)
		if err != nil {
			continue
		}
		host, port, err := splitHostPort(o.To.Address)
		if err != nil {
			continue
		}
		node := &memberlist.Node{Name: o.To.String(), Addr: net.ParseIP(host), Port: uint16(port)}
		wg.Add(1)
		if !m.owner.Go(func() {
			defer wg.Done()
			m.ml.SendReliable(node, b)
		}) {
			wg.Done() // shut down meanwhile: nothing more goes out
		}
	}
	done := make(chan struct{})
	if !m.owner.Go(func() { wg.Wait(); close(done) }) {
		return
	}
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// Shutdown stops at once, without telling the others (they see a crash). Idempotent.
func (m *Membership) Shutdown() error {
	var err error
	m.closeOnce.Do(func() {
		m.shutMu.Lock()
		m.shut = true
		m.shutMu.Unlock()
		m.owner.Close()
		err = m.ml.Shutdown()
		m.owner.Wait()
	})
	return err
}

// Done is closed when the membership has stopped.
func (m *Membership) Done() <-chan struct{} { return m.done }
