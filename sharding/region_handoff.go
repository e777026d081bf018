// A region's side of a handoff: it hands its shards off (a rebalance or a leave), and
// another region's handoff pauses the shard here and gives messages back to their
// senders' regions (sharding_protocol.go has the messages, handoff_batch.go the batched
// saves).

package sharding

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/obs"
)

// giveBack returns a message whose shard this region hands off to its sender's region:
// an ask through its reply, a tell as a Return message.
func (r *shardRegion) giveBack(d delivery) {
	if d.ask {
		d.fail(&RemoteError{Code: codeHandedOff, Message: "shard handed off", Node: r.s.self})
		return
	}
	to, err := r.s.transportAddr(d.env.Origin)
	if err != nil {
		r.s.log.Warn("cannot give a message back to its sender", "origin", d.env.Origin, "err", err)
		return
	}
	env := d.env
	env.TimeLeft = d.timeLeft(time.Now())
	r.s.cfg.Messenger.TellContext(d.ctx, to, topicReturn, encode(env))
}

// reroute takes back a message a handing-off region returned: it goes ahead of the
// messages buffered for its shard since the handoff began, after those returned before.
func (r *shardRegion) reroute(d delivery) {
	shardID := abi.ShardID(d.env.EntityID, r.settings.NumberOfShards)
	r.mu.Lock()
	sl := r.slotLocked(shardID)
	pos := sl.returned
	sl.pending = slices.Insert(sl.pending, pos, d)
	sl.returned = pos + 1
	r.buffered++
	r.handoffBuffered.Add(1)
	start := sl.idle()
	var rctx context.Context
	var rspan trace.Span
	if start {
		rctx, rspan = r.startResolvingLocked(sl, shardID, sl.firstPendingCtx())
	}
	sl.pending[pos] = r.bufferLocked(sl, shardID, d)
	r.mu.Unlock()
	if start {
		r.resolveInBackground(rctx, rspan, shardID)
	}
}

// pause stops routing a shard the region at by hands off: messages wait here, linked to
// the handoff's span (when it is traced).
func (r *shardRegion) pause(shardID int, by string, handoff trace.SpanContext) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := r.slotLocked(shardID)
	sl.home = allocation{}
	sl.paused, sl.pausedBy, sl.pauseSpan = true, by, handoff
}

// unpauseFrom ends the pauses of the region at a member that is gone: a handoff that
// did not complete must not hold messages forever.
func (r *shardRegion) unpauseFrom(gone func(string) bool) {
	r.mu.Lock()
	var ids []int
	for id, sl := range r.slots {
		if sl.paused && gone(sl.pausedBy) {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.unpause(id)
	}
}

// unpause ends a pause: the shard's new home is resolved for what waited.
func (r *shardRegion) unpause(shardID int) {
	r.mu.Lock()
	sl := r.slotLocked(shardID)
	sl.paused, sl.pausedBy, sl.pauseSpan = false, "", trace.SpanContext{}
	start := len(sl.pending) > 0 && sl.idle()
	var rctx context.Context
	var rspan trace.Span
	if start {
		rctx, rspan = r.startResolvingLocked(sl, shardID, sl.firstPendingCtx())
	}
	r.mu.Unlock()
	if start {
		r.resolveInBackground(rctx, rspan, shardID)
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
func (r *shardRegion) handOff(ctx context.Context) error {
	r.mu.Lock()
	var ids []int
	r.eachHostedLocked(func(sh *shard) { ids = append(ids, sh.id) })
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
func (r *shardRegion) handOffShard(ctx context.Context, id int) (err error) {
	start := r.s.cfg.Now()
	span := noopSpan
	if r.s.tel.traced {
		ctx, span = r.s.tracer.Start(ctx, r.tel.handoffName, trace.WithAttributes(obs.EntityType.String(r.settings.Name),
			obs.ShardID.Int(id), obs.Node.String(r.s.self)))
	}
	ref := shardRef{Type: r.settings.Name, Shard: id, Requester: r.s.self}
	begin := ref
	begin.HandOff = encodeSpanContext(span.SpanContext())
	r.mu.Lock()
	sl := r.slotLocked(id)
	sh := sl.hosted
	sl.hosted = nil
	if sh != nil {
		sh.stopReminders()
		for _, e := range sh.entities {
			// They finish what they hold; what a delivery brings them from now on
			// waits for the shard's new home.
			e.mu.Lock()
			e.gone = true
			e.mu.Unlock()
		}
	}
	sl.handing, sl.handoffSpan, sl.handoffMsgs = true, span.SpanContext(), 0
	// Messages from other regions already buffered here go back too.
	var back, keep []delivery
	for _, d := range sl.pending {
		if d.env.Origin != "" && d.env.Origin != r.s.self {
			back = append(back, d)
		} else {
			keep = append(keep, d)
		}
	}
	sl.pending = keep
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
	if herr := r.s.shardStopped(ctx, ref); herr != nil {
		err = fmt.Errorf("sharding: handing off %s: %w", ref, herr)
	}
	r.mu.Lock()
	buffered := sl.handoffMsgs
	sl.handing, sl.handoffSpan, sl.handoffMsgs = false, trace.SpanContext{}, 0
	resolve := len(sl.pending) > 0 && sl.idle()
	var rctx context.Context
	var rspan trace.Span
	if resolve {
		rctx, rspan = r.startResolvingLocked(sl, id, sl.firstPendingCtx())
	}
	r.mu.Unlock()
	r.s.broadcastHandOff(ctx, topicHandOffComplete, ref, false)
	if resolve {
		r.resolveInBackground(rctx, rspan, id)
	}
	took := r.s.cfg.Now().Sub(start)
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
		go func() { // no owner: it lives one entity's stop, which the call waits for
			defer func() { <-sem; wg.Done() }()
			e.waitIdle(ctx)
			e.passivateNow(ctx, causeHandoff, trace.SpanContext{})
		}()
	}
	wg.Wait()
}
