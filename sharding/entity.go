package sharding

import (
	"context"
	"errors"
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
	// batch holds the journaled messages handled whose records wait for one append
	// (entity_batch.go); more is set when the message in hand was taken with others
	// behind it in the mailbox.
	batch []batched
	more  bool
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

// pooledQueue is the size of the mailbox arrays in queuePool: a mailbox that outgrows
// the array it kept takes one, and gives it back when it goes idle, so that a burst of
// messages to an idle entity does not grow a new array from a few deliveries up (an
// allocation and a copy at each doubling).
const pooledQueue = 64

var queuePool = sync.Pool{New: func() any { return new([pooledQueue]delivery) }}

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
	if e.pausedLocked() && !d.start && !isPauseControl(d.env.Kind) && d.env.Kind != kindPassivate && d.env.Kind != kindExpire && !isScheduleControl(d.env.Kind) &&
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
	if len(e.queue) == cap(e.queue) && cap(e.queue) >= keptQueue && cap(e.queue) < pooledQueue {
		a := queuePool.Get().(*[pooledQueue]delivery)
		n := copy(a[:], e.queue)
		clear(e.queue)
		e.queue = a[:n]
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
		if len(e.batch) > 0 && (e.queued() == 0 || e.pausedLocked() || e.passivateWhenIdle != "" || e.r.s.aborting.Load()) {
			// The batch's records go to the journal before the mailbox goroutine does
			// anything else.
			e.mu.Unlock()
			e.flushBatch(context.Background())
			continue
		}
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
			if cap(e.queue) == pooledQueue {
				// Every delivery in it was cleared as it was taken.
				queuePool.Put((*[pooledQueue]delivery)(e.queue[:pooledQueue]))
			}
			if cap(e.queue) > keptQueue {
				e.queue = nil
			}
			e.batch = nil // an idle entity keeps no batch's array
			e.mu.Unlock()
			return
		}
		if e.pausedLocked() {
			// Paused: only a resume, a skip or a passivation is taken, from wherever
			// it waits; the rest waits behind the poison.
			k := e.head
			for k < len(e.queue) && !isPauseControl(e.queue[k].env.Kind) && e.queue[k].env.Kind != kindPassivate && e.queue[k].env.Kind != kindExpire &&
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
			e.queue[:len(e.queue)+1][len(e.queue)] = delivery{} // the copy the shift left behind
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
		e.more = e.head > 0
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
	if len(e.batch) > 0 && (!e.batchable(&d) || !s.hostingAllowed() || d.expired(time.Now())) {
		// It goes another way than the batch's messages: their records first.
		e.flushBatch(d.ctx)
	}
	if e.fenced.Load() {
		e.rerouteFenced(d)
		return
	}
	if now, ok := d.expiredNow(); !d.start && ok {
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
	done := msgDone{e: e, span: span, arrived: d.arrived, kind: kindIndex(&d),
		remote: d.env.Origin != "" && d.env.Origin != s.self, start: d.start, handled: d.env.Kind.Handled()}
	if d.env.Kind == kindPassivate {
		// A passivation asked from outside (Sharding.Passivate), after the messages
		// before it; an entity that is not active stays so.
		out := []byte(PassivateInactive)
		if e.inst != nil {
			e.passivateNow(context.WithoutCancel(ctx), causeCommand, trace.SpanContext{})
			out = []byte(PassivateDone)
		}
		done.finish(nil)
		if d.ask {
			d.answer(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	if isScheduleControl(d.env.Kind) {
		// A scheduled message kept or cancelled (Sharding.Schedule): in the store,
		// with the entity's reminders; the entity is not activated.
		out, err := e.scheduleControl(ctx, d)
		done.finish(err)
		d.answer(out, err)
		return
	}
	if err := s.awaitLease(d.deadline); err != nil {
		// No recent contact with a majority (Config.HostingLease): the shard may be
		// moving elsewhere, so the entity stops, unsaved, and the message fails.
		e.stop(ctx, false)
		err = wrapCause(ErrShardUnavailable, e.name(), err)
		done.finish(err)
		d.fail(err)
		return
	}
	if d.env.Kind == kindRevert || d.env.Kind == kindFork {
		e.timeTravel(ctx, d, done)
		return
	}
	if d.env.Kind == kindExpire {
		// The state TTL sweep (statettl.go): after the messages before it, and
		// without an activation.
		out, err := e.expire(ctx)
		done.finish(err)
		d.answer(Reply{Payload: []byte(out), Node: s.self}, err)
		return
	}
	if e.inst == nil {
		if err := e.activate(ctx, d.deadline); err != nil {
			if e.fenced.Load() {
				// The shard's allocation here turned out stale (the store refused
				// its fence): the message goes to the shard's home.
				s.log.DebugContext(ctx, "entity not activated: its shard has moved", "entity", e.name(), "err", err)
				done.finish(nil)
				e.rerouteFenced(d)
				return
			}
			if guestFailure(err) && e.pauses(&d) && e.retryOrPause(ctx, d, err) {
				done.finish(err) // tried again later, or the entity's poison
				return
			}
			s.log.WarnContext(ctx, "entity activation failed", "entity", e.name(), "err", err)
			done.finish(err)
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
			done.finish(err)
			d.fail(err)
		} else {
			done.finish(nil)
			e.requeue(d)
		}
		return
	}
	if e.fenced.Load() {
		// The allocation turned out stale while the entity activated: this instance
		// must not handle anything.
		e.stop(ctx, false)
		done.finish(nil)
		e.rerouteFenced(d)
		return
	}
	if d.start {
		done.finish(nil)
		return // a remembered entity restarted: no message
	}
	if now, ok := d.expiredNow(); ok {
		// Its deadline passed while the entity activated.
		done.finish(errExpired)
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
		info.Seq = e.nextSeq()
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
	// passivateAsked: the entity asked for its passivation, as read (and cleared) below,
	// where a message that asked stays out of a batch.
	passivateAsked := false
	if gated {
		if lc, _ := e.inst.(EntityLifecycle); err == nil && fwd == nil && e.batchable(&d) && (lc == nil || !lc.Terminated()) {
			if passivateAsked = lc != nil && lc.PassivationRequested(); !passivateAsked && e.joinBatch(ctx, d, out, done, span) {
				return
			}
		}
		if len(e.batch) > 0 {
			// Its record follows the batch's: they go first.
			if jerr := e.flushBatch(ctx); jerr != nil {
				// The instance that handled it stopped unsaved with them.
				done.finish(jerr)
				d.fail(jerr)
				return
			}
		}
		var jerr error
		if journaled, jerr = e.journalMessage(ctx, &d, out, err, fwd); jerr != nil {
			// Not durable: nothing the message did leaves, and the instance, which
			// holds its change, stops unsaved. The next message activates the entity
			// from its base and journal. The caller may retry: the message did not
			// count, unless its record reached the store after all (outcome unknown
			// only then; an idempotency key makes a retry safe either way).
			e.stop(ctx, false)
			jerr = wrapCause(ErrStateNotSaved, "", jerr)
			done.finish(jerr)
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
		done.finish(err) // tried again later, or the entity's poison
		return
	}
	if err == nil {
		e.failures = 0
	}
	if fwd != nil {
		// Passed on: the entity it names answers the asker.
		s.forward(d, fwd)
		d.reply, d.waiter, d.tell, d.teller, d.ask = nil, nil, nil, nil, false
	}
	if err != nil {
		s.log.DebugContext(ctx, "message failed", "entity", e.name(), "err", err)
		done.finish(err)
		d.fail(err)
		return
	}
	if journaled {
		e.finishJournaled(ctx, d, out, done, lc, span, passivateAsked)
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
		done.finish(nil)
		if d.ask {
			d.answer(Reply{Payload: out, Node: s.self}, nil)
		}
		return
	}
	e.unsaved++
	if key := d.env.IdempotencyKey; key != "" {
		e.rememberOutcome(key, 0, out, fwd)
	}
	switch {
	case d.env.SenderSeq == 0 || d.env.Sender == "":
		// No sender's mark to keep (markSender): no clock read, no reply to copy.
	case fwd != nil:
		e.markSender(d.env.Sender, d.env.SenderSeq, d.env.Payload, s.cfg.Now(), outcomeForwarded, nil)
	default:
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
			done.finish(err)
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
	done.finish(nil)
	if d.ask {
		d.answer(Reply{Payload: out, Node: s.self}, nil)
	}
	if lc != nil && (passivateAsked || lc.PassivationRequested()) {
		// Passivation the entity asked for: the mailbox is ours (this is its drain), so
		// messages that arrive meanwhile wait for the next incarnation. The asker has
		// its reply and may cancel its context: the save must not depend on it. Its
		// span starts a trace of its own, linked to the message's.
		e.passivateNow(context.WithoutCancel(ctx), causeRequested, span.SpanContext())
	}
}

// msgDone is what ends a message of an entity's mailbox (entity.process): a value, not
// a closure, so that it costs no allocation per message, and is kept with a batched
// message (entity_batch.go) until its batch is durable.
type msgDone struct {
	e       *entity
	span    trace.Span
	arrived time.Time // when the message reached the mailbox (delivery.arrived)
	kind    messageKindIndex
	remote  bool // sent from another member
	start   bool // an activation without a message (delivery.start)
	handled bool // its kind counts as handled (MessageKind.Handled)
}

// finish ends the message with its outcome err: the entity is no longer busy, and the
// message is counted, recorded and its span ended.
func (m msgDone) finish(err error) {
	e := m.e
	s := e.r.s
	var now time.Time
	if !m.start {
		now = s.cfg.Now()
	}
	e.mu.Lock()
	e.busy = false
	if !m.start {
		e.lastUsed = now
	}
	e.mu.Unlock()
	if m.start {
		return
	}
	if m.handled {
		e.stats.handledOne(e, now, err)
		e.r.counters.count(now.Sub(m.arrived), err)
		e.r.used(e)
	}
	if s.tel.metered {
		e.recordMessage(m.kind, m.remote, m.arrived, now, err)
	}
	failSpan(m.span, err)
	m.span.End()
}

// failLeaseLapsed ends a message handled while the hosting lease lapsed: the instance
// stops unsaved and the message fails with ErrOutcomeUnknown (ErrNoMajority): it was
// handled, and may or may not count.
func (e *entity) failLeaseLapsed(ctx context.Context, d delivery, done msgDone) {
	e.stop(ctx, false)
	// The entity handled the message: its outcome is unknown to the caller.
	err := wrapCause(ErrOutcomeUnknown, e.name(), ErrNoMajority)
	done.finish(err)
	d.fail(err)
}
