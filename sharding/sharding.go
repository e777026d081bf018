package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
)

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
	// or there is no store: shardRegion.fenceShard.
	fence stateFenceFunc
	// journal is the state store's JournalStore, or nil when it keeps no journals or
	// there is no store: entities of types that journal then save a snapshot before
	// each reply instead (entity.go).
	journal JournalStore
	// reminders keeps the entities' reminders (RemindersOf the state store), or nil
	// without a store.
	reminders ReminderStore

	// owner owns the goroutines of s. Everything that may start one holds it (Hold)
	// or runs on one; Stop closes it.
	owner *owner.Group

	mu          sync.Mutex
	regions     map[string]*shardRegion
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
	// writeCtx is the deadline that journal appends share (writeContext).
	writeCtx atomic.Pointer[sharedDeadline]
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
	var journal JournalStore
	if cfg.States != nil {
		cfg.States, fence, journal = instrumentStateStore(cfg.States, self, cfg.TracerProvider, cfg.MeterProvider)
	}
	s := &Sharding{
		cfg:           cfg,
		fence:         fence,
		journal:       journal,
		log:           cfg.Logger,
		tracer:        tel.tracer,
		tel:           tel,
		self:          self,
		owner:         owner.New(),
		reminders:     remindersOf(cfg.States),
		regions:       map[string]*shardRegion{},
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
	cfg.Messenger.Handle(topicListEntities, s.handleListEntities)
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
	s.owner.Go(s.expireLoop)
	if s.lease > 0 {
		s.owner.Go(s.watchLease)
	}
	return s, nil
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
	regions := make([]*shardRegion, 0, len(s.regions))
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

	for _, r := range regions {
		r.mu.Lock()
		r.eachHostedLocked(func(sh *shard) { sh.stopReminders() })
		r.mu.Unlock()
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
// is refused: shard IDs are fixed for the life of the cluster. Errors: the settings'
// own (TypeSettings.Validate), ErrStopped, a change of NumberOfShards.
func (s *Sharding) StartType(t TypeSettings) error {
	_, err := s.startType(t)
	return err
}

// startType is StartType, returning the region.
func (s *Sharding) startType(t TypeSettings) (*shardRegion, error) {
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
