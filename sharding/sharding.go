package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
)

const maxHops = 3

// maxForwards bounds how often entities may pass one message on (ForwardTo).
const maxForwards = 16

// Membership is what sharding needs of cluster membership; *cluster.Membership has it.
// The shard coordinator runs as a cluster singleton, which needs View, Self, Subscribe
// and RegisterLeaveHook (cluster.SingletonMembership); regions and the state store read
// the members.
type Membership interface {
	cluster.SingletonMembership
	Members() []cluster.Member
	Member(address string) (cluster.Member, bool)
	// Now reads the clock of View.MajorityContact: the hosting lease and the
	// DownRemovalMargin are measured on it.
	Now() time.Time
}

// Messenger is what sharding needs of node-to-node messaging; *cluster.Messenger has it.
// Its methods must not keep body once they return (sharding sends from pooled buffers),
// as *cluster.Messenger's do not: its transport encodes the frame before Send returns.
type Messenger interface {
	Handle(topic string, h cluster.Handler)
	Tell(addr, topic string, body []byte) error
	TellContext(ctx context.Context, addr, topic string, body []byte) error
	Request(ctx context.Context, addr, topic string, body []byte) ([]byte, error)
	RequestAsync(addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error))
	RequestAsyncContext(ctx context.Context, addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error))
}

// Entity is one active entity. Calls come from one goroutine at a time.
type Entity interface {
	// Receive handles one message and returns the reply. Errors should be CodedErrors
	// so that remote askers learn their kind.
	Receive(ctx context.Context, payload []byte) ([]byte, error)
	// Snapshot returns the entity's state, to be given to NewEntity of a later
	// incarnation (after passivation, handoff or a crash); nil if it keeps none. It is
	// called between messages.
	Snapshot(ctx context.Context) ([]byte, error)
	// Stop releases the entity; no call follows.
	Stop(ctx context.Context)
}

// EntityLifecycle is implemented by an Entity that can end, or ask to end, on its own;
// the region asks after each message.
type EntityLifecycle interface {
	// Terminated reports that the entity is gone (a wasm instance that trapped): the
	// region stops it without saving its state, and the next message activates it again
	// from its last saved state.
	Terminated() bool
	// PassivationRequested reports that the entity asked to be passivated after the
	// message (Akka's context.passivate), and clears the request. Its state is saved and
	// it is stopped; messages that arrive meanwhile go to the next incarnation.
	PassivationRequested() bool
}

// EntityStopHook is implemented by an Entity that wants to act before it is stopped with
// its state saved (passivation, handoff, shutdown; not after a failure nor when fenced).
// BeforeStop runs on the entity's mailbox goroutine just before the final Snapshot and
// reports whether it may have changed the entity's state.
type EntityStopHook interface {
	BeforeStop(ctx context.Context) bool
}

// EntityStateSaved is implemented by an Entity that wants to know when the state its
// last Snapshot returned is stored (an entity whose snapshots are deltas against an
// earlier saved state, host/checkpoint.go, chains a delta only to a state the store
// acknowledged). StateSaved runs on the entity's mailbox goroutine right after the
// store acknowledged a Save of it, before the next message. It is not called when the
// Save failed, nor for the snapshots a handoff saves in batches (the entity stops).
type EntityStateSaved interface {
	StateSaved()
}

// EntityFactory activates entities. NewEntity is called on the entity's mailbox
// goroutine when its first message arrives, and may block for the activation. state is
// the entity's last saved snapshot, or nil for a new entity.
type EntityFactory interface {
	NewEntity(ctx context.Context, entityType, entityID string, state []byte) (Entity, error)
}

// TypeSettings are the sharding settings of an entity type, given at deploy.
type TypeSettings struct {
	Name string `json:"name"`
	// NumberOfShards is fixed for the life of the cluster; abi.ShardID uses it.
	NumberOfShards int `json:"shards"`
	// Role: only members with this role host the type's shards; the others run
	// proxy-only regions that route its messages. Empty: every member hosts.
	Role string `json:"role,omitempty"`
	// Allocation is the shard allocation strategy: AllocationLeastShard (default) or
	// AllocationPriority.
	Allocation string `json:"allocation,omitempty"`
	// PassivateAfter passivates an entity idle for this long; 0 never.
	PassivateAfter time.Duration `json:"passivate_after,omitempty"`
	// MaxActive caps the active entities of the type per region; the least recently
	// used is passivated to make room. 0: no cap.
	MaxActive int `json:"max_active,omitempty"`
	// Checkpoint says when an entity's state is saved: CheckpointPassivation (on
	// passivation and handoff, the default), CheckpointEveryMessage, or "every:N".
	Checkpoint string `json:"checkpoint,omitempty"`
	// RememberEntities restarts a shard's entities wherever the shard goes.
	RememberEntities bool `json:"remember_entities,omitempty"`
}

// Allocation strategies and checkpoint policies by name.
const (
	AllocationLeastShard   = "least-shard"
	AllocationPriority     = "priority"
	CheckpointPassivation  = "passivation"
	CheckpointEveryMessage = "every-message"
)

// Validate checks the settings; it fills in the defaults of empty fields.
func (t *TypeSettings) Validate() error {
	switch {
	case t.Name == "":
		return errors.New("sharding: an entity type needs a name")
	case t.NumberOfShards < 1 || t.NumberOfShards > 100_000:
		return fmt.Errorf("sharding: number of shards %d (want 1 to 100000)", t.NumberOfShards)
	case t.PassivateAfter < 0 || t.MaxActive < 0:
		return fmt.Errorf("sharding: passivate-after and max-active must not be negative")
	}
	switch t.Allocation {
	case "":
		t.Allocation = AllocationLeastShard
	case AllocationLeastShard, AllocationPriority:
	default:
		return fmt.Errorf("sharding: allocation %q (want %s or %s)", t.Allocation, AllocationLeastShard, AllocationPriority)
	}
	if t.Checkpoint == "" {
		t.Checkpoint = CheckpointPassivation
	}
	if _, err := CheckpointEvery(t.Checkpoint); err != nil {
		return err
	}
	return nil
}

// CheckpointEvery returns after how many messages an entity's state is saved under a
// checkpoint policy: 0 for passivation (only on passivation and handoff), 1 for every
// message, N for "every:N".
func CheckpointEvery(policy string) (int, error) {
	switch policy {
	case CheckpointPassivation, "":
		return 0, nil
	case CheckpointEveryMessage:
		return 1, nil
	}
	if n, ok := strings.CutPrefix(policy, "every:"); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 1 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("sharding: checkpoint policy %q (want passivation, every-message or every:N)", policy)
}

// TypeResolver tells sharding about the entity types of the cluster.
type TypeResolver interface {
	// EntityType returns the settings of a type deployed in the cluster, making it
	// available on this member if needed (which may take network round trips). It
	// returns an error wrapping ErrUnknownEntityType for a type nobody deployed.
	EntityType(ctx context.Context, name string) (TypeSettings, error)
}

// Config configures Sharding.
type Config struct {
	Membership Membership
	Messenger  Messenger
	Types      TypeResolver
	Factory    EntityFactory
	// DData keeps the coordinator's state (allocations and epochs) with WriteMajority and
	// ReadMajority. Nil: the coordinator rebuilds its state from the regions alone.
	DData DData
	// States keeps entity state (snapshots, remembered entities): with it, state moves
	// with its shard and survives passivation and crashes (per the checkpoint policy).
	// Nil: an entity's state lives only in its instance.
	States StateStore
	// Strategy, if set, allocates the shards of every type; by default each type uses
	// the strategy its settings name (least-shard or priority).
	Strategy ShardAllocationStrategy
	// RebalanceInterval is how often the coordinator looks for shards to move. Default 10 s.
	RebalanceInterval time.Duration
	// DownRemovalMargin is how long the shards of a member that was downed (not one that
	// left) stay allocated to it before they may move, as Akka's down-removal-margin:
	// the downed member, on the other side of a partition, may still run their entities
	// until its own split brain resolver or the news of its downing stops it, and a
	// second activation meanwhile would break "at most one active instance". Longer
	// leaves the shards unavailable longer after a crash; shorter than the time the
	// downed side takes to stop risks two lives of an entity at once. Default 5 s (the
	// resolver's default stable-after; host sets the resolver's own); 0 moves them at
	// once.
	DownRemovalMargin time.Duration
	// HostingLease is how recent this member's heartbeat round trips with a majority
	// of the members must be for it to host (cluster.View.MajorityContact): past it,
	// the member activates no entity, handles no message and saves no state, and it
	// stops its entities without saving; after such a lapse it hosts again only once
	// it has the contact back and its view of the cluster has converged (so that a
	// downing it missed has reached it). A member cut off from the majority, paused
	// or behind a bridge member thus stops hosting before the majority, which downs it
	// after the resolver's stable-after, moves its shards after DownRemovalMargin (Akka
	// leaves this to the downed side's resolver; a member that does not learn of its
	// downing, or whose resolver sees another leader, is what the lease covers). It must
	// be shorter than DownRemovalMargin, with room for a save in flight, and longer than
	// the failure detector's heartbeat interval, or the lease lapses while nothing is
	// wrong. 0: half of DownRemovalMargin; negative, or a DownRemovalMargin of 0: no
	// lease (a member hosts whatever its contact).
	HostingLease time.Duration
	// MaxSimultaneousRebalance caps the shards of one type in handoff at once. Default 3.
	MaxSimultaneousRebalance int
	// BufferSize caps the messages a region buffers while shard homes are resolved
	// (and, per entity type, while the type is being resolved). Over it, messages are
	// dead letters: ErrBufferFull. Default 100,000 (Akka's buffer-size).
	BufferSize int
	// MailboxSize caps the messages queued for one entity. Default 10,000.
	MailboxSize int
	// RequestTimeout bounds one request to the coordinator or a region. Default 3 s.
	RequestTimeout time.Duration
	// ResolveTimeout is how long messages wait for their shard's home (retrying the
	// coordinator) before they fail with ErrShardUnavailable. Default 10 s.
	ResolveTimeout time.Duration
	// AskTimeout bounds an ask whose context has no deadline. Default 10 s.
	AskTimeout time.Duration
	// ReconcileInterval is how often membership is re-read, in case events were
	// missed. Default 1 s.
	ReconcileInterval time.Duration
	// Now is the clock of idle passivation (when an entity was last used, how long
	// ago), of MaxActive's least recently used choice, of the dead letter log's rate
	// limit and of the durations sharding measures (queue time, activation, handoff).
	// Deadlines (an ask's, ResolveTimeout, RequestTimeout) follow contexts and timers,
	// in real time. Default time.Now; tests give a simulated clock.
	Now func() time.Time
	// Logger receives sharding's logs. Nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of messages (tell, ask, handle), activations,
	// passivations, state store calls, shard home resolution, buffering and handoffs.
	// Nil: none.
	TracerProvider trace.TracerProvider
	// MeterProvider records sharding's metrics (messages handled, activations,
	// passivations, active entities, shards, handoffs, buffered messages, dead letters,
	// state store operations). Nil: none.
	MeterProvider metric.MeterProvider
}

// DefaultConfig returns the defaults described on Config (dependencies unset).
func DefaultConfig() Config {
	return Config{
		BufferSize:        100_000,
		MailboxSize:       10_000,
		RequestTimeout:    3 * time.Second,
		ResolveTimeout:    10 * time.Second,
		AskTimeout:        10 * time.Second,
		ReconcileInterval: time.Second,
		RebalanceInterval: 10 * time.Second,
		DownRemovalMargin: 5 * time.Second,

		MaxSimultaneousRebalance: 3,
	}
}

// CoordinatorTimeout is how long a region waits for the coordinator's answer to where
// a shard lives: two RequestTimeouts, as the coordinator may first wait one
// RequestTimeout for the region it chose to host the shard.
func (c Config) CoordinatorTimeout() time.Duration { return 2 * c.RequestTimeout }

// HandOffTimeout bounds a region's handoff of one shard: one RequestTimeout for the
// other regions to acknowledge BeginHandOff, one for the coordinator to acknowledge
// ShardStopped, and ResolveTimeout for the shard's entities to finish what they
// received and save their state (a save retries while the store is unavailable).
func (c Config) HandOffTimeout() time.Duration { return 2*c.RequestTimeout + c.ResolveTimeout }

// HandOffRequestTimeout is how long the coordinator waits for a region to answer a
// HandOff (a rebalance): HandOffTimeout and one RequestTimeout more for the message
// and its answer, so that a region that finishes in time is heard.
func (c Config) HandOffRequestTimeout() time.Duration { return c.HandOffTimeout() + c.RequestTimeout }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Membership == nil || c.Messenger == nil || c.Types == nil || c.Factory == nil:
		return errors.New("sharding: Membership, Messenger, Types and Factory are required")
	case c.BufferSize <= 0 || c.MailboxSize <= 0:
		return errors.New("sharding: buffer and mailbox sizes must be positive")
	case c.RequestTimeout <= 0 || c.ResolveTimeout <= 0 || c.AskTimeout <= 0 || c.ReconcileInterval <= 0 ||
		c.RebalanceInterval <= 0 || c.MaxSimultaneousRebalance <= 0:
		return errors.New("sharding: timeouts and intervals must be positive")
	case c.DownRemovalMargin > 0 && c.HostingLease >= c.DownRemovalMargin:
		return fmt.Errorf("sharding: the hosting lease (%v) must be shorter than the down-removal margin (%v)",
			c.HostingLease, c.DownRemovalMargin)
	}
	return nil
}

// hostingLease is the lease in effect (HostingLease with its default); 0: none.
func (c Config) hostingLease() time.Duration {
	switch {
	case c.DownRemovalMargin <= 0 || c.HostingLease < 0:
		return 0
	case c.HostingLease == 0:
		return c.DownRemovalMargin / 2
	}
	return c.HostingLease
}

// Sharding is cluster sharding on one member: its regions (one per entity type) and its
// share of the coordinator (active on the oldest member). It is safe for concurrent use.
type Sharding struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	tel    *shardingTelemetry
	self   string // this member's address
	coord  *coordinator
	// fence is the state store's FenceShard (ShardFencer), or nil when it has none
	// or there is no store: Region.fenceShard.
	fence stateFenceFunc

	// owner owns the goroutines of s. Everything that may start one holds it (Hold)
	// or runs on one; Stop closes it.
	owner *owner.Group

	mu          sync.Mutex
	regions     map[string]*Region
	typeWaiters map[string][]delivery // messages for types being resolved
	waiting     int                   // total in typeWaiters

	deadLetters atomic.Uint64
	idleSweeps  atomic.Uint64 // idle passivation sweeps done, for tests
	// deadLetterLog limits the dead letter warnings: one per type and reason every 10 s.
	deadLetterLog obs.LogLimiter
	leaving       atomic.Bool // set by the leave hook: no new shards here
	aborting      atomic.Bool // set by Abort: mailboxes stop handling what they queued
	// lease is the hosting lease (Config.HostingLease; 0: none); leaseHeld says
	// whether this member may host: set once it has majority contact in a converged
	// view, cleared (by checkLease) when the contact lapses.
	lease     time.Duration
	leaseHeld atomic.Bool
	// downed holds when this member saw each downed member (by address) downed, for
	// DownRemovalMargin (on Membership.Now); guarded by downedMu.
	downedMu sync.Mutex
	downed   map[string]time.Time
	// downedOlder marks the members in downed that were older than this one when
	// downed: one of them may have run the coordinator (downMarginLeft).
	downedOlder map[string]bool
	sub         *cluster.Subscription
	singleton   *cluster.Singleton
}

// New starts sharding on this member: it registers its message handlers with the
// messenger and follows membership. Stop ends it.
func New(cfg Config) (*Sharding, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	self := cfg.Membership.Self().Address
	tel := newShardingTelemetry(cfg.TracerProvider, cfg.MeterProvider)
	var fence stateFenceFunc
	if cfg.States != nil {
		cfg.States, fence = instrumentStateStore(cfg.States, self, cfg.TracerProvider, cfg.MeterProvider)
	}
	s := &Sharding{
		cfg:           cfg,
		fence:         fence,
		log:           cfg.Logger,
		tracer:        tel.tracer,
		tel:           tel,
		self:          self,
		owner:         owner.New(),
		regions:       map[string]*Region{},
		typeWaiters:   map[string][]delivery{},
		deadLetterLog: obs.LogLimiter{Interval: 10 * time.Second},
		downed:        map[string]time.Time{},
		downedOlder:   map[string]bool{},
		lease:         cfg.hostingLease(),
	}
	s.coord = newCoordinator(s)
	s.registerShards(cfg.MeterProvider)
	cfg.Messenger.Handle(topicDeliver, s.handleDeliver)
	cfg.Messenger.Handle(topicGetShardHome, s.handleGetShardHome)
	cfg.Messenger.Handle(topicHostShard, s.handleHostShard)
	cfg.Messenger.Handle(topicRegionState, s.handleRegionState)
	cfg.Messenger.Handle(topicShardStopped, s.handleShardStopped)
	cfg.Messenger.Handle(topicBeginHandOff, s.handleBeginHandOff)
	cfg.Messenger.Handle(topicReturn, s.handleReturn)
	cfg.Messenger.Handle(topicHandOffComplete, s.handleHandOffComplete)
	cfg.Messenger.Handle(topicHandOff, s.handleHandOff)
	cfg.Messenger.Handle(topicDropShard, s.handleDropShard)
	s.sub = cfg.Membership.Subscribe(1024)
	s.singleton = cluster.NewSingleton(cfg.Membership, "", s.coord, cfg.Logger.With("singleton", "shard-coordinator"))
	cfg.Membership.RegisterLeaveHook(s.handOffAll)
	s.owner.Go(s.followMembership)
	if s.lease > 0 {
		s.owner.Go(s.watchLease)
	}
	return s, nil
}

// leaseLeft returns how long this member may still host (see Config.HostingLease):
// until its majority contact is a lease old; 0 or less when it may not.
func (s *Sharding) leaseLeft() time.Duration {
	if s.lease <= 0 {
		return time.Duration(1<<63 - 1)
	}
	if !s.leaseHeld.Load() {
		return 0
	}
	v := s.cfg.Membership.View()
	if v.Exited || v.MajorityContact.IsZero() {
		return 0
	}
	// On membership's clock, MajorityContact's (time.Now's monotonic reading unless
	// cluster.MembershipConfig.Now is set): a process paused past its lease finds it
	// lapsed when it resumes, whatever the wall clock did.
	return s.lease - s.since(v.MajorityContact)
}

// since is the time since t on membership's clock: its Since when it has one
// (*cluster.Membership: one clock read where Now makes two), else Now().Sub(t).
func (s *Sharding) since(t time.Time) time.Duration {
	if m, ok := s.cfg.Membership.(interface{ Since(time.Time) time.Duration }); ok {
		return m.Since(t)
	}
	return s.cfg.Membership.Now().Sub(t)
}

// hosting reports whether this member may host now (leaseLeft).
func (s *Sharding) hostingAllowed() bool { return s.leaseLeft() > 0 }

// awaitLease waits until this member may host, for at most RequestTimeout and until
// deadline (if set): a member that just joined, or whose contact lapsed for a moment,
// gets it back within a heartbeat round. Errors: ErrNoMajority.
func (s *Sharding) awaitLease(deadline time.Time) error {
	if s.hostingAllowed() {
		return nil
	}
	limit := time.Now().Add(s.cfg.RequestTimeout)
	if !deadline.IsZero() && deadline.Before(limit) {
		limit = deadline
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.owner.Done():
			return ErrStopped
		case <-t.C:
		}
		if s.hostingAllowed() {
			return nil
		}
		if time.Now().After(limit) {
			return ErrNoMajority
		}
	}
}

// watchLease keeps leaseHeld (Config.HostingLease): when the majority contact lapses,
// it stops hosting, and the entities here stop without saving (the next message for
// one activates it again once the lease is back); it takes the lease again once the contact is back in a converged
// view in which this member is up or leaving.
func (s *Sharding) watchLease() {
	tick := time.NewTicker(max(s.lease/5, 5*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.owner.Done():
			return
		case <-tick.C:
		}
		v := s.cfg.Membership.View()
		contact := !v.Exited && !v.MajorityContact.IsZero() && s.cfg.Membership.Now().Sub(v.MajorityContact) < s.lease
		switch held := s.leaseHeld.Load(); {
		case held && !contact:
			s.leaseHeld.Store(false)
			stopped := 0
			for _, r := range s.allRegions() {
				stopped += r.stopForLease()
			}
			s.log.Warn("hosting lease lapsed: no heartbeat round trip with a majority of the members within the lease; the entities here stop",
				"lease", s.lease, "contact", v.MajorityContact, "entities", stopped)
		case !held && contact && v.Converged && s.selfHosting(v):
			s.leaseHeld.Store(true)
			s.log.Debug("hosting lease held", "lease", s.lease)
		}
	}
}

// selfHosting reports whether this member is up or leaving in v.
func (s *Sharding) selfHosting(v cluster.View) bool {
	for _, m := range v.Members {
		if m.Address == s.self {
			return hosting(m)
		}
	}
	return false
}

// Stop stops routing (new messages fail with ErrStopped), ends the background work,
// waits for messages being processed and stops every entity, saving its state (a
// graceful shutdown).
func (s *Sharding) Stop(ctx context.Context) error { return s.stopAll(ctx, true) }

// Abort stops like Stop but saves no entity state, and the messages waiting in
// entities' mailboxes fail with ErrStopped instead of being handled: for a member that
// the cluster downed or removed, whose shards may soon live elsewhere.
func (s *Sharding) Abort(ctx context.Context) error {
	s.aborting.Store(true)
	return s.stopAll(ctx, false)
}

func (s *Sharding) stopAll(ctx context.Context, save bool) error {
	if !s.owner.Close() {
		return nil
	}
	s.sub.Close()
	s.singleton.Close()

	s.mu.Lock()
	for _, ds := range s.typeWaiters {
		for _, d := range ds {
			d.fail(ErrStopped)
		}
	}
	s.typeWaiters = map[string][]delivery{}
	regions := make([]*Region, 0, len(s.regions))
	for _, r := range s.regions {
		regions = append(regions, r)
	}
	s.mu.Unlock()
	if !save {
		// Downed or removed: the idle entities stop now, unsaved (the busy ones stop
		// after their message, drainLoop), before the goroutines are waited for, which
		// may take longer than DownRemovalMargin.
		for _, r := range regions {
			r.abortIdleEntities(ctx)
		}
	}

	if err := s.owner.WaitContext(ctx); err != nil {
		return fmt.Errorf("sharding: stopping: %w", err)
	}
	for _, r := range regions {
		r.stopEntities(ctx, save)
	}
	return nil
}

// Drain waits until no message waits in a buffer of this member (for a shard home or an
// entity type), or ctx ends. A leaving member calls it between leaving and Stop: the
// messages that reached it during the handoff go on to the shards' new homes, which may
// only be known once the coordinator has moved.
func (s *Sharding) Drain(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		waiting := s.waiting
		s.mu.Unlock()
		for _, r := range s.allRegions() {
			r.mu.Lock()
			waiting += r.buffered
			r.mu.Unlock()
		}
		if waiting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sharding: %d messages still buffered: %w", waiting, ctx.Err())
		case <-t.C:
		}
	}
}

// StartType starts the region of an entity type on this member (idempotent) and delivers
// the messages that waited for the type. A second start with another number of shards
// is refused: shard IDs are fixed for the life of the cluster.
func (s *Sharding) StartType(t TypeSettings) (*Region, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if !s.owner.Hold() {
		return nil, ErrStopped
	}
	defer s.owner.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.regions[t.Name]; r != nil {
		if r.settings.NumberOfShards != t.NumberOfShards {
			return nil, fmt.Errorf("sharding: entity type %s has %d shards; it cannot change to %d",
				t.Name, r.settings.NumberOfShards, t.NumberOfShards)
		}
		r.updateSettings(t)
		s.restartRemembered(t)
		return r, nil
	}
	r := newRegion(s, t)
	s.regions[t.Name] = r
	s.restartRemembered(t)
	waiters := s.typeWaiters[t.Name]
	delete(s.typeWaiters, t.Name)
	s.waiting -= len(waiters)
	for _, d := range waiters {
		r.deliver(d)
	}
	return r, nil
}

// StopType removes the region of an entity type from this member: messages for the type
// no longer reach it (they wait for the type as for an unknown one, and fail if the
// resolver does not know it), and its entities are passivated, their state saved, once
// each has handled what its mailbox holds. It returns when all are stopped, or with
// ctx's error. Stopping a type without a region here is a no-op.
func (s *Sharding) StopType(ctx context.Context, name string) error {
	s.mu.Lock()
	r := s.regions[name]
	delete(s.regions, name)
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	var all []*entity
	r.eachHostedLocked(func(sh *shard) {
		for _, e := range sh.entities {
			all = append(all, e)
		}
	})
	r.mu.Unlock()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for _, e := range all {
		for {
			e.mu.Lock()
			gone := !e.live && !e.running
			e.mu.Unlock()
			if gone {
				break
			}
			e.passivateSoon(causeUndeploy)
			select {
			case <-ctx.Done():
				return fmt.Errorf("sharding: stopping the entities of %s: %w", name, ctx.Err())
			case <-t.C:
			}
		}
	}
	s.log.InfoContext(ctx, "entity type stopped", "type", name, "entities", len(all))
	return nil
}

// restartRemembered has the coordinator, if active here, allocate the homeless shards of
// a type that remembers entities, now that this member knows the type's settings (after
// a full restart the coordinator recovers before the types are known). The caller holds
// s.owner (Hold).
func (s *Sharding) restartRemembered(t TypeSettings) {
	if !t.RememberEntities {
		return
	}
	s.owner.GoHeld(s.coord.allocateRemembered)
}

// delivery is a message and how to answer it.
type delivery struct {
	env Envelope
	// ctx carries the trace; processing never stops because it is cancelled.
	ctx      context.Context
	deadline time.Time
	// ask says the sender waits for the reply.
	ask bool
	// start activates the entity without a message (a remembered entity restarting).
	start bool
	// reply receives the reply of an ask, or a failure (for a tell, failures only); it
	// is called at most once, never with a lock of this package held. May be nil. Call
	// it through answer.
	reply func(Reply, error)
	// waiter, if set (and reply nil), is where an ask made on this member waits, for
	// the use gen of it: answer puts the reply there without a closure of its own (an
	// allocation per ask).
	waiter *askWaiter
	gen    uint64
	// wait is the span of the message's wait in a region's buffer, while it waits there
	// in a traced context.
	wait trace.Span
	// arrived is when the message reached its entity's mailbox.
	arrived time.Time
}

func (d delivery) fail(err error) { d.answer(Reply{}, err) }

// answer gives d's reply (or failure) to its sender, if it has one.
func (d *delivery) answer(r Reply, err error) {
	switch {
	case d.reply != nil:
		d.reply(r, err)
	case d.waiter != nil:
		d.waiter.put(d.gen, r, err)
	}
}

// Tell sends payload to the entity typ/id without waiting for it to be processed. It
// returns an error if the message cannot be routed from here (unknown type, empty ID,
// buffer full); failures further on are logged and counted, not returned.
func (s *Sharding) Tell(ctx context.Context, typ, id string, payload []byte) error {
	return s.TellMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: payload})
}

// TellMessage is Tell for a message with a sender, kind and tag.
func (s *Sharding) TellMessage(ctx context.Context, m Message) error {
	if m.EntityID == "" {
		return ErrEmptyEntityID
	}
	span := noopSpan
	if s.tel.traced {
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			obs.EntityType.String(m.EntityType), obs.EntityID.String(m.EntityID), obs.Node.String(s.self),
			obs.MessagingSystem.String(obs.RPCSystemName), obs.MessagingOp.String("send"),
			obs.MessagingDest.String(m.EntityType))}
		if m.Link.IsValid() {
			// A timer's or a subscription's message: a trace of its own, linked to the
			// span that set the timer or subscribed.
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: m.Link}))
		}
		ctx, span = s.tracer.Start(ctx, tellSpanName(m), opts...)
		defer span.End()
	}
	// A tell has no reply, but a failure before the message leaves this member (stopped,
	// buffer full) happens synchronously and is returned; later ones are not.
	// A failure after that is a dead letter (tellFailed).
	env := m.envelope(s.self)
	env.Chain = nil // nobody waits for a tell
	dctx := ctx
	if ctx.Done() != nil {
		dctx = context.WithoutCancel(ctx) // the message outlives the call: the trace, not the cancellation
	}
	t := &tellCall{s: s, env: env, ctx: dctx}
	s.route(delivery{
		env:   env,
		ctx:   dctx,
		reply: func(_ Reply, err error) { t.failed(err) },
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	t.returned = true
	if t.err != nil {
		failSpan(span, t.err)
	}
	return t.err
}

// tellCall is a tell on its way: what its delivery's failures need.
type tellCall struct {
	s   *Sharding
	env Envelope
	ctx context.Context

	mu       sync.Mutex
	returned bool  // TellMessage has returned
	err      error // the routing failure TellMessage returns
}

// failed takes a failure of the tell: the caller's, if it failed to route the message
// from here before TellMessage returned; a dead letter otherwise.
func (t *tellCall) failed(err error) {
	t.mu.Lock()
	// Only a failure to route the message from here is the caller's; the entity's own
	// failure is a dead letter even when it comes back before TellMessage returns (a
	// quick local entity).
	early := !t.returned && t.err == nil && tellRoutingError(err)
	if early {
		t.err = err
	}
	t.mu.Unlock()
	if !early && err != nil {
		t.s.tellFailed(t.ctx, t.env, err)
	}
}

// noopSpan stands for a span when tracing is off.
var noopSpan = trace.SpanFromContext(context.Background())

// tellSpanName is "tell TYPE", "timer TYPE" or "changed TYPE".
func tellSpanName(m Message) string {
	switch m.Kind {
	case KindTimer:
		return "timer " + m.EntityType
	case KindChanged:
		return "changed " + m.EntityType
	}
	return "tell " + m.EntityType
}

// Passivate has the region hosting the entity typ/id passivate it, after the messages
// it received before: its state is saved as at any passivation, and its next message
// activates it again. passivated is false when the entity was not active. Errors: those
// of AskMessage.
func (s *Sharding) Passivate(ctx context.Context, typ, id string) (passivated bool, err error) {
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: KindPassivate})
	if err != nil {
		return false, err
	}
	return string(r.Payload) == PassivateDone, nil
}

// Ask sends payload to the entity typ/id and waits for its reply, until ctx ends (or
// Config.AskTimeout if ctx has no deadline). Errors carry an ErrorCode: the entity's own
// error, a guest failure, ErrUnknownEntityType, ErrEmptyEntityID, ErrBufferFull,
// ErrShardUnavailable, ErrAskTimeout.
func (s *Sharding) Ask(ctx context.Context, typ, id string, payload []byte) (Reply, error) {
	return s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: payload})
}

// AskMessage is Ask for a message with a sender, kind, tag and ask chain.
func (s *Sharding) AskMessage(ctx context.Context, m Message) (Reply, error) {
	typ, id := m.EntityType, m.EntityID
	if id == "" {
		return Reply{}, ErrEmptyEntityID
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		// Config.AskTimeout, kept by the waiter's timer rather than a context of its
		// own: nothing on the way reads the ask's context for its deadline (the
		// delivery carries it), and a context.WithTimeout per ask costs 4 allocations
		// and most of a microsecond.
		deadline = start.Add(s.cfg.AskTimeout)
	}
	// No span of its own: the caller's (the API's server span, the asking entity's
	// message) is the ask's, and the entity's "handle" span is its child.
	w := askWaiters.Get().(*askWaiter)
	gen := w.gen.Load()
	s.route(delivery{
		env:      m.envelope(s.self),
		ctx:      ctx,
		deadline: deadline,
		ask:      true,
		waiter:   w,
		gen:      gen,
	})
	var timeout <-chan time.Time
	if !ok {
		w.timer.Reset(deadline.Sub(start))
		timeout = w.timer.C
	}
	select {
	case res := <-w.ch:
		w.timer.Stop()
		w.gen.Store(gen + 2) // replies to this ask are refused from here on
		askWaiters.Put(w)
		return res.r, res.err
	case <-ctx.Done():
	case <-timeout:
	}
	// The reply may still come: the waiter is left to it (and to the collector), not
	// reused.
	w.timer.Stop()
	return Reply{}, fmt.Errorf("%w: %s/%s after %v", ErrAskTimeout, typ, id, time.Since(start).Round(time.Millisecond))
}

// askWaiter is where an ask waits for its reply. Waiters are reused (askWaiters) by
// the asks that got their reply; gen tells their uses apart, so that a reply that
// comes twice, or late, never reaches a later ask.
type askWaiter struct {
	ch    chan askResult // buffered: put never blocks
	timer *time.Timer    // Config.AskTimeout, for an ask whose context has no deadline
	// gen is even while the waiter waits for the reply of the ask that read it, and
	// odd (gen+1) once that reply is in ch.
	gen atomic.Uint64
}

type askResult struct {
	r   Reply
	err error
}

// askWaiters are the waiters of asks, reused.
var askWaiters = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &askWaiter{ch: make(chan askResult, 1), timer: t}
}}

// put hands the reply of the ask of generation gen to its waiter, unless that ask had
// one already or is over.
func (w *askWaiter) put(gen uint64, r Reply, err error) {
	if w.gen.CompareAndSwap(gen, gen+1) {
		w.ch <- askResult{r, err}
	}
}

// envelope is the envelope of a message first routed by the member self.
func (m Message) envelope(self string) Envelope {
	return Envelope{EntityType: m.EntityType, EntityID: m.EntityID, Payload: m.Payload, Origin: self,
		Sender: m.Sender, Kind: m.Kind, Tag: m.Tag, Chain: m.Chain}
}

// forward passes d on to the entity f names, as Entity.Receive asked: the same payload,
// sender, deadline and reply.
func (s *Sharding) forward(d delivery, f *ForwardTo) {
	if d.env.Forwards >= maxForwards {
		d.fail(fmt.Errorf("%w: %s/%s passed on %d times", ErrRoutingLoop, d.env.EntityType, d.env.EntityID, d.env.Forwards))
		return
	}
	if f.EntityID == "" {
		d.fail(ErrEmptyEntityID)
		return
	}
	env := d.env
	env.EntityType, env.EntityID = f.EntityType, f.EntityID
	env.Hops, env.Epoch, env.Origin = 0, 0, s.self
	env.Forwards++
	d.env = env
	if d.ask && !d.deadline.IsZero() && time.Now().After(d.deadline) {
		d.fail(fmt.Errorf("%w: %s/%s", ErrAskTimeout, f.EntityType, f.EntityID))
		return
	}
	s.route(d)
}

// route delivers d to its region, waiting for the entity type if this member does not
// know it yet. Failures go to d.answer.
func (s *Sharding) route(d delivery) {
	if !s.owner.Hold() {
		d.fail(ErrStopped)
		return
	}
	defer s.owner.Release()
	s.mu.Lock()
	r := s.regions[d.env.EntityType]
	if r == nil {
		if s.waiting >= s.cfg.BufferSize {
			s.mu.Unlock()
			s.deadLetter(d, ErrBufferFull)
			return
		}
		first := len(s.typeWaiters[d.env.EntityType]) == 0
		s.typeWaiters[d.env.EntityType] = append(s.typeWaiters[d.env.EntityType], d)
		s.waiting++
		s.mu.Unlock()
		if first {
			typ := d.env.EntityType
			s.owner.GoHeld(func() { s.resolveType(typ) })
		}
		return
	}
	s.mu.Unlock()
	r.deliver(d)
}

// resolveType asks the TypeResolver about a type messages wait for, then starts its
// region (which delivers them) or fails them.
func (s *Sharding) resolveType(typ string) {
	ctx, cancel := context.WithTimeout(s.owner.Context(), s.cfg.ResolveTimeout)
	defer cancel()
	settings, err := s.cfg.Types.EntityType(ctx, typ)
	if err == nil {
		_, err = s.StartType(settings)
	}
	if err != nil {
		s.mu.Lock()
		waiters := s.typeWaiters[typ]
		delete(s.typeWaiters, typ)
		s.waiting -= len(waiters)
		s.mu.Unlock()
		for _, d := range waiters {
			d.fail(err)
		}
	}
}

// ensureRegion returns the region of typ, resolving the type if needed (may block).
func (s *Sharding) ensureRegion(ctx context.Context, typ string) (*Region, error) {
	s.mu.Lock()
	r := s.regions[typ]
	s.mu.Unlock()
	if r != nil {
		return r, nil
	}
	settings, err := s.cfg.Types.EntityType(ctx, typ)
	if err != nil {
		return nil, err
	}
	return s.StartType(settings)
}

// HasRegion reports whether this member runs a region (hosting or proxy-only) of the
// entity type typ: StartType has returned it and StopType has not stopped it.
func (s *Sharding) HasRegion(typ string) bool { return s.region(typ) != nil }

func (s *Sharding) region(typ string) *Region {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.regions[typ]
}

func (s *Sharding) allRegions() []*Region {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Region, 0, len(s.regions))
	for _, r := range s.regions {
		out = append(out, r)
	}
	return out
}

func (s *Sharding) deadLetter(d delivery, err error) {
	s.countDeadLetter(d.ctx, d.env, err)
	d.fail(err)
}

// countDeadLetter counts a dropped message, by type and reason, and logs it at warn
// (rate limited: see deadLetterLog).
func (s *Sharding) countDeadLetter(ctx context.Context, env Envelope, err error) {
	s.deadLetters.Add(1)
	reason := deadLetterReason(err)
	s.tel.deadLetters.Add(context.Background(), 1, s.tel.typeAttr(env.EntityType, attrDeadLetterReason, reason))
	if suppressed, ok := s.deadLetterLog.Allow(env.EntityType+"\x00"+reason, s.cfg.Now()); ok {
		s.log.WarnContext(ctx, "dead letter", "entity", env.EntityType+"/"+env.EntityID, "reason", reason,
			"err", err, "suppressed", suppressed)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("dead letter", trace.WithAttributes(attrDeadLetterReason.String(reason)))
	}
}

// tellFailed makes a tell that failed after it left its sender (the entity refused it,
// trapped, could not be activated, its shard had no home...) a dead letter with the
// failure's code as its reason. A dropped one (buffer or mailbox full) is counted where
// it was dropped.
// tellRoutingError reports whether err is a tell's failure to be delivered from this
// member, which Tell returns: an unknown type, an empty ID, a full buffer or mailbox
// here, a stopped region.
func tellRoutingError(err error) bool {
	return errors.Is(err, ErrUnknownEntityType) || errors.Is(err, ErrEmptyEntityID) ||
		errors.Is(err, ErrBufferFull) || errors.Is(err, ErrMailboxFull) || errors.Is(err, ErrStopped)
}

func (s *Sharding) tellFailed(ctx context.Context, env Envelope, err error) {
	if errors.Is(err, ErrBufferFull) || errors.Is(err, ErrMailboxFull) {
		return
	}
	s.countDeadLetter(ctx, env, err)
}

// deadLetterReason names why a message was dropped (shardhost.dead_letter.reason).
func deadLetterReason(err error) string {
	switch {
	case errors.Is(err, ErrBufferFull):
		return "buffer-full"
	case errors.Is(err, ErrMailboxFull):
		return "mailbox-full"
	}
	return ErrorCode(err)
}

// Leaving reports whether this member has begun handing its shards off to leave.
func (s *Sharding) Leaving() bool { return s.leaving.Load() }

// DeadLetters returns how many messages became dead letters here since start: dropped
// because a buffer or mailbox was full, or tells that failed (tellFailed).
func (s *Sharding) DeadLetters() uint64 { return s.deadLetters.Load() }

// LocalState returns the shards this member hosts and their active entities, sorted,
// and the counters of its regions.
func (s *Sharding) LocalState() RegionState {
	st := RegionState{Node: s.self, Shards: []ShardState{}, DeadLetters: s.DeadLetters()}
	for _, r := range s.allRegions() {
		st.Shards = append(st.Shards, r.state()...)
		st.Passivations += r.Passivations()
		st.BufferedDuringHandoff += r.BufferedDuringHandoff()
	}
	sort.Slice(st.Shards, func(i, j int) bool {
		if st.Shards[i].Type != st.Shards[j].Type {
			return st.Shards[i].Type < st.Shards[j].Type
		}
		return st.Shards[i].ID < st.Shards[j].ID
	})
	return st
}

// ClusterShardingState asks every member for its region state and returns them sorted
// by node. Members that do not answer are listed in the error and left out. It is
// Akka's GetClusterShardingStats with the IDs of the active entities rather than their
// number; the name differs so as to suggest neither counts nor Akka's
// CurrentClusterState, which is about membership.
func (s *Sharding) ClusterShardingState(ctx context.Context) ([]RegionState, error) {
	members := s.cfg.Membership.Members()
	states := make([]RegionState, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m.Address == s.self {
			states[i] = s.LocalState()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = s.remoteState(ctx, m)
		}()
	}
	wg.Wait()
	var out []RegionState
	for i := range states {
		if errs[i] == nil {
			out = append(out, states[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, errors.Join(errs...)
}

func (s *Sharding) remoteState(ctx context.Context, m cluster.Member) (RegionState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	b, err := s.cfg.Messenger.Request(ctx, m.TransportAddr, topicRegionState, nil)
	if err != nil {
		return RegionState{}, fmt.Errorf("region state of %s: %w", m.Address, err)
	}
	var st RegionState
	if err := decode(b, &st); err != nil {
		return RegionState{}, fmt.Errorf("region state of %s: %w", m.Address, err)
	}
	return st, nil
}

// followMembership keeps regions and the coordinator in step with membership.
func (s *Sharding) followMembership() {
	tick := time.NewTicker(s.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.owner.Done():
			return
		case e := <-s.sub.C:
			s.onMemberEvent(e)
		case <-tick.C:
			s.reconcile()
			s.passivateIdle()
		}
	}
}

// onMemberEvent follows one membership event (followMembership).
func (s *Sharding) onMemberEvent(e cluster.MemberEvent) {
	switch e.Kind {
	case cluster.MemberUp:
		s.downedMu.Lock()
		delete(s.downed, e.Member.Address) // a new incarnation at the address
		delete(s.downedOlder, e.Member.Address)
		s.downedMu.Unlock()
	case cluster.MemberDowned:
		s.noteDowned(e.Member)
		s.memberRemoved(e.Member)
	case cluster.MemberExited, cluster.MemberRemoved:
		s.memberRemoved(e.Member)
	}
}

// memberRemoved makes the regions forget the member's address as a home at once (their
// messages wait for the shards' next homes); the coordinator keeps a downed member's
// allocations for DownRemovalMargin (reconcile drops them after), and those it made to
// another process at the address (coordinator.memberRemoved).
func (s *Sharding) memberRemoved(m cluster.Member) {
	addr := m.Address
	for _, r := range s.allRegions() {
		r.forgetHomesAt(func(home string) bool { return home == addr })
		r.unpauseFrom(func(by string) bool { return by == addr })
	}
	if !s.withinDownMargin(addr) {
		s.coord.memberRemoved(m)
	}
}

// passivateIdle runs each region's idle passivation.
func (s *Sharding) passivateIdle() {
	if !s.owner.Hold() {
		return
	}
	defer s.owner.Release()
	now := s.cfg.Now()
	for _, r := range s.allRegions() {
		r.passivateIdle(now)
	}
	s.idleSweeps.Add(1)
}

// hosting reports whether a member's status lets it host shards it already has: up or
// leaving (a leaving member hands its shards off before it exits). An unreachable
// member still counts until it is downed: it may be running its entities.
func hosting(m cluster.Member) bool {
	return m.Status == cluster.StatusUp || m.Status == cluster.StatusLeaving
}

// sawDowned records when this member first saw the member at addr downed.
func (s *Sharding) sawDowned(addr string) {
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	if _, ok := s.downed[addr]; !ok {
		s.downed[addr] = s.cfg.Membership.Now()
	}
}

// withinDownMargin reports whether the member at addr was downed less than
// DownRemovalMargin ago: its shards stay allocated to it meanwhile.
func (s *Sharding) withinDownMargin(addr string) bool {
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	at, ok := s.downed[addr]
	return ok && s.cfg.Membership.Now().Sub(at) < s.cfg.DownRemovalMargin
}

// noteDowned records m as downed (sawDowned), and as older than this member if it is:
// it may have run the coordinator.
func (s *Sharding) noteDowned(m cluster.Member) {
	s.sawDowned(m.Address)
	if m.IsOlderThan(s.cfg.Membership.Self()) {
		s.downedMu.Lock()
		s.downedOlder[m.Address] = true
		s.downedMu.Unlock()
	}
}

// downMarginLeft returns how long until every member seen downed that was older than
// this one (those down in the membership now included) was downed DownRemovalMargin
// ago; 0 or less if none is within the margin. Only an older member can have run the
// coordinator that this member's takes over from: a younger one's downing delays
// nothing.
func (s *Sharding) downMarginLeft() time.Duration {
	for _, m := range s.cfg.Membership.Members() {
		s.holding(m) // records members down now
	}
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	now := s.cfg.Membership.Now()
	var left time.Duration
	for addr := range s.downedOlder {
		if at, ok := s.downed[addr]; ok {
			left = max(left, s.cfg.DownRemovalMargin-now.Sub(at))
		}
	}
	return left
}

// holding reports whether m hosts (hosting), recording when it is first seen down.
// The coordinator also keeps the allocations of a member downed less than
// DownRemovalMargin ago (withinDownMargin).
func (s *Sharding) holding(m cluster.Member) bool {
	if m.Status == cluster.StatusDown {
		s.noteDowned(m)
	}
	return hosting(m)
}

// reconcile forgets homes and allocations at members that are gone, in case a removal
// event was dropped, and those of downed members once DownRemovalMargin has passed.
func (s *Sharding) reconcile() {
	alive := map[string]bool{}
	for _, m := range s.cfg.Membership.Members() {
		if s.holding(m) {
			alive[m.Address] = true
		}
	}
	gone := func(addr string) bool { return !alive[addr] }
	for _, r := range s.allRegions() {
		r.forgetHomesAt(gone)
		r.unpauseFrom(gone)
	}
	s.coord.forgetRegions(func(addr string, _ cluster.UID, _ bool) bool { return !alive[addr] && !s.withinDownMargin(addr) })
}

// transportAddr returns where to send frames for the member at addr.
func (s *Sharding) transportAddr(addr string) (string, error) {
	m, ok := s.cfg.Membership.Member(addr)
	if !ok {
		return "", fmt.Errorf("%w: member %s is not in the cluster", ErrShardUnavailable, addr)
	}
	return m.TransportAddr, nil
}

// handOffAll is the leave hook: every region hands its shards off, one at a time, so
// that they are allocated elsewhere before this member exits.
func (s *Sharding) handOffAll(ctx context.Context) error {
	s.leaving.Store(true)
	var errs []error
	for _, r := range s.allRegions() {
		errs = append(errs, r.handOff(ctx))
	}
	return errors.Join(errs...)
}

// typeSettings returns a type's settings as this member knows them (defaults for a type
// it has no region of).
func (s *Sharding) typeSettings(typ string) TypeSettings {
	if r := s.region(typ); r != nil {
		return r.Settings()
	}
	return TypeSettings{Name: typ, Allocation: AllocationLeastShard}
}
