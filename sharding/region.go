package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
)

// shardRegion is the shard region of one entity type on this member (Akka's
// ShardRegion): it hosts the shards the coordinator allocated here, forwards messages
// for other shards to their regions, and buffers messages for shards whose home it is
// resolving.
type shardRegion struct {
	s        *Sharding
	settings TypeSettings // Name and NumberOfShards read freely; the rest under mu
	// current is a copy of settings for Settings, which every message reads: loading it
	// takes no lock (the region's lock is the one routing contends on).
	current atomic.Pointer[TypeSettings]

	mu sync.Mutex
	// slots holds what the region knows of each shard it has dealt with: whether it
	// hosts it, its home elsewhere, the messages waiting for it. At most NumberOfShards.
	slots    map[int]*shardSlot
	buffered int // messages waiting in the slots' pending buffers
	// lives maps an entity ID to the entity here that has, or is making, its instance
	// (entity.claimLife): one per ID across every copy of its shard here, so that a
	// copy hosted anew does not start the entity beside the dropped copy's, still
	// stopping.
	lives map[string]*entity
	// afterLookup, when set (by tests, before any message), runs in deliver between an
	// entity's lookup in its shard's map and the delivery to its mailbox, with its ID.
	afterLookup func(id string)

	tel regionTelemetry

	// firer delivers the due reminders of the type's shards hosted here.
	firer reminderFirer

	// evictMu guards policy, which tracks the active entities for MaxActive by the
	// type's PassivationStrategy (nil: no cap). Taken after mu when both are held.
	evictMu sync.Mutex
	policy  policy[*entity]

	passivations atomic.Uint64 // entities passivated, for inspection and tests
	expired      atomic.Uint64 // entities whose state the state TTL deleted (statettl.go)
	// counters counts the messages its entities handled (Sharding.Counters).
	counters regionCounters
	// handoffBuffered counts the messages buffered because their shard was being handed
	// off (here or by another region), since start.
	handoffBuffered atomic.Uint64
}

// shard is a hosted shard: its active entities and its allocation epoch.
type shard struct {
	id       int
	epoch    uint64
	entities map[string]*entity
	rem      *shardReminders // the shard's next reminder (reminders_run.go)
}

// shardSlot is a region's routing state of one shard. r.mu guards it.
type shardSlot struct {
	hosted *shard     // the shard lives here (nil otherwise)
	home   allocation // its home elsewhere, when known (home.region != "")

	pending   []delivery // messages waiting for the shard's home
	returned  int        // messages given back to this region, at the head of pending
	resolving bool       // the coordinator is being asked for the shard's home
	handing   bool       // this region hands the shard off: remote messages go back
	paused    bool       // another region (pausedBy) hands the shard off: messages wait
	pausedBy  string

	// Spans that buffered messages link to: the resolution of the shard's home, this
	// region's handoff of it, another region's handoff (from its BeginHandOff).
	resolveSpan, handoffSpan, pauseSpan trace.SpanContext
	handoffMsgs                         int // buffered during this region's handoff of the shard

	fence *shardFence // the newest fence of the shard's state from here (fenceShard)
}

// shardFence is a fence of a shard's state at an allocation epoch (ShardFencer),
// written or being written from this region.
type shardFence struct {
	epoch uint64
	done  chan struct{} // closed once err is set
	err   error
}

// failed reports whether the fence is done and failed.
func (f *shardFence) failed() bool {
	select {
	case <-f.done:
		return f.err != nil
	default:
		return false
	}
}

// fenceShard fences the shard's state in the store at epoch (ShardFencer), before this
// region first reads it at that epoch (an entity's activation, the shard's remembered
// entities): from then on no write of a former owner of the shard (an older epoch) is
// acknowledged, so what the read finds is all a former owner had acknowledged, and
// nothing acknowledged to it later is overwritten. Once per shard and epoch: the first
// caller writes the fence (one round trip to the store, bounded by RequestTimeout
// whatever its own context), those that come meanwhile wait for it, later ones find it
// done; a failed fence is written again by the next caller. Nothing to do without a
// store, or with a store that is no ShardFencer. Errors: FenceShard's (ErrStaleEpoch:
// the shard has a newer allocation elsewhere), ErrStoreUnavailable when ctx ends
// first.
func (r *shardRegion) fenceShard(ctx context.Context, shardID int, epoch uint64) error {
	if r.s.fence == nil {
		return nil
	}
	r.mu.Lock()
	sl := r.slotLocked(shardID)
	f, lead := sl.fence, false
	if f == nil || f.epoch < epoch || f.failed() {
		f, lead = &shardFence{epoch: epoch, done: make(chan struct{})}, true
		sl.fence = f
	}
	r.mu.Unlock()
	if lead {
		fctx, cancel := context.WithTimeout(withTraceOf(r.s.owner.Context(), ctx), r.s.cfg.RequestTimeout)
		f.err = r.s.fence(fctx, r.settings.Name, shardID, f.epoch)
		cancel()
		close(f.done)
	}
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the fence of %s/%d at epoch %d: %w", ErrStoreUnavailable, r.settings.Name, shardID, f.epoch, ctx.Err())
	}
}

// idle reports whether nothing is resolving or handing the shard off, here or in
// another region: a message that waits for it must start a resolution.
func (sl *shardSlot) idle() bool { return !sl.resolving && !sl.handing && !sl.paused }

// slotLocked returns the slot of a shard, made if new. r.mu is held.
func (r *shardRegion) slotLocked(shardID int) *shardSlot {
	sl := r.slots[shardID]
	if sl == nil {
		sl = &shardSlot{}
		r.slots[shardID] = sl
	}
	return sl
}

// hostedLocked returns the shard if it lives here, else nil. r.mu is held.
func (r *shardRegion) hostedLocked(shardID int) *shard {
	if sl := r.slots[shardID]; sl != nil {
		return sl.hosted
	}
	return nil
}

// eachHostedLocked calls f for every shard hosted here. r.mu is held.
func (r *shardRegion) eachHostedLocked(f func(*shard)) {
	for _, sl := range r.slots {
		if sl.hosted != nil {
			f(sl.hosted)
		}
	}
}

// startResolvingLocked marks a shard's home as being resolved and starts the span of
// that resolution, in the trace of ctx; the caller runs resolve with what it returns
// (through resolveInBackground) once it has let go of r.mu.
func (r *shardRegion) startResolvingLocked(sl *shardSlot, shardID int, ctx context.Context) (context.Context, trace.Span) {
	sl.resolving = true
	return r.startResolveSpanLocked(sl, shardID, ctx)
}

// takePendingLocked empties a shard's buffer and returns what waited, in order. r.mu
// is held.
func (r *shardRegion) takePendingLocked(sl *shardSlot) []delivery {
	pending := sl.pending
	sl.pending, sl.returned = nil, 0
	r.buffered -= len(pending)
	return pending
}

// resolveInBackground runs resolve on a goroutine Sharding owns; if Sharding is
// stopping, the shard's buffered messages fail with ErrStopped instead.
func (r *shardRegion) resolveInBackground(ctx context.Context, span trace.Span, shardID int) {
	if !r.s.owner.Go(func() { r.resolve(ctx, span, shardID) }) {
		span.End()
		r.failPending(shardID, ErrStopped)
	}
}

func newRegion(s *Sharding, t TypeSettings) *shardRegion {
	r := &shardRegion{s: s, settings: t, slots: map[int]*shardSlot{}, lives: map[string]*entity{}, tel: newRegionTelemetry(t.Name)}
	r.current.Store(&t)
	r.policy = newRegionPolicy(t)
	return r
}

// newRegionPolicy is the policy of t's MaxActive and PassivationStrategy, or nil
// without a cap. t was validated.
func newRegionPolicy(t TypeSettings) policy[*entity] {
	if t.MaxActive <= 0 {
		return nil
	}
	p, err := newPolicy(t.PassivationStrategy, t.MaxActive, func(e *entity) uint64 { return fnv64(e.id) })
	if err != nil {
		return newLRUPolicy[*entity](t.MaxActive) // unreachable after Validate
	}
	return p
}

// Settings returns the region's entity type settings. It takes no lock.
func (r *shardRegion) Settings() TypeSettings {
	return *r.current.Load()
}

// updateSettings applies a redeployment's settings. Name and NumberOfShards never
// change (they are read without the lock); the other fields are read with it.
func (r *shardRegion) updateSettings(t TypeSettings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings.Role, r.settings.Allocation, r.settings.Checkpoint = t.Role, t.Allocation, t.Checkpoint
	changed := r.settings.MaxActive != t.MaxActive || r.settings.PassivationStrategy != t.PassivationStrategy
	r.settings.PassivateAfter, r.settings.MaxActive, r.settings.RememberEntities = t.PassivateAfter, t.MaxActive, t.RememberEntities
	r.settings.PassivationStrategy = t.PassivationStrategy
	if changed {
		// A new policy starts from the entities active now, in no particular order of
		// use; the ones past a lowered cap are passivated.
		p := newRegionPolicy(t)
		var victims []*entity
		r.evictMu.Lock()
		if p != nil {
			r.eachHostedLocked(func(sh *shard) {
				for _, e := range sh.entities {
					e.mu.Lock()
					live := e.live
					e.mu.Unlock()
					if live {
						victims = append(victims, p.add(e)...)
					}
				}
			})
		}
		r.policy = p
		r.evictMu.Unlock()
		for _, v := range victims {
			v.passivateSoon(causeMaxActive)
		}
	}
	cur := r.settings
	r.current.Store(&cur)
}

// deliver routes d: to a local entity, to the region hosting its shard, or into the
// buffer while the shard's home is resolved. Messages of one sender keep their order:
// buffered messages are flushed under the region's lock before any later one passes.
// The caller holds the Sharding's owner (Hold).
func (r *shardRegion) deliver(d delivery) {
	shardID := abi.ShardID(d.env.EntityID, r.settings.NumberOfShards)
	r.mu.Lock()
	sl := r.slotLocked(shardID)
	if sh := sl.hosted; sh != nil {
		if d.env.Epoch > sh.epoch {
			// The sender knows a newer allocation of the shard: this copy is stale.
			r.dropStaleLocked(sh)
		} else {
			e := r.entityLocked(sh, d.env.EntityID)
			r.mu.Unlock()
			if r.afterLookup != nil {
				r.afterLookup(d.env.EntityID)
			}
			d.handing()
			e.enqueue(d) // routes d again if e is gone meanwhile
			return
		}
	}
	if home := sl.home; home.region != "" {
		r.mu.Unlock()
		r.forward(home, shardID, d)
		return
	}
	if sl.handing && d.env.Origin != "" && d.env.Origin != r.s.self {
		// Handed off here: the message goes back to its sender's region, which keeps
		// it ahead of what it buffered since the handoff began.
		r.mu.Unlock()
		r.giveBack(d)
		return
	}
	if r.buffered >= r.s.cfg.BufferSize {
		r.mu.Unlock()
		r.s.deadLetter(d, ErrBufferFull)
		return
	}
	// While the shard is handed off (here or elsewhere), its messages wait: the handoff
	// resolves them when it completes.
	if sl.paused || sl.handing {
		r.handoffBuffered.Add(1)
	}
	start := sl.idle()
	var rctx context.Context
	var rspan trace.Span
	if start {
		rctx, rspan = r.startResolvingLocked(sl, shardID, d.ctx)
	}
	sl.pending = append(sl.pending, r.bufferLocked(sl, shardID, d))
	r.buffered++
	r.mu.Unlock()
	if start {
		r.s.owner.GoHeld(func() { r.resolve(rctx, rspan, shardID) })
	}
}

// bufferLocked records that d waits in the shard's buffer: counted, and, in a traced
// context, a "buffered" span, linked to what holds it (the handoff of the shard, here
// or by another region, or the resolution of its home), that ends when it leaves the
// buffer (unbuffered). r.mu is held.
func (r *shardRegion) bufferLocked(sl *shardSlot, shardID int, d delivery) delivery {
	reason, link := bufferResolving, sl.resolveSpan
	if sl.paused {
		reason, link = bufferHandoff, sl.pauseSpan
	} else if sl.handing {
		reason, link = bufferHandoff, sl.handoffSpan
		sl.handoffMsgs++
	}
	r.s.tel.buffered.Add(context.Background(), 1, r.s.tel.typeAttr(r.settings.Name, attrBufferReason, reason))
	if !r.s.tel.traced || d.wait != nil || !obs.Traced(d.ctx) {
		return d
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(obs.EntityType.String(r.settings.Name),
		obs.EntityID.String(d.env.EntityID), obs.ShardID.Int(shardID), obs.Node.String(r.s.self),
		attrBufferReason.String(reason))}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	_, d.wait = r.s.tracer.Start(d.ctx, r.tel.bufferedName, opts...)
	return d
}

// unbuffered ends the span of d's wait in a buffer, if any.
func (d *delivery) unbuffered() {
	if d.wait != nil {
		d.wait.End()
		d.wait = nil
	}
}

// startResolveSpanLocked starts the span of the resolution of a shard's home, in the
// trace of the message that made it start (ctx), and records it for the messages
// buffered meanwhile to link to. r.mu is held.
func (r *shardRegion) startResolveSpanLocked(sl *shardSlot, shardID int, ctx context.Context) (context.Context, trace.Span) {
	ctx = context.WithoutCancel(ctx)
	if !r.s.tel.traced || !obs.Traced(ctx) {
		return ctx, noopSpan
	}
	ctx, span := r.s.tracer.Start(ctx, r.tel.resolveName, trace.WithAttributes(obs.EntityType.String(r.settings.Name),
		obs.ShardID.Int(shardID), obs.Node.String(r.s.self)))
	sl.resolveSpan = span.SpanContext()
	return ctx, span
}

// firstPendingCtx is the context of the first message waiting for a shard (a resolution
// it starts is in its trace), or context.Background().
func (sl *shardSlot) firstPendingCtx() context.Context {
	if len(sl.pending) > 0 && sl.pending[0].ctx != nil {
		return sl.pending[0].ctx
	}
	return context.Background()
}

// activated is called on an entity's goroutine after it got an instance: over the
// type's MaxActive, the entities its PassivationStrategy chooses are passivated (one
// in hand finishes its message first).
func (r *shardRegion) activated(e *entity) {
	r.evictMu.Lock()
	var victims []*entity
	if r.policy != nil {
		victims = r.policy.add(e)
	}
	r.evictMu.Unlock()
	for _, v := range victims {
		v.passivateSoon(causeMaxActive)
	}
}

// used counts a message e handled, for the passivation strategy.
func (r *shardRegion) used(e *entity) {
	if r.current.Load().MaxActive <= 0 {
		return
	}
	r.evictMu.Lock()
	var victims []*entity
	if r.policy != nil {
		e.mu.Lock()
		live := e.live
		e.mu.Unlock()
		if live {
			victims = r.policy.access(e)
		}
	}
	r.evictMu.Unlock()
	for _, v := range victims {
		v.passivateSoon(causeMaxActive)
	}
}

// released forgets a stopped entity in the passivation strategy.
func (r *shardRegion) released(e *entity) {
	r.evictMu.Lock()
	if r.policy != nil {
		r.policy.remove(e)
	}
	r.evictMu.Unlock()
}

// passivateIdle passivates the entities idle for longer than the type's PassivateAfter,
// and forgets entities without instance or messages. The caller holds s.owner
// (Hold).
func (r *shardRegion) passivateIdle(now time.Time) {
	r.mu.Lock()
	after := r.settings.PassivateAfter
	var idle []*entity
	r.eachHostedLocked(func(sh *shard) {
		for id, e := range sh.entities {
			e.mu.Lock()
			quiet := !e.running && e.queued() == 0
			if quiet && !e.live && !e.ob.busy() {
				// Nothing to keep: a new message makes a new one. (A mailbox whose
				// outbox still sends is kept: a new one would send it again beside it.)
				e.gone = true
				delete(sh.entities, id)
			} else if quiet && after > 0 && now.Sub(e.lastUsed) > after {
				idle = append(idle, e)
			}
			e.mu.Unlock()
		}
	})
	r.mu.Unlock()
	for _, e := range idle {
		e.passivate(causeIdle)
	}
}

// BufferedDuringHandoff returns how many messages the region buffered because their
// shard was being handed off, since start.
func (r *shardRegion) BufferedDuringHandoff() uint64 { return r.handoffBuffered.Load() }

// Passivations returns how many entities of the region were passivated.
func (r *shardRegion) Passivations() uint64 { return r.passivations.Load() }

func (r *shardRegion) entityLocked(sh *shard, id string) *entity {
	e := sh.entities[id]
	if e == nil {
		e = newEntity(r, sh.id, id, sh.epoch)
		sh.entities[id] = e
	}
	return e
}

// dropStale stops hosting a shard whose allocation here is older than epoch: the
// coordinator allocated it again since. Its entities stop without saving state (a stale
// host's writes would be refused anyway).
func (r *shardRegion) dropStale(shardID int, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sh := r.hostedLocked(shardID); sh != nil && sh.epoch < epoch {
		r.dropStaleLocked(sh)
	}
}

func (r *shardRegion) dropStaleLocked(sh *shard) {
	r.s.log.Warn("stale shard allocation: stopping the shard here", "type", r.settings.Name, "shard", sh.id, "epoch", sh.epoch)
	r.slots[sh.id].hosted = nil
	sh.stopReminders()
	for _, e := range sh.entities {
		e.fenced.Store(true)
		// Soon, not now: an entity whose mailbox goroutine is still busy (its last
		// reply sent, its bookkeeping not yet done) would refuse a passivation now
		// and live on beside the shard's new home.
		e.passivateSoon(causeStale)
	}
}

// stopForLease stops every entity hosted here without saving, when this member's
// hosting lease lapses (Sharding.watchLease): at once if idle, else after the message
// it is on (which fails, as the lease has lapsed). The shards stay here: their next
// messages activate the entities again, from their saved state, once the lease is
// back. It returns how many entities it stops.
func (r *shardRegion) stopForLease() int {
	all := r.hostedEntities()
	n := 0
	for _, e := range all {
		if e.active() {
			n++
		}
		e.passivateSoon(causeLease)
	}
	return n
}

// notAnotherProcess refuses a home at this member's address allocated to another
// process there (a previous incarnation whose allocations the coordinator has not
// forgotten yet): not this process's to host (faults seed 2443). Errors:
// ErrShardUnavailable.
func (s *Sharding) notAnotherProcess(ref shardRef, home shardHome) error {
	self := uint64(s.cfg.Membership.Self().UID)
	if home.Region != s.self || home.Process == 0 || home.Process == self {
		return nil
	}
	return fmt.Errorf("%w: %s is allocated to process %016x at this address, this is %016x",
		ErrShardUnavailable, ref, home.Process, self)
}

// resolve asks the coordinator for a shard's home until it answers or ResolveTimeout
// passes, then flushes the shard's buffered messages. span (the "shard home" span, in
// ctx) ends with it.
func (r *shardRegion) resolve(ctx context.Context, span trace.Span, shardID int) {
	ref := shardRef{Type: r.settings.Name, Shard: shardID}
	deadline := time.Now().Add(r.s.cfg.ResolveTimeout)
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		home, err := r.s.shardHome(ctx, ref)
		if err == nil {
			err = r.s.notAnotherProcess(ref, home)
		}
		if err == nil {
			span.SetAttributes(attrHome.String(home.Region), attrEpoch.Int64(int64(home.Epoch)))
			span.End()
			r.resolved(shardID, home)
			return
		}
		if errors.Is(err, ErrStopped) || time.Now().After(deadline) {
			r.s.log.WarnContext(ctx, "shard home not resolved", "shard", ref.String(), "err", err)
			err = wrapCause(ErrShardUnavailable, ref.String(), err)
			failSpan(span, err)
			span.End()
			r.failPending(shardID, err)
			return
		}
		r.s.log.DebugContext(ctx, "retrying shard home", "shard", ref.String(), "err", err)
		span.AddEvent("retry", trace.WithAttributes(obs.ErrorType.String(ErrorCode(err))))
		select {
		case <-r.s.owner.Done():
			failSpan(span, ErrStopped)
			span.End()
			r.failPending(shardID, ErrStopped)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// resolved records a shard's home and flushes its buffer there, in order.
func (r *shardRegion) resolved(shardID int, h shardHome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := r.slotLocked(shardID)
	sl.resolving, sl.resolveSpan = false, trace.SpanContext{}
	if sl.paused || sl.handing {
		return // a handoff began meanwhile: its completion resolves again
	}
	if h.Region == r.s.self {
		r.hostShardLocked(shardID, h.Epoch)
		return
	}
	sl.home = allocation{h.Region, h.Epoch}
	for _, d := range r.takePendingLocked(sl) {
		d.unbuffered()
		r.forward(sl.home, shardID, d)
	}
}

func (r *shardRegion) failPending(shardID int, err error) {
	r.mu.Lock()
	sl := r.slotLocked(shardID)
	sl.resolving, sl.resolveSpan = false, trace.SpanContext{}
	pending := r.takePendingLocked(sl)
	r.mu.Unlock()
	for _, d := range pending {
		d.unbuffered()
		d.fail(err)
	}
}

// hostShard makes this region the home of a shard under an allocation epoch (the
// coordinator's HostShard).
func (r *shardRegion) hostShard(shardID int, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hostShardLocked(shardID, epoch)
}

// hostShardLocked hosts a shard here and delivers the messages buffered for it, in
// order, before any later message can reach the shard's entities.
func (r *shardRegion) hostShardLocked(shardID int, epoch uint64) *shard {
	sl := r.slotLocked(shardID)
	sh := sl.hosted
	if sh == nil {
		sh = &shard{id: shardID, epoch: epoch, entities: map[string]*entity{}, rem: &shardReminders{inflight: map[reminderFiring]bool{}}}
		sl.hosted, sl.home = sh, allocation{}
		// Hosted anew: fenced anew, even at an epoch fenced from here before it left
		// (a stale coordinator's allocation may bring it back at that epoch after a
		// newer owner fenced it: faults seed 2204).
		sl.fence = nil
		r.s.log.Debug("hosting shard", "type", r.settings.Name, "shard", shardID, "epoch", epoch)
		if r.s.cfg.States != nil && (r.settings.RememberEntities || r.s.journal != nil) {
			r.s.owner.Go(func() { r.restartRemembered(sh) })
		}
		if r.s.reminders != nil {
			// The shard's reminders: those due fire now, the next sets its timer.
			r.s.owner.Go(func() { r.scanReminders(sh) })
		}
	} else if epoch > sh.epoch {
		r.s.log.Debug("hosting shard at a newer epoch", "type", r.settings.Name, "shard", shardID, "epoch", epoch, "was", sh.epoch)
		sh.epoch = epoch
		for _, e := range sh.entities {
			e.setEpoch(epoch)
		}
	}
	for _, d := range r.takePendingLocked(sl) {
		d.unbuffered()
		d.handing()
		r.entityLocked(sh, d.env.EntityID).enqueue(d)
	}
	return sh
}

// restartRemembered starts the remembered entities of a shard that came here, if its
// type remembers them, and, if the store keeps journals, the entities whose outbox
// marks it holds (outboxMarkPrefix), whose activations send their outboxes again.
func (r *shardRegion) restartRemembered(sh *shard) {
	r.mu.Lock()
	epoch := sh.epoch
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.RequestTimeout)
	err := r.fenceShard(ctx, sh.id, epoch)
	cancel()
	var ids []string
	if err == nil {
		ctx, cancel = context.WithTimeout(context.Background(), r.s.cfg.RequestTimeout)
		ids, err = r.s.cfg.States.Remembered(ctx, r.settings.Name, sh.id)
		cancel()
	}
	if errors.Is(err, ErrStaleEpoch) {
		r.s.log.Warn("the state store has a newer allocation of a shard that came here", "type", r.settings.Name, "shard", sh.id,
			"epoch", epoch, "err", err)
		r.dropStale(sh.id, epoch+1)
		return
	}
	if err != nil {
		r.s.log.Warn("cannot read the remembered entities of a shard", "type", r.settings.Name, "shard", sh.id, "err", err)
		return
	}
	if !r.s.owner.Hold() {
		return
	}
	defer r.s.owner.Release()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hostedLocked(sh.id) != sh {
		return // handed off meanwhile
	}
	var remembered, outboxes []string
	for _, id := range ids {
		switch {
		case isOutboxMark(id):
			if r.s.journal != nil {
				outboxes = append(outboxes, strings.TrimPrefix(id, outboxMarkPrefix))
			}
		case IsReminderID(id): // a store's reminder records (RemindersOf)
		case r.settings.RememberEntities:
			remembered = append(remembered, id)
		}
	}
	for _, id := range remembered {
		r.entityLocked(sh, id).enqueue(delivery{start: true, ctx: context.Background()})
	}
	for _, id := range outboxes {
		e := r.entityLocked(sh, id)
		// The store holds its mark: cleared once the outbox its activation finds
		// drains and the entity passivates.
		e.ob.mu.Lock()
		e.ob.dirty = true
		e.ob.mu.Unlock()
		if _, started := slices.BinarySearch(remembered, id); !started {
			e.enqueue(delivery{start: true, ctx: context.Background()})
		}
	}
	if len(remembered) > 0 {
		r.s.log.Info("restarting remembered entities", "type", r.settings.Name, "shard", sh.id, "entities", len(remembered))
	}
	if len(outboxes) > 0 {
		r.s.log.Info("restarting entities whose outboxes hold unacknowledged tells", "type", r.settings.Name, "shard", sh.id,
			"entities", len(outboxes))
	}
}

// forgetHomesAt drops cached homes at members for which gone returns true, so that their
// shards are resolved anew.
func (r *shardRegion) forgetHomesAt(gone func(string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sl := range r.slots {
		if sl.home.region != "" && gone(sl.home.region) {
			sl.home = allocation{}
		}
	}
}

// forward sends d to the region at home. It may be called with r.mu held: it only
// queues frames and never calls back into the region.
func (r *shardRegion) forward(a allocation, shardID int, d delivery) {
	home := a.region
	if d.env.Hops >= maxHops {
		d.fail(fmt.Errorf("%w: %s/%s after %d hops", ErrRoutingLoop, d.env.EntityType, d.env.EntityID, d.env.Hops))
		return
	}
	to, err := r.s.transportAddr(home)
	if err != nil {
		d.fail(err)
		return
	}
	d.handing()
	now := time.Now()
	if d.expired(now) {
		r.s.dropExpired(d, now)
		return
	}
	env := d.env
	env.Hops++
	env.Epoch = a.epoch
	env.TimeLeft = d.timeLeft(now)
	withWireBuf(func(b []byte) []byte { return appendEnvelope(b, &env) }, func(body []byte) {
		r.send(d, home, to, body)
	})
}

// send sends d's envelope, encoded as body, to the region at home (transport address
// to), and has the reply of an ask (or the failure) given to d. The messenger keeps
// no body once it returns (withWireBuf).
func (r *shardRegion) send(d delivery, home, to string, body []byte) {
	// The messenger carries the trace in the frame, under a CLIENT span for an ask.
	if !d.ask {
		if err := r.s.cfg.Messenger.TellContext(d.ctx, to, topicDeliver, body); err != nil {
			d.fail(fmt.Errorf("%w: forwarding to %s: %v", ErrShardUnavailable, home, err))
		}
		return
	}
	timeout := time.Until(d.deadline)
	if timeout <= 0 {
		timeout = time.Millisecond
	}
	r.s.cfg.Messenger.RequestAsyncContext(d.ctx, to, topicDeliver, body, timeout, func(b []byte, err error) {
		if err != nil {
			d.fail(forwardFailure(home, err))
			return
		}
		var w wireReply
		if err := decodeWireReply(b, &w); err != nil {
			d.fail(err)
			return
		}
		if w.Code == codeHandedOff {
			// The shard is being handed off: route the message again from here.
			r.reroute(d)
			return
		}
		if w.Code != "" {
			d.fail(&RemoteError{Code: w.Code, Message: w.Error, Node: w.Node})
			return
		}
		d.answer(Reply{Payload: w.Payload, Node: w.Node}, nil)
	})
}

// forwardFailure is the failure of an ask forwarded to the region at home whose
// request failed with err: not delivered if it was never sent (cluster.ErrNotSent:
// the member could not be reached), else of unknown outcome (no reply in time, or
// none at all: the member may have handled it).
func forwardFailure(home string, err error) error {
	kind, code := ErrOutcomeUnknown, CodeOutcomeUnknown
	if errors.Is(err, cluster.ErrNotSent) {
		kind, code = ErrNotDelivered, CodeNotDelivered
	}
	return &RemoteError{Code: code, Message: fmt.Sprintf("%v: forwarding to %s: %v", kind, home, err), Node: home}
}

// state lists the region's shards and active entities, sorted.
func (r *shardRegion) state() []ShardState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []ShardState{}
	r.eachHostedLocked(func(sh *shard) {
		ss := ShardState{Type: r.settings.Name, ID: sh.id, Epoch: sh.epoch}
		for eid, e := range sh.entities {
			if e.active() {
				ss.Entities = append(ss.Entities, eid)
			}
		}
		sort.Strings(ss.Entities)
		out = append(out, ss)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// hostedEntities returns the entities of every shard the region hosts, taken under its
// lock.
func (r *shardRegion) hostedEntities() []*entity {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []*entity
	r.eachHostedLocked(func(sh *shard) {
		for _, e := range sh.entities {
			all = append(all, e)
		}
	})
	return all
}

// abortIdleEntities stops, without saving, every entity of the region that no
// goroutine drains (Sharding.Abort): it takes the mailbox as a drain would.
func (r *shardRegion) abortIdleEntities(ctx context.Context) {
	all := r.hostedEntities()
	for _, e := range all {
		e.mu.Lock()
		if e.running {
			e.mu.Unlock()
			continue
		}
		e.running = true
		e.mu.Unlock()
		e.fenced.Store(true)
		e.stop(ctx, false)
		e.failQueued(ErrStopped)
	}
}

// stopEntities stops every entity of the region; called by Sharding.Stop once no
// mailbox goroutine runs.
func (r *shardRegion) stopEntities(ctx context.Context, save bool) {
	all := r.hostedEntities()
	for _, e := range all {
		if save {
			e.passivateNow(ctx, causeShutdown, trace.SpanContext{})
		} else {
			e.stop(ctx, false)
		}
	}
}
