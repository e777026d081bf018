// An entity's end of life: saving its state, passivating it (soon, now, or when
// its shard is handed off), and stopping its instance.

package sharding

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
)

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
	state, err := e.snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", e.id, err)
	}
	if state == nil {
		return nil
	}
	// A save waits no longer than the hosting lease lasts: an acknowledgement after
	// it would not be trusted (the shard may have a new home by then), and the entity
	// must stop in time.
	left := s.leaseLeft()
	if left <= 0 {
		return ErrNoMajority
	}
	sctx, cancel := context.WithTimeout(ctx, min(s.cfg.RequestTimeout, left))
	defer cancel()
	epoch := e.currentEpoch()
	if err := s.cfg.States.Save(sctx, e.key(), epoch, state); err != nil {
		if errors.Is(err, ErrStaleEpoch) {
			// The shard has a newer allocation: the whole copy here is stale. Dropped,
			// so that the next message resolves the shard's home; kept, it would bring
			// every message for this entity back here to be routed again, endlessly.
			e.fenced.Store(true)
			e.r.dropStale(e.shard, epoch+1)
		}
		return err
	}
	e.unsaved = 0
	e.stats.stateBytes.Store(int64(len(state)))
	if a, ok := e.inst.(EntityStateSaved); ok {
		a.StateSaved()
	}
	e.based(ctx)
	return nil
}

// rerouteFenced routes again a message that reached the entity after its shard's
// allocation here turned out stale (fenced): it belongs to the shard's home, which its
// region resolves anew. A remembered entity's restart is dropped.
func (e *entity) rerouteFenced(d delivery) {
	e.mu.Lock()
	e.busy = false
	e.mu.Unlock()
	if d.start {
		return
	}
	e.r.s.log.DebugContext(d.ctx, "message for a stale shard copy routed again", "entity", e.r.settings.Name+"/"+e.id)
	e.r.deliver(d)
}

// passivate stops the entity's instance if it is idle: it takes the mailbox (as a drain
// would), so messages that arrive meanwhile wait and go to the next incarnation, in
// order. It reports whether it started. The caller holds s.owner (Hold) or runs on
// an owned goroutine.
func (e *entity) passivate(cause string) bool {
	e.mu.Lock()
	if e.running || !e.live || e.queued() > 0 {
		e.mu.Unlock()
		return false
	}
	e.running = true
	e.mu.Unlock()
	e.r.s.owner.GoHeld(func() {
		e.passivateNow(context.Background(), cause, trace.SpanContext{})
		e.drainLoop()
	})
	return true
}

// passivateSoon passivates the entity now if no goroutine drains its mailbox, or as
// soon as the one that does has nothing left.
func (e *entity) passivateSoon(cause string) {
	e.mu.Lock()
	if e.running {
		// Its goroutine may be handling a message or still activating (not live yet):
		// either way it passivates once it has nothing left.
		e.passivateWhenIdle = cause
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.passivate(cause)
}

// passivateNow stops the entity saving its state (unless it is fenced, or its hosting
// lease lapsed), as a passivation of the given cause: under a "passivate" span, a
// child of ctx's span or, with a valid link, a new trace linked to it, and counted.
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
	// An entity stopped for a lapsed hosting lease saves nothing: the shard may have
	// another home by now.
	e.stop(ctx, cause != causeLease)
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
	hooked := false
	if h, ok := e.inst.(EntityStopHook); ok && save && !e.fenced.Load() {
		if h.BeforeStop(ctx) {
			e.unsaved++
			hooked = true
		}
	}
	if save && e.unsaved > 0 && e.baseAtStop(hooked) && e.poison == nil {
		if err := e.save(ctx); err != nil {
			e.r.s.log.WarnContext(ctx, "entity state not saved", "entity", e.r.settings.Name+"/"+e.id, "err", err)
		}
	}
	e.unpauseAtStop(ctx)
	e.release(ctx, save && !e.fenced.Load())
}
