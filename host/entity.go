package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// entityFactory is the node as sharding's EntityFactory: entities are wasm instances.
type entityFactory Node

func (f *entityFactory) NewEntity(ctx context.Context, typ, id string, state []byte) (sharding.Entity, error) {
	n := (*Node)(f)
	name := typ + "/" + id
	if err := n.backoff.check(name); err != nil {
		return nil, err
	}
	e, err := n.newEntity(ctx, typ, id, state)
	if err != nil {
		var ge *GuestError
		if errors.As(err, &ge) {
			n.guestFailed(typ, id, err)
		}
		return nil, err
	}
	return e, nil
}

var _ sharding.EntityForgiver = (*entityFactory)(nil)

// Forgive implements sharding.EntityForgiver: a resumed entity's failures are
// forgotten, so that its backoff does not refuse the retry of its poison.
func (f *entityFactory) Forgive(typ, id string) { (*Node)(f).backoff.succeeded(typ + "/" + id) }

// guestFailed counts a guest failure of typ/id towards its backoff and in the metrics.
func (n *Node) guestFailed(typ, id string, err error) {
	n.guestFailure(typ, err)
	if n.backoff.failed(typ + "/" + id) {
		n.tel.backoffs.Add(context.Background(), 1, n.tel.attrs.Get([2]string{typ, ""}))
	}
}

func (n *Node) newEntity(ctx context.Context, typ, id string, state []byte) (*wasmEntity, error) {
	info, ok := n.catalog.get(typ)
	if !ok {
		return nil, n.unknownType(typ)
	}
	target := targetOf(info, id) // the current version's module, or a canary's stable one
	mod, err := n.modules.get(ctx, target, n.moduleSources(info))
	if err != nil {
		return nil, withCode(err)
	}
	mod.CompileInBackground() // if not started yet (a module loaded since this process started)
	// The instance's spans carry the entity's attribute set; the runtime does not know
	// its shard or this member.
	ctx = withEntityAttrs(ctx, []attribute.KeyValue{obs.EntityType.String(typ), obs.EntityID.String(id),
		obs.ShardID.Int(abi.ShardID(id, info.NumberOfShards)), obs.Node.String(n.membership.Self().Address)})
	var inst *wasmInstance
	var extras entityExtras
	var chain *restoredChain
	transparent := !mod.guestSnapshot // a new instance: as its module snapshots
	if state == nil {
		if inst, err = mod.Instantiate(ctx, typ, id); err != nil {
			return nil, withCode(err)
		}
	} else {
		var kind byte
		var payload []byte
		if kind, payload, extras, err = decodeState(state); err != nil {
			return nil, withCode(err)
		}
		restore := "guest"
		if kind != stateGuest {
			restore = "instance"
		}
		n.tel.restores.Add(context.Background(), 1, n.tel.attrs.Get([2]string{typ, "r:" + restore}))
		transparent = kind != stateGuest
		if kind == stateGuest {
			if extras.Module != "" && extras.Module != mod.Digest {
				// The journal's records after this state were made by the module that
				// saved it: they are replayed on it, and the entity moves to the
				// current version after them (moveTo).
				if from, ferr := n.modules.get(ctx, extras.Module, n.moduleSources(info)); ferr == nil {
					mod = from
				} else {
					n.log.Warn("entity's explicit state restored on the current module: the module that saved it is unavailable",
						"entity", typ+"/"+id, "module", extras.Module[:min(12, len(extras.Module))], "err", ferr)
				}
			}
			inst, err = mod.RestoreGuest(ctx, typ, id, payload)
		} else {
			inst, chain, err = n.restoreState(ctx, mod, typ, id, kind, payload)
			if inst != nil {
				mod = inst.m
			}
		}
		if err != nil {
			return nil, withCode(err)
		}
	}
	// failing starts set: the first handled message forgets the failures of earlier
	// incarnations (backoff).
	e := &wasmEntity{n: n, mod: mod, typ: typ, id: id, inst: inst, timers: map[string]*entityTimer{}, subs: map[string]*entitySub{},
		failing: true, fresh: state == nil, journalModule: extras.Module, target: target,
		version: moduleVersionOf(info, mod.Digest)}
	if kind := stateKind(state); kind != 0 && kind != stateGuest {
		e.journalModule = inst.m.Digest // a transparent snapshot's module
	}
	inst.svc = e
	if n.cfg.Recovery {
		e.rec = &recovery{baseState: state}
	}
	if chain != nil {
		// Checkpoints go on with deltas against the base restored from: the writes are
		// tracked from before on_activate.
		e.cp = &checkpointer{}
		if err := e.cp.track(inst, chain.base, chain.baseBytes, chain.delta); err != nil {
			inst.Close(ctx)
			return nil, withCode(err)
		}
	}
	// The timers and subscriptions of the last incarnation run again (abi/SPEC.md,
	// "v1: timers"), before on_activate.
	now := time.Now()
	link := trace.SpanContextFromContext(ctx) // the activation: timers re-armed link to it
	for _, t := range extras.Timers {
		e.arm(&entityTimer{name: t.Name, msg: t.Message, interval: time.Duration(t.Interval), link: link}, time.Unix(0, t.Due).Sub(now))
	}
	for _, key := range extras.Subscriptions {
		if err := e.subscribe(ctx, key); err != nil {
			n.log.Warn("entity subscription not renewed", "entity", e.name(), "key", key, "err", err)
		}
	}
	if e.rec != nil {
		inst.startRecording()
	}
	err = inst.Activate(ctx)
	if e.rec != nil {
		e.rec.activation = inst.stopRecording()
	}
	if err != nil {
		e.Stop(ctx)
		return nil, withCode(err)
	}
	if state == nil && mod.guestSnapshot {
		// A new instance of a module that may snapshot its state itself: whether it
		// does says how it is counted (versions.go). Its state is its first one, small.
		_, ok, err := inst.GuestSnapshot()
		if err != nil && inst.Closed() {
			e.Stop(ctx)
			return nil, withCode(err)
		}
		transparent = err == nil && !ok
	}
	e.countAs(inst.m.Digest, transparent)
	return e, nil
}

// moduleVersionOf returns the version of info's type whose module has digest, or 0.
func moduleVersionOf(info TypeInfo, digest string) uint64 {
	for _, v := range info.Versions() {
		if v.Digest == digest {
			return v.Version
		}
	}
	return 0
}

var _ sharding.EntityInspector = (*wasmEntity)(nil)

// Inspect implements sharding.EntityInspector, on the entity's mailbox goroutine.
func (e *wasmEntity) Inspect() sharding.EntityFacts {
	return sharding.EntityFacts{ModuleVersion: e.version, MemoryBytes: uint64(e.inst.MemorySize()),
		Timers: len(e.timers), Subscriptions: len(e.subs)}
}

// wasmEntity is an entity backed by a wasm instance, with the timers and subscriptions
// it started. After a trap or a deadline the instance is gone and Receive fails with a
// guest error code: the region discards the entity, and the next message activates it
// again from its last saved state.
//
// Everything but the timer and subscription goroutines runs on the entity's mailbox
// goroutine; those only read what they captured and route messages.
type wasmEntity struct {
	n       *Node
	mod     *wasmModule
	version uint64 // of the type's module mod is (0: not in the catalog's history)
	typ, id string
	inst    *wasmInstance
	timers  map[string]*entityTimer
	subs    map[string]*entitySub
	stopped atomic.Bool
	wg      sync.WaitGroup // subscription goroutines
	// rec is the base and replay record of in-memory recovery (recovery.go); nil
	// when recovery is off or was given up.
	rec *recovery
	// failing is set by a guest failure and cleared by a handled message: only then
	// does a message consult the backoff.
	failing bool
	// cp is the chain of saved base and deltas of its transparent snapshots
	// (checkpoint.go); nil until the first one. wholeSnapshots makes every checkpoint
	// a whole snapshot, as before deltas (benchmarks compare).
	cp             *checkpointer
	wholeSnapshots bool
	// ver is the group the entity is counted in among the member's active ones
	// (versions.go), when counted.
	ver     activeKey
	counted bool
	// Module versions (journal.go, "Module versions"). fresh: the instance is a new
	// one and no message ran on it yet. journalModule is the module the journal's
	// records so far were made by ("" unknown): the next record names the
	// instance's module when it is another. target is the type's module when the
	// entity activated: an entity with explicit state moves to it before its first
	// message (moveTo); "" once done.
	fresh         bool
	journalModule string
	target        string
	// moveErr is why the entity's move to its type's current module failed (nil: it
	// did not fail): Upgrade reports it.
	moveErr error
	// replayMoved: the entity's transparent state moved to another module by a replay
	// of its journal (replayupgrade.go) since its last saved state, which is the old
	// module's: its next stop saves a base (BeforeStop), and BaseDue says one is due.
	replayMoved bool
	// egressRate is the entity's outbound HTTP rate (egress.go).
	egressRate egressBucket

	// The journal (journal.go). gated: the message under way is gated, so its tells
	// wait in held and its timers in heldTimers until ReleaseEffects. lastCalls and
	// lastReturned are the host calls of the last message and whether its guest call
	// returned; extrasChanged: it changed the timers or subscriptions. sinceBaseCost
	// is the guest time of the messages since the last saved base (BaseDue).
	gated         bool
	held          []heldTell
	heldTimers    []*entityTimer
	heldReminders []heldReminder
	lastCalls     []hostRecord
	lastReturned  bool
	extrasChanged bool
	sinceBaseCost time.Duration
}

// entityTimer is a timer an entity started.
type entityTimer struct {
	name     string
	msg      []byte
	interval time.Duration
	due      time.Time
	gen      uint64
	t        *time.Timer
	// link is the span that set the timer (its guest call): each firing starts a trace
	// of its own linked to it.
	link trace.SpanContext
}

// entitySub is a distributed data subscription of an entity.
type entitySub struct {
	sub  *ddata.Subscription
	done chan struct{}
	link trace.SpanContext // the span that subscribed
}

// timerGen numbers timer starts, so that a message of a replaced or cancelled timer is
// told apart from the current one's.
var timerGen atomic.Uint64

func (e *wasmEntity) name() string { return e.typ + "/" + e.id }

func (e *wasmEntity) Receive(ctx context.Context, payload []byte) ([]byte, error) {
	if e.inst == nil || e.inst.Closed() {
		return nil, withCode(fmt.Errorf("%w: %s/%s", ErrInstanceClosed, e.typ, e.id))
	}
	e.fresh = false
	if e.target != "" {
		e.moveTo(ctx)
	}
	if e.inst.code.interpreted && !e.mod.Interpreted() {
		e.toCompiled(ctx)
	}
	if e.failing {
		// Recovered in memory after each failure, an entity that keeps failing rests
		// as one activated again would (abi/SPEC.md, "Failures").
		if err := e.n.backoff.check(e.name()); err != nil {
			return nil, err
		}
	}
	mi, _ := sharding.MessageInfoFrom(ctx)
	e.gated, e.lastCalls, e.lastReturned, e.extrasChanged = mi.Gated, nil, false, false
	defer func() { e.gated = false }()
	if mi.Kind == sharding.KindTimer && mi.Sender == upgradeWake && mi.Tag == 0 {
		// Upgrade's activation (upgrade.go): the reply is the module the entity runs,
		// and why it did not move.
		out := e.inst.m.Digest
		if e.moveErr != nil {
			out += "\n" + e.moveErr.Error()
		}
		return []byte(out), nil
	}
	if mi.Kind == sharding.KindTimer {
		t := e.timers[mi.Sender]
		if t == nil || t.gen != mi.Tag {
			return nil, nil // a cancelled or replaced timer's message: dropped
		}
		e.extrasChanged = true
		if t.interval > 0 {
			e.rearm(t, t.interval) // fixed delay: the next one counts from now (linked to the setter still)
		} else {
			delete(e.timers, t.name)
		}
	}
	if e.rec == nil && !e.gated {
		out, err := e.inst.Receive(ctx, payload)
		e.outcome(err)
		return out, withCode(err)
	}
	inst := e.inst
	inst.startRecording()
	out, err := inst.Receive(ctx, payload)
	calls := inst.stopRecording()
	e.lastCalls, e.lastReturned = calls, inst.returned
	if e.gated {
		// What replaying it would cost: the guest's time, not its waits on host calls.
		e.sinceBaseCost += max(inst.lastCall-inst.recWait, 0)
	}
	if inst.returned && e.rec != nil {
		e.logMessage(payload, mi, calls, inst.lastCall)
	}
	e.outcome(err)
	if inst.Closed() && e.rec != nil && (isGuestError(err) || inst.returned) {
		// A trap, the deadline or the host call budget (or the deadline just as the
		// call returned): the message failed (or stands), the state since it is
		// rebuilt in memory.
		e.recover(ctx, err)
	}
	return out, withCode(err)
}

// toCompiled moves the entity from its instance on the interpreter to one of its
// module's compiled code, between two messages, through a transparent snapshot (a Go
// guest: about 1 ms, once): its memory, globals and clocks carry over, and its timers
// and subscriptions are the wasmEntity's. When that fails, the entity goes on on the
// interpreter and the failure is logged.
func (e *wasmEntity) toCompiled(ctx context.Context) {
	start := time.Now()
	snap, err := e.inst.Snapshot()
	var inst *wasmInstance
	if err == nil {
		inst, err = e.mod.Restore(ctx, e.typ, e.id, snap)
	}
	if err != nil {
		e.n.log.Warn("entity not moved to its compiled module: it goes on on the interpreter", "entity", e.name(), "err", err)
		return
	}
	inst.svc = e
	old := e.inst
	e.inst = inst
	old.Close(ctx)
	e.n.tel.restores.Add(context.Background(), 1, e.n.tel.attrs.Get([2]string{e.typ, "r:compiled"}))
	e.n.log.Debug("entity moved to its compiled module", "entity", e.name(), "took", time.Since(start))
}

// outcome counts a message's guest failure, or its success, towards the backoff, and
// for a canary in flight by module (rolloutOutcome).
func (e *wasmEntity) outcome(err error) {
	switch {
	case isGuestError(err):
		e.n.guestFailed(e.typ, e.id, err)
		e.failing = true
		e.n.rolloutOutcome(e.typ, e.mod.Digest, err)
		return
	case err == nil && e.failing:
		e.n.backoff.succeeded(e.name())
		e.failing = false
	}
	if err == nil {
		e.n.rolloutOutcome(e.typ, e.mod.Digest, nil)
	}
}

// Snapshot implements sharding.Entity: the guest-level snapshot when the guest gives
// one, a transparent snapshot of the instance otherwise, with the entity's timers and
// subscriptions; nil when the instance is gone (its last saved state stands).
func (e *wasmEntity) Snapshot(ctx context.Context) ([]byte, error) {
	if e.inst == nil || e.inst.Closed() {
		return nil, nil
	}
	extras := e.extras()
	state, ok, err := e.inst.GuestSnapshot()
	if err != nil {
		return nil, withCode(err)
	}
	e.countAs(e.inst.m.Digest, !ok)
	if ok {
		return encodeState(stateGuest, state, extras), nil
	}
	if e.wholeSnapshots {
		start := time.Now()
		snap, err := e.inst.Snapshot()
		if err != nil {
			return nil, withCode(err)
		}
		if e.rec != nil {
			e.setBase(snap, time.Since(start)) // an instanceSnapshot is a value: the base for recovery too
		}
		b, err := snap.MarshalBinary()
		if err != nil {
			return nil, err
		}
		return encodeState(stateInstance, b, extras), nil
	}
	if e.cp == nil {
		e.cp = &checkpointer{}
	}
	state, snap, took, err := e.checkpoint(extras)
	if err != nil {
		return nil, withCode(err)
	}
	if snap != nil && e.rec != nil {
		e.setBase(snap, took) // an instanceSnapshot is a value: the base for recovery too
	}
	return state, nil
}

func (e *wasmEntity) extras() entityExtras {
	var x entityExtras
	for _, t := range e.timers {
		x.Timers = append(x.Timers, savedTimer{Name: t.name, Message: t.msg, Due: t.due.UnixNano(), Interval: int64(t.interval)})
	}
	slices.SortFunc(x.Timers, func(a, b savedTimer) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for key := range e.subs {
		x.Subscriptions = append(x.Subscriptions, key)
	}
	slices.Sort(x.Subscriptions)
	if e.inst != nil {
		x.Module = e.inst.m.Digest
	}
	return x
}

// Terminated implements sharding.EntityLifecycle: the instance trapped or overran its
// deadline and is closed.
func (e *wasmEntity) Terminated() bool { return e.inst == nil || e.inst.Closed() }

// PassivationRequested implements sharding.EntityLifecycle: the guest called the
// passivate host function during the last message.
func (e *wasmEntity) PassivationRequested() bool {
	return e.inst != nil && e.inst.PassivationRequested()
}

// BeforeStop implements sharding.EntityStopHook: the guest's on_passivate. It also
// reports a change when the entity runs another module than its type's current one (a
// redeploy since its activation): the stop then saves its state as a base under the
// journal too, so that the next activation starts from that state (explicit state goes
// into the new module, a transparent snapshot keeps its own) instead of replaying the
// messages since the last base on code that did not handle them (docs/state.md).
func (e *wasmEntity) BeforeStop(ctx context.Context) bool {
	if e.inst == nil {
		return false
	}
	hooked := e.inst.BeforeStop(ctx)
	return hooked || e.outdated() || e.replayMoved
}

// outdated reports whether the entity's module is not the one its type's current
// version gives it (a canary's stable one outside the canary: rollout.go).
func (e *wasmEntity) outdated() bool {
	info, ok := e.n.catalog.get(e.typ)
	return ok && e.mod != nil && targetOf(info, e.id) != e.mod.Digest
}

// Stop ends the entity's timers and subscriptions (they are in its saved state) and
// closes its instance.
func (e *wasmEntity) Stop(ctx context.Context) {
	e.stopped.Store(true)
	e.uncount()
	for _, t := range e.timers {
		if t.t != nil {
			t.t.Stop()
		}
	}
	for key := range e.subs {
		e.unsubscribe(key)
	}
	e.wg.Wait()
	clear(e.held) // a message whose record was not durable: what it held is dropped
	e.held, e.heldTimers, e.heldReminders = nil, nil, nil
	if e.cp != nil {
		e.cp.stop()
	}
	if e.inst != nil {
		e.inst.Close(ctx)
		e.inst = nil
	}
	e.rec = nil
}

// The services of the v1 host functions.

// tell sends an entity's tell. A tell outlives the message that made it: it takes the
// message's trace, not its cancellation nor its deadline (an asker's). During a gated
// message it is held until the message's record is durable (ReleaseEffects); what can
// be checked now (an empty ID, a type nobody deployed) is refused now, as an ungated
// tell refuses it.
func (e *wasmEntity) tell(ctx context.Context, m sharding.Message) error {
	ctx = context.WithoutCancel(ctx)
	if !e.gated {
		return e.n.sharding.TellMessage(ctx, m)
	}
	if m.EntityID == "" {
		return sharding.ErrEmptyEntityID
	}
	if _, ok := e.n.catalog.get(m.EntityType); !ok {
		return e.n.unknownType(m.EntityType)
	}
	e.held = append(e.held, heldTell{ctx: ctx, m: m})
	return nil
}

func (e *wasmEntity) ask(ctx context.Context, m sharding.Message) ([]byte, error) {
	r, err := e.n.sharding.AskMessage(ctx, m)
	return r.Payload, err
}

// msgSpan is the span of the message the entity handles now (its guest call), if any.
func (e *wasmEntity) msgSpan() trace.SpanContext {
	if e.inst != nil && e.inst.msgCtx != nil {
		return trace.SpanContextFromContext(e.inst.msgCtx)
	}
	return trace.SpanContext{}
}

func (e *wasmEntity) ddataGet(ctx context.Context, key string, rc ddata.ReadConsistency) (ddata.ReplicatedData, error) {
	return e.n.replicator.Get(ctx, key, rc)
}

func (e *wasmEntity) ddataUpdate(ctx context.Context, key string, typ ddata.DataType, op ddata.Op, wc ddata.WriteConsistency) (ddata.ReplicatedData, error) {
	initial, err := ddata.Empty(typ)
	if err != nil {
		return nil, err
	}
	return e.n.replicator.Update(ctx, key, initial, wc, op.Modify(e.n.replicator.SelfNodeID(), nil))
}

func (e *wasmEntity) ddataDelete(ctx context.Context, key string, wc ddata.WriteConsistency) error {
	return e.n.replicator.Delete(ctx, key, wc)
}

// subscribe delivers the changes of key to the entity as messages of kind changed, from
// a goroutine that Stop and unsubscribe end. Each change starts a trace of its own,
// linked to the span of ctx (the guest call that subscribed, or the activation that
// renewed the subscription), which gets a "ddata subscribe" child.
//
// The entity owns that goroutine without an owner.Group: Stop ends each (unsubscribe)
// and waits for them (e.wg), which is what a Group would do, and a Group per entity
// would cost a context for each of the thousands a member hosts.
func (e *wasmEntity) subscribe(ctx context.Context, key string) (err error) {
	if e.n.traced && obs.Traced(ctx) {
		var span trace.Span
		ctx, span = e.n.tracer.Start(ctx, "ddata subscribe", trace.WithAttributes(attribute.String("shardhost.ddata.key", key),
			obs.EntityType.String(e.typ), obs.EntityID.String(e.id)))
		defer func() {
			obs.Fail(span, err, "bad-request")
			span.End()
		}()
	}
	if _, ok := e.subs[key]; ok {
		return nil
	}
	if len(e.subs) >= abi.MaxTimers {
		return fmt.Errorf("%w: at most %d subscriptions per entity", ErrBadRequest, abi.MaxTimers)
	}
	es := &entitySub{sub: e.n.replicator.Subscribe(key, 16), done: make(chan struct{}), link: trace.SpanContextFromContext(ctx)}
	e.subs[key] = es
	e.extrasChanged = true
	s, typ, id := e.n.sharding, e.typ, e.id
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			select {
			case <-es.done:
				return
			case ch := <-es.sub.C:
				payload := []byte("null")
				if ch.Data != nil && !ch.Deleted && !ch.Expired {
					var err error
					if payload, err = valueJSON(ch.Data); err != nil {
						continue
					}
				}
				if err := s.TellMessage(context.Background(), sharding.Message{EntityType: typ, EntityID: id,
					Payload: payload, Sender: ch.Key, Kind: sharding.KindChanged, Link: es.link}); err != nil {
					e.n.log.Debug("change not delivered", "entity", typ+"/"+id, "key", ch.Key, "err", err)
				}
			}
		}
	}()
	return nil
}

func (e *wasmEntity) unsubscribe(key string) {
	es, ok := e.subs[key]
	if !ok {
		return
	}
	delete(e.subs, key)
	e.extrasChanged = true
	es.sub.Close()
	close(es.done)
}

func (e *wasmEntity) startTimer(name string, msg []byte, delay, interval time.Duration) error {
	old := e.timers[name]
	if old == nil && len(e.timers) >= abi.MaxTimers {
		return fmt.Errorf("%w: at most %d timers per entity", ErrBadRequest, abi.MaxTimers)
	}
	if old != nil && old.t != nil {
		old.t.Stop()
	}
	e.extrasChanged = true
	e.rearm(&entityTimer{name: name, msg: msg, interval: interval, link: e.msgSpan()}, delay)
	return nil
}

// rearm (re)starts t to fire after delay, as arm does; during a gated message it is
// recorded now and armed by ReleaseEffects.
func (e *wasmEntity) rearm(t *entityTimer, delay time.Duration) {
	if !e.gated {
		e.arm(t, delay)
		return
	}
	e.schedule(t, delay)
	e.heldTimers = append(e.heldTimers, t)
}

// arm (re)starts t to fire after delay (at once when it is not positive) with a new
// generation, and records it.
func (e *wasmEntity) arm(t *entityTimer, delay time.Duration) {
	e.schedule(t, delay)
	e.start(t)
}

// schedule records t, to fire after delay, with a new generation; start arms it.
func (e *wasmEntity) schedule(t *entityTimer, delay time.Duration) {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
	delay = max(delay, 0)
	t.gen = timerGen.Add(1)
	t.due = time.Now().Add(delay)
	e.timers[t.name] = t
}

// start arms t, scheduled, to fire at its due time.
func (e *wasmEntity) start(t *entityTimer) {
	s, typ, id, name, msg, gen, link := e.n.sharding, e.typ, e.id, t.name, t.msg, t.gen, t.link
	t.t = time.AfterFunc(max(time.Until(t.due), 0), func() {
		if e.stopped.Load() {
			return
		}
		if err := s.TellMessage(context.Background(), sharding.Message{EntityType: typ, EntityID: id,
			Payload: msg, Sender: name, Kind: sharding.KindTimer, Tag: gen, Link: link}); err != nil {
			e.n.log.Debug("timer message not delivered", "entity", typ+"/"+id, "timer", name, "err", err)
		}
	})
}

func (e *wasmEntity) cancelTimer(name string) bool {
	t, ok := e.timers[name]
	if !ok {
		return false
	}
	if t.t != nil {
		t.t.Stop()
	}
	delete(e.timers, name)
	e.extrasChanged = true
	return true
}

// valueJSON renders a distributed data value as abi/SPEC.md says: counters as numbers,
// sets as sorted arrays, registers as strings, flags as booleans, maps as objects.
func valueJSON(d ddata.ReplicatedData) ([]byte, error) {
	b, err := json.Marshal(d.Value())
	if err != nil {
		return nil, fmt.Errorf("host: rendering a %s as JSON: %w", d.Type(), err)
	}
	return b, nil
}

// backoff rests entities that keep failing (abi/SPEC.md, "Failures"): after
// backoffAfter guest failures in a row, the entity is not activated for a while that
// starts at backoffMin and doubles up to backoffMax. A handled message resets it.
type backoff struct {
	mu      sync.Mutex
	clock   func() time.Time
	failing map[string]*failing
}

type failing struct {
	count int
	delay time.Duration
	until time.Time
}

const (
	backoffAfter = 3
	backoffMin   = time.Second
	backoffMax   = time.Minute
)

func newBackoff(clock func() time.Time) *backoff {
	return &backoff{clock: clock, failing: map[string]*failing{}}
}

// check returns an error coded entity-backoff while the entity rests.
func (b *backoff) check(entity string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.failing[entity]
	if f == nil || !b.clock().Before(f.until) {
		return nil
	}
	return &codedError{sharding.CodeBackoff, fmt.Errorf("%w: %s failed %d times in a row; retry after %v",
		ErrEntityBackoff, entity, f.count, f.until.Sub(b.clock()).Round(time.Millisecond))}
}

// failed counts a guest failure of the entity; it reports whether the entity now rests.
func (b *backoff) failed(entity string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.failing[entity]
	if f == nil {
		f = &failing{}
		b.failing[entity] = f
	}
	f.count++
	if f.count >= backoffAfter {
		f.delay = min(max(2*f.delay, backoffMin), backoffMax)
		f.until = b.clock().Add(f.delay)
		return true
	}
	return false
}

// forget forgets the failures of the entities ("TYPE/ID") drop reports.
func (b *backoff) forget(drop func(entity string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for entity := range b.failing {
		if drop(entity) {
			delete(b.failing, entity)
		}
	}
}

// succeeded forgets the entity's failures.
func (b *backoff) succeeded(entity string) {
	b.mu.Lock()
	if len(b.failing) > 0 {
		delete(b.failing, entity)
	}
	b.mu.Unlock()
}
