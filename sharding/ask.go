// Tell and Ask: a message leaves this member's API as a delivery (the envelope and how
// to answer it), and an ask waits for its reply on a pooled waiter.

package sharding

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// maxForwards bounds how often entities may pass one message on (ForwardTo).
const maxForwards = 16

// delivery is a message and how to answer it.
type delivery struct {
	env envelope
	// ctx carries the trace; processing never stops because it is cancelled.
	ctx context.Context
	// deadline, if set, is when the message expires on this member's clock: an ask's
	// (its context's, or Config.AskTimeout from its start; on the member that hosts
	// the entity, the sooner of the sender's, carried as envelope.TimeLeft, and
	// AskTimeout from its arrival), or a tell's whose sender's context had one. A
	// message whose deadline passed before its entity took it is dropped, a dead letter
	// with reason "expired" (entity.process).
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
	// tell, if set (and reply and waiter nil), is where a tell made on this member
	// (by teller) learns of a failure while TellMessage has not returned, for the use
	// gen of it (tellCall.failed): without a closure or a tellCall of its own (an
	// allocation each per tell).
	tell   *tellCall
	teller *Sharding
	// wait is the span of the message's wait in a region's buffer, while it waits there
	// in a traced context.
	wait trace.Span
	// arrived is when the message reached its entity's mailbox.
	arrived time.Time
}

func (d delivery) fail(err error) { d.answer(Reply{}, err) }

// expired reports whether d has a deadline and it passed at now.
func (d *delivery) expired(now time.Time) bool { return !d.deadline.IsZero() && now.After(d.deadline) }

// expiredNow reports whether d has a deadline and it has passed, and the time it read
// to tell; without a deadline it reads no clock (a tell's usual case).
func (d *delivery) expiredNow() (time.Time, bool) {
	if d.deadline.IsZero() {
		return time.Time{}, false
	}
	now := time.Now()
	return now, now.After(d.deadline)
}

// timeLeft is envelope.TimeLeft for d sent at now: 0 without a deadline, else what is
// left of it, at least 1 ns (an expired message is dropped where it is taken).
func (d *delivery) timeLeft(now time.Time) uint64 {
	if d.deadline.IsZero() {
		return 0
	}
	return uint64(max(d.deadline.Sub(now), 1))
}

// deadlineAt returns the deadline on this member of a message that arrived at now
// with timeLeft (envelope.TimeLeft): now plus timeLeft, or zero without one; for an
// ask, at most limit (Config.AskTimeout) after now.
func deadlineAt(timeLeft uint64, now time.Time, ask bool, limit time.Duration) time.Time {
	var deadline time.Time
	if timeLeft != 0 {
		deadline = now.Add(time.Duration(min(timeLeft, math.MaxInt64)))
	}
	if ask {
		if l := now.Add(limit); deadline.IsZero() || l.Before(deadline) {
			deadline = l
		}
	}
	return deadline
}

// answer gives d's reply (or failure) to its sender, if it has one. The failure of a
// message an entity passed on has an unknown outcome where it would leave it unhandled
// (passedOnFailure).
func (d *delivery) answer(r Reply, err error) {
	if err != nil && d.env.Forwards > 0 {
		err = passedOnFailure(err, d.env.Forwards)
	}
	switch {
	case d.reply != nil:
		d.reply(r, err)
	case d.waiter != nil:
		d.waiter.put(d.gen, r, err)
	case d.tell != nil:
		d.tell.failed(d, err)
	}
}

// handing records that d leaves this member's buffers: it goes to its entity's mailbox
// here, or to another member. An ask whose deadline passes before is not delivered
// (AskMessage). Call it before the check of d's deadline that lets it go on.
func (d *delivery) handing() {
	if d.waiter != nil {
		d.waiter.handed.Store(d.gen + 1)
	}
}

// Tell sends payload to the entity typ/id without waiting for it to be processed. It
// returns an error if the message cannot be routed from here (unknown type, empty ID,
// buffer full); failures further on are logged and counted, not returned.
func (s *Sharding) Tell(ctx context.Context, typ, id string, payload []byte) error {
	return s.TellMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: payload})
}

// TellMessage is Tell for a message with a sender, kind and tag.
//
// A tell has no deadline unless ctx has one. With one, the message is dropped if its
// entity has not taken it by then, on whatever member hosts it: a dead letter with
// reason "expired".
func (s *Sharding) TellMessage(ctx context.Context, m Message) error {
	if m.EntityID == "" {
		return ErrEmptyEntityID
	}
	if m.IdempotencyKey != "" {
		if err := CheckIdempotencyKey(m.IdempotencyKey); err != nil {
			return err
		}
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
	t := tellCalls.Get().(*tellCall)
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	deadline, _ := ctx.Deadline() // the message's, if the caller gave one (delivery.deadline)
	s.route(delivery{
		env:      env,
		ctx:      dctx,
		deadline: deadline,
		tell:     t,
		gen:      gen,
		teller:   s,
	})
	t.mu.Lock()
	err := t.err
	t.err = nil
	t.gen++ // returned: a later failure of this tell is a dead letter
	t.mu.Unlock()
	tellCalls.Put(t)
	if err != nil {
		failSpan(span, err)
	}
	return classified(err)
}

// tellCall is where TellMessage learns of a failure to route its tell from here: the
// caller's error. It serves one tell at a time, use gen of it, and is used again (from
// tellCalls) once TellMessage has returned; a failure that comes later (for an older
// gen) is a dead letter.
type tellCall struct {
	mu  sync.Mutex
	gen uint64 // the use under way; moves on when TellMessage returns
	err error  // the routing failure TellMessage returns
}

var tellCalls = sync.Pool{New: func() any { return new(tellCall) }}

// failed takes a failure of d, a tell made on this member: the caller's, if it failed
// to route the message from here before TellMessage returned; a dead letter otherwise.
func (t *tellCall) failed(d *delivery, err error) {
	t.mu.Lock()
	// Only a failure to route the message from here is the caller's; the entity's own
	// failure is a dead letter even when it comes back before TellMessage returns (a
	// quick local entity).
	early := t.gen == d.gen && t.err == nil && tellRoutingError(err)
	if early {
		t.err = err
	}
	t.mu.Unlock()
	if !early && err != nil {
		d.teller.tellFailed(d.ctx, d.env, err)
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
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindPassivate})
	if err != nil {
		return false, err
	}
	return string(r.Payload) == PassivateDone, nil
}

// Ask sends payload to the entity typ/id and waits for its reply, until ctx ends (or
// Config.AskTimeout if ctx has no deadline). Errors carry an ErrorCode: the entity's own
// error, a guest failure, ErrUnknownEntityType, ErrEmptyEntityID, ErrBufferFull,
// ErrStateNotSaved, ErrStateNotLoaded; ErrNotDelivered when the message never reached
// its entity (ErrShardUnavailable: its shard has no home, or the member hosting it
// cannot be reached; ErrStopped), so that sending it again is safe; ErrOutcomeUnknown
// when it may have been handled (ErrAskTimeout: no reply in time after it left this
// member's buffers; the connection to the member hosting it broke, or that member lost
// its hosting lease).
//
// The deadline goes with the message to the member that hosts the entity, which uses
// the sooner of it and its own Config.AskTimeout: a message whose deadline passed
// before its entity took it (waiting in a mailbox behind a slow message, or in a
// buffer) is dropped there, before activation and before the entity's Receive, a dead
// letter with reason "expired", and holds the entity no longer.
func (s *Sharding) Ask(ctx context.Context, typ, id string, payload []byte) (Reply, error) {
	return s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Payload: payload})
}

// AskMessage is Ask for a message with a sender, kind, tag and ask chain.
func (s *Sharding) AskMessage(ctx context.Context, m Message) (Reply, error) {
	typ, id := m.EntityType, m.EntityID
	if id == "" {
		return Reply{}, ErrEmptyEntityID
	}
	if m.IdempotencyKey != "" {
		if err := CheckIdempotencyKey(m.IdempotencyKey); err != nil {
			return Reply{}, err
		}
	}
	if err := numberAsk(ctx, &m); err != nil {
		return Reply{}, err
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
		return res.r, classified(res.err)
	case <-ctx.Done():
	case <-timeout:
	}
	// The reply may still come: the waiter is left to it (and to the collector), not
	// reused.
	w.timer.Stop()
	now := time.Now()
	err := fmt.Errorf("%w: %s/%s after %v", ErrAskTimeout, typ, id, now.Sub(start).Round(time.Millisecond))
	if now.After(deadline) && w.handed.Load() != gen+1 {
		// The deadline passed while the message waited in a buffer here (for its type,
		// its shard's home, a handoff): whoever takes it from there finds it expired,
		// later than now, and drops it before it reaches an entity (delivery.handing
		// comes before that check).
		return Reply{}, wrapCause(ErrNotDelivered, "", err)
	}
	return Reply{}, wrapCause(ErrOutcomeUnknown, "", err)
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
	// handed is gen+1 (odd, so never a new waiter's zero) of the last ask whose
	// message left this member's buffers (delivery.handing).
	handed atomic.Uint64
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
func (m Message) envelope(self string) envelope {
	return envelope{EntityType: m.EntityType, EntityID: m.EntityID, Payload: m.Payload, Origin: self,
		Sender: m.Sender, Kind: m.Kind, Tag: m.Tag, Chain: m.Chain, IdempotencyKey: m.IdempotencyKey,
		SenderSeq: m.SenderSeq, Acked: boolByte(m.acked)}
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
	// Its sender's number belongs to the entity that passed it on, whose mark holds it:
	// the entity it goes to might also hear from that sender directly, in another order.
	env.SenderSeq = 0
	env.Forwards++
	d.env = env
	if d.ask && !d.deadline.IsZero() && time.Now().After(d.deadline) {
		d.fail(fmt.Errorf("%w: %s/%s", ErrAskTimeout, f.EntityType, f.EntityID))
		return
	}
	s.route(d)
}
