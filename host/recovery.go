package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/sharding"
)

// In-memory recovery (docs/sharding.md, "What a failure loses"; docs/design.md): a message that
// traps, overruns its deadline or its host call budget costs that message alone. The
// entity starts again from its state after its last successful message, not from its
// last durable checkpoint, which --checkpoint governs and which is what a crash of the
// member falls back to.
//
// How: the entity keeps a base (the state it was activated from, or an in-memory
// transparent snapshot taken since) and a replay record of every message its instance
// handled since that base: the payload, what sharding said of it, and the outcome of
// each host call that reaches beyond the instance (tell, ask, forward, distributed
// data, subscriptions, timers, now, random). After a failure a new instance is made
// from the base and the record replayed into it: host calls answer from the record and
// do nothing (the messages were sent, the data updated and the timers armed the first
// time), so the guest, which is deterministic given those answers (its clocks and its
// WASI random source are the host's deterministic ones, abi/SPEC.md), reaches the same
// state. A replay that asks for another host call than the record holds is a guest
// that is not deterministic: recovery gives up and the entity restarts from its durable
// state, as without recovery.
//
// Cost: per message, a copy of its payload and of its host calls' results (nothing
// else on the path: BenchmarkRecoveryOverhead). The record is cut short by a new base,
// a transparent snapshot, when replaying it would take longer than recoveryReplayFactor
// snapshots (the guest time it holds), or it holds recoveryMaxMessages messages or
// recoveryMaxBytes bytes: so snapshots cost at most about 1/recoveryReplayFactor of the
// guest's time, and a recovery replays at most that long.

const (
	// recoveryReplayFactor: a new base is taken once the guest time the record holds is
	// this many times what the last snapshot took.
	recoveryReplayFactor = 20
	// recoveryMaxMessages and recoveryMaxBytes bound the record.
	recoveryMaxMessages = 4096
	recoveryMaxBytes    = 4 << 20
	// recoverySnapshotBytesPerNs is the speed of a snapshot assumed before one was
	// measured, in bytes of linear memory per nanosecond (a Go guest: about 1 ms for
	// 2.9 MB).
	recoverySnapshotBytesPerNs = 2
)

// errReplayDiverged: a replayed call asked for a host call the record does not hold.
var errReplayDiverged = errors.New("host: replay diverged from the record")

// hostRecord is the outcome of one host call: what it left on the stack (its result),
// in the instance's result buffer, and in the guest's memory.
type hostRecord struct {
	fn     string
	ret    uint64
	result []byte
	mem    []byte
}

// loggedMessage is a message the instance handled, as the replay record keeps it: its
// payload is recovery.payloads[off:off+n]; extra, unless -1, indexes recovery.extras,
// where a message with more than Ask in its MessageInfo, or with host calls, keeps
// them. It holds no pointer: a record of thousands of messages, one per busy entity, is
// neither scanned by the collector nor a cache miss per field (a loggedMessage with the
// payload, info and calls in it was 112 bytes; appending it was 10% of the CPU time of
// 64 askers over 1,000 entities).
type loggedMessage struct {
	off, n uint32
	extra  int32
	ask    bool
}

// loggedExtra is what a loggedMessage keeps apart.
type loggedExtra struct {
	info  sharding.MessageInfo
	calls []hostRecord
}

// Kept across bases: a record's arrays up to these sizes (larger ones are dropped, so
// that an entity that once had a long record does not keep it).
const (
	keptLogMessages = 1024
	keptLogPayloads = 16 << 10
)

// hostEffect says how the replay treats a host function.
type hostEffect uint8

const (
	effectNone   hostEffect = iota // deterministic given the instance: runs again
	effectRecord                   // reaches outside: recorded, answered from the record
	effectSkip                     // output only (log, trace event, passivate): not run again
)

// hostEffects lists the host functions that are not effectNone.
var hostEffects = map[string]hostEffect{
	abi.ImportTell: effectRecord, abi.ImportAsk: effectRecord, abi.ImportForward: effectRecord,
	abi.ImportTellKey: effectRecord, abi.ImportAskKey: effectRecord,
	abi.ImportReminderSet: effectRecord, abi.ImportReminderCancel: effectRecord, abi.ImportReminderList: effectRecord,
	abi.ImportDDataGet: effectRecord, abi.ImportDDataUpdate: effectRecord, abi.ImportDDataDelete: effectRecord,
	abi.ImportDDataSubscribe: effectRecord, abi.ImportDDataUnsubscribe: effectRecord,
	abi.ImportTimerStart: effectRecord, abi.ImportTimerCancel: effectRecord,
	abi.ImportNow: effectRecord, abi.ImportRandom: effectRecord,
	abi.ImportHTTPRequest: effectRecord,
	abi.ImportLog:         effectSkip, abi.ImportTraceEvent: effectSkip, abi.ImportPassivate: effectSkip,
}

// replayable wraps a host function for recording and replay; results is the number of
// results it has.
func replayable(name string, f api.GoModuleFunc, results int) api.GoModuleFunc {
	switch hostEffects[name] {
	case effectRecord:
		return func(ctx context.Context, mod api.Module, stack []uint64) {
			inst := mustInstance(ctx)
			if inst.replaying {
				inst.charge()
				if !inst.replayCall(name, mod, stack, results) {
					// A trial replay past a difference from the record (replay.go):
					// the call runs, as outside a node; f charges it itself.
					inst.calls--
					f(ctx, mod, stack)
				}
				return
			}
			if !inst.recording {
				f(ctx, mod, stack)
				return
			}
			start := time.Now()
			f(ctx, mod, stack)
			inst.recWait += time.Since(start)
			inst.recordCall(name, mod, stack, results)
		}
	case effectSkip:
		return func(ctx context.Context, mod api.Module, stack []uint64) {
			if inst := mustInstance(ctx); inst.replaying {
				inst.charge()
				return
			}
			f(ctx, mod, stack)
		}
	}
	return f
}

func (i *wasmInstance) recordCall(name string, mod api.Module, stack []uint64, results int) {
	r := hostRecord{fn: name}
	if results > 0 {
		r.ret = stack[0]
	}
	if len(i.result) > 0 {
		r.result = append([]byte(nil), i.result...)
	}
	if name == abi.ImportRandom {
		r.mem = append([]byte(nil), read(mod, uint32(stack[0]), uint32(stack[1]))...)
	}
	i.recCalls = append(i.recCalls, r)
}

// replayCall answers a host call from the record and reports true. A call the record
// does not hold at this point panics with errReplayDiverged (the guest traps), but in a
// trial replay (i.trial set), which notes the difference and reports false, as for
// every later call of the message: the caller runs them.
func (i *wasmInstance) replayCall(name string, mod api.Module, stack []uint64, results int) bool {
	if i.trial != nil && i.trial.differs != "" {
		return false
	}
	if i.replayPos >= len(i.replayCalls) || i.replayCalls[i.replayPos].fn != name {
		if i.trial != nil {
			i.trial.differ(i.replayPos, name, i.replayCalls)
			return false
		}
		panic(fmt.Errorf("%w: %s called %s at host call %d", errReplayDiverged, i.name, name, i.replayPos))
	}
	r := i.replayCalls[i.replayPos]
	if name == abi.ImportRandom && uint32(stack[1]) != uint32(len(r.mem)) && i.trial != nil {
		i.trial.differs = fmt.Sprintf("host call %d asks %s for %d bytes, the record has %d", i.replayPos+1, name, uint32(stack[1]), len(r.mem))
		return false
	}
	i.replayPos++
	if name == abi.ImportRandom {
		if uint32(stack[1]) != uint32(len(r.mem)) || !mod.Memory().Write(uint32(stack[0]), r.mem) {
			panic(fmt.Errorf("%w: %s asked for other random bytes", errReplayDiverged, i.name))
		}
	}
	i.result = append(i.result[:0], r.result...)
	if results > 0 {
		stack[0] = r.ret
	}
	return true
}

// startRecording starts the record of the instance's next call.
func (i *wasmInstance) startRecording() {
	i.recording = true
	i.recCalls, i.recWait = nil, 0
}

// stopRecording ends the record and returns it.
func (i *wasmInstance) stopRecording() []hostRecord {
	i.recording = false
	c := i.recCalls
	i.recCalls = nil
	return c
}

// replay runs op's export (receive or on_activate; nothing when the module has none)
// with the host calls answered from calls. Errors: a *GuestError when the replayed call
// failed, errReplayDiverged when the guest did not make the calls of the record.
func (i *wasmInstance) replay(op wasmbin.Op, payload []byte, info sharding.MessageInfo, calls []hostRecord) error {
	if !i.m.ops.Has(op) {
		return nil
	}
	i.replaying, i.replayCalls, i.replayPos = true, calls, 0
	i.msg, i.forward = info, nil
	_, _, err := i.invoke(op, payload, op == wasmbin.OpReceive || op == wasmbin.OpHTTP, i.m.rt.cfg.MaxMessageSize)
	i.replaying, i.replayCalls = false, nil
	i.disarmCallTimer() // set for the replay's longer deadline
	i.msg, i.forward, i.passivate = sharding.MessageInfo{}, nil, false
	switch {
	case errors.Is(err, ErrReplyTooLarge):
		err = nil // as the first time: the state stands
	case err == nil && i.replayPos != len(calls):
		err = fmt.Errorf("%w: %s made %d of its %d host calls", errReplayDiverged, i.name, i.replayPos, len(calls))
	}
	return err
}

// recovery is a wasmEntity's base and replay record (nil when recovery is off).
type recovery struct {
	// base is an in-memory snapshot to start from; nil: the state the entity was
	// activated from (baseState, nil for none), then its on_activate (activation).
	base       *instanceSnapshot
	baseState  []byte
	activation []hostRecord
	log        []loggedMessage
	payloads   []byte
	extras     []loggedExtra
	logBytes   int
	// logCost is the guest time the record holds; snapCost what the last snapshot took.
	logCost  time.Duration
	snapCost time.Duration
}

// logMessage appends a handled message to the record, and takes a new base when the
// record is long enough (see recoveryReplayFactor).
func (e *wasmEntity) logMessage(payload []byte, info sharding.MessageInfo, calls []hostRecord, took time.Duration) {
	r := e.rec
	m := loggedMessage{off: uint32(len(r.payloads)), n: uint32(len(payload)), extra: -1, ask: info.Ask}
	r.payloads = append(r.payloads, payload...)
	if info.Sender != "" || info.Kind != 0 || info.Tag != 0 || len(info.Chain) > 0 || len(calls) > 0 {
		x := loggedExtra{info: info, calls: calls}
		if len(info.Chain) > 0 {
			x.info.Chain = append([]string(nil), info.Chain...)
		}
		m.extra = int32(len(r.extras))
		r.extras = append(r.extras, x)
	}
	r.log = append(r.log, m)
	r.logBytes += len(payload) + 64
	for _, c := range calls {
		r.logBytes += len(c.result) + len(c.mem) + 48
	}
	r.logCost += took
	snapCost := r.snapCost
	if snapCost == 0 {
		snapCost = time.Duration(e.inst.MemorySize() / recoverySnapshotBytesPerNs)
	}
	if r.logCost >= recoveryReplayFactor*snapCost || len(r.log) >= recoveryMaxMessages || r.logBytes >= recoveryMaxBytes {
		e.rebase()
	}
}

// rebase takes an in-memory snapshot of the instance as the new base and empties the
// record. A module whose state a snapshot cannot hold keeps its record to the bounds,
// then gives up recovery for this incarnation (its durable state stands).
func (e *wasmEntity) rebase() {
	start := time.Now()
	snap, err := e.inst.Snapshot()
	if err != nil {
		if len(e.rec.log) >= recoveryMaxMessages || e.rec.logBytes >= recoveryMaxBytes {
			e.n.log.Warn("entity without in-memory recovery: its state cannot be snapshotted", "entity", e.name(), "err", err)
			e.rec = nil
		}
		return
	}
	e.setBase(snap, time.Since(start))
}

// setBase makes snap, taken now, the base.
func (e *wasmEntity) setBase(snap *instanceSnapshot, took time.Duration) {
	r := e.rec
	r.base, r.baseState, r.activation = snap, nil, nil
	r.log, r.payloads = r.log[:0], r.payloads[:0]
	if cap(r.log) > keptLogMessages {
		r.log = nil
	}
	if cap(r.payloads) > keptLogPayloads {
		r.payloads = nil
	}
	clear(r.extras) // the host calls' results go with them
	r.extras, r.logBytes, r.logCost = r.extras[:0], 0, 0
	r.snapCost = max(took, time.Microsecond)
}

// logged returns the k-th message of the record.
func (r *recovery) logged(k int) (payload []byte, info sharding.MessageInfo, calls []hostRecord) {
	m := r.log[k]
	info.Ask = m.ask
	if m.extra >= 0 {
		x := r.extras[m.extra]
		info, calls = x.info, x.calls
	}
	return r.payloads[m.off : m.off+m.n], info, calls
}

// recover replaces the failed instance: a new one from the base, with the record
// replayed. It reports whether it did; if not, the entity is terminated and restarts
// from its durable state at its next message.
func (e *wasmEntity) recover(ctx context.Context, cause error) bool {
	r := e.rec
	start := time.Now()
	inst, err := e.baseInstance(ctx)
	if err == nil {
		inst.svc = e
		if r.base == nil {
			err = inst.replay(wasmbin.OpOnActivate, nil, sharding.MessageInfo{}, r.activation)
		}
	}
	for k := 0; err == nil && k < len(r.log); k++ {
		payload, info, calls := r.logged(k)
		err = inst.replay(receiveOp(info), payload, info, calls)
	}
	if err == nil && inst.Closed() {
		err = ErrInstanceClosed
	}
	if err != nil {
		if inst != nil {
			inst.Close(ctx)
		}
		e.n.log.Warn("entity not recovered in memory: it restarts from its last saved state", "entity", e.name(),
			"cause", cause, "err", err)
		e.rec = nil
		return false
	}
	old := e.inst
	e.inst = inst
	if old != nil {
		old.Close(ctx)
	}
	replayed := len(r.log)
	// A fresh base: a message that keeps failing costs one restore, not a replay.
	e.rebase()
	e.n.log.Info("entity recovered in memory after a failed message", "entity", e.name(), "replayed", replayed,
		"took", time.Since(start).Round(time.Microsecond), "cause", cause)
	e.n.tel.restores.Add(context.Background(), 1, e.n.tel.attrs.Get([2]string{e.typ, "r:memory"}))
	return true
}

// baseInstance makes a new instance of the entity's module from the base, as it was
// before its on_activate (a base snapshot is after it).
func (e *wasmEntity) baseInstance(ctx context.Context) (*wasmInstance, error) {
	r := e.rec
	if r.base != nil {
		return e.mod.Restore(ctx, e.typ, e.id, r.base)
	}
	if r.baseState == nil {
		return e.mod.Instantiate(ctx, e.typ, e.id)
	}
	kind, payload, _, err := decodeState(r.baseState)
	if err != nil {
		return nil, err
	}
	if kind == stateGuest {
		return e.mod.RestoreGuest(ctx, e.typ, e.id, payload)
	}
	inst, _, err := e.n.restoreState(ctx, e.mod, e.typ, e.id, kind, payload)
	return inst, err
}
