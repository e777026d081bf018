package cluster

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// CoreConfig configures the membership core of one member.
type CoreConfig struct {
	// Self is this member's unique address; its metadata follows.
	Self          UniqueAddress
	Roles         []string
	TransportAddr string
	APIAddr       string
	// Name is this member's stable name (Member.Name); "" for none. A member that joins
	// with the name of a member not down downs that member: a new incarnation of it.
	Name string
	// Seeds are addresses to send Join to. None: this member starts a new cluster by
	// joining itself.
	Seeds []string
	// MinMembers holds joining members in joining until at least this many members
	// (joining or up) are in the cluster (Akka's min-nr-of-members). Default 1.
	MinMembers int
	// MinMembersOfRole is the same per role.
	MinMembersOfRole map[string]int
	// HeartbeatInterval is how often a member heartbeats the members it monitors.
	// Default 1 s.
	HeartbeatInterval time.Duration
	// MonitoredByNrOfMembers is how many members watch each member. Default 5.
	MonitoredByNrOfMembers int
	// FailureDetector configures each monitored member's phi accrual detector.
	FailureDetector PhiAccrualConfig
	// GossipInterval is the period of gossip rounds (a third of it while fewer than
	// half the members have seen the current state). Default 1 s.
	GossipInterval time.Duration
	// GossipDifferentViewProbability is the chance that a round, when the cluster has
	// not converged, picks a member that has not seen the current state. Default 0.8.
	GossipDifferentViewProbability float64
	// SBRStrategy and SBRQuorumSize configure the split brain resolver; it acts on the
	// leader once the set of unreachable members has not changed for SBRStableAfter.
	// Default keep-majority, 5 s.
	SBRStrategy    SBRStrategy
	SBRQuorumSize  int
	SBRStableAfter time.Duration
	// JoinRetryInterval is how often Join is sent to the seeds until a Welcome comes.
	// Default 1 s.
	JoinRetryInterval time.Duration
	// TombstoneTTL is how long removed members are remembered. Default 24 h.
	TombstoneTTL time.Duration
	// RandomSeed seeds the choice of gossip targets (tests use a fixed one).
	RandomSeed int64
	// WaitForLeaveHooks makes the leader move a leaving member to exiting only once
	// that member has reported its leave hooks done (ReadyToExit). The Membership
	// wrapper sets it; a bare core leaves at once.
	WaitForLeaveHooks bool
}

// DefaultCoreConfig returns the defaults described on CoreConfig, without Self.
func DefaultCoreConfig() CoreConfig {
	return CoreConfig{
		MinMembers:                     1,
		HeartbeatInterval:              time.Second,
		MonitoredByNrOfMembers:         5,
		FailureDetector:                DefaultPhiAccrualConfig(),
		GossipInterval:                 time.Second,
		GossipDifferentViewProbability: 0.8,
		SBRStrategy:                    KeepMajority,
		SBRStableAfter:                 5 * time.Second,
		JoinRetryInterval:              time.Second,
		TombstoneTTL:                   24 * time.Hour,
		RandomSeed:                     time.Now().UnixNano(),
	}
}

// DefaultLocalCoreConfig is a fast profile for one machine and tests: heartbeats every
// 200 ms, an acceptable pause of 600 ms, gossip every 200 ms and a resolver that acts
// after 1 s of stability. A crash is seen within about a second.
func DefaultLocalCoreConfig() CoreConfig {
	c := DefaultCoreConfig()
	c.HeartbeatInterval = 200 * time.Millisecond
	c.FailureDetector.AcceptableHeartbeatPause = 600 * time.Millisecond
	c.FailureDetector.FirstHeartbeatEstimate = 200 * time.Millisecond
	c.FailureDetector.MinStdDeviation = 50 * time.Millisecond
	c.GossipInterval = 200 * time.Millisecond
	c.SBRStableAfter = time.Second
	c.JoinRetryInterval = 200 * time.Millisecond
	return c
}

// Validate reports a configuration that cannot work.
func (c CoreConfig) Validate() error {
	switch {
	case c.Self.Address == "" || c.Self.UID == 0:
		return fmt.Errorf("cluster: self address and UID are required")
	case c.MinMembers < 1:
		return fmt.Errorf("cluster: min members must be at least 1, got %d", c.MinMembers)
	case c.HeartbeatInterval <= 0 || c.GossipInterval <= 0 || c.JoinRetryInterval <= 0 || c.SBRStableAfter <= 0:
		return fmt.Errorf("cluster: intervals must be positive")
	case c.MonitoredByNrOfMembers < 1:
		return fmt.Errorf("cluster: a member must be monitored by at least 1 other")
	case c.FailureDetector.Threshold <= 0 || c.FailureDetector.MaxSampleSize < 2:
		return fmt.Errorf("cluster: bad failure detector settings %+v", c.FailureDetector)
	case c.SBRStrategy == StaticQuorum && c.SBRQuorumSize < 1:
		return fmt.Errorf("cluster: static-quorum needs a quorum size")
	}
	if _, err := ParseSBRStrategy(string(c.SBRStrategy)); err != nil {
		return err
	}
	for role, n := range c.MinMembersOfRole {
		if n < 1 {
			return fmt.Errorf("cluster: min members of role %s must be at least 1", role)
		}
	}
	return nil
}

// messageKind is the kind of a membership message between members.
type messageKind uint8

const (
	msgJoin messageKind = iota + 1
	msgWelcome
	msgGossip
	msgGossipStatus
	msgHeartbeat
	msgHeartbeatRsp
	// msgContact and msgContactRsp are the heartbeats for contact only
	// (contactReceivers), in a form of their own: the request names its sender by UID
	// alone (FromUID) and carries a number (Seq) that names the request among all this
	// sender's contact requests; the answer carries only that number. 19 and 9 bytes
	// at most (a random UID, a number below 2³²) where a heartbeat and its answer are
	// about 33 each: at 1,000 members, about 500 of each a second per member.
	msgContact
	msgContactRsp
)

// Message is what the Cores of members send each other. Its content is the core's
// business: carry it with EncodeMessage and DecodeMessage.
type Message struct {
	Kind messageKind `cbor:"1,keyasint"`
	// From is the sender; the zero value (left out of the encoding) in msgContact and
	// msgContactRsp.
	From UniqueAddress `cbor:"2,keyasint,omitempty"`
	// Joiner is the joining member (msgJoin).
	Joiner *gossipMember `cbor:"3,keyasint,omitempty"`
	// Gossip is the full state (msgWelcome, msgGossip).
	Gossip *gossipWire `cbor:"4,keyasint,omitempty"`
	// Version and Seen summarise the state (msgGossipStatus).
	Version vectorClock     `cbor:"5,keyasint,omitempty"`
	Seen    []UniqueAddress `cbor:"6,keyasint,omitempty"`
	// Seq numbers heartbeats.
	Seq uint64 `cbor:"7,keyasint,omitempty"`
	// SeenBits is the seen set of a status as one bit per member of the state, in
	// address order (bit i of byte i/8, lowest first), sent instead of Seen: it means
	// something only to a member whose state has the same version, which holds the
	// same members. n/8 bytes rather than every seen member's address: the status is
	// most of the gossip at rest (docs/scale.md). Members that know only Seen ignore
	// it and answer with their own status.
	SeenBits []byte `cbor:"8,keyasint,omitempty"`
	// FromUID is the sender of a msgContact, by UID: the receiver finds its address
	// among the members of its state (none, or two with that UID: no answer).
	FromUID UID `cbor:"9,keyasint,omitempty"`
}

// Outbound is a message a Core asks its caller to send: to a member's address
// (To.Address; To.UID may be 0 for a seed). Reliable asks for a stream (ordered,
// retried) rather than a datagram; a datagram may be lost.
type Outbound struct {
	To       UniqueAddress
	Msg      Message
	Reliable bool
}

// Core is the membership of the cluster specification for one member, as a pure state
// machine: the caller feeds it time (Tick) and messages from other members (Step), and
// sends the messages they return (EncodeMessage; the receiver's DecodeMessage, then
// Step). Membership drives one over memberlist; another transport can drive it the same
// way. It is not safe for concurrent use; one goroutine owns it.
type Core struct {
	cfg    CoreConfig
	rng    *rand.Rand
	gossip gossipState
	joined bool

	detectors     map[UniqueAddress]*phiDetector
	hbSeq         uint64
	lastHeartbeat time.Time
	// hbSent is when each of the recent heartbeat rounds (by Seq) was sent, and
	// contact, per member, when the newest round that member answered was sent: a
	// round trip proves contact as of its request, not its response (a response may
	// have been delayed). MajorityContact is computed from them.
	hbSent  map[uint64]time.Time
	contact map[UniqueAddress]time.Time
	// contactRounds are the recent rounds of contact requests (msgContact), round
	// hbSeq at hbSeq % maxHeartbeatRounds: an answer carries only its request's
	// number, which names the round and the member it went to. contactNext is the
	// number of the next request.
	contactRounds [maxHeartbeatRounds]contactRound
	contactNext   uint64
	// ring is the heartbeat ring of the members in ringSet (heartbeatRing).
	ring    heartbeatRing
	ringSet map[UniqueAddress]struct{}
	// nodes are the members of nodeSet in order (sortedNodes); nodesOf is the members
	// map they were last found equal to.
	nodes   []UniqueAddress
	nodeSet map[UniqueAddress]struct{}
	nodesOf map[UniqueAddress]gossipMember
	// byUID finds the members of nodes by UID (a contact request's sender); a UID
	// that two members share maps to the zero UniqueAddress.
	byUID map[UID]UniqueAddress
	// derived holds what is computed from the state on every tick (derivedState).
	derived derived
	// lastNow is the time of the latest Tick or Step: self's own contact.
	lastNow    time.Time
	lastGossip time.Time
	lastJoin   time.Time

	// The split brain resolver acts once the view has been stable for SBRStableAfter.
	sbrSignature string
	sbrSince     time.Time

	exited     bool
	exitReason string
	// sawLeaving: this member has seen itself leaving, so a removal it hears of next
	// ends a graceful leave (the exiting status may have passed it by).
	sawLeaving bool
}

// NewCore returns the core of a member that is not yet in a cluster.
func NewCore(cfg CoreConfig) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{
		cfg:       cfg,
		rng:       rand.New(rand.NewSource(cfg.RandomSeed)),
		gossip:    emptyGossip(),
		detectors: map[UniqueAddress]*phiDetector{},
		hbSent:    map[uint64]time.Time{},
		contact:   map[UniqueAddress]time.Time{},
		// Request numbers from 1: a number below 2³² encodes in at most 5 bytes, and
		// 0 is what an answer without one decodes to.
		contactNext: 1,
	}, nil
}

func (c *Core) self() UniqueAddress { return c.cfg.Self }

func (c *Core) selfMember() gossipMember {
	return gossipMember{Node: c.cfg.Self, Status: StatusJoining, Roles: append([]string(nil), c.cfg.Roles...),
		TransportAddr: c.cfg.TransportAddr, APIAddr: c.cfg.APIAddr, Name: c.cfg.Name}
}

// Tick advances the core to now: joining, heartbeats and reachability, leader actions,
// the split brain resolver and gossip rounds. It returns the messages to send.
func (c *Core) Tick(now time.Time) []Outbound {
	c.lastNow = now
	if c.exited {
		return nil
	}
	if !c.joined {
		return c.tryJoin(now)
	}
	var out []Outbound
	out = append(out, c.heartbeats(now)...)
	c.checkReachability(now)
	c.leaderActions(now)
	c.resolveSplitBrain(now)
	c.pruneTombstones(now)
	c.checkSelf()
	switch {
	case !c.exited:
		out = append(out, c.gossipRound(now)...)
	case c.exitReason == ReasonLeft:
		// A leaving member that is the leader moves itself to exiting in its leader
		// actions and exits in the same tick: unless it tells the others, they keep it
		// as leaving and, once its process stops, unreachable, until their resolver
		// downs it (Akka's exiting member waits for ExitingConfirmed for the same
		// reason). Its last state goes to every member it reaches.
		out = append(out, c.gossipToAll()...)
	}
	return out
}

func (c *Core) tryJoin(now time.Time) []Outbound {
	if len(c.cfg.Seeds) == 0 {
		// A member without seeds starts a new cluster: it joins itself.
		g := emptyGossip()
		g.members[c.self()] = c.selfMember()
		c.gossip = g.changed(c.self())
		c.joined = true
		return nil
	}
	if !c.lastJoin.IsZero() && now.Sub(c.lastJoin) < c.cfg.JoinRetryInterval {
		return nil
	}
	c.lastJoin = now
	me := c.selfMember()
	var out []Outbound
	for _, seed := range c.cfg.Seeds {
		if seed == c.self().Address {
			continue
		}
		out = append(out, Outbound{To: UniqueAddress{Address: seed}, Msg: Message{Kind: msgJoin, From: c.self(), Joiner: &me}, Reliable: true})
	}
	return out
}

// gossipTargets are the members gossip goes to: every member of the state other than
// self that this member itself sees reachable, in address order, whatever others observe
// (Akka's validNodeForGossip). A member cut off from some sees them unreachable, and its
// observations, gossiped, must not stop those from gossiping with each other: they
// would never again agree on a state, and the resolver decides only on a state its side
// has seen. (Heartbeats choose their own targets on the monitoring ring.)
func (c *Core) gossipTargets() []UniqueAddress {
	mine := map[UniqueAddress]bool{}
	for _, s := range c.gossip.reachability[c.self()].Unreachable {
		mine[s] = true
	}
	var out []UniqueAddress
	for _, n := range c.sortedNodes() {
		if n != c.self() && !mine[n] {
			out = append(out, n)
		}
	}
	return out
}

// sortedNodes returns the members' unique addresses in order, sorted again only when
// the set of members has changed (a sorted copy of the members on every gossip round
// was most of a round's CPU, docs/scale.md). The caller must not change the slice.
func (c *Core) sortedNodes() []UniqueAddress {
	if c.nodesOf != nil && sameMap(c.nodesOf, c.gossip.members) {
		return c.nodes
	}
	c.nodesOf = c.gossip.members
	same := c.nodeSet != nil && len(c.nodeSet) == len(c.gossip.members)
	if same {
		for n := range c.gossip.members {
			if _, same = c.nodeSet[n]; !same {
				break
			}
		}
	}
	if same {
		return c.nodes
	}
	c.nodes = make([]UniqueAddress, 0, len(c.gossip.members))
	c.nodeSet = make(map[UniqueAddress]struct{}, len(c.gossip.members))
	c.byUID = make(map[UID]UniqueAddress, len(c.gossip.members))
	for n := range c.gossip.members {
		c.nodes = append(c.nodes, n)
		c.nodeSet[n] = struct{}{}
		if _, dup := c.byUID[n.UID]; dup {
			c.byUID[n.UID] = UniqueAddress{}
		} else {
			c.byUID[n.UID] = n
		}
	}
	slices.SortFunc(c.nodes, UniqueAddress.compare)
	return c.nodes
}

func (c *Core) heartbeats(now time.Time) []Outbound {
	if !c.lastHeartbeat.IsZero() && now.Sub(c.lastHeartbeat) < c.cfg.HeartbeatInterval {
		return nil
	}
	c.lastHeartbeat = now
	unreachable := c.derivedState().unreachable
	ring := c.heartbeatRing()
	receivers := ring.receivers(c.self(), c.cfg.MonitoredByNrOfMembers, unreachable)
	keep := map[UniqueAddress]bool{}
	c.hbSeq++
	c.hbSent[c.hbSeq] = now
	delete(c.hbSent, c.hbSeq-maxHeartbeatRounds) // a response later than that proves nothing recent
	var out []Outbound
	for _, r := range receivers {
		keep[r] = true
		if c.detectors[r] == nil {
			// Akka's first heartbeat trigger: a member that never answers becomes
			// unreachable as if it had answered once, now.
			d := newPhiDetector(c.cfg.FailureDetector)
			d.heartbeat(now)
			c.detectors[r] = d
		}
		out = append(out, Outbound{To: r, Msg: Message{Kind: msgHeartbeat, From: c.self(), Seq: c.hbSeq}})
	}
	answered := c.answeredLastRound()
	round := &c.contactRounds[c.hbSeq%maxHeartbeatRounds]
	round.sent, round.first, round.ring, round.monitored = now, c.contactNext, ring.nodes, receivers
	round.idx = c.contactReceivers(ring, receivers, unreachable, answered, round.idx[:0])
	for _, i := range round.idx {
		out = append(out, Outbound{To: ring.nodes[i], Msg: Message{Kind: msgContact, FromUID: c.self().UID, Seq: c.contactNext}})
		c.contactNext++
	}
	for n := range c.detectors {
		if !keep[n] {
			delete(c.detectors, n)
		}
	}
	for n := range c.contact {
		if _, ok := c.gossip.members[n]; !ok {
			delete(c.contact, n)
		}
	}
	return out
}

// derived is what Tick and View compute from the state: the unreachable set, the
// leader and convergence as self sees them, for the state whose maps it names.
type derived struct {
	members      map[UniqueAddress]gossipMember
	reachability map[UniqueAddress]observerRecord
	seen         map[UniqueAddress]bool

	unreachable map[UniqueAddress]bool // read only
	// unreachableFor is unreachableSetFor(self), computed when first asked; read only.
	unreachableFor map[UniqueAddress]bool
	leader         UniqueAddress
	hasLeader      bool
	converged      bool
	// speedUp is Core.speedUp's answer for this state, once speedUpKnown.
	speedUp, speedUpKnown bool
	// sbrSignature is resolveSplitBrain's signature of this state, once
	// sbrSignatureKnown.
	sbrSignature      string
	sbrSignatureKnown bool
}

// derivedState returns the unreachable set, the leader and convergence of the current
// state, computed again only when the state has changed. States are never changed in
// place (every change makes new maps), so the same maps are the same state; the cache
// holds them, so their memory is not reused for another state. Each is O(members),
// and every tick asked for them several times: at 300 members the leader alone was a
// seventh of the CPU (docs/scale.md).
func (c *Core) derivedState() *derived {
	d := &c.derived
	g := c.gossip
	if d.members != nil && sameMap(d.members, g.members) && sameMap(d.reachability, g.reachability) && sameMap(d.seen, g.seen) {
		return d
	}
	*d = derived{members: g.members, reachability: g.reachability, seen: g.seen, unreachable: g.unreachableSet()}
	d.leader, d.hasLeader = g.leaderGiven(c.self(), d.unreachable)
	d.converged = g.convergedGiven(c.self(), d.unreachable)
	return d
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// heartbeatRing returns the ring of the members that are not down, built again only
// when that set has changed: sorting it on every heartbeat round cost each member
// O(n log n) a second (docs/scale.md).
func (c *Core) heartbeatRing() heartbeatRing {
	count, same := 0, c.ringSet != nil
	for n, m := range c.gossip.members {
		if m.Status == StatusDown {
			continue
		}
		count++
		if same {
			_, same = c.ringSet[n]
		}
	}
	if same && count == len(c.ringSet) {
		return c.ring
	}
	nodes := make([]UniqueAddress, 0, count)
	set := make(map[UniqueAddress]struct{}, count)
	for n, m := range c.gossip.members {
		if m.Status != StatusDown {
			nodes = append(nodes, n)
			set[n] = struct{}{}
		}
	}
	c.ring, c.ringSet = newHeartbeatRing(nodes), set
	return c.ring
}

// checkReachability updates self's reachability record from the failure detectors.
func (c *Core) checkReachability(now time.Time) {
	rec := c.gossip.reachability[c.self()]
	mine := map[UniqueAddress]bool{}
	for _, s := range rec.Unreachable {
		mine[s] = true
	}
	changed := false
	for n, d := range c.detectors {
		avail := d.available(now)
		if !avail && !mine[n] {
			mine[n], changed = true, true
		} else if avail && mine[n] {
			delete(mine, n)
			changed = true
		}
	}
	for n := range mine {
		if _, ok := c.gossip.members[n]; !ok {
			delete(mine, n)
			changed = true
		} else if _, watched := c.detectors[n]; !watched {
			// No longer monitored by self (the ring changed): self's verdict lapses.
			delete(mine, n)
			changed = true
		}
	}
	if !changed {
		return
	}
	g := c.gossip.changed(c.self())
	g.reachability[c.self()] = observerRecord{Version: rec.Version + 1, Unreachable: sortedSet(mine)}
	c.gossip = g
}

// leaderActions are the leader's duties, done only on convergence: joining → up (when
// the minimum number of members is there), leaving → exiting, exiting → removed and
// down → removed.
func (c *Core) leaderActions(now time.Time) {
	d := c.derivedState()
	if !d.hasLeader || d.leader != c.self() || !d.converged {
		return
	}
	g := c.gossip
	changed := false
	upNumber := 0
	for _, m := range g.members {
		if m.UpNumber > upNumber {
			upNumber = m.UpNumber
		}
	}
	minFulfilled := c.minMembersFulfilled()
	var next gossipState
	ensure := func() {
		if !changed {
			next = g.changed(c.self())
			changed = true
		}
	}
	for _, m := range g.sortedMembers() {
		switch {
		case m.Status == StatusJoining && minFulfilled:
			ensure()
			upNumber++
			m.Status, m.UpNumber = StatusUp, upNumber
			next.members[m.Node] = m
		case m.Status == StatusLeaving && (m.ReadyToExit || !c.cfg.WaitForLeaveHooks):
			ensure()
			m.Status = StatusExiting
			next.members[m.Node] = m
		case m.Status == StatusExiting || m.Status == StatusDown:
			if m.Node == c.self() {
				continue // a leader never removes itself; the next leader does
			}
			ensure()
			delete(next.members, m.Node)
			delete(next.seen, m.Node)
			delete(next.reachability, m.Node)
			next.tombstones[m.Node] = now.UnixNano()
		}
	}
	if changed {
		next.reachability = pruneSubjects(next.reachability, next.tombstones)
		c.gossip = next
	}
}

func pruneSubjects(r map[UniqueAddress]observerRecord, tombstones map[UniqueAddress]int64) map[UniqueAddress]observerRecord {
	for obs, rec := range r {
		r[obs] = observerRecord{Version: rec.Version, Unreachable: withoutTombstoned(rec.Unreachable, tombstones)}
	}
	return r
}

func (c *Core) minMembersFulfilled() bool {
	count := 0
	perRole := map[string]int{}
	for _, m := range c.gossip.members {
		if m.Status == StatusJoining || m.Status == StatusUp {
			count++
			for _, r := range m.Roles {
				perRole[r]++
			}
		}
	}
	if count < c.cfg.MinMembers {
		return false
	}
	for role, n := range c.cfg.MinMembersOfRole {
		if perRole[role] < n {
			return false
		}
	}
	return true
}

// resolveSplitBrain runs the split brain resolver on the leader once the unreachable
// set has been stable for SBRStableAfter. Only it (or an operator) ever downs a member.
func (c *Core) resolveSplitBrain(now time.Time) {
	d := c.derivedState()
	if d.unreachableFor == nil {
		d.unreachableFor = c.gossip.unreachableSetFor(c.self())
	}
	unreachable := d.unreachableFor
	if !d.sbrSignatureKnown {
		// Once per state, in one buffer: built on every tick with += it was O(u²)
		// bytes for u unreachable members, and with a third of 1,000 members cut off
		// most of the CPU and garbage of the partition (docs/scale.md).
		var b strings.Builder
		for _, n := range sortedSet(unreachable) {
			if s := c.gossip.members[n].Status; s != StatusDown {
				b.WriteString(n.String())
				b.WriteByte(',')
			}
		}
		d.sbrSignature, d.sbrSignatureKnown = b.String(), true
	}
	sig := d.sbrSignature
	if sig != c.sbrSignature {
		c.sbrSignature, c.sbrSince = sig, now
		return
	}
	if sig == "" || now.Sub(c.sbrSince) < c.cfg.SBRStableAfter {
		return
	}
	if !d.hasLeader || d.leader != c.self() {
		return
	}
	// Decide only on a state every member counted on this side has seen (Akka's
	// convergence, among the reachable): it holds this side's observations, so such a
	// member has heard from this leader since they were made, and does not count it on
	// the other side. Without it, a member cut off from the others that heard from one
	// of them through a message already on its way counted that one on its side for
	// longer than the stable-after, and downed the rest as their majority, while they
	// downed it (faults seed 240900). Stability is kept: the decision comes once seen.
	for _, m := range c.gossip.members {
		if (m.Status == StatusUp || m.Status == StatusLeaving) && !unreachable[m.Node] && !c.gossip.seen[m.Node] {
			return
		}
	}
	down := sbrDecide(c.cfg.SBRStrategy, c.cfg.SBRQuorumSize, c.gossip.sortedMembers(), func(n UniqueAddress) bool {
		return n == c.self() || !unreachable[n]
	})
	c.sbrSince = now // decide again only after another stable period
	if len(down) == 0 {
		return
	}
	g := c.gossip.changed(c.self())
	for _, n := range down {
		m := g.members[n]
		if m.Status != StatusDown {
			m.Status = StatusDown
			g.members[n] = m
		}
	}
	c.gossip = g
}

func (c *Core) pruneTombstones(now time.Time) {
	for n, at := range c.gossip.tombstones {
		if now.Sub(time.Unix(0, at)) > c.cfg.TombstoneTTL {
			g := c.gossip.clone()
			delete(g.tombstones, n)
			c.gossip = g
		}
	}
}

// checkSelf ends this member's part when the cluster has downed or removed it, or when
// it has finished leaving. A leaving member may hear of its removal without having seen
// itself exiting (the leader removes an exiting member without waiting for it to see
// that): it has left all the same. (One downed while leaving, that misses the down as
// well, is taken to have left too: the removal does not say which it was.)
func (c *Core) checkSelf() {
	if _, gone := c.gossip.tombstones[c.self()]; gone {
		if c.sawLeaving {
			c.exit(ReasonLeft)
		} else {
			c.exit(ReasonRemoved)
		}
		return
	}
	switch c.gossip.members[c.self()].Status {
	case StatusDown:
		c.exit(ReasonDowned)
	case StatusLeaving:
		c.sawLeaving = true
	case StatusExiting:
		c.exit(ReasonLeft)
	}
}

// Reasons a member is out of the cluster (View.ExitReason).
const (
	ReasonLeft    = "left the cluster"
	ReasonDowned  = "downed by the cluster (split brain resolver or operator)"
	ReasonRemoved = "removed from the cluster"
)

func (c *Core) exit(reason string) {
	if !c.exited {
		c.exited, c.exitReason = true, reason
	}
}

// gossipRound picks a member and sends it the state (or, while converged, only the
// state's version), following the spec's speed-up rules.
func (c *Core) gossipRound(now time.Time) []Outbound {
	if !c.lastGossip.IsZero() {
		// The sped-up interval first: most ticks end here without a scan of the members.
		since := now.Sub(c.lastGossip)
		if since < c.cfg.GossipInterval/3 || since < c.cfg.GossipInterval && !c.speedUp() {
			return nil
		}
	}
	// The targets (a sorted copy of the members) only once the round is due, not on
	// every tick (docs/scale.md).
	targets := c.gossipTargets()
	if len(targets) == 0 {
		return nil
	}
	c.lastGossip = now
	converged := c.derivedState().converged
	target := targets[c.rng.Intn(len(targets))]
	if !converged && c.rng.Float64() < c.cfg.GossipDifferentViewProbability {
		var unseen []UniqueAddress
		for _, t := range targets {
			if !c.gossip.seen[t] {
				unseen = append(unseen, t)
			}
		}
		if len(unseen) > 0 {
			target = unseen[c.rng.Intn(len(unseen))]
		}
	}
	if converged || c.gossip.seen[target] {
		// A member that has seen the current version needs only the seen set (Akka's
		// gossipTo: a status to a member in the seen set, the state to the others).
		return []Outbound{c.statusTo(target)}
	}
	return []Outbound{c.gossipTo(target)}
}

// speedUp reports whether gossip rounds come three times as often: while a member that
// self reaches (and that is not down or exiting) has not seen the current version.
// Akka speeds up only while fewer than half have seen it; the second half then took a
// round a second for each doubling of the seen set, and a join at 300 members two such
// tails (docs/scale.md). At rest every member has seen it, and rounds are at the
// interval.
func (c *Core) speedUp() bool {
	// Once per state (derivedState): at rest every tick between a third of the
	// interval and the interval asked, and the scan of every member was a quarter of
	// the CPU at 1,000 members (docs/scale.md).
	d := c.derivedState()
	if !d.speedUpKnown {
		d.speedUp, d.speedUpKnown = c.scanSpeedUp(), true
	}
	return d.speedUp
}

func (c *Core) scanSpeedUp() bool {
	mine := c.gossip.reachability[c.self()].Unreachable
	for n, m := range c.gossip.members {
		if c.gossip.seen[n] || m.Status == StatusDown || m.Status == StatusExiting {
			continue
		}
		if !slices.Contains(mine, n) {
			return true
		}
	}
	return false
}

// gossipToAll returns the state for every reachable member: what a member that left
// sends before it stops, so that nobody waits for news of it.
func (c *Core) gossipToAll() []Outbound {
	var out []Outbound
	for _, t := range c.gossipTargets() {
		out = append(out, c.gossipTo(t))
	}
	return out
}

func (c *Core) gossipTo(to UniqueAddress) Outbound {
	w := c.gossip.wire()
	return Outbound{To: to, Msg: Message{Kind: msgGossip, From: c.self(), Gossip: &w}, Reliable: true}
}

func (c *Core) statusTo(to UniqueAddress) Outbound { return c.statusFor(to, false) }

// statusFor is statusTo, with the seen set as the list of addresses (Seen) when legacy:
// the answer to a member that sent only the list, which would not read the bits and
// would answer again with its own list as long as this member's seen set had more.
func (c *Core) statusFor(to UniqueAddress, legacy bool) Outbound {
	if legacy {
		return Outbound{To: to, Msg: Message{Kind: msgGossipStatus, From: c.self(), Version: c.gossip.version, Seen: sortedSet(c.gossip.seen)}}
	}
	nodes := c.sortedNodes()
	bits := make([]byte, (len(nodes)+7)/8)
	for i, n := range nodes {
		if c.gossip.seen[n] {
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return Outbound{To: to, Msg: Message{Kind: msgGossipStatus, From: c.self(), Version: c.gossip.version, SeenBits: bits}}
}

// statusSeen returns the seen set a status carries, read against this member's state,
// which has the status's version: from SeenBits, or from Seen (a member that sends
// only that). Bits that do not fit the state's members count as nothing seen: the
// answer then carries this member's whole seen set.
func (c *Core) statusSeen(m Message) map[UniqueAddress]bool {
	out := map[UniqueAddress]bool{}
	for _, s := range m.Seen {
		out[s] = true
	}
	if m.SeenBits == nil {
		return out
	}
	nodes := c.sortedNodes()
	if len(m.SeenBits) != (len(nodes)+7)/8 {
		return out
	}
	for i, n := range nodes {
		if m.SeenBits[i/8]&(1<<(i%8)) != 0 {
			out[n] = true
		}
	}
	return out
}

// EncodeMessage encodes a Core's message for the wire (CBOR).
func EncodeMessage(m Message) ([]byte, error) { return cbor.Marshal(m) }

// DecodeMessage decodes a message from another member's Core, with the limits that
// keep a malformed or hostile one from costing more than its size. Errors: what the
// CBOR decoder reports.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	err := gossipDecMode.Unmarshal(b, &m)
	return m, err
}

// Step handles a message from another member at now and returns the messages to send.
func (c *Core) Step(now time.Time, m Message) []Outbound {
	c.lastNow = now
	if c.exited || m.From == c.self() {
		return nil
	}
	switch m.Kind {
	case msgJoin:
		return c.onJoin(now, m)
	case msgWelcome, msgGossip:
		if m.Gossip == nil {
			return nil
		}
		g, err := m.Gossip.gossip()
		if err != nil {
			return nil
		}
		return c.onGossip(m.From, g, m.Kind == msgWelcome)
	case msgGossipStatus:
		return c.onStatus(m)
	case msgHeartbeat:
		if _, gone := c.gossip.tombstones[m.From]; gone {
			// A removed member learns it is out from the state, not from silence alone.
			return []Outbound{c.gossipTo(m.From)}
		}
		if cur, ok := c.gossip.members[m.From]; ok && cur.Status == StatusDown {
			// Nor does a downed one get answers (Akka quarantines it): a member that
			// was paused while the others downed it would otherwise count them towards
			// its majority contact and host again (sharding's hosting lease) until
			// their gossip reached it. It gets the state that says it is down instead.
			return []Outbound{c.gossipTo(m.From)}
		}
		return []Outbound{{To: m.From, Msg: Message{Kind: msgHeartbeatRsp, From: c.self(), Seq: m.Seq}}}
	case msgHeartbeatRsp:
		if d := c.detectors[m.From]; d != nil {
			d.heartbeat(now)
		}
		if sent, ok := c.hbSent[m.Seq]; ok && sent.After(c.contact[m.From]) {
			c.contact[m.From] = sent
		}
	case msgContact:
		from, ok := c.memberByUID(m.FromUID)
		if !ok {
			return nil // not a member of this state (or a UID two share): no address to answer
		}
		if c.gossip.members[from].Status == StatusDown {
			return []Outbound{c.gossipTo(from)} // as a heartbeat of a downed member
		}
		return []Outbound{{To: from, Msg: Message{Kind: msgContactRsp, Seq: m.Seq}}}
	case msgContactRsp:
		if n, sent, ok := c.contactAnswered(m.Seq); ok && sent.After(c.contact[n]) {
			c.contact[n] = sent
		}
	}
	return nil
}

// memberByUID returns the member of the state with UID uid; false if none, or if two
// members have it.
func (c *Core) memberByUID(uid UID) (UniqueAddress, bool) {
	if !c.joined || uid == 0 {
		return UniqueAddress{}, false
	}
	c.sortedNodes() // keeps byUID
	n, ok := c.byUID[uid]
	return n, ok && n.UID != 0
}

// contactRound is one heartbeat round: sent at sent, with heartbeats to monitored
// and contact requests numbered from first, the i-th to ring[idx[i]].
type contactRound struct {
	sent      time.Time
	first     uint64
	ring      []UniqueAddress
	idx       []int32
	monitored []UniqueAddress
}

// answeredLastRound returns, when a member asked in the previous heartbeat round
// (monitored or for contact) did not answer it, a test of whether a member answered
// that round; nil when all did (at rest), or before the second round.
func (c *Core) answeredLastRound() func(UniqueAddress) bool {
	if c.hbSeq < 2 {
		return nil
	}
	prev := &c.contactRounds[(c.hbSeq-1)%maxHeartbeatRounds]
	answered := func(n UniqueAddress) bool { return !c.contact[n].Before(prev.sent) }
	for _, n := range prev.monitored {
		if !answered(n) {
			return answered
		}
	}
	for _, i := range prev.idx {
		if !answered(prev.ring[i]) {
			return answered
		}
	}
	return nil
}

// contactAnswered returns the member that contact request number n went to and when
// its round was sent; false if n is of no recent round (maxHeartbeatRounds back).
func (c *Core) contactAnswered(n uint64) (UniqueAddress, time.Time, bool) {
	for i := range c.contactRounds {
		r := &c.contactRounds[i]
		if n >= r.first && n-r.first < uint64(len(r.idx)) {
			return r.ring[r.idx[n-r.first]], r.sent, true
		}
	}
	return UniqueAddress{}, time.Time{}, false
}

func (c *Core) onJoin(now time.Time, m Message) []Outbound {
	if !c.joined || m.Joiner == nil || m.Joiner.Node != m.From || m.From.UID == 0 {
		return nil
	}
	joiner := *m.Joiner
	if _, gone := c.gossip.tombstones[joiner.Node]; gone {
		return nil // a removed incarnation never comes back
	}
	if cur, ok := c.gossip.members[joiner.Node]; ok {
		if cur.Status == StatusDown {
			return nil
		}
		// Already a member (a retried Join): welcome it again.
		w := c.gossip.wire()
		return []Outbound{{To: joiner.Node, Msg: Message{Kind: msgWelcome, From: c.self(), Gossip: &w}, Reliable: true}}
	}
	g := c.gossip.changed(c.self())
	for _, old := range g.sortedMembers() {
		sameName := joiner.Name != "" && old.Name == joiner.Name
		if (old.Node.Address == joiner.Node.Address || sameName) && old.Node.UID != joiner.Node.UID && old.Status != StatusDown {
			// A new incarnation on the same address, or of the same name at another
			// address (a pod recreated at a new IP): the old process is gone (Akka downs
			// the old incarnation of an address that joins again).
			old.Status = StatusDown
			g.members[old.Node] = old
		}
	}
	joiner.Status, joiner.UpNumber = StatusJoining, 0
	g.members[joiner.Node] = joiner
	c.gossip = g
	w := c.gossip.wire()
	return []Outbound{{To: joiner.Node, Msg: Message{Kind: msgWelcome, From: c.self(), Gossip: &w}, Reliable: true}}
}

func (c *Core) onGossip(from UniqueAddress, remote gossipState, welcome bool) []Outbound {
	if !c.joined {
		if _, ok := remote.members[c.self()]; !ok {
			return nil // not (yet) a member: only a Welcome with self in it makes one
		}
		c.joined = true
	} else if _, known := c.gossip.members[from]; !known && !welcome {
		// Gossip from a process this member's state does not hold (Akka: "Ignoring
		// received gossip from unknown node"): a member of another cluster, or an old
		// incarnation still running after its cluster downed it, that sent to this
		// address. Merged, its members would come back into this cluster as up (seed
		// 13364: a member restarted alone formed a new cluster, took in the state of a
		// process downed earlier, and saw its own previous incarnation up beside it). A
		// member that joined meanwhile is learnt from the gossip of the others.
		return nil
	}
	c.gossip = c.gossip.Merge(remote).seenBy(c.self())
	if _, ok := c.gossip.members[c.self()]; !ok {
		if _, gone := c.gossip.tombstones[c.self()]; !gone {
			// The sender's state lacks self (it never knew it): put self back.
			g := c.gossip.changed(c.self())
			g.members[c.self()] = c.selfMember()
			c.gossip = g
		}
	}
	c.checkSelf()
	// Tell the sender what it lacks: our newer or merged state, or that we have seen.
	switch {
	case welcome || c.exited:
		return nil
	case c.gossip.version.Compare(remote.version) != orderSame:
		return []Outbound{c.gossipTo(from)}
	}
	// The same version: the sender lacks at least self in its seen set, or another
	// member this one knows has seen it; the union goes back, so that one exchange
	// leaves both with it (push-pull: the seen set then fills in about half the rounds).
	for s := range c.gossip.seen {
		if !remote.seen[s] {
			return []Outbound{c.statusTo(from)}
		}
	}
	return nil
}

func (c *Core) onStatus(m Message) []Outbound {
	if !c.joined {
		return nil
	}
	legacy := m.SeenBits == nil // a member that sends the seen set only as a list

	switch c.gossip.version.Compare(m.Version) {
	case orderAfter, orderConcurrent:
		return []Outbound{c.gossipTo(m.From)}
	case orderBefore:
		return []Outbound{c.statusFor(m.From, legacy)} // the sender answers with its newer state
	}
	// Same version: unite the seen sets, and tell the sender if it lacks something.
	remoteSeen := c.statusSeen(m)
	// One copy for all the additions, not one per member seen (docs/scale.md).
	g := c.gossip
	copied := false
	for s := range remoteSeen {
		if _, ok := g.members[s]; ok && !g.seen[s] {
			if !copied {
				g, copied = g.clone(), true
			}
			g.seen[s] = true
		}
	}
	c.gossip = g.seenBy(c.self())
	for s := range c.gossip.seen {
		if !remoteSeen[s] {
			return []Outbound{c.statusFor(m.From, legacy)}
		}
	}
	return nil
}

// Leave marks the member at address leaving (Akka's Cluster.leave). It returns false
// if there is no such member, or it is already leaving or beyond.
func (c *Core) Leave(address string) bool {
	return c.setStatus(address, StatusLeaving, func(s MemberStatus) bool { return s == StatusJoining || s == StatusUp })
}

// ReadyToExit records that this member, leaving, has run its leave hooks: the leader
// may now move it to exiting.
func (c *Core) ReadyToExit() {
	m, ok := c.gossip.members[c.self()]
	if !ok || m.ReadyToExit {
		return
	}
	g := c.gossip.changed(c.self())
	m.ReadyToExit = true
	g.members[c.self()] = m
	c.gossip = g
}

// Down marks the member at address down (Akka's Cluster.down): the operator's decision.
func (c *Core) Down(address string) bool {
	return c.setStatus(address, StatusDown, func(s MemberStatus) bool { return s != StatusDown })
}

func (c *Core) setStatus(address string, to MemberStatus, allowed func(MemberStatus) bool) bool {
	if !c.joined {
		return false
	}
	for _, m := range c.gossip.sortedMembers() {
		if m.Node.Address == address && allowed(m.Status) {
			g := c.gossip.changed(c.self())
			m.Status = to
			g.members[m.Node] = m
			c.gossip = g
			return true
		}
	}
	return false
}

// MonitoredPhi returns the phi accrual suspicion level, at now, of each member this
// member monitors (at most MonitoredByNrOfMembers).
func (c *Core) MonitoredPhi(now time.Time) map[UniqueAddress]float64 {
	out := make(map[UniqueAddress]float64, len(c.detectors))
	for n, d := range c.detectors {
		out[n] = d.phi(now)
	}
	return out
}

// View is a core's picture of the cluster.
type View struct {
	Self      UniqueAddress `json:"self"`
	Joined    bool          `json:"joined"`
	Members   []Member      `json:"members"` // sorted by address, removed members excluded
	Leader    UniqueAddress `json:"leader"`
	HasLeader bool          `json:"has_leader"`
	Converged bool          `json:"converged"`
	// Exited is set when this member is out of the cluster (downed, removed or left),
	// with the reason.
	Exited     bool   `json:"exited"`
	ExitReason string `json:"exit_reason,omitempty"`
	// MajorityContact is the newest time T such that this member has had a heartbeat
	// round trip, started at T or later, with each of enough members that, with itself,
	// they are a majority of the members up or leaving in its view (itself counted
	// even when not up yet); zero if it never had. A member alone has contact as of
	// its last tick. It is on the clock of Tick and Step (under Membership, Membership.Now:
	// time.Now, with its monotonic reading, unless MembershipConfig.Now is set), which is
	// the clock to measure its age on. Sharding hosts only while it is recent (its hosting
	// lease): a member cut off from the majority, or paused, stops hosting before the
	// majority moves its shards (docs/design.md, invariant 1).
	MajorityContact time.Time `json:"majority_contact"`
}

// Member returns the member at a gossip address in v. If two incarnations are listed
// (a restarted process whose old incarnation is not removed yet), the one in the
// earlier lifecycle status is returned: the live one. O(log members): a binary search
// of Members, which are sorted by address (sharding looks up the member of a shard's
// home for every message it forwards, docs/scale.md).
func (v View) Member(address string) (Member, bool) {
	i, _ := slices.BinarySearchFunc(v.Members, address, func(m Member, a string) int {
		switch {
		case m.Address < a:
			return -1
		case m.Address > a:
			return 1
		}
		return 0
	})
	var found Member
	ok := false
	for ; i < len(v.Members) && v.Members[i].Address == address; i++ {
		if mem := v.Members[i]; !ok || statusRank(mem.Status) < statusRank(found.Status) {
			found, ok = mem, true
		}
	}
	return found, ok
}

// maxHeartbeatRounds is how many heartbeat rounds back a response still counts as a
// round trip for MajorityContact.
const maxHeartbeatRounds = 16

// countsForContact reports whether a member in status st counts towards
// View.MajorityContact's majority: members up or leaving.
func countsForContact(st MemberStatus) bool { return st == StatusUp || st == StatusLeaving }

// contactNeeded is how many members other than self must have answered a heartbeat for
// View.MajorityContact: self and that many others are a majority of the members up or
// leaving (self counted even when not up yet).
func (c *Core) contactNeeded() int {
	n, selfCounts := 0, false
	for _, m := range c.gossip.members {
		if countsForContact(m.Status) {
			n++
			selfCounts = selfCounts || m.Node == c.self()
		}
	}
	if !selfCounts {
		n++
	}
	return n / 2
}

// contactReceivers appends to out the positions on ring of the members that get a
// heartbeat for contact only (msgContact; no failure detector watches their answers)
// besides the monitored receivers: with more than 2×MonitoredByNrOfMembers+1 members,
// the monitored ones are fewer than View.MajorityContact needs, and without these no
// member would ever have majority contact (nor host under sharding's lease). They are
// the next members up or leaving and reachable along the heartbeat ring, until one
// more than needed would answer a round (a slow answer then does not age the contact
// by a round). When a member asked in the previous round did not answer it (answered
// is then not nil), only the members that answered that round are counted, and the
// others are asked again: the walk goes on until enough that answered are asked, or
// over the whole ring, so that the majority side of a partition has majority contact
// again a round later, long before its failure detectors see the others unreachable
// (TestSimMajorityKeepsContactThroughAPartition); a member cut off asks every member
// it still sees reachable each round until it is out. Each must be a round trip of this member's own: contact
// vouched for by another member would keep the lease of a member cut off behind a
// bridge. Cost at rest: about members/2 requests and as many answers a round for each
// member above that size, O(members) a member and O(members²) for the cluster; a
// request is at most 19 bytes and an answer 9 (docs/scale.md, "Membership").
func (c *Core) contactReceivers(ring heartbeatRing, monitored []UniqueAddress, unreachable map[UniqueAddress]bool, answered func(UniqueAddress) bool, out []int32) []int32 {
	need := c.contactNeeded()
	have := 0
	inMonitored := make(map[UniqueAddress]bool, len(monitored))
	for _, r := range monitored {
		inMonitored[r] = true
		if m, ok := c.gossip.members[r]; ok && countsForContact(m.Status) && !unreachable[r] && (answered == nil || answered(r)) {
			have++
		}
	}
	if have > need {
		return out
	}
	// The walk of heartbeatRing.receivers over the whole ring, without its copy.
	start := slices.Index(ring.nodes, c.self())
	for step := 1; step < len(ring.nodes) && have <= need; step++ {
		i := step - 1
		if start >= 0 {
			i = (start + step) % len(ring.nodes)
		}
		r := ring.nodes[i]
		if r == c.self() || inMonitored[r] || unreachable[r] {
			continue
		}
		if m, ok := c.gossip.members[r]; !ok || !countsForContact(m.Status) {
			continue
		}
		out = append(out, int32(i))
		if answered == nil || answered(r) {
			have++
		}
	}
	return out
}

// majorityContact computes View.MajorityContact: the k-th newest contact among the
// counting members other than self, where self and k others are a majority.
func (c *Core) majorityContact() time.Time {
	var others []time.Time
	for _, m := range c.gossip.members {
		if !countsForContact(m.Status) || m.Node == c.self() {
			continue
		}
		if t, ok := c.contact[m.Node]; ok {
			others = append(others, t)
		}
	}
	need := c.contactNeeded() // others needed: self and need others are a majority
	if need == 0 {
		return c.lastNow
	}
	if len(others) < need {
		return time.Time{}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].After(others[j]) })
	return others[need-1]
}

// View returns the core's picture of the cluster.
func (c *Core) View() View {
	v := View{Self: c.self(), Joined: c.joined, Exited: c.exited, ExitReason: c.exitReason}
	if !c.joined {
		return v
	}
	d := c.derivedState()
	v.Leader, v.HasLeader, v.Converged = d.leader, d.hasLeader, d.converged
	v.MajorityContact = c.majorityContact()
	unreachable := d.unreachable // once, not a scan of every record per member
	for _, m := range c.gossip.sortedMembers() {
		v.Members = append(v.Members, Member{
			Address:       m.Node.Address,
			UID:           m.Node.UID,
			TransportAddr: m.TransportAddr,
			APIAddr:       m.APIAddr,
			Name:          m.Name,
			Roles:         append([]string{}, m.Roles...),
			Status:        m.Status,
			UpNumber:      m.UpNumber,
			Reachable:     m.Node == c.self() || !unreachable[m.Node],
			Leader:        v.HasLeader && m.Node == v.Leader,
		})
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].Address < v.Members[j].Address })
	return v
}

// gossipWire returns the state for memberlist's push-pull; false before joining.
func (c *Core) gossipWire() (gossipWire, bool) {
	if !c.joined {
		return gossipWire{}, false
	}
	return c.gossip.wire(), true
}
