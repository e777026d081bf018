package shardhost

import (
	"errors"
	"sort"
	"time"
	"unicode/utf8"
)

// Harness runs an entity without a host, for unit tests of entity code: it plays the
// host's part of the ABI and delivers messages, snapshots, restores and the lifecycle
// hooks through the same path as the wasm exports. It fakes every host function:
//
//   - messages: Send (from outside) and SendFrom (from an entity) deliver messages of
//     KindMessage; the entity's tells and forwards are recorded in Tells and Forwards,
//     its asks in Asks and answered by Asker (a scripted function), each with the
//     idempotency key it was sent with (Envelope.Key);
//   - distributed data: an in-memory replicator of the types gcounter, pncounter, gset,
//     orset, lwwmap, lwwregister and flag (one replica: every consistency is reached),
//     which tests read and change with Data and UpdateData; DeliverChanged delivers a
//     subscribed key's value as a message of KindChanged, and DDataFault injects errors;
//   - timers: recorded (Timers, Timer) and fired by FireTimer or, after Advance, FireDue;
//   - durable reminders: recorded (Reminders) and fired by FireReminder, kept across
//     Restart as the state store keeps them;
//   - time and randomness: a settable clock (SetTime, Advance) that stands still between
//     calls, and random bytes from a seeded generator (Seed);
//   - lifecycle: the entity is activated (Activator) before its first message; Restart
//     passivates it (Passivator, then a snapshot) and starts its next incarnation, with
//     its timers, subscriptions and data kept, as the host does.
//
// A test of a Snapshotter may also passivate and reactivate an entity by taking Snapshot
// from one harness and handing it to Restore of a fresh one. A Harness is not safe for
// concurrent use.
type Harness struct {
	typ, id    string
	f          Factory
	d          dispatcher
	sent       bool
	activated  bool
	passivated bool
	pending    []byte // a restored state to take up again if the activation fails
	// pendingFrom, when set, is the version pending was migrated from (Migrate).
	pendingFrom *uint64

	// the message being delivered
	kind      MessageKind
	from      string
	forwardTo *Envelope

	wall time.Time
	mono time.Duration
	rng  uint64

	data   map[string]*memData
	subs   map[string]bool
	timers map[string]*Timer
	seq    uint64 // orders timers that are due at the same time
	// reminders are the entity's durable reminders, by name; due is the due time (Unix
	// ms) of the reminder being delivered.
	reminders map[string]*Reminder
	due       int64
	calls     int // host function calls of the current message or hook

	// Logs holds every line the entity logged, as "LEVEL text".
	Logs []string
	// Tells holds the messages the entity told, in order.
	Tells []Envelope
	// Asks holds the messages the entity asked, in order (also those Asker refused).
	Asks []Envelope
	// Forwards holds the messages the entity forwarded, in order: those of the Receive
	// calls that returned without an error.
	Forwards []Envelope
	// Traces holds the names of the trace events the entity added, in order.
	Traces []string

	// Asker answers the entity's asks, and the messages it forwards (its answer is then
	// the reply Send returns). The timeout is the one the entity gave (0: the host's
	// default). Asker stands for the asked entity, but it is called for every ask, even
	// one whose idempotency key it saw (Asks has the keys); a real entity answers such a
	// repeat with its first reply. An error that is a *HostError gives its code (ErrTimeout and the others
	// to the entity); any other error is the asked entity's error (ErrEntityError with
	// the error's text). A nil Asker answers every ask with ErrUnavailable and every
	// forward with an empty reply. An ask of the entity itself fails with ErrAskCycle
	// without reaching Asker.
	Asker func(typ, id string, msg []byte, timeout time.Duration) ([]byte, error)
	// CallBudget is how many host function calls one message (or hook) may make, as the
	// host's budget: the call past it panics, as the host traps it. 0 is the host's
	// default (10,000); a negative budget is unlimited. The harness counts one call per
	// host function the entity uses (the SDK caches the entity's ID and type, and the
	// kind and sender per message); the host also counts the SDK's reads of results.
	CallBudget int
	// DDataFault, if set, is called before every distributed data operation of the
	// entity, with op "get", "update" or "delete"; a non-nil error fails the operation as
	// Asker's errors do (return &HostError{Code: CodeTimeout} for an update that was not
	// acknowledged in time: it is applied, as on a real host).
	DDataFault func(op, key string) error
	// HTTP answers the entity's outbound HTTP requests (Context.HTTPDo), standing for the
	// outside services and the type's egress settings: an error that is a *HostError
	// gives its code (ErrEgressDenied, ErrTimeout ...), any other error is
	// ErrEgressFailed with its text. A nil HTTP refuses every request with
	// ErrEgressDenied, as a type deployed without --egress. HTTPRequests holds every
	// request that reached it, in order.
	HTTP         func(req *HTTPRequest) (*HTTPResponse, error)
	HTTPRequests []HTTPRequest
}

// Envelope is a message the entity sent: to Type/ID, with the sender the receiver sees
// ("TYPE/ID" of the entity, or for a forward the original sender).
type Envelope struct {
	Type, ID string
	Msg      []byte
	Sender   string
	// Timeout is an ask's timeout (0: the host's default).
	Timeout time.Duration
	// Key is the idempotency key of a TellWithKey or an AskWithKey; empty without one.
	Key string
}

// Timer is a timer the entity started.
type Timer struct {
	Name     string
	Msg      []byte
	Delay    time.Duration
	Interval time.Duration // 0 for a timer that fires once
	Due      time.Time     // when it fires next, on the harness's clock
	seq      uint64
}

// HarnessEpoch is the time a Harness's wall clock starts at.
var HarnessEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var _ host = (*Harness)(nil)

// EntityError is the error of a message the entity refused, as a Harness returns it:
// Text is what the host would give the asker (the error's text), Err the error the
// entity's Receive (or its factory) returned.
type EntityError struct {
	Text string
	Err  error
}

// Error returns the entity's error text.
func (e *EntityError) Error() string { return e.Text }

// Unwrap returns the entity's error.
func (e *EntityError) Unwrap() error { return e.Err }

// NewHarness returns a harness for one entity of the given type and ID, created by f.
// Its clock starts at HarnessEpoch and its random generator with seed 1.
func NewHarness(entityType, entityID string, f Factory) *Harness {
	h := &Harness{typ: entityType, id: entityID, f: f, wall: HarnessEpoch, rng: 1,
		data: map[string]*memData{}, subs: map[string]bool{}, timers: map[string]*Timer{}}
	h.d.h = h
	return h
}

// Send delivers msg to the entity as a message from outside the cluster's entities
// (Sender empty), activating the entity first if needed, and returns its reply, or its
// error as an *EntityError that wraps the error Receive returned: errors.Is and
// errors.As see through it (to a sentinel of the entity, or a HostError it passed on),
// and its text is what the host would reply. If the entity forwarded the message, the
// reply is Asker's answer to it.
func (h *Harness) Send(msg []byte) ([]byte, error) { return h.deliver(KindMessage, "", msg) }

// SendFrom delivers msg as Send does, as a message from the entity sender ("TYPE/ID").
func (h *Harness) SendFrom(sender string, msg []byte) ([]byte, error) {
	return h.deliver(KindMessage, sender, msg)
}

// SendScheduled delivers msg as Send does, as the scheduled message due at due (one
// sent with a delivery time: ScheduledDue gives due), and returns its reply or error.
// The harness delivers it now, whatever its clock says: a due before the clock is a
// late delivery, as after an outage.
func (h *Harness) SendScheduled(msg []byte, due time.Time) ([]byte, error) {
	h.due = due.UnixMilli()
	defer func() { h.due = 0 }()
	return h.deliver(KindMessage, "", msg)
}

// Activate activates the entity as the host does before its first message: it creates
// the entity (if no Restore did) and calls its OnActivate. Send calls it when needed. On
// an error the entity is dropped, and the next message tries again with a fresh one (from
// the restored state, if any).
func (h *Harness) Activate() error {
	defer h.useFactory()()
	return h.activate()
}

func (h *Harness) activate() error {
	if h.activated {
		return nil
	}
	if h.d.entity == nil && h.pending != nil {
		var err error
		if h.pendingFrom != nil {
			err = h.d.migrate(*h.pendingFrom, append([]byte(nil), h.pending...))
		} else {
			err = h.d.restore(append([]byte(nil), h.pending...))
		}
		if err != nil {
			return err
		}
	}
	h.calls = 0
	if err := h.d.activate(); err != nil {
		return err
	}
	h.activated, h.pending, h.pendingFrom = true, nil, nil
	return nil
}

func (h *Harness) deliver(kind MessageKind, from string, msg []byte) ([]byte, error) {
	defer h.useFactory()()
	h.sent = true
	h.passivated = false
	if err := h.activate(); err != nil {
		return nil, err
	}
	h.kind, h.from, h.forwardTo = kind, from, nil
	h.calls = 0
	out, isErr := h.d.receive(msg)
	fwd := h.forwardTo
	h.kind, h.from, h.forwardTo = KindMessage, "", nil
	if isErr {
		if h.d.err != nil {
			return nil, &EntityError{Text: string(out), Err: h.d.err}
		}
		return nil, &EntityError{Text: string(out)}
	}
	if fwd != nil {
		fwd.Msg = append([]byte(nil), msg...)
		h.Forwards = append(h.Forwards, *fwd)
		if h.Asker == nil {
			return nil, nil
		}
		return h.Asker(fwd.Type, fwd.ID, fwd.Msg, 0)
	}
	return out, nil
}

// Passivated reports whether the entity called Context.Passivate while it handled the
// last message Send delivered.
func (h *Harness) Passivated() bool { return h.passivated }

// Snapshot takes a snapshot of the entity as the host does between messages. ok is false
// when the entity keeps no guest-level snapshot, because it does not implement
// Snapshotter or no message has created it yet: the host would copy its memory instead.
// An error from the entity's Snapshot, or ErrSnapshotTooLarge, comes with ok true.
func (h *Harness) Snapshot() (state []byte, ok bool, err error) {
	return h.d.snapshot()
}

// Restore starts the entity from state, as the host starts a new incarnation from a
// guest-level snapshot: it creates the entity and calls its Restore with a copy of state.
// Call it on a fresh harness, before Send; afterwards it returns ErrRestoreAfterStart. It
// returns ErrNotSnapshotter for an entity that does not implement Snapshotter, or the
// entity's error; after an error the entity is dropped, so that Restore may be tried
// again or Send starts a fresh entity.
func (h *Harness) Restore(state []byte) error {
	if h.sent || h.d.entity != nil {
		return ErrRestoreAfterStart
	}
	defer h.useFactory()()
	if err := h.d.restore(append([]byte(nil), state...)); err != nil {
		return err
	}
	h.pending, h.pendingFrom = append([]byte(nil), state...), nil
	return nil
}

// Migrate starts the entity from a state that another version of its module saved,
// the entity type's version fromVersion, as the host does when it moves an entity to a
// new version (shardhost_migrate): it creates the entity and calls its Migrate
// (Migrator) with a copy of state, or its Restore when it has none. Call it on a fresh
// harness, before Send; afterwards it returns ErrRestoreAfterStart. Errors: those of
// Restore, and the entity's Migrate's.
func (h *Harness) Migrate(fromVersion uint64, state []byte) error {
	if h.sent || h.d.entity != nil {
		return ErrRestoreAfterStart
	}
	defer h.useFactory()()
	if err := h.d.migrate(fromVersion, append([]byte(nil), state...)); err != nil {
		return err
	}
	h.pending, h.pendingFrom = append([]byte(nil), state...), &fromVersion
	return nil
}

// Restart stops the entity as the host does for a passivation (or handoff) and starts
// its next incarnation: it calls OnPassivate, takes a snapshot and, for a guest-level
// one, creates a new entity and restores it (otherwise the host would copy the
// instance's memory: the entity goes on as it is). The next message activates the new
// incarnation (OnActivate). Timers, subscriptions and distributed data are kept, as the
// host keeps them. An error from the snapshot or the restore is returned, and the
// entity is then gone: the next message starts a fresh one.
func (h *Harness) Restart() error {
	defer h.useFactory()()
	if h.d.entity == nil {
		h.activated = false
		return nil
	}
	h.calls = 0
	h.d.passivate()
	state, ok, err := h.d.snapshot()
	h.activated, h.passivated = false, false
	if err != nil {
		h.d.entity = nil
		return err
	}
	if !ok {
		return nil
	}
	h.d.entity = nil
	h.pending, h.pendingFrom = state, nil // the host keeps the state for later attempts
	return h.d.restore(append([]byte(nil), state...))
}

// useFactory makes h's factory the registered one, and returns the function that puts
// the previous one back.
func (h *Harness) useFactory() (undo func()) {
	saved := registered
	registered = h.f
	return func() { registered = saved }
}

// SetTime sets the wall clock the entity reads with Context.Now. The monotonic clock
// does not move.
func (h *Harness) SetTime(t time.Time) { h.wall = t }

// Now returns the harness's wall clock.
func (h *Harness) Now() time.Time { return h.wall }

// Advance moves both clocks forward by d (timers do not fire by themselves: see FireDue).
func (h *Harness) Advance(d time.Duration) {
	h.wall = h.wall.Add(d)
	h.mono += d
}

// Seed restarts the random generator with seed.
func (h *Harness) Seed(seed uint64) { h.rng = seed }

// Timers returns the running timers, by the time they are due.
func (h *Harness) Timers() []Timer {
	out := make([]Timer, 0, len(h.timers))
	for _, t := range h.timers {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Due.Equal(out[j].Due) {
			return out[i].Due.Before(out[j].Due)
		}
		return out[i].seq < out[j].seq
	})
	return out
}

// Timer returns the running timer name.
func (h *Harness) Timer(name string) (Timer, bool) {
	t, ok := h.timers[name]
	if !ok {
		return Timer{}, false
	}
	return *t, true
}

// ErrNoTimer is returned by FireTimer for a timer that is not running.
var ErrNoTimer = errors.New("shardhost: harness: no such timer")

// FireTimer delivers the message of the running timer name now, whenever it is due, as a
// message of KindTimer, and returns the entity's reply or error. A timer that fires once
// is gone; a repeating one is due again an interval after the harness's clock.
func (h *Harness) FireTimer(name string) ([]byte, error) {
	t, ok := h.timers[name]
	if !ok {
		return nil, ErrNoTimer
	}
	if t.Interval > 0 {
		t.Due = h.wall.Add(t.Interval)
	} else {
		delete(h.timers, name)
	}
	return h.deliver(KindTimer, name, append([]byte(nil), t.Msg...))
}

// FireDue fires, in order, every timer due at the harness's clock or before it (a
// repeating timer once per call, even if several intervals have passed), and returns the
// names it fired. It stops at the first error the entity returns.
func (h *Harness) FireDue() ([]string, error) {
	var fired []string
	for _, t := range h.Timers() {
		if t.Due.After(h.wall) {
			break
		}
		if _, ok := h.timers[t.Name]; !ok {
			continue // cancelled by an earlier one
		}
		fired = append(fired, t.Name)
		if _, err := h.FireTimer(t.Name); err != nil {
			return fired, err
		}
	}
	return fired, nil
}

// Subscribed reports whether the entity subscribes to key.
func (h *Harness) Subscribed(key string) bool { return h.subs[key] }

// ErrNotSubscribed is returned by DeliverChanged for a key the entity does not subscribe
// to, or that has no value.
var ErrNotSubscribed = errors.New("shardhost: harness: not subscribed")

// DeliverChanged delivers the current value of key as the host delivers a change of a
// subscribed key: a message of KindChanged whose Sender is the key. It returns
// ErrNotSubscribed if the entity does not subscribe to key or key has no value.
func (h *Harness) DeliverChanged(key string) ([]byte, error) {
	d := h.data[key]
	if !h.subs[key] || d == nil || d.deleted {
		return nil, ErrNotSubscribed
	}
	return h.deliver(KindChanged, key, d.json())
}

// Data returns the value of key as JSON, as Context.DDataGet does.
func (h *Harness) Data(key string) ([]byte, error) {
	code, res := h.dataGet(key)
	return res, codeError(code, res)
}

// UpdateData applies the operation to key as another entity or the CLI would (as
// Context.DDataUpdate does) and returns the new value. Subscribers are not told: use
// DeliverChanged.
func (h *Harness) UpdateData(key, typ, op string) ([]byte, error) {
	code, res := h.dataUpdate(key, typ, op, "")
	return res, codeError(code, res)
}

// DefaultCallBudget is the host's default number of host function calls per message.
const DefaultCallBudget = 10000

// call counts a host function call against the budget.
func (h *Harness) call() {
	h.calls++
	budget := h.CallBudget
	if budget == 0 {
		budget = DefaultCallBudget
	}
	if budget > 0 && h.calls > budget {
		panic("shardhost: harness: host call budget of " + itoa(int64(budget)) + " exceeded (the host traps)")
	}
}

func (h *Harness) entityID() string   { return h.id }
func (h *Harness) entityType() string { return h.typ }
func (h *Harness) passivate() {
	h.call()
	h.passivated = true
}
func (h *Harness) log(level LogLevel, msg string) {
	h.call()
	name := "INFO"
	switch {
	case level < LevelInfo:
		name = "DEBUG"
	case level >= LevelError:
		name = "ERROR"
	case level >= LevelWarn:
		name = "WARN"
	}
	h.Logs = append(h.Logs, name+" "+msg)
}

func (h *Harness) messageKind() MessageKind {
	h.call()
	if h.d.ctx.phase != phaseReceive {
		panic("shardhost: harness: message_kind outside shardhost_receive traps")
	}
	return h.kind
}

func (h *Harness) sender() string {
	h.call()
	if h.d.ctx.phase != phaseReceive {
		return ""
	}
	return h.from
}

func (h *Harness) self() string { return h.typ + "/" + h.id }

// maxMessageSize is the host's default message cap (abi.MaxMessageSize).
const maxMessageSize = 1 << 20

// checkSend checks a tell, ask or forward, and its idempotency key, as the host does.
func (h *Harness) checkSend(typ, id string, msg []byte, key string) (Code, []byte) {
	switch {
	case h.d.ctx.phase != phaseReceive && h.d.ctx.phase != phaseActivate:
		return CodeNotAllowed, []byte("not allowed outside a message or on_activate")
	case typ == "" || id == "":
		return CodeBadRequest, []byte("empty entity type or ID")
	case len(msg) > maxMessageSize:
		return CodeBadRequest, []byte("message over the size cap")
	case len(key) > MaxIdempotencyKey:
		return CodeBadRequest, []byte("invalid idempotency key: " + itoa(int64(len(key))) + " bytes (at most " +
			itoa(MaxIdempotencyKey) + ")")
	case !utf8.ValidString(key):
		return CodeBadRequest, []byte("the idempotency key is not UTF-8")
	}
	return CodeOK, nil
}

func (h *Harness) tell(typ, id string, msg []byte) (Code, []byte) { return h.tellKey(typ, id, msg, "") }

func (h *Harness) tellKey(typ, id string, msg []byte, key string) (Code, []byte) {
	h.call()
	if code, res := h.checkSend(typ, id, msg, key); code != CodeOK {
		return code, res
	}
	h.Tells = append(h.Tells, Envelope{Type: typ, ID: id, Msg: append([]byte(nil), msg...), Sender: h.self(), Key: key})
	return CodeOK, nil
}

func (h *Harness) ask(typ, id string, msg []byte, timeoutMS int32) (Code, []byte) {
	return h.askKey(typ, id, msg, "", timeoutMS)
}

func (h *Harness) askKey(typ, id string, msg []byte, key string, timeoutMS int32) (Code, []byte) {
	h.call()
	if code, res := h.checkSend(typ, id, msg, key); code != CodeOK {
		return code, res
	}
	timeout := time.Duration(timeoutMS) * time.Millisecond
	env := Envelope{Type: typ, ID: id, Msg: append([]byte(nil), msg...), Sender: h.self(), Timeout: timeout, Key: key}
	h.Asks = append(h.Asks, env)
	if typ == h.typ && id == h.id {
		return CodeAskCycle, []byte("ask of " + h.self() + " would wait on itself")
	}
	if h.Asker == nil {
		return CodeUnavailable, []byte("harness: no Asker")
	}
	out, err := h.Asker(typ, id, env.Msg, timeout)
	if code, text := errorCode(err); code != CodeOK {
		return code, []byte(text)
	}
	return CodeOK, out
}

func (h *Harness) forward(typ, id string) (Code, []byte) {
	h.call()
	if h.d.ctx.phase != phaseReceive || h.kind != KindMessage {
		return CodeNotAllowed, []byte("forward outside a message of kind 0")
	}
	if code, res := h.checkSend(typ, id, nil, ""); code != CodeOK {
		return code, res
	}
	h.forwardTo = &Envelope{Type: typ, ID: id, Sender: h.from}
	return CodeOK, nil
}

func (h *Harness) fault(op, key string) (Code, []byte) {
	if h.DDataFault == nil {
		return CodeOK, nil
	}
	code, text := errorCode(h.DDataFault(op, key))
	return code, []byte(text)
}

func (h *Harness) ddataGet(key, cons string, _ int32) (Code, []byte) {
	h.call()
	if !validConsistency(cons) {
		return CodeBadRequest, []byte("bad consistency " + quote(cons))
	}
	if code, res := h.fault("get", key); code != CodeOK {
		return code, res
	}
	return h.dataGet(key)
}

func (h *Harness) ddataUpdate(key, typ, op, cons string, _ int32) (Code, []byte) {
	h.call()
	fc, fres := h.fault("update", key)
	if fc != CodeOK && fc != CodeTimeout {
		return fc, fres
	}
	code, res := h.dataUpdate(key, typ, op, cons)
	if code == CodeOK && fc == CodeTimeout {
		return fc, fres // applied locally, not acknowledged in time
	}
	return code, res
}

func (h *Harness) ddataDelete(key, cons string, _ int32) (Code, []byte) {
	h.call()
	if !validConsistency(cons) {
		return CodeBadRequest, []byte("bad consistency " + quote(cons))
	}
	if code, res := h.fault("delete", key); code != CodeOK {
		return code, res
	}
	d := h.data[key]
	if d == nil {
		d = &memData{}
		h.data[key] = d
	}
	if d.deleted {
		return CodeDeleted, []byte("key " + quote(key) + " was deleted")
	}
	*d = memData{deleted: true}
	return CodeOK, nil
}

func (h *Harness) ddataSubscribe(key string) (Code, []byte) {
	h.call()
	if key == "" {
		return CodeBadRequest, []byte("empty key")
	}
	h.subs[key] = true
	return CodeOK, nil
}

func (h *Harness) ddataUnsubscribe(key string) (Code, []byte) {
	h.call()
	delete(h.subs, key)
	return CodeOK, nil
}

func (h *Harness) timerStart(name string, msg []byte, delayMS, intervalMS int64) (Code, []byte) {
	h.call()
	_, running := h.timers[name]
	switch {
	case len(name) > MaxTimerName:
		return CodeBadRequest, []byte("timer name over 256 bytes")
	case len(msg) > MaxTimerMessage:
		return CodeBadRequest, []byte("timer message over 64 KiB")
	case !running && len(h.timers) >= MaxTimers:
		return CodeBadRequest, []byte("too many timers")
	}
	if delayMS < 0 {
		delayMS = 0
	}
	if intervalMS < 0 {
		intervalMS = 0
	}
	h.seq++
	delay := time.Duration(delayMS) * time.Millisecond
	h.timers[name] = &Timer{Name: name, Msg: append([]byte(nil), msg...), Delay: delay,
		Interval: time.Duration(intervalMS) * time.Millisecond, Due: h.wall.Add(delay), seq: h.seq}
	return CodeOK, nil
}

// Reminders returns the entity's durable reminders, by name.
func (h *Harness) Reminders() []Reminder {
	out := make([]Reminder, 0, len(h.reminders))
	for _, r := range h.reminders {
		out = append(out, *r)
	}
	sortReminders(out)
	return out
}

func sortReminders(rs []Reminder) {
	for i := 1; i < len(rs); i++ {
		for k := i; k > 0 && rs[k].Name < rs[k-1].Name; k-- {
			rs[k], rs[k-1] = rs[k-1], rs[k]
		}
	}
}

// ErrNoReminder is returned by FireReminder for a reminder the entity does not have.
var ErrNoReminder = errors.New("shardhost: harness: no such reminder")

// FireReminder delivers the reminder name now, whenever it is due, as a message of
// KindReminder (ReminderDue gives its due time), and returns the entity's reply or
// error; then, as the host does after a delivery, a repeating reminder moves on to its
// first due after the harness's clock and a one-shot is deleted (unless the entity set
// it anew meanwhile).
func (h *Harness) FireReminder(name string) ([]byte, error) {
	r, ok := h.reminders[name]
	if !ok {
		return nil, ErrNoReminder
	}
	due := r.Due
	h.due = due.UnixMilli()
	out, err := h.deliver(KindReminder, name, append([]byte(nil), r.Payload...))
	h.due = 0
	if cur, ok := h.reminders[name]; ok && cur.Due.Equal(due) {
		if cur.Interval > 0 {
			next := due.Add(cur.Interval)
			for !next.After(h.wall) {
				next = next.Add(cur.Interval)
			}
			cur.Due = next
		} else {
			delete(h.reminders, name)
		}
	}
	return out, err
}

func (h *Harness) reminderSet(name string, dueMS, intervalMS int64, payload []byte) (Code, []byte) {
	h.call()
	_, set := h.reminders[name]
	switch {
	case name == "" || len(name) > MaxReminderName:
		return CodeBadRequest, []byte("a reminder name has 1 to 128 bytes")
	case dueMS < 0:
		return CodeBadRequest, []byte("negative due time")
	case intervalMS < 0 || intervalMS > 0 && intervalMS < MinReminderInterval.Milliseconds():
		return CodeBadRequest, []byte("a reminder interval is 0 or at least 1000 ms")
	case len(payload) > MaxReminderPayload:
		return CodeBadRequest, []byte("reminder payload over 64 KiB")
	case !set && len(h.reminders) >= MaxReminders:
		return CodeBadRequest, []byte("too many reminders")
	}
	if h.reminders == nil {
		h.reminders = map[string]*Reminder{}
	}
	h.reminders[name] = &Reminder{Name: name, Due: time.UnixMilli(dueMS), Interval: time.Duration(intervalMS) * time.Millisecond,
		Payload: append([]byte(nil), payload...)}
	return CodeOK, nil
}

func (h *Harness) reminderCancel(name string) (Code, []byte) {
	h.call()
	if _, ok := h.reminders[name]; !ok {
		return CodeNotFound, []byte("no reminder " + quote(name))
	}
	delete(h.reminders, name)
	return CodeOK, nil
}

func (h *Harness) reminderList() (Code, []byte) {
	h.call()
	return CodeOK, encodeReminders(h.Reminders())
}

func (h *Harness) reminderDue() int64 {
	h.call()
	return h.due
}

func (h *Harness) timerCancel(name string) bool {
	h.call()
	_, ok := h.timers[name]
	delete(h.timers, name)
	return ok
}

func (h *Harness) now(clock int32) int64 {
	h.call()
	switch clock {
	case clockWall:
		return h.wall.UnixNano()
	case clockMonotonic:
		return int64(h.mono)
	}
	panic("shardhost: harness: now with an unknown clock traps")
}

func (h *Harness) random(b []byte) {
	h.call()
	if len(b) > MaxRandom {
		panic("shardhost: harness: random over 64 KiB traps")
	}
	for i := 0; i < len(b); i += 8 {
		// splitmix64
		h.rng += 0x9e3779b97f4a7c15
		z := h.rng
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(z >> (8 * j))
		}
	}
}

func (h *Harness) traceEvent(name string) {
	h.call()
	if len(name) > 256 {
		name = name[:256]
	}
	h.Traces = append(h.Traces, name)
}
