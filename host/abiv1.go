package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/api"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/sharding"
)

// The host functions ABI v1 adds (abi/SPEC.md, "v1"): messages between entities,
// distributed data, timers, time, randomness and trace events. Those that can fail
// return an abi.Code and leave the instance's result (the reply, the value, or the error
// text) for the guest to copy with result.

var (
	// errAskCycle: an entity asked an entity that waits, directly or through others, for
	// its own reply; the ask would deadlock, so it is refused at once.
	errAskCycle = errors.New("host: ask cycle")
	// errCallBudget: a message made more host function calls than the budget allows.
	errCallBudget = errors.New("host: host call budget exceeded")
	// ErrEntityBackoff: the entity failed (trapped, overran its deadline) several times
	// in a row and is rested before it is activated again.
	ErrEntityBackoff = errors.New("host: entity keeps failing; activation backs off")
)

// services is what the v1 host functions reach beyond the instance: the node's
// messaging, distributed data, timers and subscriptions, on behalf of one entity. A
// wasmEntity gives them; an instance without (a bare wasmRuntime's) answers
// CodeUnavailable.
type services interface {
	tell(ctx context.Context, m sharding.Message) error
	ask(ctx context.Context, m sharding.Message) ([]byte, error)
	ddataGet(ctx context.Context, key string, rc ddata.ReadConsistency) (ddata.ReplicatedData, error)
	ddataUpdate(ctx context.Context, key string, typ ddata.DataType, op ddata.Op, wc ddata.WriteConsistency) (ddata.ReplicatedData, error)
	ddataDelete(ctx context.Context, key string, wc ddata.WriteConsistency) error
	subscribe(ctx context.Context, key string) error
	unsubscribe(key string)
	startTimer(name string, msg []byte, delay, interval time.Duration) error
	cancelTimer(name string) bool
	setReminder(ctx context.Context, r sharding.Reminder) error
	cancelReminder(ctx context.Context, name string) (bool, error)
	listReminders(ctx context.Context) ([]sharding.Reminder, error)
}

// errNoServices answers the v1 functions of an instance that runs outside a node.
var errNoServices = fmt.Errorf("%w: this instance runs outside a shardhost node", sharding.ErrShardUnavailable)

// defaultHostCallTimeout bounds an ask or a distributed data call whose guest gave no
// timeout, in addition to the message deadline.
const defaultHostCallTimeout = 5 * time.Second

// phase is which export of the guest is running.
type phase uint8

const (
	phaseNone phase = iota
	phaseReceive
	phaseSnapshot
	phaseRestore
	phaseActivate
	phasePassivate
	phaseInit
	phaseQuery
)

var (
	i64 = api.ValueTypeI64

	v1Functions = []struct {
		name            string
		f               api.GoModuleFunc
		params, results []api.ValueType
	}{
		{abi.ImportResult, hostResult, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportMessageKind, hostMessageKind, nil, []api.ValueType{i32}},
		{abi.ImportSender, hostSender, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportTell, hostTell, []api.ValueType{i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportAsk, hostAsk, []api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportForward, hostForward, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportDDataGet, hostDDataGet, []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportDDataUpdate, hostDDataUpdate, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportDDataDelete, hostDDataDelete, []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportDDataSubscribe, hostSubscribe, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportDDataUnsubscribe, hostUnsubscribe, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportTimerStart, hostTimerStart, []api.ValueType{i32, i32, i32, i32, i64, i64}, []api.ValueType{i32}},
		{abi.ImportTimerCancel, hostTimerCancel, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportNow, hostNow, []api.ValueType{i32}, []api.ValueType{i64}},
		{abi.ImportRandom, hostRandom, []api.ValueType{i32, i32}, nil},
		{abi.ImportTraceEvent, hostTraceEvent, []api.ValueType{i32, i32}, nil},
		{abi.ImportTellKey, hostTellKey, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportAskKey, hostAskKey, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportHTTPRequest, hostHTTPRequest, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		{abi.ImportReminderSet, hostReminderSet, []api.ValueType{i32, i32, i64, i64, i32, i32}, []api.ValueType{i32}},
		{abi.ImportReminderCancel, hostReminderCancel, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportReminderList, hostReminderList, nil, []api.ValueType{i32}},
		{abi.ImportReminderDue, hostReminderDue, nil, []api.ValueType{i64}},
	}
)

// charge counts one host function call against the budget of the running export; the
// call past the budget traps.
func (i *wasmInstance) charge() {
	i.calls++
	if budget := i.m.rt.cfg.CallBudget; i.calls > budget {
		panic(fmt.Errorf("%w: more than %d host calls in one call of the guest", errCallBudget, budget))
	}
}

// finish sets the result from err and returns its code: the error text for a failure,
// empty (or out) on success.
func (i *wasmInstance) finish(stack []uint64, out []byte, err error) {
	code := codeOf(err)
	if err != nil {
		out = []byte(err.Error())
		var ee *EntityError
		var re *sharding.RemoteError
		switch {
		case errors.As(err, &ee):
			out = []byte(ee.Message)
		case errors.As(err, &re) && code == abi.CodeEntityError:
			out = []byte(re.Message)
		}
	}
	i.result = append(i.result[:0], out...)
	stack[0] = uint64(uint32(code))
}

// codeOf maps an error of a v1 host function to its abi.Code.
func codeOf(err error) abi.Code {
	if c, ok := egressCode(err); ok {
		return c
	}
	switch {
	case err == nil:
		return abi.CodeOK
	case errors.Is(err, errAskCycle):
		return abi.CodeAskCycle
	case errors.Is(err, errNotAllowed):
		return abi.CodeNotAllowed
	case errors.Is(err, sharding.ErrNotDelivered):
		// Before the timeout: an ask whose deadline passed before its message left
		// this member was not delivered.
		return abi.CodeUnavailable
	case errors.Is(err, ddata.ErrNotFound), errors.Is(err, errNoReminder):
		return abi.CodeNotFound
	case errors.Is(err, sharding.ErrStoreUnavailable):
		return abi.CodeUnavailable
	case errors.Is(err, ddata.ErrDataDeleted):
		return abi.CodeDeleted
	case errors.Is(err, ddata.ErrTypeMismatch):
		return abi.CodeTypeMismatch
	case errors.Is(err, ddata.ErrGetFailure), errors.Is(err, ddata.ErrUpdateTimeout),
		errors.Is(err, sharding.ErrAskTimeout), errors.Is(err, context.DeadlineExceeded):
		return abi.CodeTimeout
	case errors.Is(err, ddata.ErrBadOp), errors.Is(err, ddata.ErrUnknownType), errors.Is(err, ddata.ErrBadKey),
		errors.Is(err, ddata.ErrModifyFailure), errors.Is(err, ErrBadRequest), errors.Is(err, ErrMessageTooLarge):
		return abi.CodeBadRequest
	case errors.Is(err, ddata.ErrReplicatorClosed), errors.Is(err, errNoServices):
		return abi.CodeUnavailable
	}
	switch sharding.ErrorCode(err) {
	case sharding.CodeEntityError:
		return abi.CodeEntityError
	case sharding.CodeBadRequest:
		return abi.CodeBadRequest
	case sharding.CodeUnavailable, sharding.CodeNotDelivered, sharding.CodeOverloaded, sharding.CodeUnknownType, sharding.CodeBackoff,
		sharding.CodeStateNotSaved, sharding.CodeStateNotLoaded:
		return abi.CodeUnavailable
	case sharding.CodeOutcomeUnknown:
		return abi.CodeTimeout
	}
	return abi.CodeError
}

var errNotAllowed = errors.New("host: not allowed here")

// text reads a UTF-8 string argument; ok is false (and the result set to BadRequest)
// when it is not UTF-8.
func (i *wasmInstance) text(mod api.Module, stack []uint64, ptr, n uint32, what string) (string, bool) {
	b := read(mod, ptr, n)
	if !utf8.Valid(b) {
		i.finish(stack, nil, fmt.Errorf("%w: the %s is not UTF-8", ErrBadRequest, what))
		return "", false
	}
	return string(b), true
}

// callCtx is the context of an ask or a distributed data call made by the guest: the
// current message's trace and baggage, the instance's cancellation (the message
// deadline), and the guest's timeout (defaultHostCallTimeout when 0).
func (i *wasmInstance) callCtx(timeoutMs int32) (context.Context, context.CancelFunc) {
	ctx := i.ctx
	if i.msgCtx != nil {
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(i.msgCtx))
		if b := baggage.FromContext(i.msgCtx); b.Len() > 0 {
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
		ctx = sharding.WithSender(ctx, i.msgCtx) // an ask takes the entity's sender sequence
	}
	t := defaultHostCallTimeout
	if timeoutMs > 0 {
		t = time.Duration(timeoutMs) * time.Millisecond
	}
	return context.WithTimeout(ctx, t)
}

// messaging reports whether tell, ask and forward may run now.
func (i *wasmInstance) messaging() bool {
	return i.phase == phaseReceive || i.phase == phaseActivate
}

// hostResult is result(ptr, cap) -> len.
func hostResult(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	writeBytes(mod, stack, inst.result)
}

// writeBytes implements the (ptr, cap) -> len pattern for b.
func writeBytes(mod api.Module, stack []uint64, b []byte) {
	ptr, capacity := uint32(stack[0]), uint32(stack[1])
	if uint32(len(b)) <= capacity && len(b) > 0 {
		if !mod.Memory().Write(ptr, b) {
			panic(fmt.Errorf("%w: [%#x, +%d)", errOutOfRange, ptr, len(b)))
		}
	}
	stack[0] = uint64(uint32(len(b)))
}

// hostMessageKind is message_kind() -> i32.
func hostMessageKind(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	if inst.phase != phaseReceive {
		panic("host: message_kind called outside shardhost_receive")
	}
	stack[0] = uint64(uint32(inst.msg.Kind))
}

// hostSender is sender(ptr, cap) -> len.
func hostSender(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	var s string
	if inst.phase == phaseReceive {
		s = inst.msg.Sender
	}
	writeBytes(mod, stack, []byte(s))
}

// target reads the (type, id) arguments at stack[0:4].
func (i *wasmInstance) target(mod api.Module, stack []uint64) (typ, id string, ok bool) {
	args, ok := i.textArgs(mod, stack, "entity type", "entity ID")
	if !ok {
		return "", "", false
	}
	return args[0], args[1], true
}

// outgoing is a message from this entity to typ/id with the ask chain it carries.
func (i *wasmInstance) outgoing(typ, id string, payload []byte, ask bool) sharding.Message {
	m := sharding.Message{EntityType: typ, EntityID: id, Payload: payload, Sender: i.name}
	if ask {
		if i.phase == phaseReceive && i.msg.Ask {
			m.Chain = append(m.Chain, i.msg.Chain...)
		}
		m.Chain = append(m.Chain, i.name)
	}
	return m
}

// message reads the (type, id, msg) arguments of tell and ask and returns the message
// from this entity; ok is false (the result set) when the arguments are bad, the call
// is not allowed here, or the instance runs outside a node.
func (i *wasmInstance) message(mod api.Module, stack []uint64, verb string, ask bool) (m sharding.Message, ok bool) {
	typ, id, ok := i.target(mod, stack)
	if !ok {
		return m, false
	}
	switch n := uint32(stack[5]); {
	case !i.messaging():
		i.finish(stack, nil, fmt.Errorf("%w: %s outside a message or on_activate", errNotAllowed, verb))
	case i.svc == nil:
		i.finish(stack, nil, errNoServices)
	case int(n) > i.m.rt.cfg.MaxMessageSize:
		i.finish(stack, nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrMessageTooLarge, n, i.m.rt.cfg.MaxMessageSize))
	default:
		payload := append([]byte(nil), read(mod, uint32(stack[4]), n)...)
		return i.outgoing(typ, id, payload, ask), true
	}
	return m, false
}

// idempotencyKey reads the idempotency key argument (ptr, len) at stack[k:k+2] into m
// (an empty key is none); ok is false, and the result set to BadRequest, for a key over
// abi.MaxIdempotencyKey bytes or not UTF-8.
func (i *wasmInstance) idempotencyKey(mod api.Module, stack []uint64, k int, m *sharding.Message) bool {
	if n := uint32(stack[k+1]); n > abi.MaxIdempotencyKey {
		i.finish(stack, nil, fmt.Errorf("%w: %w: %d bytes (at most %d)", ErrBadRequest, sharding.ErrInvalidIdempotencyKey,
			n, abi.MaxIdempotencyKey))
		return false
	}
	key, ok := i.text(mod, stack, uint32(stack[k]), uint32(stack[k+1]), "idempotency key")
	if ok {
		m.IdempotencyKey = key
	}
	return ok
}

// hostTell is tell(type, id, msg) -> code.
func hostTell(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	m, ok := inst.message(mod, stack, "tell", false)
	if !ok {
		return
	}
	inst.tell(ctx, stack, m)
}

// hostTellKey is tell_key(type, id, msg, key) -> code.
func hostTellKey(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	m, ok := inst.message(mod, stack, "tell", false)
	if !ok || !inst.idempotencyKey(mod, stack, 6, &m) {
		return
	}
	inst.tell(ctx, stack, m)
}

// tell sends m, a tell the guest made, and sets the result.
func (i *wasmInstance) tell(ctx context.Context, stack []uint64, m sharding.Message) {
	if i.msgCtx != nil {
		ctx = i.msgCtx
	}
	i.finish(stack, nil, i.svc.tell(ctx, m))
}

// hostAsk is ask(type, id, msg, timeout_ms) -> code.
func hostAsk(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	m, ok := inst.message(mod, stack, "ask", true)
	if !ok {
		return
	}
	inst.ask(stack, m, int32(uint32(stack[6])))
}

// hostAskKey is ask_key(type, id, msg, key, timeout_ms) -> code.
func hostAskKey(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	m, ok := inst.message(mod, stack, "ask", true)
	if !ok || !inst.idempotencyKey(mod, stack, 6, &m) {
		return
	}
	inst.ask(stack, m, int32(uint32(stack[8])))
}

// ask sends m, an ask the guest made with a timeout of timeoutMs (0: the default), waits
// for its answer and sets the result; an ask of an entity that waits for this one is
// refused (errAskCycle).
func (i *wasmInstance) ask(stack []uint64, m sharding.Message, timeoutMs int32) {
	target := m.EntityType + "/" + m.EntityID
	for _, waiting := range m.Chain {
		if waiting == target {
			i.finish(stack, nil, fmt.Errorf("%w: %s asks %s, which waits for it (%s)", errAskCycle, i.name, target,
				chainText(m.Chain, target)))
			return
		}
	}
	cctx, cancel := i.callCtx(timeoutMs)
	defer cancel()
	out, err := i.svc.ask(cctx, m)
	if err != nil && cctx.Err() != nil && !errors.Is(err, sharding.ErrAskTimeout) {
		err = fmt.Errorf("%w: %s: %v", sharding.ErrAskTimeout, target, err)
	}
	i.finish(stack, out, err)
}

// chainText renders an ask cycle: "a → b → a".
func chainText(chain []string, target string) string {
	return strings.Join(chain, " → ") + " → " + target
}

// hostForward is forward(type, id) -> code.
func hostForward(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	typ, id, ok := inst.target(mod, stack)
	if !ok {
		return
	}
	switch {
	case inst.phase != phaseReceive || inst.msg.Kind != sharding.KindMessage:
		inst.finish(stack, nil, fmt.Errorf("%w: forward outside an entity message", errNotAllowed))
	case id == "":
		inst.finish(stack, nil, fmt.Errorf("%w: empty entity ID", ErrBadRequest))
	default:
		inst.forward = &sharding.ForwardTo{EntityType: typ, EntityID: id}
		inst.finish(stack, nil, nil)
	}
}

// textArgs reads the UTF-8 (ptr, len) arguments at stack[0:2*len(names)], named for the
// error; ok is false (and the result set to BadRequest) when one is not UTF-8.
func (i *wasmInstance) textArgs(mod api.Module, stack []uint64, names ...string) ([]string, bool) {
	out := make([]string, len(names))
	for k, what := range names {
		s, ok := i.text(mod, stack, uint32(stack[2*k]), uint32(stack[2*k+1]), what)
		if !ok {
			return nil, false
		}
		out[k] = s
	}
	return out, true
}

// withServices reports whether the instance runs in a node; if not, it sets the result
// to Unavailable.
func (i *wasmInstance) withServices(stack []uint64) bool {
	if i.svc == nil {
		i.finish(stack, nil, errNoServices)
		return false
	}
	return true
}

// hostDDataGet is ddata_get(key, consistency, timeout_ms) -> code.
func hostDDataGet(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	args, ok := inst.textArgs(mod, stack, "key", "consistency")
	if !ok || !inst.withServices(stack) {
		return
	}
	rc, err := ddata.ParseReadConsistency(orDefault(args[1], "local"))
	if err != nil {
		inst.finish(stack, nil, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	cctx, cancel := inst.callCtx(int32(uint32(stack[4])))
	defer cancel()
	d, err := inst.svc.ddataGet(cctx, args[0], rc)
	inst.finishValue(stack, d, err)
}

// finishValue sets the result to d's value as JSON.
func (i *wasmInstance) finishValue(stack []uint64, d ddata.ReplicatedData, err error) {
	if err != nil {
		i.finish(stack, nil, err)
		return
	}
	out, err := valueJSON(d)
	i.finish(stack, out, err)
}

// writeConsistency parses a guest's write consistency; on an error it sets the result.
func (i *wasmInstance) writeConsistency(stack []uint64, s string) (ddata.WriteConsistency, bool) {
	wc, err := ddata.ParseWriteConsistency(orDefault(s, "local"))
	if err != nil {
		i.finish(stack, nil, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return wc, false
	}
	return wc, true
}

// hostDDataUpdate is ddata_update(key, type, op, consistency, timeout_ms) -> code.
func hostDDataUpdate(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	args, ok := inst.textArgs(mod, stack, "key", "data type", "operation", "consistency")
	if !ok || !inst.withServices(stack) {
		return
	}
	key, typ := args[0], ddata.DataType(args[1])
	wc, ok := inst.writeConsistency(stack, args[3])
	if !ok {
		return
	}
	op, err := ddata.ParseOp(typ, args[2])
	if err != nil {
		inst.finish(stack, nil, err)
		return
	}
	cctx, cancel := inst.callCtx(int32(uint32(stack[8])))
	defer cancel()
	d, err := inst.svc.ddataUpdate(cctx, key, typ, op, wc)
	inst.finishValue(stack, d, err)
}

// hostDDataDelete is ddata_delete(key, consistency, timeout_ms) -> code.
func hostDDataDelete(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	args, ok := inst.textArgs(mod, stack, "key", "consistency")
	if !ok || !inst.withServices(stack) {
		return
	}
	wc, ok := inst.writeConsistency(stack, args[1])
	if !ok {
		return
	}
	cctx, cancel := inst.callCtx(int32(uint32(stack[4])))
	defer cancel()
	inst.finish(stack, nil, inst.svc.ddataDelete(cctx, args[0], wc))
}

// hostSubscribe is ddata_subscribe(key) -> code.
func hostSubscribe(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	key, ok := inst.text(mod, stack, uint32(stack[0]), uint32(stack[1]), "key")
	if !ok {
		return
	}
	switch {
	case inst.svc == nil:
		inst.finish(stack, nil, errNoServices)
	case key == "":
		inst.finish(stack, nil, fmt.Errorf("%w: empty key", ErrBadRequest))
	default:
		sctx, cancel := inst.callCtx(0)
		inst.finish(stack, nil, inst.svc.subscribe(sctx, key))
		cancel()
	}
}

// hostUnsubscribe is ddata_unsubscribe(key) -> code.
func hostUnsubscribe(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	key, ok := inst.text(mod, stack, uint32(stack[0]), uint32(stack[1]), "key")
	if !ok {
		return
	}
	if inst.svc != nil {
		inst.svc.unsubscribe(key)
	}
	inst.finish(stack, nil, nil)
}

// hostTimerStart is timer_start(name, msg, delay_ms, interval_ms) -> code.
func hostTimerStart(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	name, ok := inst.text(mod, stack, uint32(stack[0]), uint32(stack[1]), "timer name")
	if !ok {
		return
	}
	delay, interval := int64(stack[4]), int64(stack[5])
	const maxMs = int64(365 * 24 * time.Hour / time.Millisecond)
	switch {
	case inst.svc == nil:
		inst.finish(stack, nil, errNoServices)
	case name == "" || len(name) > abi.MaxTimerName:
		inst.finish(stack, nil, fmt.Errorf("%w: a timer name has 1 to %d bytes, got %d", ErrBadRequest, abi.MaxTimerName, len(name)))
	case uint32(stack[3]) > abi.MaxTimerMessage:
		inst.finish(stack, nil, fmt.Errorf("%w: a timer message has at most %d bytes, got %d", ErrBadRequest, abi.MaxTimerMessage, uint32(stack[3])))
	case delay < 0 || interval < 0 || delay > maxMs || interval > maxMs:
		inst.finish(stack, nil, fmt.Errorf("%w: delay %d ms and interval %d ms must be 0 to %d", ErrBadRequest, delay, interval, maxMs))
	default:
		msg := append([]byte(nil), read(mod, uint32(stack[2]), uint32(stack[3]))...)
		inst.finish(stack, nil, inst.svc.startTimer(name, msg, time.Duration(delay)*time.Millisecond, time.Duration(interval)*time.Millisecond))
	}
}

// hostTimerCancel is timer_cancel(name) -> 0 or 1.
func hostTimerCancel(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	name := string(read(mod, uint32(stack[0]), uint32(stack[1])))
	stack[0] = 0
	if inst.svc != nil && inst.svc.cancelTimer(name) {
		stack[0] = 1
	}
}

// hostNow is now(clock) -> i64 nanoseconds.
func hostNow(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	rt := inst.m.rt
	now := rt.cfg.Clock()
	switch int32(uint32(stack[0])) {
	case abi.ClockWall:
		stack[0] = uint64(now.UnixNano())
	case abi.ClockMonotonic:
		stack[0] = uint64(now.Sub(rt.started).Nanoseconds())
	default:
		panic(fmt.Errorf("host: now: unknown clock %d", int32(uint32(stack[0]))))
	}
}

// hostRandom is random(ptr, len).
func hostRandom(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if n > abi.MaxRandom {
		panic(fmt.Errorf("host: random: %d bytes asked, at most %d per call", n, abi.MaxRandom))
	}
	buf := read(mod, ptr, n) // a view of the guest's memory
	inst.m.rt.randMu.Lock()
	_, err := inst.m.rt.cfg.Rand.Read(buf)
	inst.m.rt.randMu.Unlock()
	if err != nil {
		panic(fmt.Errorf("host: random: %w", err))
	}
}

// hostTraceEvent is trace_event(ptr, len).
func hostTraceEvent(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	n := min(uint32(stack[1]), 256)
	name := string(read(mod, uint32(stack[0]), n))
	if inst.msgCtx != nil {
		trace.SpanFromContext(inst.msgCtx).AddEvent(name, trace.WithAttributes())
	}
}
