package sharding

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/obs"
)

// Region is the shard region of one entity type on this member (Akka's ShardRegion): it
// hosts the shards the coordinator allocated here, forwards messages for other shards to
// their regions, and buffers messages for shards whose home it is resolving.
type Region struct {
	s        *Sharding
	settings TypeSettings

	mu        sync.Mutex
	shards    map[int]*shard     // hosted here
	homes     map[int]allocation // known homes elsewhere, with their epochs
	pending   map[int][]delivery // waiting for their shard's home
	resolving map[int]bool       // shards whose home is being asked for
	handing   map[int]bool       // shards this region hands off: remote messages go back
	paused    map[int]string     // shards another region (this member address) hands off: messages wait here
	returned  map[int]int        // messages given back to us, at the head of pending
	buffered  int                // messages in pending
	// Spans that buffered messages link to: the resolution of a shard's home, this
	// region's handoff of a shard, another region's handoff (from its BeginHandOff).
	resolveSpans, handoffSpans, pauseSpans map[int]trace.SpanContext
	handoffMsgs                            map[int]int // buffered here during this region's handoff of a shard

	tel regionTelemetry

	passivations atomic.Uint64 // entities passivated, for inspection and tests
	// handoffBuffered counts the messages buffered because their shard was being handed
	// off (here or by another region), since start.
	handoffBuffered atomic.Uint64
}

// shard is a hosted shard: its active entities and its allocation epoch.
type shard struct {
	id       int
	epoch    uint64
	entities map[string]*entity
}

func newRegion(s *Sharding, t TypeSettings) *Region {
	return &Region{
		s:         s,
		settings:  t,
		shards:    map[int]*shard{},
		homes:     map[int]allocation{},
		pending:   map[int][]delivery{},
		resolving: map[int]bool{},
		handing:   map[int]bool{},
		paused:    map[int]string{},
		returned:  map[int]int{},

		resolveSpans: map[int]trace.SpanContext{},
		handoffSpans: map[int]trace.SpanContext{},
		pauseSpans:   map[int]trace.SpanContext{},
		handoffMsgs:  map[int]int{},
		tel:          newRegionTelemetry(t.Name),
	}
}

// Settings returns the region's entity type settings.
func (r *Region) Settings() TypeSettings {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.settings
}

// updateSettings applies a redeployment's settings. Name and NumberOfShards never
// change (they are read without the lock); the other fields are read with it.
func (r *Region) updateSettings(t TypeSettings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings.Role, r.settings.Allocation, r.settings.Checkpoint = t.Role, t.Allocation, t.Checkpoint
	r.settings.PassivateAfter, r.settings.MaxActive, r.settings.RememberEntities = t.PassivateAfter, t.MaxActive, t.RememberEntities
}

// deliver routes d: to a local entity, to the region hosting its shard, or into the
// buffer while the shard's home is resolved. Messages of one sender keep their order:
// buffered messages are flushed under the region's lock before any later one passes.
// The caller holds the Sharding's stopMu for reading.
func (r *Region) deliver(d delivery) {
	shardID := abi.ShardID(d.env.EntityID, r.settings.NumberOfShards)
	r.mu.Lock()
	if sh := r.shards[shardID]; sh != nil {
		if d.env.Epoch > sh.epoch {
			// The sender knows a newer allocation of the shard: this copy is stale.
			r.dropStaleLocked(sh)
		} else {
			e := r.entityLocked(sh, d.env.EntityID)
			r.mu.Unlock()
			e.enqueue(d)
			return
		}
	}
	if home, ok := r.homes[shardID]; ok {
		r.mu.Unlock()
		r.forward(home, shardID, d)
		return
	}
	if r.handing[shardID] && d.env.Origin != "" && d.env.Origin != r.s.self {
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
	_, paused := r.paused[shardID]
	if paused || r.handing[shardID] {
		r.handoffBuffered.Add(1)
	}
	start := !r.resolving[shardID] && !r.handing[shardID] && !paused
	var rctx context.Context
	var rspan trace.Span
	if start {
		r.resolving[shardID] = true
		rctx, rspan = r.startResolveLocked(shardID, d.ctx)
	}
	r.pending[shardID] = append(r.pending[shardID], r.bufferLocked(shardID, d))
	r.buffered++
	r.mu.Unlock()
	if start {
		// deliver runs with stopMu held for reading, so the WaitGroup may grow.
		r.s.wg.Add(1)
		go func() {
			defer r.s.wg.Done()
			r.resolve(rctx, rspan, shardID)
		}()
	}
}

// bufferLocked records that d waits in the shard's buffer: counted, and, in a traced
// context, a "buffered" span, linked to what holds it (the handoff of the shard, here
// or by another region, or the resolution of its home), that ends when it leaves the
// buffer (unbuffered). r.mu is held.
func (r *Region) bufferLocked(shardID int, d delivery) delivery {
	reason, link := bufferResolving, r.resolveSpans[shardID]
	if _, paused := r.paused[shardID]; paused {
		reason, link = bufferHandoff, r.pauseSpans[shardID]
	} else if r.handing[shardID] {
		reason, link = bufferHandoff, r.handoffSpans[shardID]
		r.handoffMsgs[shardID]++
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

// startResolveLocked starts the span of the resolution of a shard's home, in the trace of
// the message that made it start (ctx), and records it for the messages buffered
// meanwhile to link to. r.mu is held.
func (r *Region) startResolveLocked(shardID int, ctx context.Context) (context.Context, trace.Span) {
	ctx = context.WithoutCancel(ctx)
	if !r.s.tel.traced || !obs.Traced(ctx) {
		return ctx, noopSpan
	}
	ctx, span := r.s.tracer.Start(ctx, r.tel.resolveName, trace.WithAttributes(obs.EntityType.String(r.settings.Name),
		obs.ShardID.Int(shardID), obs.Node.String(r.s.self)))
	r.resolveSpans[shardID] = span.SpanContext()
	return ctx, span
}

// firstPendingCtx is the context of the first message waiting for a shard (a resolution
// it starts is in its trace), or context.Background(). r.mu is held.
func (r *Region) firstPendingCtxLocked(shardID int) context.Context {
	if q := r.pending[shardID]; len(q) > 0 && q[0].ctx != nil {
		return q[0].ctx
	}
	return context.Background()
}

// activated is called on an entity's goroutine after it got an instance: over the
// type's MaxActive, the least recently used idle entity of the region is passivated.
func (r *Region) activated(e *entity) {
	r.mu.Lock()
	maxActive := r.settings.MaxActive
	if maxActive <= 0 {
		r.mu.Unlock()
		return
	}
	active := 0
	var lru *entity
	var lruAt time.Time
	for _, sh := range r.shards {
		for _, other := range sh.entities {
			other.mu.Lock()
			// Idle: no message in hand or waiting (its goroutine may still be finishing
			// the last one; then it passivates as soon as it is done).
			live, idle, used := other.live, !other.busy && len(other.queue) == 0, other.lastUsed
			other.mu.Unlock()
			if !live {
				continue
			}
			active++
			if other != e && idle && (lru == nil || used.Before(lruAt)) {
				lru, lruAt = other, used
			}
		}
	}
	r.mu.Unlock()
	if active > maxActive && lru != nil {
		lru.passivateSoon(causeMaxActive)
	}
}

// passivateIdle passivates the entities idle for longer than the type's PassivateAfter,
// and forgets entities without instance or messages. The caller holds stopMu for
// reading.
func (r *Region) passivateIdle(now time.Time) {
	r.mu.Lock()
	after := r.settings.PassivateAfter
	var idle []*entity
	for _, sh := range r.shards {
		for id, e := range sh.entities {
			e.mu.Lock()
			quiet := !e.running && len(e.queue) == 0
			if quiet && !e.live {
				delete(sh.entities, id) // nothing to keep: a new message makes a new one
			} else if quiet && after > 0 && now.Sub(e.lastUsed) > after {
				idle = append(idle, e)
			}
			e.mu.Unlock()
		}
	}
	r.mu.Unlock()
	for _, e := range idle {
		e.passivate(causeIdle)
	}
}

// BufferedDuringHandoff returns how many messages the region buffered because their
// shard was being handed off, since start.
func (r *Region) BufferedDuringHandoff() uint64 { return r.handoffBuffered.Load() }

// Passivations returns how many entities of the region were passivated.
func (r *Region) Passivations() uint64 { return r.passivations.Load() }

// giveBack returns a message whose shard this region hands off to its sender's region:
// an ask through its reply, a tell as a Return message.
func (r *Region) giveBack(d delivery) {
	if d.ask {
		d.fail(&RemoteError{Code: codeHandedOff, Message: "shard handed off", Node: r.s.self})
		return
	}
	to, err := r.s.transportAddr(d.env.Origin)
	if err != nil {
		r.s.log.Warn("cannot give a message back to its sender", "origin", d.env.Origin, "err", err)
		return
	}
	r.s.cfg.Messenger.TellContext(d.ctx, to, topicReturn, encode(d.env))
}

// reroute takes back a message a handing-off region returned: it goes ahead of the
// messages buffered for its shard since the handoff began, after those returned before.
func (r *Region) reroute(d delivery) {
	shardID := abi.ShardID(d.env.EntityID, r.settings.NumberOfShards)
	r.mu.Lock()
	pos := r.returned[shardID]
	q := r.pending[shardID]
	q = append(q, delivery{})
	copy(q[pos+1:], q[pos:])
	q[pos] = d
	r.pending[shardID] = q
	r.returned[shardID] = pos + 1
	r.buffered++
	r.handoffBuffered.Add(1)
	_, paused := r.paused[shardID]
	start := !r.resolving[shardID] && !r.handing[shardID] && !paused
	var rctx context.Context
	var rspan trace.Span
	if start {
		r.resolving[shardID] = true
		rctx, rspan = r.startResolveLocked(shardID, r.firstPendingCtxLocked(shardID))
	}
	q[pos] = r.bufferLocked(shardID, d)
	r.mu.Unlock()
	if start && !r.s.goroutine(func() { r.resolve(rctx, rspan, shardID) }) {
		rspan.End()
		r.failPending(shardID, ErrStopped)
	}
}

// pause stops routing a shard the region at by hands off: messages wait here, linked to
// the handoff's span (when it is traced).
func (r *Region) pause(shardID int, by string, handoff trace.SpanContext) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.homes, shardID)
	r.paused[shardID] = by
	r.pauseSpans[shardID] = handoff
}

// unpauseFrom ends the pauses of the region at a member that is gone: a handoff that
// did not complete must not hold messages forever.
func (r *Region) unpauseFrom(gone func(string) bool) {
	r.mu.Lock()
	var ids []int
	for id, by := range r.paused {
		if gone(by) {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.unpause(id)
	}
}

// unpause ends a pause: the shard's new home is resolved for what waited.
func (r *Region) unpause(shardID int) {
	r.mu.Lock()
	delete(r.paused, shardID)
	delete(r.pauseSpans, shardID)
	start := len(r.pending[shardID]) > 0 && !r.resolving[shardID] && !r.handing[shardID]
	var rctx context.Context
	var rspan trace.Span
	if start {
		r.resolving[shardID] = true
		rctx, rspan = r.startResolveLocked(shardID, r.firstPendingCtxLocked(shardID))
	}
	r.mu.Unlock()
	if start && !r.s.goroutine(func() { r.resolve(rctx, rspan, shardID) }) {
		rspan.End()
		r.failPending(shardID, ErrStopped)
	}
}

func (r *Region) entityLocked(sh *shard, id string) *entity {
	e := sh.entities[id]
	if e == nil {
		e = &entity{r: r, shard: sh.id, id: id, epoch: sh.epoch}
		sh.entities[id] = e
	}
	return e
}

// dropStale stops hosting a shard whose allocation here is older than epoch: the
// coordinator allocated it again since. Its entities stop without saving state (a stale
// host's writes would be refused anyway).
func (r *Region) dropStale(shardID int, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sh := r.shards[shardID]; sh != nil && sh.epoch < epoch {
		r.dropStaleLocked(sh)
	}
}

func (r *Region) dropStaleLocked(sh *shard) {
	r.s.log.Warn("stale shard allocation: stopping the shard here", "type", r.settings.Name, "shard", sh.id, "epoch", sh.epoch)
	delete(r.shards, sh.id)
	for _, e := range sh.entities {
		e.fenced.Store(true)
		// Soon, not now: an entity whose mailbox goroutine is still busy (its last
		// reply sent, its bookkeeping not yet done) would refuse a passivation now
		// and live on beside the shard's new home.
		e.passivateSoon(causeStale)
	}
}

// resolve asks the coordinator for a shard's home until it answers or ResolveTimeout
// passes, then flushes the shard's buffered messages. span (the "shard home" span, in
// ctx) ends with it.
func (r *Region) resolve(ctx context.Context, span trace.Span, shardID int) {
	ref := shardRef{Type: r.settings.Name, Shard: shardID}
	deadline := time.Now().Add(r.s.cfg.ResolveTimeout)
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		home, err := r.s.shardHome(ctx, ref)
		if err == nil {
			span.SetAttributes(attrHome.String(home.Region), attrEpoch.Int64(int64(home.Epoch)))
			span.End()
			r.resolved(shardID, home)
			return
		}
		if errors.Is(err, ErrStopped) || time.Now().After(deadline) {
			r.s.log.WarnContext(ctx, "shard home not resolved", "shard", ref.String(), "err", err)
			err = fmt.Errorf("%w: %s: %v", ErrShardUnavailable, ref, err)
			failSpan(span, err)
			span.End()
			r.failPending(shardID, err)
			return
		}
		r.s.log.DebugContext(ctx, "retrying shard home", "shard", ref.String(), "err", err)
		span.AddEvent("retry", trace.WithAttributes(obs.ErrorType.String(ErrorCode(err))))
		select {
		case <-r.s.stop:
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
func (r *Region) resolved(shardID int, h shardHome) {
	home := h.Region
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.resolving, shardID)
	delete(r.resolveSpans, shardID)
	if _, paused := r.paused[shardID]; paused || r.handing[shardID] {
		return // a handoff began meanwhile: its completion resolves again
	}
	if home == r.s.self {
		r.hostShardLocked(shardID, h.Epoch)
		return
	}
	pending := r.pending[shardID]
	delete(r.pending, shardID)
	delete(r.returned, shardID)
	r.buffered -= len(pending)
	r.homes[shardID] = allocation{home, h.Epoch}
	for _, d := range pending {
		d.unbuffered()
		r.forward(r.homes[shardID], shardID, d)
	}
}

func (r *Region) failPending(shardID int, err error) {
	r.mu.Lock()
	delete(r.resolving, shardID)
	delete(r.resolveSpans, shardID)
	pending := r.pending[shardID]
	delete(r.pending, shardID)
	delete(r.returned, shardID)
	r.buffered -= len(pending)
	r.mu.Unlock()
	for _, d := range pending {
		d.unbuffered()
		d.fail(err)
	}
}

// hostShard makes this region the home of a shard under an allocation epoch (the
// coordinator's HostShard).
func (r *Region) hostShard(shardID int, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hostShardLocked(shardID, epoch)
}

// hostShardLocked hosts a shard here and delivers the messages buffered for it, in
// order, before any later message can reach the shard's entities.
func (r *Region) hostShardLocked(shardID int, epoch uint64) *shard {
	sh := r.shards[shardID]
	if sh == nil {
		sh = &shard{id: shardID, epoch: epoch, entities: map[string]*entity{}}
		r.shards[shardID] = sh
		delete(r.homes, shardID)
		r.s.log.Debug("hosting shard", "type", r.settings.Name, "shard", shardID, "epoch", epoch)
		if r.settings.RememberEntities && r.s.cfg.States != nil {
			r.s.goroutine(func() { r.restartRemembered(sh) })
		}
	} else if epoch > sh.epoch {
		sh.epoch = epoch
		for _, e := range sh.entities {
			e.setEpoch(epoch)
		}
	}
	pending := r.pending[shardID]
	delete(r.pending, shardID)
	delete(r.returned, shardID)
	r.buffered -= len(pending)
	for _, d := range pending {
		d.unbuffered()
		r.entityLocked(sh, d.env.EntityID).enqueue(d)
	}
	return sh
}

// restartRemembered starts the remembered entities of a shard that came here.
func (r *Region) restartRemembered(sh *shard) {
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.RequestTimeout)
	ids, err := r.s.cfg.States.Remembered(ctx, r.settings.Name, sh.id)
	cancel()
	if err != nil {
		r.s.log.Warn("cannot read the remembered entities of a shard", "type", r.settings.Name, "shard", sh.id, "err", err)
		return
	}
	r.s.stopMu.RLock()
	defer r.s.stopMu.RUnlock()
	if r.s.stopped {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shards[sh.id] != sh {
		return // handed off meanwhile
	}
	for _, id := range ids {
		r.entityLocked(sh, id).enqueue(delivery{start: true, ctx: context.Background()})
	}
	if len(ids) > 0 {
		r.s.log.Info("restarting remembered entities", "type", r.settings.Name, "shard", sh.id, "entities", len(ids))
	}
}

// handOff stops hosting every shard of the region, one at a time (the leave hook),
// keeping each sender's order:
//  1. the shard stops taking messages here: messages from other regions go back to
//     them, messages from local senders wait;
//  2. every other region is told (BeginHandOff) to stop routing to it and buffer; their
//     acknowledgements come after whatever they had already sent here, which has thus
//     been given back;
//  3. the shard's entities finish what they already received and stop;
//  4. the coordinator forgets the allocation;
//  5. the regions are told the handoff is complete (behind every message given back)
//     and resolve the new home, with what they buffered in order.
func (r *Region) handOff(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]int, 0, len(r.shards))
	for id := range r.shards {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Ints(ids)
	var firstErr error
	for _, id := range ids {
		if err := r.handOffShard(ctx, id); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	r.s.log.Info("region handed off its shards", "type", r.settings.Name, "shards", len(ids))
	return firstErr
}

// handOffShard hands one shard off (see handOff). A shard not hosted here is only
// reported to the coordinator.
func (r *Region) handOffShard(ctx context.Context, id int) (err error) {
	start := time.Now()
	span := noopSpan
	if r.s.tel.traced {
		ctx, span = r.s.tracer.Start(ctx, r.tel.handoffName, trace.WithAttributes(obs.EntityType.String(r.settings.Name),
			obs.ShardID.Int(id), obs.Node.String(r.s.self)))
	}
	ref := shardRef{Type: r.settings.Name, Shard: id, Requester: r.s.self}
	begin := ref
	begin.HandOff = encodeSpanContext(span.SpanContext())
	r.mu.Lock()
	sh := r.shards[id]
	delete(r.shards, id)
	r.handing[id] = true
	r.handoffSpans[id] = span.SpanContext()
	r.handoffMsgs[id] = 0
	// Messages from other regions already buffered here go back too.
	var back, keep []delivery
	for _, d := range r.pending[id] {
		if d.env.Origin != "" && d.env.Origin != r.s.self {
			back = append(back, d)
		} else {
			keep = append(keep, d)
		}
	}
	r.pending[id] = keep
	r.buffered -= len(back)
	r.mu.Unlock()
	for _, d := range back {
		d.unbuffered()
		r.giveBack(d)
	}
	r.s.broadcastHandOff(ctx, topicBeginHandOff, begin, true)
	entities := 0
	if sh != nil {
		entities = len(sh.entities)
		stopForHandOff(ctx, sh.entities)
	}
	if herr := r.s.shardHandedOff(ctx, ref); herr != nil {
		err = fmt.Errorf("sharding: handing off %s: %w", ref, herr)
	}
	r.mu.Lock()
	delete(r.handing, id)
	delete(r.handoffSpans, id)
	buffered := r.handoffMsgs[id]
	delete(r.handoffMsgs, id)
	resolve := len(r.pending[id]) > 0 && !r.resolving[id]
	var rctx context.Context
	var rspan trace.Span
	if resolve {
		r.resolving[id] = true
		rctx, rspan = r.startResolveLocked(id, r.firstPendingCtxLocked(id))
	}
	r.mu.Unlock()
	r.s.broadcastHandOff(ctx, topicHandOffComplete, ref, false)
	if resolve && !r.s.goroutine(func() { r.resolve(rctx, rspan, id) }) {
		rspan.End()
		r.failPending(id, ErrStopped)
	}
	took := time.Since(start)
	span.SetAttributes(attrEntitiesStopped.Int(entities), attrMessagesBuffered.Int(buffered))
	failSpan(span, err)
	span.End()
	outcome := obs.OutcomeOK
	if err != nil {
		outcome = ErrorCode(err)
	}
	r.s.tel.handoffs.Add(context.Background(), 1, r.s.tel.typeAttr(r.settings.Name, obs.Outcome, outcome))
	r.s.tel.handoffDur.Record(context.Background(), took.Seconds(), r.tel.typeOnly)
	r.s.log.InfoContext(ctx, "shard handed off", "shard", ref.String(), "entities", entities, "buffered", buffered, "took", took)
	return err
}

// handOffParallelism is how many entities of a shard stop (and save their state) at
// once during a handoff.
const handOffParallelism = 16

// stopForHandOff lets each entity finish what it already received, then stops it and
// saves its state, handOffParallelism at a time.
func stopForHandOff(ctx context.Context, entities map[string]*entity) {
	for _, e := range entities {
		if b, ok := StateStoreAs[BatchStateStore](e.r.s.cfg.States); ok {
			stopForHandOffBatched(ctx, b, entities) // handoff_batch.go
			return
		}
		break
	}
	sem := make(chan struct{}, handOffParallelism)
	var wg sync.WaitGroup
	for _, e := range entities {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			e.waitIdle(ctx)
			e.passivateNow(ctx, causeHandoff, trace.SpanContext{})
		}()
	}
	wg.Wait()
}

// forgetHomesAt drops cached homes at members for which gone returns true, so that their
// shards are resolved anew.
func (r *Region) forgetHomesAt(gone func(string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, home := range r.homes {
		if gone(home.region) {
			delete(r.homes, id)
		}
	}
}

// forward sends d to the region at home. It may be called with r.mu held: it only
// queues frames and never calls back into the region.
func (r *Region) forward(a allocation, shardID int, d delivery) {
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
	env := d.env
	env.Hops++
	env.Epoch = a.epoch
	body := encode(env)
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
			d.fail(&RemoteError{Code: CodeUnavailable, Message: fmt.Sprintf("forwarding to %s: %v", home, err), Node: home})
			return
		}
		var w wireReply
		if err := decode(b, &w); err != nil {
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
		d.reply(Reply{Payload: w.Payload, Node: w.Node}, nil)
	})
}

// state lists the region's shards and active entities, sorted.
func (r *Region) state() []ShardState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ShardState, 0, len(r.shards))
	for id, sh := range r.shards {
		ss := ShardState{Type: r.settings.Name, ID: id, Epoch: sh.epoch}
		for eid, e := range sh.entities {
			if e.active() {
				ss.Entities = append(ss.Entities, eid)
			}
		}
		sort.Strings(ss.Entities)
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// stopEntities stops every entity of the region; called by Sharding.Stop once no
// mailbox goroutine runs.
func (r *Region) stopEntities(ctx context.Context, save bool) {
	r.mu.Lock()
	var all []*entity
	for _, sh := range r.shards {
		for _, e := range sh.entities {
			all = append(all, e)
		}
	}
	r.mu.Unlock()
	for _, e := range all {
		if save {
			e.passivateNow(ctx, causeShutdown, trace.SpanContext{})
		} else {
			e.stop(ctx, false)
		}
	}
}

// entity is one entity's mailbox. A goroutine drains it while it is not empty, so an
// idle entity holds no goroutine; its instance is touched only by that goroutine (or,
// after Sharding.Stop, by stop).
type entity struct {
	r     *Region
	shard int
	id    string

	mu       sync.Mutex
	queue    []delivery
	running  bool
	live     bool      // has an instance
	lastUsed time.Time // when it last finished a message
	busy     bool      // handling a message (from its dequeue to just before its reply)
	// passivateWhenIdle, if set, is the cause of a passivation to run once the
	// goroutine that drains the mailbox has nothing left (chosen while it finished).
	passivateWhenIdle string
	epoch             uint64 // the shard's allocation epoch here: fences state writes

	// fenced is set when the shard's allocation here turned out stale: the entity stops
	// without saving.
	fenced atomic.Bool

	// Owned by the goroutine that drains the mailbox.
	inst       Entity
	remembered bool // recorded among the shard's remembered entities
	unsaved    int  // messages since the last checkpoint
	// handleOpts are the attributes of the entity's "handle" spans, by kind of message.
	handleOpts [numKinds]trace.SpanStartOption
}

func (e *entity) setEpoch(epoch uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.epoch = epoch
}

func (e *entity) key() EntityKey { return EntityKey{Type: e.r.settings.Name, Shard: e.shard, ID: e.id} }

func (e *entity) currentEpoch() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch
}

// waitIdle waits until the entity's mailbox is empty and no goroutine drains it, or ctx
// ends.
func (e *entity) waitIdle(ctx context.Context) {
	for {
		e.mu.Lock()
		idle := !e.running && len(e.queue) == 0
		e.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (e *entity) active() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live
}

// enqueue adds d to the mailbox, starting the drain goroutine if none runs. It may be
// called with the region's lock held.
func (e *entity) enqueue(d delivery) {
	e.mu.Lock()
	if len(e.queue) >= e.r.s.cfg.MailboxSize {
		e.mu.Unlock()
		e.r.s.deadLetter(d, ErrMailboxFull)
		return
	}
	if !d.start {
		d.arrived = time.Now()
	}
	e.queue = append(e.queue, d)
	if e.running {
		e.mu.Unlock()
		return
	}
	e.running = true
	e.mu.Unlock()
	// The caller holds stopMu for reading (route) or runs on an owned goroutine
	// (resolve, hostShard), so the WaitGroup is not being waited on at zero.
	e.r.s.wg.Add(1)
	go e.drain()
}

func (e *entity) drain() {
	defer e.r.s.wg.Done()
	e.drainLoop()
}

func (e *entity) drainLoop() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 && e.passivateWhenIdle != "" {
			// A passivation chose it while it finished its last message.
			cause := e.passivateWhenIdle
			e.passivateWhenIdle = ""
			e.mu.Unlock()
			e.passivateNow(context.Background(), cause, trace.SpanContext{})
			continue
		}
		if len(e.queue) == 0 {
			e.running = false
			e.queue = nil
			e.mu.Unlock()
			return
		}
		d := e.queue[0]
		e.queue[0] = delivery{}
		e.queue = e.queue[1:]
		e.busy = true
		e.mu.Unlock()
		e.process(d)
	}
}

func (e *entity) process(d delivery) {
	s := e.r.s
	name := e.r.settings.Name + "/" + e.id
	ctx := d.ctx
	span := noopSpan
	if s.tel.traced && !d.start {
		kind := trace.SpanKindInternal
		if !d.ask {
			kind = trace.SpanKindConsumer // a tell, timer or change: messaging
		}
		k := kindIndex(&d)
		if e.handleOpts[k] == nil {
			e.handleOpts[k] = trace.WithAttributes(append(e.entityAttrs(), obs.MessageKind.String(kindNames[k]))...)
		}
		ctx, span = s.tracer.Start(ctx, e.r.tel.handleName, trace.WithSpanKind(kind), e.handleOpts[k])
	}
	// done ends the message's span and records it; it comes before the reply, so that
	// the reply's server span (the asker's wait) covers everything here.
	kind, remote, arrived := kindIndex(&d), d.env.Origin != "" && d.env.Origin != s.self, d.arrived
	done := func(err error) {
		e.mu.Lock()
		e.busy = false
		if !d.start {
			e.lastUsed = time.Now()
		}
		e.mu.Unlock()
		if d.start {
			return
		}
		e.recordMessage(kind, remote, arrived, err)
		failSpan(span, err)
		span.End()
	}
	if d.env.Kind == KindPassivate {
		// A passivation asked from outside (Sharding.Passivate), after the messages
		// before it; an entity that is not active stays so.
		out := []byte(PassivateInactive)
		if e.inst != nil {
			e.passivateNow(context.WithoutCancel(ctx), causeCommand, trace.SpanContext{})
			out = []byte(PassivateDone)
		}
		done(nil)
		if d.ask {
			d.reply(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	if e.inst == nil {
		if err := e.activate(ctx); err != nil {
			s.log.WarnContext(ctx, "entity activation failed", "entity", name, "err", err)
			done(err)
			d.fail(err)
			return
		}
	}
	if d.start {
		done(nil)
		return // a remembered entity restarted: no message
	}
	mctx := context.WithValue(ctx, messageInfoKey{}, MessageInfo{
		Sender: d.env.Sender, Kind: d.env.Kind, Tag: d.env.Tag, Chain: d.env.Chain, Ask: d.ask})
	out, err := e.inst.Receive(mctx, d.env.Payload)
	lc, _ := e.inst.(EntityLifecycle)
	if lc != nil && lc.Terminated() {
		// The entity is gone (a trapped instance): what it did since its last save is
		// lost, and the next message starts from the saved state.
		s.log.WarnContext(ctx, "entity terminated", "entity", name, "err", err)
		e.stop(ctx, false)
	}
	var fwd *ForwardTo
	if errors.As(err, &fwd) {
		// Passed on: the entity it names answers the asker.
		s.forward(d, fwd)
		d.reply, d.ask = nil, false
		err = nil
	}
	if err != nil {
		s.log.DebugContext(ctx, "message failed", "entity", name, "err", err)
		done(err)
		d.fail(err)
		return
	}
	if e.inst == nil {
		// Terminated just after it handled the message: the reply stands, but its
		// state is not saved.
		done(nil)
		if d.ask {
			d.reply(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	e.unsaved++
	// The checkpoint policy: with every-message, the state is saved before the reply,
	// so an acknowledged message survives a crash of this member.
	if every, _ := CheckpointEvery(e.r.Settings().Checkpoint); every > 0 && s.cfg.States != nil && e.unsaved >= every {
		if err := e.save(ctx); err != nil {
			err = fmt.Errorf("%w: the message was handled but its state not saved: %v", ErrShardUnavailable, err)
			done(err)
			d.fail(err)
			return
		}
	}
	done(nil)
	if d.ask {
		d.reply(Reply{Payload: out, Node: s.self}, nil)
	}
	if lc != nil && lc.PassivationRequested() {
		// Passivation the entity asked for: the mailbox is ours (this is its drain), so
		// messages that arrive meanwhile wait for the next incarnation. The asker has
		// its reply and may cancel its context: the save must not depend on it. Its
		// span starts a trace of its own, linked to the message's.
		e.passivateNow(context.WithoutCancel(ctx), causeRequested, span.SpanContext())
	}
}

// activate creates the entity's instance, from its saved state if the state store has
// one, and records it among the shard's remembered entities if the type remembers them.
func (e *entity) activate(ctx context.Context) (err error) {
	s := e.r.s
	begin := time.Now()
	span := noopSpan
	if s.tel.traced {
		ctx, span = s.tracer.Start(ctx, e.r.tel.activateName, trace.WithAttributes(e.entityAttrs()...))
	}
	var state []byte
	defer func() {
		st := "fresh"
		if state != nil {
			st = "restored"
		}
		outcome := obs.OutcomeOK
		if err != nil {
			outcome = ErrorCode(err)
		}
		s.tel.activations.Add(context.Background(), 1, s.tel.activationAttrs.Get(activationKey{e.r.settings.Name, st, outcome}))
		s.tel.activationDur.Record(context.Background(), time.Since(begin).Seconds(), s.tel.typeAttr(e.r.settings.Name, attrActivationState, st))
		span.SetAttributes(attrActivationState.String(st))
		failSpan(span, err)
		span.End()
	}()
	if s.cfg.States != nil {
		st, err := e.loadState(ctx)
		switch {
		case errors.Is(err, ErrNoState):
		case err != nil:
			// Starting without the saved state would lose it: refuse instead.
			return fmt.Errorf("%w: loading the state of %s: %v", ErrShardUnavailable, e.id, err)
		default:
			state = st
		}
	}
	inst, err := s.cfg.Factory.NewEntity(ctx, e.r.settings.Name, e.id, state)
	if err != nil {
		return err
	}
	e.inst = inst
	e.unsaved = 0
	e.mu.Lock()
	e.live = true
	e.mu.Unlock()
	s.tel.active.Add(context.Background(), 1, e.r.tel.typeOnly)
	s.log.InfoContext(ctx, "entity activated", "entity", e.r.settings.Name+"/"+e.id, "shard", e.shard, "restored", state != nil)
	if e.r.Settings().RememberEntities && s.cfg.States != nil && !e.remembered {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		if err := s.cfg.States.Remember(rctx, e.key(), e.currentEpoch(), true); err != nil {
			s.log.WarnContext(ctx, "cannot remember an entity", "entity", e.id, "err", err)
		} else {
			e.remembered = true
		}
		cancel()
	}
	e.r.activated(e)
	return nil
}

// loadState reads the entity's saved state, trying again (three attempts in all, 50 ms
// then 200 ms apart) while the store is unavailable: a majority of its replicas may be
// moments from answering, as while members join or a shard moves.
func (e *entity) loadState(ctx context.Context) ([]byte, error) {
	s := e.r.s
	var err error
	for attempt, pause := 0, 50*time.Millisecond; ; attempt, pause = attempt+1, pause*4 {
		lctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		var st []byte
		st, err = s.cfg.States.Load(lctx, e.key())
		cancel()
		if err == nil || errors.Is(err, ErrNoState) || attempt == 2 || ctx.Err() != nil {
			return st, err
		}
		s.log.DebugContext(ctx, "entity state not loaded yet", "entity", e.r.settings.Name+"/"+e.id, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
	}
}

// save writes the entity's snapshot to the state store under its shard's epoch.
func (e *entity) save(ctx context.Context) (err error) {
	s := e.r.s
	if s.cfg.States == nil || e.inst == nil || e.fenced.Load() {
		return nil
	}
	if s.tel.traced {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, e.r.tel.saveName, trace.WithAttributes(e.entityAttrs()...))
		defer func() {
			failSpan(span, err)
			span.End()
		}()
	}
	state, err := e.inst.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", e.id, err)
	}
	if state == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.cfg.States.Save(sctx, e.key(), e.currentEpoch(), state); err != nil {
		if errors.Is(err, ErrStaleEpoch) {
			e.fenced.Store(true)
		}
		return err
	}
	e.unsaved = 0
	return nil
}

// passivate stops the entity's instance if it is idle: it takes the mailbox (as a drain
// would), so messages that arrive meanwhile wait and go to the next incarnation, in
// order. It reports whether it started. The caller holds stopMu for reading or runs on
// an owned goroutine.
func (e *entity) passivate(cause string) bool {
	e.mu.Lock()
	if e.running || !e.live || len(e.queue) > 0 {
		e.mu.Unlock()
		return false
	}
	e.running = true
	e.mu.Unlock()
	e.r.s.wg.Add(1)
	go func() {
		defer e.r.s.wg.Done()
		e.passivateNow(context.Background(), cause, trace.SpanContext{})
		e.drainLoop()
	}()
	return true
}

// passivateSoon passivates the entity now if no goroutine drains its mailbox, or as
// soon as the one that does has nothing left.
func (e *entity) passivateSoon(cause string) {
	e.mu.Lock()
	if e.running && e.live {
		e.passivateWhenIdle = cause
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.passivate(cause)
}

// passivateNow stops the entity saving its state (unless it is fenced), as a
// passivation of the given cause: under a "passivate" span, a child of ctx's span or,
// with a valid link, a new trace linked to it, and counted.
func (e *entity) passivateNow(ctx context.Context, cause string, link trace.SpanContext) {
	if e.inst == nil {
		return
	}
	s := e.r.s
	if s.tel.traced {
		opts := []trace.SpanStartOption{trace.WithAttributes(append(e.entityAttrs(), attrPassivationCause.String(cause))...)}
		if link.IsValid() {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: link}))
		}
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, e.r.tel.passivateName, opts...)
		defer span.End()
	}
	s.log.DebugContext(ctx, "passivating entity", "entity", e.r.settings.Name+"/"+e.id, "cause", cause)
	e.stop(ctx, true)
	if cause != causeHandoff && cause != causeShutdown {
		e.r.passivations.Add(1) // what shardhost shards reports
	}
	s.tel.passivations.Add(context.Background(), 1, s.tel.typeAttr(e.r.settings.Name, attrPassivationCause, cause))
}

// stop releases the instance, saving its state first when save is set (passivation,
// handoff, graceful shutdown) unless the entity is fenced.
func (e *entity) stop(ctx context.Context, save bool) {
	if e.inst == nil {
		return
	}
	if h, ok := e.inst.(EntityStopHook); ok && save && !e.fenced.Load() {
		if h.BeforeStop(ctx) {
			e.unsaved++
		}
	}
	if save && e.unsaved > 0 {
		if err := e.save(ctx); err != nil {
			e.r.s.log.WarnContext(ctx, "entity state not saved", "entity", e.r.settings.Name+"/"+e.id, "err", err)
		}
	}
	e.release(ctx, save && !e.fenced.Load())
}
