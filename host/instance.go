package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// GuestError is a message that failed inside the guest: a trap (including a Go panic
// or proc_exit), or the per-message deadline. The instance is gone afterwards. It
// matches ErrGuestTrap or ErrGuestDeadline with errors.Is.
type GuestError struct {
	// Entity is "type/id".
	Entity string
	// Cause is ErrGuestTrap or ErrGuestDeadline.
	Cause error
	// Detail is the runtime's one-line account (e.g. "wasm error: unreachable").
	Detail string
	// Stderr is the start (at most 4 KiB) of what the guest wrote to stderr during the
	// failed call: a Go panic's message and stack land here.
	Stderr string
	// LastOutput is the last non-empty line (at most 4 KiB) the guest wrote to stdout or
	// stderr during the failed call, a partial line included: where TinyGo, which
	// writes a panic to stdout, leaves its panic message. Empty when it wrote nothing.
	LastOutput string
	// Ran is how long the failed call ran, measured by the host from the start of the
	// call, when its deadline starts, to its end. For ErrGuestDeadline it is at least
	// the deadline.
	Ran time.Duration
	// MemoryBytes is the size of the guest's linear memory when the call failed, in
	// bytes (0 when instantiation failed): at most the runtime's MemoryLimit.
	MemoryBytes uint32
	// MemoryLimit is the runtime's cap on linear memory (RuntimeConfig.MemoryLimit, the
	// member's --memory-limit), in bytes, when the trap was the guest running out of
	// memory under it: its runtime said "out of memory" (Go, TinyGo, the SDK's
	// allocator). 0 for any other failure.
	MemoryLimit uint64
}

func (e *GuestError) Error() string {
	s := fmt.Sprintf("%v: %s", e.Cause, e.Entity)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.MemoryLimit > 0 {
		s += fmt.Sprintf(" (memory cap hit: the guest ran out of memory at %s of linear memory; the cap is %s, the member's --memory-limit)",
			formatMiB(uint64(e.MemoryBytes)), formatMiB(e.MemoryLimit))
	}
	if line := firstNonEmptyLine(e.Stderr); line != "" {
		s += " (stderr: " + line + ")"
	} else if e.LastOutput != "" {
		s += " (stdout: " + e.LastOutput + ")" // nothing on stderr: the line is stdout's
	}
	return s
}

// formatMiB writes n bytes in MiB, with one decimal when n is not a whole number of MiB.
func formatMiB(n uint64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func (e *GuestError) Unwrap() error { return e.Cause }

// EntityError is an error the entity itself returned for a message (status Error). The
// entity goes on; only that message failed.
type EntityError struct {
	// Message is the entity's error text.
	Message string
}

func (e *EntityError) Error() string { return e.Message }

// instanceKey is the context key under which an instance's calls carry the instance,
// for the host functions.
type instanceKey struct{}

func instanceFrom(ctx context.Context) *wasmInstance {
	inst, _ := ctx.Value(instanceKey{}).(*wasmInstance)
	return inst
}

// wasmInstance is one entity's wasm instance. It is not safe for concurrent use: the
// caller delivers one message at a time, which is what the ABI promises the guest.
type wasmInstance struct {
	m *wasmModule
	// code is the compiled module the instance was made from (interpreted or not).
	code       *moduleCode
	entityType string
	entityID   string
	name       string // "type/id"
	mod        api.Module
	mem        api.Memory
	// stop is the global wasmbin.Rewrite added: set, the guest traps at its next loop
	// iteration. stopped makes stopGuest set it once.
	stop    api.MutableGlobal
	stopped atomic.Bool
	lm      *linearMemory // mem's slot in the runtime's arena; nil when on the Go heap
	// fromImage: the instance is made from its module's pre-initialized image, so that
	// a resident slot, which holds the image, serves (residentslots.go).
	fromImage bool
	// lastGrow is what the guest's last memory.grow returned (wasmbin.LastGrowExport):
	// -1 when its memory could not grow.
	lastGrow api.Global
	// dispatch is the module's shardhost_dispatch (wasmbin.DispatchExport): the host calls
	// every export through it, so an instance holds one wazero call engine.
	dispatch    api.Function
	ctx         context.Context // lives as long as the instance; carries it for host functions
	cancel      context.CancelFunc
	timer       *time.Timer // the activation deadline (instantiate)
	deadlineHit atomic.Bool
	stderr      head
	// stdout and stderrOut are the guest's output streams; lastOutput is the last
	// non-empty line either wrote during the call in progress.
	stdout, stderrOut *guestOutput
	lastOutput        string
	stack             [3]uint64

	// The message deadline of the call in progress (calldeadline.go): callEnd is
	// when it passes, in nanoseconds after monoBase (0: no call); callTimer, made at
	// the first call, fires no later than that while a call runs; callArmed says it
	// is set to fire.
	callEnd   atomic.Int64
	callTimer atomic.Pointer[time.Timer] // atomic: the timer's own goroutine reads it
	callArmed atomic.Bool
	lastCall  time.Duration // how long the last call into the guest took

	// State of the call in progress, touched by host functions on the calling goroutine.
	inCall   bool  // in an export that may reply
	phase    phase // which export runs
	replyCap int   // the largest reply of the current call, in bytes
	reply    []byte
	// replyOver is the size of the last reply over replyCap in the current call, 0 if
	// none: the call then fails with ErrReplyTooLarge.
	replyOver int
	calls     int // host function calls in the current call (the budget)
	closed    bool
	// The v1 state of the current message: what sharding says of it, its context (for
	// traces), the result of the last host function, and a forward the guest asked for.
	msg     sharding.MessageInfo
	msgCtx  context.Context
	result  []byte
	forward *sharding.ForwardTo
	// svc is the node's messaging, distributed data and timers for this entity; nil
	// outside a node.
	svc services
	// passivate is set by the passivate host function; PassivationRequested reads and
	// clears it.
	passivate bool
	// returned says whether the last call of an export returned (the guest's state is
	// the one it left), rather than trapping or never reaching the guest.
	returned bool
	// In-memory recovery (recovery.go): the host calls of the current call are recorded
	// while recording is set; while replaying, they are answered from replayCalls.
	recording, replaying  bool
	recCalls, replayCalls []hostRecord
	// recWait is how long the recorded host calls of the last call took: time the
	// guest waited (an ask, a distributed data write), which a replay, answering them
	// from the record, does not spend.
	recWait   time.Duration
	replayPos int
	// trial, set by a trial replay (replay.go), notes where the guest's host calls
	// leave the record instead of failing the call.
	trial *trialCalls

	// Snapshots (snapshot.go): the guest's clocks, and the module's mutable globals,
	// looked up at the first snapshot or restore.
	clock       guestClock
	wasiRand    fakeRand
	snapGlobals []api.MutableGlobal

	// Telemetry: the attribute set of the entity's spans, the measurement options of
	// its type, and the memory counted in shardhost.entity.memory.
	attrs      []attribute.KeyValue
	typeOpt    []metric.RecordOption // the entity type, as Record's options: no slice per call
	memOpt     metric.MeasurementOption
	memCounted int64
	hostCalls  *atomic.Int64 // of the entity type
}

// Instantiate creates an instance of the module for the entity typ/id and runs the
// module's _initialize, within the message deadline. Errors wrap ErrGuestTrap or
// ErrGuestDeadline when the guest failed, ErrRuntimeClosed when the runtime is gone.
func (m *wasmModule) Instantiate(ctx context.Context, entityType, entityID string) (*wasmInstance, error) {
	return m.instantiate(ctx, entityType, entityID, nil, false)
}

// instantiate is Instantiate; with a plan, it is Restore's: the plan names the compiled
// module and start functions, and its snapshot is loaded before the instance is returned.
// restoring names its span "restore" (a guest-level restore follows).
func (m *wasmModule) instantiate(ctx context.Context, entityType, entityID string, plan *restorePlan, restoring bool) (*wasmInstance, error) {
	rt := m.rt
	if !rt.enter() {
		return nil, fmt.Errorf("%w: instantiating %s/%s", ErrRuntimeClosed, entityType, entityID)
	}
	defer rt.exit()
	inst := &wasmInstance{m: m, entityType: entityType, entityID: entityID, name: entityType + "/" + entityID}
	span := noopSpan
	if entityType != "" {
		inst.attrs = entityAttrs(ctx, entityType, entityID)
		inst.memOpt = rt.tel.byType.Get(entityType)
		inst.typeOpt = []metric.RecordOption{inst.memOpt}
		inst.hostCalls = rt.tel.hostCallsOf(entityType)
		if rt.tel.traced {
			name := "instantiate " + entityType
			if plan != nil || restoring {
				name = "restore " + entityType
			}
			_, span = rt.tracer.Start(ctx, name, trace.WithAttributes(append(inst.attrs, attrModuleDigest.String(m.Digest))...))
		}
	}
	defer span.End()
	inst.clock.reset(snapshotClock{Wall: fakeEpochNanos})
	code, start := m.code.Load(), m.start
	var img *preImage
	if plan != nil {
		code, start = plan.code, plan.start
	} else if img = m.pre.image.Load(); img != nil {
		// A new instance of compiled code starts from the module's pre-initialized
		// image (preinit.go) once its restore image is compiled.
		if c := m.snap.readyImage(rt); c != nil && !code.interpreted && !m.pre.off.Load() {
			code, start = &moduleCode{r: rt.r, compiled: c}, nil
		} else {
			img = nil
		}
	}
	inst.code = code
	inst.fromImage = img != nil
	// Not derived from rt.ctx: every instance would register with (and lock) that one
	// parent, which activations on all cores contended on. wasmRuntime.Close cancels the
	// live instances' contexts itself, and this one below if it closed meanwhile.
	base, cancel := context.WithCancel(context.Background())
	inst.ctx = context.WithValue(base, instanceKey{}, inst)
	inst.cancel = cancel
	// No guest code runs in InstantiateModule (the module's start section is an export,
	// wasmbin.Rewrite): the start functions run after it, under the deadline.
	inst.stdout = &guestOutput{inst: inst, stream: "stdout", level: slog.LevelInfo}
	inst.stderrOut = &guestOutput{inst: inst, stream: "stderr", level: slog.LevelWarn}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithStdout(inst.stdout).
		WithStderr(inst.stderrOut).
		WithNanotime(inst.clock.nanotime, 1).
		WithWalltime(inst.clock.walltime, sys.ClockResolution(time.Microsecond)).
		WithRandSource(&inst.wasiRand)
	// The linear memory comes from the runtime's arena (linearmem.go).
	started := time.Now()
	mod, err := code.r.InstantiateModule(experimental.WithMemoryAllocator(inst.ctx, (*memoryAllocator)(inst)), code.compiled, cfg)
	if err != nil {
		if inst.lm != nil {
			inst.lm.Free() // wazero does not close a module whose instantiation failed
		}
		cancel()
		err = inst.guestError(err, false, rt.cfg.ActivationDeadline, time.Since(started))
		obs.Fail(span, err, guestOutcome(err))
		return nil, err
	}
	inst.mod = mod
	inst.stop, _ = mod.ExportedGlobal(wasmbin.StopGlobalExport).(api.MutableGlobal)
	inst.lastGrow = mod.ExportedGlobal(wasmbin.LastGrowExport)
	inst.dispatch = mod.ExportedFunction(wasmbin.DispatchExport)
	if inst.stop == nil || inst.dispatch == nil {
		inst.mod.Close(context.Background())
		cancel()
		return nil, fmt.Errorf("%w: no %s global or %s function after instantiation", ErrInvalidModule, wasmbin.StopGlobalExport, wasmbin.DispatchExport)
	}
	rt.mu.Lock()
	rt.live[inst] = struct{}{}
	rt.mu.Unlock()
	inst.timer = time.AfterFunc(rt.cfg.ActivationDeadline, func() {
		inst.deadlineHit.Store(true)
		inst.stopGuest()
		cancel()
	})
	if rt.closing.Load() {
		// Close may have gone through live before this instance was in it.
		inst.stopGuest()
		cancel()
	}
	for _, op := range start {
		inst.stack[0] = uint64(op)
		if err = inst.dispatch.CallWithStack(inst.ctx, inst.stack[:]); err != nil {
			break
		}
	}
	fired := !inst.timer.Stop()
	if err != nil {
		err = inst.guestError(err, fired, rt.cfg.ActivationDeadline, time.Since(started))
		inst.Close(context.Background())
		obs.Fail(span, err, guestOutcome(err))
		return nil, err
	}
	inst.mem = mod.Memory()
	if ops := m.ops; fired || inst.mem == nil || !ops.Has(wasmbin.OpAlloc) || !ops.Has(wasmbin.OpReceive) {
		inst.Close(context.Background())
		if fired {
			return nil, &GuestError{Entity: inst.name, Cause: ErrGuestDeadline, Detail: fmt.Sprintf("instantiation took over %v", rt.cfg.ActivationDeadline)}
		}
		return nil, fmt.Errorf("%w: exports missing after instantiation", ErrInvalidModule)
	}
	if img != nil {
		if err := inst.loadImage(img); err != nil {
			inst.Close(context.Background())
			obs.Fail(span, err, guestOutcome(err))
			return nil, err
		}
	}
	if plan != nil && plan.snap != nil {
		if err := inst.load(plan); err != nil {
			inst.Close(context.Background())
			obs.Fail(span, err, guestOutcome(err))
			return nil, err
		}
	}
	inst.trackMemory()
	return inst, nil
}

// Receive delivers one message to the guest and returns its reply. An entity's own
// refusal is an *EntityError and the instance goes on; a trap or the deadline is a
// *GuestError and the instance is closed (Closed reports true). A message over the size
// cap fails with ErrMessageTooLarge before reaching the guest; a reply over it fails
// with ErrReplyTooLarge, and the instance goes on with the state the message left.
func (i *wasmInstance) Receive(ctx context.Context, msg []byte) ([]byte, error) {
	i.returned = false
	if i.closed {
		return nil, ErrInstanceClosed
	}
	if len(msg) > i.m.rt.cfg.MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrMessageTooLarge, len(msg), i.m.rt.cfg.MaxMessageSize)
	}
	// The message's span is the caller's (sharding's "handle" span): the guest's trace
	// events, and the spans of what it calls (ddata, tell, ask), go there. One span per
	// message keeps tracing cheap; the guest call's duration is a metric.
	rt := i.m.rt
	i.lastCall = 0
	i.msg, _ = sharding.MessageInfoFrom(ctx)
	i.msgCtx = ctx
	reply, err := i.call(msg)
	i.msg, i.msgCtx = sharding.MessageInfo{}, nil
	if err == nil {
		i.m.hot.learn(i.lm) // once per module: the pages an activation touched
	}
	if i.typeOpt != nil {
		if rt.tel.metered {
			rt.tel.callDur.Record(context.Background(), i.lastCall.Seconds(), i.typeOpt...)
		}
		i.hostCalls.Add(int64(i.calls))
	}
	if rt.tel.traced {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attrMessageBytes.Int(len(msg)), attrHostCalls.Int(i.calls))
		}
	}
	return reply, err
}

// noopSpan stands for a span when tracing is off.
var noopSpan = trace.SpanFromContext(context.Background())

func (i *wasmInstance) call(msg []byte) ([]byte, error) {
	i.forward = nil
	op := receiveOp(i.msg)
	if op == wasmbin.OpHTTP && !i.m.ops.Has(op) {
		return nil, errNoHTTP(i.name)
	}
	status, reply, err := i.invoke(op, msg, true, i.m.rt.cfg.MaxMessageSize)
	fwd := i.forward
	i.forward = nil
	if err != nil {
		return nil, err
	}
	switch {
	case op == wasmbin.OpHTTP && status == abi.StatusNoHTTP:
		return nil, errNoHTTP(i.name)
	}
	switch status {
	case abi.StatusOK:
		if fwd != nil {
			return nil, fwd
		}
		return reply, nil
	case abi.StatusError:
		return nil, &EntityError{Message: string(reply)}
	default:
		return nil, &EntityError{Message: fmt.Sprintf("guest returned status %d", status)}
	}
}

// invoke calls one of the guest's exports, op's, within the message deadline:
// fn(ptr, len) with arg written into a buffer from shardhost_alloc when withArg is set,
// fn() otherwise. It returns the status the guest returned and the reply it gave (at most
// replyCap bytes). A trap or the deadline closes the instance and is a *GuestError.
func (i *wasmInstance) invoke(op wasmbin.Op, arg []byte, withArg bool, replyCap int) (abi.Status, []byte, error) {
	if !i.m.rt.enter() {
		// The runtime closes the module and its memory.
		i.closed = true
		i.cancel()
		i.trackMemory()
		return 0, nil, fmt.Errorf("%w: %s", ErrRuntimeClosed, i.name)
	}
	defer i.m.rt.exit()
	i.stderr.reset()
	i.lastOutput = ""
	i.returned = false
	started := sinceMonoBase()
	deadline := i.m.rt.cfg.MessageDeadline
	if i.replaying {
		// A replay re-runs a call that ended once within the message deadline, and
		// always ends the same way: on a loaded host it may take longer, and failing it
		// would lose the acknowledged messages since the last save (the entity restarts
		// from its saved state). The activation deadline still stops one that hangs.
		deadline = max(deadline, i.m.rt.cfg.ActivationDeadline)
	}
	end := i.startDeadline(started, deadline)
	var err error
	var ptr uint32
	if withArg {
		i.stack[0], i.stack[1] = uint64(wasmbin.OpAlloc), uint64(len(arg))
		err = i.dispatch.CallWithStack(i.ctx, i.stack[:])
		if err == nil {
			ptr = uint32(i.stack[0])
			switch {
			case ptr == 0 && len(arg) > 0:
				err = errors.New("shardhost_alloc returned 0 (out of memory)")
			case !i.mem.Write(ptr, arg):
				err = fmt.Errorf("shardhost_alloc returned %#x, outside the guest's memory", ptr)
			}
		}
	}
	if err == nil {
		i.inCall, i.phase, i.replyCap = true, phaseOf(op), replyCap
		i.reply = i.reply[:0]
		i.replyOver = 0
		i.calls = 0
		i.stack[0], i.stack[1], i.stack[2] = uint64(op), uint64(ptr), uint64(len(arg))
		err = i.dispatch.CallWithStack(i.ctx, i.stack[:])
		i.inCall, i.phase = false, phaseNone
		i.returned = err == nil
	}
	i.lastCall = sinceMonoBase() - started
	fired := i.endDeadline(end)
	if err != nil {
		err = i.guestError(err, fired, deadline, i.lastCall)
		i.Close(context.Background())
		return 0, nil, err
	}
	reply := append([]byte(nil), i.reply...)
	i.trackMemory()
	if fired {
		// The deadline passed just as the call returned: the context is cancelled, so
		// the instance cannot be called again. The reply stands.
		i.Close(context.Background())
	}
	if i.replyOver > 0 {
		return 0, nil, fmt.Errorf("%w: %s replied %d bytes, the cap is %d", ErrReplyTooLarge, i.name, i.replyOver, replyCap)
	}
	return abi.Status(int32(uint32(i.stack[0]))), reply, nil
}

// receiveOp is the export that handles a message of info's kind: shardhost_http for
// an HTTP request (routes.go), shardhost_receive for every other.
func receiveOp(info sharding.MessageInfo) wasmbin.Op {
	if info.Kind == sharding.KindHTTP {
		return wasmbin.OpHTTP
	}
	return wasmbin.OpReceive
}

// phaseOf names the phase a call of op's export is.
func phaseOf(op wasmbin.Op) phase {
	switch op {
	case wasmbin.OpReceive, wasmbin.OpHTTP:
		return phaseReceive
	case wasmbin.OpSnapshot:
		return phaseSnapshot
	case wasmbin.OpRestore:
		return phaseRestore
	case wasmbin.OpOnActivate:
		return phaseActivate
	case wasmbin.OpOnPassivate:
		return phasePassivate
	case wasmbin.OpQuery:
		return phaseQuery
	}
	return phaseNone
}

// Activate runs the guest's shardhost_on_activate (ABI v1), if it exports one, before
// the first message of an incarnation. Errors: an *EntityError with the guest's text when
// it refused, a *GuestError for a trap or the deadline (the instance is then closed).
func (i *wasmInstance) Activate(ctx context.Context) error {
	if i.closed {
		return ErrInstanceClosed
	}
	if !i.m.ops.Has(wasmbin.OpOnActivate) {
		return nil
	}
	i.msgCtx = ctx
	defer func() { i.msgCtx = nil }()
	status, reply, err := i.invoke(wasmbin.OpOnActivate, nil, false, i.m.rt.cfg.MaxMessageSize)
	switch {
	case err != nil:
		return err
	case status != abi.StatusOK:
		return &EntityError{Message: fmt.Sprintf("%s refused its activation: %s", abi.ExportOnActivate, reply)}
	}
	return nil
}

// BeforeStop runs the guest's shardhost_on_passivate (ABI v1), if it exports one, before
// its state is saved for a passivation, handoff or shutdown. It reports whether the
// hook may have changed the state: not when the guest answered StatusNoHook (it has
// none). A refusal or a failure is logged (after a trap the instance is closed and the
// last saved state stands).
func (i *wasmInstance) BeforeStop(ctx context.Context) bool {
	if i.closed || !i.m.ops.Has(wasmbin.OpOnPassivate) {
		return false
	}
	i.msgCtx = ctx
	defer func() { i.msgCtx = nil }()
	status, reply, err := i.invoke(wasmbin.OpOnPassivate, nil, false, i.m.rt.cfg.MaxMessageSize)
	switch {
	case err != nil:
		i.m.rt.log.Warn("entity's on_passivate failed", "entity", i.name, "err", err)
		return false
	case status == abi.StatusNoHook:
		return false
	case status != abi.StatusOK:
		i.m.rt.log.Warn("entity's on_passivate refused", "entity", i.name, "status", status, "text", string(reply))
	}
	return true
}

// HasGuestSnapshot reports whether the module exports shardhost_snapshot and
// shardhost_restore (abi/SPEC.md).
func (m *wasmModule) HasGuestSnapshot() bool { return m.guestSnapshot }

// GuestSnapshot asks the guest for its guest-level snapshot (shardhost_snapshot), between
// messages. ok is false when the module has none or the guest answered NoSnapshot: the
// caller takes a transparent snapshot (Snapshot) instead.
//
// Errors: ErrInstanceClosed; ErrSnapshotFailed when the guest refused (its text is in the
// error) or gave more than abi.MaxSnapshotSize bytes; a *GuestError for a trap or the
// deadline, after which the instance is closed.
func (i *wasmInstance) GuestSnapshot() (state []byte, ok bool, err error) {
	if i.closed {
		return nil, false, ErrInstanceClosed
	}
	if !i.m.guestSnapshot {
		return nil, false, nil
	}
	status, reply, err := i.invoke(wasmbin.OpSnapshot, nil, false, abi.MaxSnapshotSize)
	switch {
	case errors.Is(err, ErrReplyTooLarge):
		return nil, false, fmt.Errorf("%w: %w", ErrSnapshotFailed, err)
	case err != nil:
		return nil, false, err
	case status == abi.StatusOK:
		return reply, true, nil
	case status == abi.StatusNoSnapshot:
		return nil, false, nil
	case status == abi.StatusError:
		return nil, false, fmt.Errorf("%w: %s: %s", ErrSnapshotFailed, i.name, reply)
	}
	return nil, false, fmt.Errorf("%w: %s: guest returned status %d", ErrSnapshotFailed, i.name, status)
}

// RestoreGuest makes a new instance for the entity entityType/entityID, as Instantiate
// does, and gives it a guest-level state that an earlier GuestSnapshot returned
// (shardhost_restore), before any message.
//
// Errors: ErrBadSnapshot when the module does not export shardhost_restore;
// ErrRestoreFailed (which matches ErrSnapshotFailed) when the guest refused the state
// (its text is in the error); those of Instantiate.
func (m *wasmModule) RestoreGuest(ctx context.Context, entityType, entityID string, state []byte) (*wasmInstance, error) {
	if !m.guestSnapshot {
		return nil, fmt.Errorf("%w: module %.12s… does not export %s: it cannot take up the guest-level state of %s/%s",
			ErrBadSnapshot, m.Digest, abi.ExportRestore, entityType, entityID)
	}
	inst, err := m.instantiate(ctx, entityType, entityID, nil, true)
	if err != nil {
		return nil, err
	}
	status, reply, err := inst.invoke(wasmbin.OpRestore, state, true, m.rt.cfg.MaxMessageSize)
	switch {
	case err != nil:
		return nil, err
	case status != abi.StatusOK:
		inst.Close(ctx)
		if status == abi.StatusError {
			return nil, fmt.Errorf("%w: %s refused its saved state: %s", ErrRestoreFailed, inst.name, reply)
		}
		return nil, fmt.Errorf("%w: %s: %s returned status %d", ErrRestoreFailed, inst.name, abi.ExportRestore, status)
	}
	return inst, nil
}

// MigrateGuest makes a new instance for the entity entityType/entityID, as
// RestoreGuest does, and gives it a guest-level state that another module saved, the
// type's version fromVersion (0: not known), through shardhost_migrate (abi/SPEC.md,
// "State: migrations"); a module that does not export it gets the state through
// shardhost_restore. Nothing of a failed migration stays: the new instance is closed.
// Errors: those of RestoreGuest; ErrMigrationFailed when the guest refused the state,
// returned another status, or trapped (its text, or the trap, is in the error), or
// when its state after the migration does not snapshot (shardhost_snapshot fails).
func (m *wasmModule) MigrateGuest(ctx context.Context, entityType, entityID string, fromVersion uint64, state []byte) (*wasmInstance, error) {
	if !m.guestMigrate {
		return m.RestoreGuest(ctx, entityType, entityID, state)
	}
	inst, err := m.instantiate(ctx, entityType, entityID, nil, true)
	if err != nil {
		return nil, err
	}
	in := make([]byte, 8, 8+len(state))
	binary.LittleEndian.PutUint64(in, fromVersion)
	status, reply, err := inst.invoke(wasmbin.OpMigrate, append(in, state...), true, m.rt.cfg.MaxMessageSize)
	switch {
	case err != nil:
		inst.Close(ctx)
		return nil, fmt.Errorf("%w: %s: %w", ErrMigrationFailed, inst.name, err)
	case status != abi.StatusOK:
		inst.Close(ctx)
		if status == abi.StatusError {
			return nil, fmt.Errorf("%w: %s refused the state of version %d: %s", ErrMigrationFailed, inst.name, fromVersion, reply)
		}
		return nil, fmt.Errorf("%w: %s: %s returned status %d", ErrMigrationFailed, inst.name, abi.ExportMigrate, status)
	}
	// The state the migration left must be one the module can save: a migration that
	// accepted what it could not take up fails now, not at the entity's next save.
	if _, ok, err := inst.GuestSnapshot(); err != nil || !ok {
		inst.Close(ctx)
		if err == nil {
			err = errors.New("it gave no state")
		}
		return nil, fmt.Errorf("%w: %s accepted the state of version %d, but its state after the migration cannot be saved: %w",
			ErrMigrationFailed, inst.name, fromVersion, err)
	}
	return inst, nil
}

// PassivationRequested reports whether the guest called the passivate host function
// during the last message, and clears the request.
func (i *wasmInstance) PassivationRequested() bool {
	p := i.passivate
	i.passivate = false
	return p
}

// stopGuest makes the guest trap at its next loop iteration (the deadline timer, or
// wasmRuntime.Close). It may be called from any goroutine; only the first call sets the
// global.
func (i *wasmInstance) stopGuest() {
	if !i.stopped.CompareAndSwap(false, true) {
		return
	}
	if i.code.interpreted {
		i.cancel() // the interpreter runtime closes the module at its next loop iteration
		return
	}
	i.stop.Set(1)
}

// guestError turns a runtime error into a *GuestError; fired says whether the deadline
// timer went off during the call, deadline is the call's and ran how long it ran.
func (i *wasmInstance) guestError(err error, fired bool, deadline, ran time.Duration) error {
	if (errors.Is(err, context.Canceled) || i.m.rt.closing.Load()) && !fired && !i.deadlineHit.Load() {
		return fmt.Errorf("%w: %v", ErrRuntimeClosed, err)
	}
	// A line the guest left without its newline (TinyGo's abort after a panic, a
	// runtime that dies mid-line) is logged now and may be its last words.
	if i.stdout != nil {
		i.stdout.flush()
		i.stderrOut.flush()
	}
	ge := &GuestError{Entity: i.name, Cause: ErrGuestTrap, Stderr: i.stderr.String(), LastOutput: i.lastOutput, Ran: ran}
	if i.mem != nil {
		ge.MemoryBytes = i.mem.Size()
	}
	var exit *sys.ExitError
	switch {
	case fired || i.deadlineHit.Load():
		ge.Cause = ErrGuestDeadline
		ge.Detail = fmt.Sprintf("stopped after %v (the deadline is %v)", ran.Round(time.Millisecond), deadline)
	case errors.As(err, &exit):
		ge.Detail = fmt.Sprintf("exited with code %d", exit.ExitCode())
	default:
		ge.Detail = strings.TrimSuffix(firstLine(err.Error()), " (recovered by wazero)")
	}
	// The runtime said so (Go, TinyGo, the SDK's allocator), or it said nothing but its
	// last memory.grow failed (a Rust guest aborts on a failed allocation silently).
	if ge.Cause == ErrGuestTrap && (strings.Contains(ge.Detail, "out of memory") ||
		strings.Contains(ge.Stderr, "out of memory") || strings.Contains(ge.LastOutput, "out of memory") ||
		(i.lastGrow != nil && int32(uint32(i.lastGrow.Get())) == -1)) {
		ge.MemoryLimit = i.m.rt.cfg.MemoryLimit >> 16 << 16
	}
	return ge
}

// Closed reports whether the instance is closed (after Close, a trap or a deadline).
func (i *wasmInstance) Closed() bool { return i.closed }

// MemorySize returns the size of the instance's linear memory in bytes.
func (i *wasmInstance) MemorySize() uint32 {
	if i.closed {
		return 0
	}
	return i.mem.Size()
}

// Close releases the instance. It is idempotent.
func (i *wasmInstance) Close(ctx context.Context) error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.timer.Stop()
	if t := i.callTimer.Load(); t != nil {
		t.Stop()
	}
	rt := i.m.rt
	rt.mu.Lock()
	delete(rt.live, i)
	rt.mu.Unlock()
	err := i.mod.Close(ctx)
	i.cancel()
	i.trackMemory()
	return err
}

// head keeps the first 4 KiB written to it since the last reset: where a Go panic or
// a runtime fatal error puts its message.
type head struct {
	buf []byte
}

const headSize = 4 << 10

func (h *head) Write(p []byte) {
	if room := headSize - len(h.buf); room > 0 {
		if len(p) > room {
			p = p[:room]
		}
		h.buf = append(h.buf, p...)
	}
}

func (h *head) reset()         { h.buf = h.buf[:0] }
func (h *head) String() string { return string(h.buf) }

// guestOutput receives a guest's stdout or stderr. Complete lines go to the host's log
// with the entity, stdout at info and stderr at warn (a line is cut at 4 KiB); stderr's
// start is also kept for the error of a failing call, and the last non-empty line of
// either stream for a trap's error.
type guestOutput struct {
	inst *wasmInstance
	// wrote is set at the first write.
	wrote   bool
	stream  string
	level   slog.Level
	partial []byte
}

// line logs one line of output and keeps it as the call's last when it is not blank.
func (g *guestOutput) line(b []byte) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	text := string(b)
	g.inst.lastOutput = strings.TrimSpace(text)
	g.inst.m.rt.log.Log(context.Background(), g.level, "guest output", "entity", g.inst.name, "stream", g.stream, "text", text)
	g.inst.entityLog(g.stream, g.level, strings.TrimRight(text, "\r"))
}

// entityLog adds a line to the entity's log ring (entitylog.go), with the trace of
// the message in progress, if any.
func (i *wasmInstance) entityLog(stream string, level slog.Level, text string) {
	if i.m.rt.logs == nil || i.trial != nil || i.replaying || i.msg.Replay {
		return // a replay's output was logged when the message first ran
	}
	i.m.rt.logs.add(i.msgCtx, i.entityType, i.entityID, stream, level, text, i.msg.Seq)
}

// flush logs the partial line, if any, as a line.
func (g *guestOutput) flush() {
	if len(g.partial) > 0 {
		g.line(g.partial)
		g.partial = g.partial[:0]
	}
}

func (g *guestOutput) Write(p []byte) (int, error) {
	g.wrote = true
	if g.stream == "stderr" {
		g.inst.stderr.Write(p)
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxLogLine - len(g.partial); room > 0 {
				g.partial = append(g.partial, p[:min(room, len(p))]...)
			}
			break
		}
		line := p[:i]
		if len(g.partial) > 0 {
			line = append(g.partial, line[:min(max(maxLogLine-len(g.partial), 0), len(line))]...)
		}
		g.line(line)
		g.partial = g.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func firstNonEmptyLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// fakeRand is the guest's WASI random_get: wazero's deterministic default (math/rand
// seeded with 42, the same bytes from an instance's start). The first
// fakeRandPrefixBytes of that stream are computed once per process (fakeRandPrefix):
// seeding a source costs about 10 µs and 5 KiB, and a TinyGo guest reads a few bytes
// at every activation (a Rust guest none). A guest that reads past them gets a source
// of its own, seeded and moved past them. math/rand's Read gives the same stream
// however it is split into calls.
type fakeRand struct {
	off int // bytes of the stream read so far
	r   *mathrand.Rand
}

// fakeRandPrefixBytes is how much of the stream is computed once, in bytes.
const fakeRandPrefixBytes = 1024

// fakeRandPrefix returns the first fakeRandPrefixBytes of the stream.
var fakeRandPrefix = sync.OnceValue(func() []byte {
	b := make([]byte, fakeRandPrefixBytes)
	mathrand.New(mathrand.NewSource(42)).Read(b)
	return b
})

func (f *fakeRand) Read(p []byte) (int, error) {
	if f.r == nil {
		if prefix := fakeRandPrefix(); f.off+len(p) <= len(prefix) {
			f.off += copy(p, prefix[f.off:])
			return len(p), nil
		}
		f.r = mathrand.New(mathrand.NewSource(42))
		if f.off > 0 {
			f.r.Read(make([]byte, f.off)) // past what the prefix gave
		}
	}
	f.off += len(p)
	return f.r.Read(p)
}
