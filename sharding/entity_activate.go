// An entity's activation: its place among this member's lives of its ID claimed, its
// shard fenced at the allocation epoch, its state loaded (its own base and journal, or
// another entity's for a fork), its instance made.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// activate creates the entity's instance, from its saved state if the state store has
// one, and records it among the shard's remembered entities if the type remembers them.
func (e *entity) activate(ctx context.Context, deadline time.Time) (err error) {
	return e.activateFrom(ctx, deadline, &activation{})
}

// activation says where an activation starts from: the entity's own base and journal
// (the zero value), or another entity's (from, a fork), and up to which record (upTo, a
// revert or a fork; 0: all). lastSeq, set by the activation, is the last record the
// journal read held, past upTo too.
type activation struct {
	from    *EntityKey
	upTo    uint64
	back    uint64 // upTo is the last record less back
	lastSeq uint64
}

// activateFrom is activate from what a says.
func (e *entity) activateFrom(ctx context.Context, deadline time.Time, a *activation) (err error) {
	s := e.r.s
	begin := s.cfg.Now()
	span := noopSpan
	if s.tel.traced {
		ctx, span = s.tracer.Start(ctx, e.r.tel.activateName, trace.WithAttributes(e.entityAttrs()...))
	}
	var state []byte
	var entries []JournalEntry
	e.journaled = e.journals()
	e.seq, e.baseSeq, e.keys = 0, 0, idemTable{}
	e.sendSeq, e.marks = 0, nil
	e.histBase, e.histAt = 0, 0
	defer func() {
		st := "fresh"
		if state != nil || len(entries) > 0 {
			st = "restored"
		}
		outcome := obs.OutcomeOK
		if err != nil {
			outcome = ErrorCode(err)
		}
		s.tel.activations.Add(context.Background(), 1, s.tel.activationAttrs.Get(activationKey{e.r.settings.Name, st, outcome}))
		s.tel.activationDur.Record(context.Background(), s.cfg.Now().Sub(begin).Seconds(), s.tel.typeAttr(e.r.settings.Name, attrActivationState, st))
		span.SetAttributes(attrActivationState.String(st))
		failSpan(span, err)
		span.End()
	}()
	if s.cfg.States != nil {
		// The shard's first activation here at its epoch fences its state first, so
		// that a former owner's write is either seen by the load or refused.
		epoch := e.currentEpoch()
		if err := e.fence(ctx, epoch); err != nil {
			if errors.Is(err, ErrStaleEpoch) {
				// The shard has a newer allocation elsewhere: this copy is stale, and
				// the message goes to the shard's home (process).
				e.fenced.Store(true)
				e.r.dropStale(e.shard, epoch+1)
			}
			return wrapCause(ErrStateNotLoaded, e.r.settings.Name+"/"+e.id, err)
		}
		st, err := e.loadState(ctx, epoch, a.from)
		switch {
		case errors.Is(err, ErrNoState):
		case errors.Is(err, ErrStaleEpoch):
			// A replica has seen a newer epoch of the shard: the copy here is stale,
			// though its fence at its epoch was remembered (fault seed 82305).
			e.fenced.Store(true)
			e.r.dropStale(e.shard, epoch+1)
			return wrapCause(ErrStateNotLoaded, e.r.settings.Name+"/"+e.id, err)
		case err != nil:
			// Starting without the saved state would lose it: refuse instead.
			return wrapCause(ErrStateNotLoaded, e.r.settings.Name+"/"+e.id, err)
		default:
			state = st
			e.stats.stateBytes.Store(int64(len(st)))
		}
		if s.journal != nil {
			// The base: the state, and the last journal record it holds; then the
			// records after it, replayed into the new instance. They are read whatever
			// the type's policy: records of a type that journaled before its policy
			// changed are acknowledged messages too.
			base, err := DecodeBase(state)
			if err != nil {
				return wrapCause(ErrStateNotLoaded, e.name(), err)
			}
			e.seq, state = base.Seq, base.State
			if a.from == nil {
				e.histBase, e.histAt = base.History, base.HistoryAt
			}
			if a.from == nil { // a fork remembers none of its source's keys
				if e.keys, err = decodeIdemTable(base.Keys, s.cfg.Now(), e.r.Settings().IdempotencyRetention); err != nil {
					return wrapCause(ErrStateNotLoaded, e.name(), err)
				}
				// Nor its sender sequence, outbox and marks (delivery.go).
				seq, pending, marks, err := decodeDelivery(base.Delivery)
				if err != nil {
					return wrapCause(ErrStateNotLoaded, e.name(), err)
				}
				e.sendSeq, e.marks = seq, marks
				e.learnDelivery(&JournalEntry{Sends: pending})
			}
			if entries, err = e.loadJournal(ctx, epoch, e.seq, a.from); err != nil {
				if errors.Is(err, ErrStaleEpoch) {
					e.fenced.Store(true)
					e.r.dropStale(e.shard, epoch+1)
				}
				return wrapCause(ErrStateNotLoaded, e.name(), err)
			}
			if n := len(entries); n > 0 {
				a.lastSeq = entries[n-1].Seq
			} else {
				a.lastSeq = e.seq
			}
			if a.back > 0 {
				if a.back >= a.lastSeq {
					return fmt.Errorf("%w: %d records back from the journal's last, %d", ErrNotInHistory, a.back, a.lastSeq)
				}
				a.upTo = a.lastSeq - a.back
			}
			if a.from == nil {
				e.learnHistory(entries)
			}
			if a.upTo > 0 && a.upTo < e.seq {
				// Before the base: from the history's copy of an earlier one.
				var from Base
				if from, entries, err = e.historyAt(ctx, epoch, a); err != nil {
					return err
				}
				e.seq, state = from.Seq, from.State
				if a.from == nil {
					if e.keys, err = decodeIdemTable(from.Keys, s.cfg.Now(), e.r.Settings().IdempotencyRetention); err != nil {
						return wrapCause(ErrStateNotLoaded, e.name(), err)
					}
				}
			} else if a.upTo > 0 {
				if entries, err = cutAt(entries, e.seq, a.upTo); err != nil {
					return err
				}
			}
		}
	}
	if !s.hostingAllowed() {
		// The lease lapsed while the state loaded (Config.HostingLease).
		return wrapCause(ErrShardUnavailable, e.r.settings.Name+"/"+e.id, ErrNoMajority)
	}
	if err := e.claimLife(ctx, deadline); err != nil {
		return err
	}
	inst, err := s.cfg.Factory.NewEntity(ctx, e.r.settings.Name, e.id, state)
	if err != nil {
		e.releaseLife()
		return err
	}
	e.inst = inst
	if err := e.replay(ctx, entries); err != nil {
		e.inst = nil
		inst.Stop(ctx)
		e.releaseLife()
		return wrapCause(ErrStateNotLoaded, e.name(), err)
	}
	e.baseSeq = e.seq
	if n := len(entries); n > 0 {
		e.seq = entries[n-1].Seq
	}
	if a.from == nil && a.upTo == 0 {
		if p := pausedAfter(entries, e.r.settings.Name, e.id); p != nil {
			cause := fmt.Errorf("paused before this activation (its journal says so); resume or skip it")
			if p.env.Kind == kindHold {
				cause = fmt.Errorf("%w before this activation (its journal says so)", errHeld)
			}
			e.setPaused(p, cause)
		}
	}
	for k := range entries {
		if en := &entries[k]; en.IdempotencyKey != "" && a.from == nil {
			e.remember(en.IdempotencyKey, en.Seq, en.Time, en.Outcome, en.Reply)
		}
		if en := &entries[k]; a.from == nil && (!isControlRecord(en.Kind) || en.Kind == kindSkip) {
			e.learnDelivery(en) // a skip's: the mark of the numbered tell it skipped
		}
	}
	e.addSends(nil)          // the outbox the base and the records hold leaves again
	e.unsaved = len(entries) // what a passivation's base would save the next activation
	e.mu.Lock()
	e.live = true
	e.mu.Unlock()
	e.inspector, _ = e.inst.(EntityInspector)
	e.stats.activated(e, s.cfg.Now())
	s.tel.active.Add(context.Background(), 1, e.r.tel.typeOnly)
	// At Debug, as its stop (release): one line per activation costs ~5 µs of an
	// activation budget of 50 µs (docs/design.md, "Targets"), and a member activating
	// thousands of entities a second would log little else at Info. Its arguments (a
	// name built, values boxed) are made only when Debug is on.
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.DebugContext(ctx, "entity activated", "entity", e.r.settings.Name+"/"+e.id, "shard", e.shard, "restored", state != nil || len(entries) > 0)
	}
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

// claimLife takes the entity's place in shardRegion.lives before its instance is made: it
// waits while another entity of this ID here still has an instance, or is making one,
// and refuses if the entity's shard copy here was dropped meanwhile. A copy dropped as
// stale keeps its entities until they stop, and one whose activation was under way
// when the drop came went on to make its instance: the copy hosted next at a newer
// epoch (the coordinator's allocation after a HostShard that timed out) then started
// the entity beside it (fault seed 82303, two lives of a counter on one member, 1 ms
// apart). The check of fenced and the claim hold r.mu, as dropStaleLocked does.
//
// The wait ends with ctx, at deadline (the message's), or, for a message without one
// (a tell, a remembered entity's start), after Config.HandOffTimeout, what a shard's
// entities get to stop in a handoff; and when the sharding stops. A life that never
// ends (an instance no shard map holds, as 454e451 fixed) so fails the entity's
// messages rather than hold its mailbox forever. Errors: ErrShardUnavailable (with
// ErrStaleEpoch if dropped, or ctx's error), ErrStopped.
func (e *entity) claimLife(ctx context.Context, deadline time.Time) error {
	r := e.r
	var timer *time.Timer
	for {
		r.mu.Lock()
		if e.fenced.Load() {
			r.mu.Unlock()
			return wrapCause(ErrShardUnavailable, e.name(), ErrStaleEpoch)
		}
		other := r.lives[e.id]
		if other == nil || other == e {
			r.lives[e.id] = e
			if other == nil {
				e.lifeDone = make(chan struct{})
			}
			r.mu.Unlock()
			return nil
		}
		wait := other.lifeDone
		r.mu.Unlock()
		if timer == nil {
			if deadline.IsZero() {
				deadline = time.Now().Add(r.s.cfg.HandOffTimeout())
			}
			timer = time.NewTimer(time.Until(deadline))
			defer timer.Stop()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return wrapCause(ErrShardUnavailable, e.name(), fmt.Errorf("another instance of the entity here is still stopping: %w", ctx.Err()))
		case <-timer.C:
			return wrapCause(ErrShardUnavailable, e.name(), errors.New("another instance of the entity here is still stopping at the message's deadline"))
		case <-r.s.owner.Done():
			return ErrStopped
		}
	}
}

// releaseLife gives up the entity's place in shardRegion.lives, once its instance has
// stopped (or was not made).
func (e *entity) releaseLife() {
	r := e.r
	r.mu.Lock()
	if r.lives[e.id] == e {
		delete(r.lives, e.id)
		close(e.lifeDone)
	}
	r.mu.Unlock()
}

// fence fences the entity's shard at epoch before its state is read (shardRegion.fenceShard),
// trying again as loadState does while the store is unavailable.
func (e *entity) fence(ctx context.Context, epoch uint64) error {
	var err error
	for attempt, pause := 0, 50*time.Millisecond; ; attempt, pause = attempt+1, pause*4 {
		err = e.r.fenceShard(ctx, e.shard, epoch)
		if err == nil || errors.Is(err, ErrStaleEpoch) || !errors.Is(err, ErrStoreUnavailable) || attempt == 2 || ctx.Err() != nil {
			return err
		}
		e.r.s.log.DebugContext(ctx, "shard not fenced yet", "entity", e.r.settings.Name+"/"+e.id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// loadState reads the entity's saved state at the shard's allocation epoch here
// (WithReadEpoch: ErrStaleEpoch if the store has seen a newer one), trying again (three
// attempts in all, 50 ms then 200 ms apart) while the store is unavailable: a majority
// of its replicas may be moments from answering, as while members join or a shard
// moves.
func (e *entity) loadState(ctx context.Context, epoch uint64, from *EntityKey) ([]byte, error) {
	s := e.r.s
	key, rctx := e.key(), WithReadEpoch(ctx, epoch)
	if from != nil {
		key, rctx = *from, ctx // another entity's, in another shard: no read epoch of ours
	}
	var err error
	for attempt, pause := 0, 50*time.Millisecond; ; attempt, pause = attempt+1, pause*4 {
		lctx, cancel := context.WithTimeout(rctx, s.cfg.RequestTimeout)
		var st []byte
		st, err = s.cfg.States.Load(lctx, key)
		cancel()
		if err == nil || errors.Is(err, ErrNoState) || errors.Is(err, ErrStaleEpoch) || attempt == 2 || ctx.Err() != nil {
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
