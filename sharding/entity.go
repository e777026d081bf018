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

	"github.com/shardhost/shardhost/internal/obs"
)

// entity is one entity's mailbox. A goroutine drains it while it is not empty, so an
// idle entity holds no goroutine; its instance is touched only by that goroutine (or,
// after Sharding.Stop, by stop).
type entity struct {
	r     *shardRegion
	shard int
	id    string

	// drain is drainLoop, made once by newEntity: a method value made for every
	// message that starts the mailbox goroutine would be an allocation each.
	drain func()

	mu sync.Mutex
	// queue[head:] is the mailbox. Its array is kept while the entity is idle (up to
	// keptQueue deliveries), so that a warm entity's message allocates no mailbox.
	queue   []delivery
	head    int
	running bool
	live    bool // has an instance
	// gone is set when the entity leaves its shard's map (forgotten while idle, or its
	// shard handed off): a delivery that looked it up just before goes back to the
	// region (enqueue), which finds the entity's current mailbox or the shard's new
	// home, rather than start an instance that no map holds.
	gone     bool
	lastUsed time.Time // when it last finished a message
	busy     bool      // handling a message (from its dequeue to just before its reply)
	// passivateWhenIdle, if set, is the cause of a passivation to run once the
	// goroutine that drains the mailbox has nothing left (chosen while it finished).
	passivateWhenIdle string
	epoch             uint64 // the shard's allocation epoch here: fences state writes
	// poison, when set, is the message the entity is paused on, which failed with
	// poisonErr (pause.go).
	poison    *delivery
	poisonErr error

	// fenced is set when the shard's allocation here turned out stale: the entity stops
	// without saving.
	fenced atomic.Bool
	// lifeDone is closed when the entity gives up its place in shardRegion.lives (made when
	// it takes it; r.mu guards both).
	lifeDone chan struct{}

	// Owned by the goroutine that drains the mailbox.
	inst       Entity
	remembered bool // recorded among the shard's remembered entities
	unsaved    int  // messages since the last checkpoint
	// journaled: this incarnation journals its messages (entity_journal.go); seq is the
	// sequence number of its last durable record, baseSeq that of the last record its
	// saved base holds.
	journaled    bool
	seq, baseSeq uint64
	// histBase is the Seq of the journal's last KindBase record (0: none known), and
	// histAt its time (Unix ms): where the history a revert reaches starts.
	histBase uint64
	histAt   int64
	// keys are the idempotency keys the entity remembers (idempotency.go).
	keys idemTable
	// sendSeq is the entity's sender sequence (delivery.go), sendSeqMoved set when the
	// message under way numbered a send, and marks its senders' high-water marks.
	sendSeq      uint64
	sendSeqMoved bool
	marks        senderMarks
	// ob is the entity's outbox (delivery.go), shared with its goroutine.
	ob *outbox
	// failures counts the failures in a row of the message at the head of the mailbox
	// that no one waits for (pause.go).
	failures int
	// handleOpts are the attributes of the entity's "handle" spans, by kind of message.
	handleOpts [numKinds]trace.SpanStartOption
	// inspector is inst as an EntityInspector, or nil (set at activation).
	inspector EntityInspector

	// stats is what inspection reads (list.go): written by the goroutine that drains
	// the mailbox, read by anyone.
	stats entityStats
}

// newEntity returns the mailbox of entity id of the region's shard at epoch.
func newEntity(r *shardRegion, shard int, id string, epoch uint64) *entity {
	e := &entity{r: r, shard: shard, id: id, epoch: epoch, ob: &outbox{}}
	e.drain = e.drainLoop
	return e
}

func (e *entity) setEpoch(epoch uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.epoch = epoch
}

// name is "TYPE/ID", for logs and errors: made when needed, not for every message.
func (e *entity) name() string { return e.r.settings.Name + "/" + e.id }

// forwardOf returns the *ForwardTo err is (or wraps), or nil. Its own function, so
// that the variable errors.As needs escapes to the heap only when called, on the rare
// path of a failed or passed-on message.
func forwardOf(err error) *ForwardTo {
	var fwd *ForwardTo
	if errors.As(err, &fwd) {
		return fwd
	}
	return nil
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
		idle := !e.running && e.queued() == 0
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

// keptQueue is the most deliveries whose mailbox array an idle entity keeps.
const keptQueue = 4

// queued is the number of messages in the mailbox; e.mu is held.
func (e *entity) queued() int { return len(e.queue) - e.head }

// takeQueue empties the mailbox and returns what it held; e.mu is held.
func (e *entity) takeQueue() []delivery {
	q := e.queue[e.head:]
	e.queue, e.head = nil, 0
	return q
}

// enqueue adds d to the mailbox, starting the drain goroutine if none runs, or routes d
// again if the entity is gone. It may be called with the region's lock held for an
// entity just taken from its shard's map.
func (e *entity) enqueue(d delivery) {
	e.mu.Lock()
	if e.gone {
		// Left its shard's map after the delivery looked it up (shardRegion.deliver
		// releases the region's lock first); the callers under that lock take it
		// from the map, where it is never gone.
		e.mu.Unlock()
		e.r.deliver(d)
		return
	}
	if e.pausedLocked() && !d.start && !isPauseControl(d.env.Kind) && d.env.Kind != kindPassivate && !isScheduleControl(d.env.Kind) &&
		(d.ask || e.queued() >= e.r.s.cfg.MailboxSize) {
		// Paused: an ask is refused at once, a tell beyond the mailbox's size too.
		e.mu.Unlock()
		e.r.s.deadLetter(d, e.pausedError())
		return
	}
	if e.queued() >= e.r.s.cfg.MailboxSize && !isPauseControl(d.env.Kind) {
		// A resume, skip or pause passes a full mailbox: a paused entity's mailbox
		// fills up with what waits for its resume.
		e.mu.Unlock()
		e.r.s.deadLetter(d, ErrMailboxFull)
		return
	}
	if !d.start && e.r.s.tel.metered {
		d.arrived = e.r.s.cfg.Now()
	}
	if e.head > 0 && len(e.queue) == cap(e.queue) {
		// Full to the end of its array, with room before head: move down.
		n := copy(e.queue, e.queue[e.head:])
		clear(e.queue[n:])
		e.queue, e.head = e.queue[:n], 0
	}
	e.queue = append(e.queue, d)
	if e.running {
		e.mu.Unlock()
		return
	}
	e.running = true
	e.mu.Unlock()
	// The caller holds s.owner (Hold) (route) or runs on an owned goroutine
	// (resolve, hostShard).
	e.r.s.owner.GoHeld(e.drain)
}

func (e *entity) drainLoop() {
	for {
		e.mu.Lock()
		if e.r.s.aborting.Load() {
			// The member is out of the cluster (or crashing): what waits here is not
			// handled, so that the entity stops with the message it is on, before its
			// shard moves elsewhere (Config.DownRemovalMargin).
			queued := e.takeQueue()
			e.mu.Unlock()
			for _, d := range queued {
				d.fail(ErrStopped)
			}
			// The instance ends here, not once every goroutine of the member has
			// stopped (stopAll), which may take longer than the margin.
			e.fenced.Store(true)
			e.stop(context.Background(), false)
			e.failQueued(ErrStopped)
			return
		}
		if e.queued() == 0 && e.passivateWhenIdle != "" {
			// A passivation chose it while it finished its last message.
			cause := e.passivateWhenIdle
			e.passivateWhenIdle = ""
			e.mu.Unlock()
			e.passivateNow(context.Background(), cause, trace.SpanContext{})
			continue
		}
		if e.queued() == 0 {
			e.running = false
			if cap(e.queue) > keptQueue {
				e.queue = nil
			}
			e.mu.Unlock()
			return
		}
		if e.pausedLocked() {
			// Paused: only a resume, a skip or a passivation is taken, from wherever
			// it waits; the rest waits behind the poison.
			k := e.head
			for k < len(e.queue) && !isPauseControl(e.queue[k].env.Kind) && e.queue[k].env.Kind != kindPassivate &&
				!isScheduleControl(e.queue[k].env.Kind) {
				k++
			}
			if k == len(e.queue) {
				e.running = false
				e.mu.Unlock()
				return
			}
			d := e.queue[k]
			e.queue = append(e.queue[:k], e.queue[k+1:]...)
			e.busy = true
			e.mu.Unlock()
			e.process(d)
			continue
		}
		d := e.queue[e.head]
		e.queue[e.head] = delivery{}
		if e.head++; e.head == len(e.queue) {
			e.queue, e.head = e.queue[:0], 0
		}
		e.busy = true
		e.mu.Unlock()
		e.process(d)
	}
}

// failQueued gives the mailbox up (running was set by its caller) and fails what came
// in meanwhile with err.
func (e *entity) failQueued(err error) {
	e.mu.Lock()
	queued := e.takeQueue()
	e.running = false
	e.mu.Unlock()
	for _, d := range queued {
		d.fail(err)
	}
}

func (e *entity) process(d delivery) {
	s := e.r.s
	if e.fenced.Load() {
		e.rerouteFenced(d)
		return
	}
	if now := time.Now(); !d.start && d.expired(now) {
		// Its deadline passed while it waited (behind a slow message, or for its
		// shard): whoever waited for it gave up, and it must not hold the entity.
		e.mu.Lock()
		e.busy = false
		e.mu.Unlock()
		s.dropExpired(d, now)
		return
	}
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
		var now time.Time
		if !d.start {
			now = s.cfg.Now()
		}
		e.mu.Lock()
		e.busy = false
		if !d.start {
			e.lastUsed = now
		}
		e.mu.Unlock()
		if d.start {
			return
		}
		if d.env.Kind.Handled() {
			e.stats.handledOne(e, now, err)
			e.r.counters.count(now.Sub(arrived), err)
			e.r.used(e)
		}
		if s.tel.metered {
			e.recordMessage(kind, remote, arrived, now, err)
		}
		failSpan(span, err)
		span.End()
	}
	if d.env.Kind == kindPassivate {
		// A passivation asked from outside (Sharding.Passivate), after the messages
		// before it; an entity that is not active stays so.
		out := []byte(PassivateInactive)
		if e.inst != nil {
			e.passivateNow(context.WithoutCancel(ctx), causeCommand, trace.SpanContext{})
			out = []byte(PassivateDone)
		}
		done(nil)
		if d.ask {
			d.answer(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	if isScheduleControl(d.env.Kind) {
		// A scheduled message kept or cancelled (Sharding.Schedule): in the store,
		// with the entity's reminders; the entity is not activated.
		out, err := e.scheduleControl(ctx, d)
		done(err)
		d.answer(out, err)
		return
	}
	if err := s.awaitLease(d.deadline); err != nil {
		// No recent contact with a majority (Config.HostingLease): the shard may be
		// moving elsewhere, so the entity stops, unsaved, and the message fails.
		e.stop(ctx, false)
		err = wrapCause(ErrShardUnavailable, e.name(), err)
		done(err)
		d.fail(err)
		return
	}
	if d.env.Kind == kindRevert || d.env.Kind == kindFork {
		e.timeTravel(ctx, d, done)
		return
	}
	if e.inst == nil {
		if err := e.activate(ctx, d.deadline); err != nil {
			if e.fenced.Load() {
				// The shard's allocation here turned out stale (the store refused
				// its fence): the message goes to the shard's home.
				s.log.DebugContext(ctx, "entity not activated: its shard has moved", "entity", e.name(), "err", err)
				done(nil)
				e.rerouteFenced(d)
				return
			}
			if guestFailure(err) && e.pauses(&d) && e.retryOrPause(ctx, d, err) {
				done(err) // tried again later, or the entity's poison
				return
			}
			s.log.WarnContext(ctx, "entity activation failed", "entity", e.name(), "err", err)
			done(err)
			d.fail(err)
			return
		}
	}
	if isPauseControl(d.env.Kind) {
		e.resumeOrSkip(ctx, d, done)
		return
	}
	if e.poison != nil {
		// Paused since its activation (its journal's last pause): the message waits
		// behind the poison, or is refused if its sender waits.
		if d.ask {
			err := e.pausedError()
			done(err)
			d.fail(err)
		} else {
			done(nil)
			e.requeue(d)
		}
		return
	}
	if e.fenced.Load() {
		// The allocation turned out stale while the entity activated: this instance
		// must not handle anything.
		e.stop(ctx, false)
		done(nil)
		e.rerouteFenced(d)
		return
	}
	if d.start {
		done(nil)
		return // a remembered entity restarted: no message
	}
	if now := time.Now(); d.expired(now) {
		// Its deadline passed while the entity activated.
		done(errExpired)
		s.dropExpired(d, now)
		return
	}
	if key := d.env.IdempotencyKey; key != "" {
		if ke, ok := e.keys.get(key, s.cfg.Now(), e.r.Settings().IdempotencyRetention); ok {
			// Handled already: the first message's outcome again, nothing run.
			e.answerRemembered(d, ke, done)
			return
		}
	}
	if m, ok := e.marks.repeat(&d); ok {
		// Its sender's high-water mark covers it: handled already (delivery.go).
		e.answerRepeat(d, m, done)
		return
	}
	// Under the journal, the message's record is durable before anything it caused
	// leaves: its reply, its forward, and the tells and timers the entity holds back
	// (MessageInfo.Gated) until ReleaseEffects.
	gated := e.journaled
	info := MessageInfo{Sender: d.env.Sender, Kind: d.env.Kind, Tag: d.env.Tag, Chain: d.env.Chain,
		Ask: d.ask && d.env.Acked == 0, Gated: gated}
	if e.journaled {
		info.Seq = e.seq + 1
	}
	mc := &messageCtx{Context: ctx, info: info}
	e.sendSeqMoved = false
	if e.sendsOnce() {
		mc.sender = e
	}
	mctx := context.Context(mc)
	out, err := e.inst.Receive(mctx, d.env.Payload)
	var fwd *ForwardTo
	if err != nil {
		if fwd = forwardOf(err); fwd != nil {
			err = nil
		}
	}
	journaled := false
	if gated {
		var jerr error
		if journaled, jerr = e.journalMessage(ctx, &d, out, err, fwd); jerr != nil {
			// Not durable: nothing the message did leaves, and the instance, which
			// holds its change, stops unsaved. The next message activates the entity
			// from its base and journal. The caller may retry: the message did not
			// count, unless its record reached the store after all (outcome unknown
			// only then; an idempotency key makes a retry safe either way).
			e.stop(ctx, false)
			jerr = wrapCause(ErrStateNotSaved, "", jerr)
			done(jerr)
			d.fail(jerr)
			return
		}
	}
	lc, _ := e.inst.(EntityLifecycle)
	if lc != nil && lc.Terminated() {
		// The entity is gone (a trapped instance): what it did since its last save is
		// lost (unless journaled), and the next message starts from the saved state.
		s.log.WarnContext(ctx, "entity terminated", "entity", e.name(), "err", err)
		e.stop(ctx, false)
	}
	if err != nil && guestFailure(err) && e.pauses(&d) && e.retryOrPause(ctx, d, err) {
		done(err) // tried again later, or the entity's poison
		return
	}
	if err == nil {
		e.failures = 0
	}
	if fwd != nil {
		// Passed on: the entity it names answers the asker.
		s.forward(d, fwd)
		d.reply, d.waiter, d.ask = nil, nil, false
	}
	if err != nil {
		s.log.DebugContext(ctx, "message failed", "entity", e.name(), "err", err)
		done(err)
		d.fail(err)
		return
	}
	if journaled {
		e.finishJournaled(ctx, d, out, done, lc, span)
		return
	}
	if !s.hostingAllowed() {
		// The lease lapsed while the entity handled the message: another member may
		// host it by now, so this reply cannot be trusted, nor the instance kept.
		e.failLeaseLapsed(ctx, d, done)
		return
	}
	if e.inst == nil {
		// Terminated just after it handled the message: the reply stands, but its
		// state is not saved.
		done(nil)
		if d.ask {
			d.answer(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	e.unsaved++
	if key := d.env.IdempotencyKey; key != "" {
		e.rememberOutcome(key, 0, out, fwd)
	}
	if fwd != nil {
		e.markSender(d.env.Sender, d.env.SenderSeq, d.env.Payload, s.cfg.Now(), outcomeForwarded, nil)
	} else {
		e.markSender(d.env.Sender, d.env.SenderSeq, d.env.Payload, s.cfg.Now(), "", markReply(d, out, nil))
	}
	// The checkpoint policy: with every-message, the state is saved before the reply,
	// so an acknowledged message survives a crash of this member.
	if every := e.saveEvery(); every > 0 && s.cfg.States != nil && e.unsaved >= every {
		if err := e.save(ctx); err != nil {
			// The instance holds a change the store may not have: it stops unsaved,
			// so that no later reply shows a change that a stop without saving (a
			// lapsed lease, a downed member) or a crash would then take back. The
			// next message activates it from its saved state.
			e.stop(ctx, false)
			err = wrapCause(ErrStateNotSaved, "", err)
			done(err)
			d.fail(err)
			return
		}
		if !s.hostingAllowed() {
			// Saved, but the lease lapsed meanwhile: the reply waits for nobody who
			// could trust it (the change may or may not count).
			e.failLeaseLapsed(ctx, d, done)
			return
		}
	}
	done(nil)
	if d.ask {
		d.answer(Reply{Payload: out, Node: s.self}, nil)
	}
	if lc != nil && lc.PassivationRequested() {
		// Passivation the entity asked for: the mailbox is ours (this is its drain), so
		// messages that arrive meanwhile wait for the next incarnation. The asker has
		// its reply and may cancel its context: the save must not depend on it. Its
		// span starts a trace of its own, linked to the message's.
		e.passivateNow(context.WithoutCancel(ctx), causeRequested, span.SpanContext())
	}
}

// failLeaseLapsed ends a message handled while the hosting lease lapsed: the instance
// stops unsaved and the message fails with ErrOutcomeUnknown (ErrNoMajority): it was
// handled, and may or may not count.
func (e *entity) failLeaseLapsed(ctx context.Context, d delivery, done func(error)) {
	e.stop(ctx, false)
	// The entity handled the message: its outcome is unknown to the caller.
	err := wrapCause(ErrOutcomeUnknown, e.name(), ErrNoMajority)
	done(err)
	d.fail(err)
}

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
