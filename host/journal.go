package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/binread"
	"github.com/shardhost/shardhost/sharding"
)

// A wasm entity under the journal (docs/design.md, "The journal"; sharding's
// JournaledEntity). A gated message (sharding.MessageInfo.Gated) runs with its host
// calls recorded, as in-memory recovery records them (recovery.go), and its outward
// effects held back: its tells wait in held, its timers are scheduled but not armed.
// Sharding appends the message's record, with the host calls' answers as its effects
// (JournalEffects), and once the record is durable ReleaseEffects sends the tells and
// arms the timers. An ask, a forward's target, a distributed data call and a
// subscription are not held: the guest waits for their answers (asks and distributed
// data), or they change nothing outside the entity (subscriptions); a forward leaves
// with the reply, after the record. A crash between an ask's send and the record
// repeats the ask when the message is retried.
//
// An activation replays the records after the entity's base (Replay) with the same
// machinery: each host call answered from its record, so the guest reaches the state
// it had, and nothing is sent again. The records' effects also carry the entity's
// timers and subscriptions whenever a message changed them, so that the replayed
// entity arms the timers and renews the subscriptions its last record had.

// journalEffectsVersion is the first byte of a record's effects.
const journalEffectsVersion = 1

// journalCallNames numbers the host functions whose calls a record keeps (index + 1);
// 0 means the name follows as a string. The order is part of the record's format:
// append, never reorder.
var journalCallNames = []string{
	abi.ImportTell, abi.ImportAsk, abi.ImportForward, abi.ImportDDataGet, abi.ImportDDataUpdate, abi.ImportDDataDelete,
	abi.ImportDDataSubscribe, abi.ImportDDataUnsubscribe, abi.ImportTimerStart, abi.ImportTimerCancel, abi.ImportNow,
	abi.ImportRandom, abi.ImportTellKey, abi.ImportAskKey, abi.ImportHTTPRequest, abi.ImportReminderSet,
	abi.ImportReminderCancel, abi.ImportReminderList,
}

var journalCallIndex = func() map[string]byte {
	m := make(map[string]byte, len(journalCallNames))
	for k, n := range journalCallNames {
		m[n] = byte(k + 1)
	}
	return m
}()

// Caps of a decoded record's effects: the host calls of one message (the call budget
// bounds them further) and the bytes of one answer.
const (
	maxJournalCalls      = 1 << 20
	maxJournalCallResult = 64 << 20
)

// errBadEffects: a record's effects do not decode.
var errBadEffects = errors.New("host: a journal record's effects do not decode")

// encodeEffects returns the effects of a record: the version, the host calls (name,
// what each left on the stack, in the result buffer and, for random, in memory), and,
// when extras is not nil, the entity's timers and subscriptions after the message.
func encodeEffects(calls []hostRecord, extras *entityExtras) ([]byte, error) {
	if len(calls) == 0 && extras == nil {
		return nil, nil
	}
	n := 2 + len(calls)*4
	for _, c := range calls {
		n += len(c.result) + len(c.mem) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, journalEffectsVersion)
	b = binary.AppendUvarint(b, uint64(len(calls)))
	for _, c := range calls {
		if k, ok := journalCallIndex[c.fn]; ok {
			b = append(b, k)
		} else {
			b = append(b, 0)
			b = binary.AppendUvarint(b, uint64(len(c.fn)))
			b = append(b, c.fn...)
		}
		b = binary.AppendUvarint(b, c.ret)
		b = binary.AppendUvarint(b, uint64(len(c.result)))
		b = append(b, c.result...)
		b = binary.AppendUvarint(b, uint64(len(c.mem)))
		b = append(b, c.mem...)
	}
	if extras == nil {
		return append(b, 0), nil
	}
	x, err := cbor.Marshal(extras)
	if err != nil {
		return nil, fmt.Errorf("host: encoding an entity's timers and subscriptions: %w", err)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(x)))
	return append(b, x...), nil
}

// decodeEffects decodes a record's effects: the host calls, and the extras when the
// record has them. Errors wrap errBadEffects.
func decodeEffects(b []byte) (calls []hostRecord, extras *entityExtras, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	if b[0] != journalEffectsVersion {
		return nil, nil, fmt.Errorf("%w: version %d", errBadEffects, b[0])
	}
	r := binread.New(b[1:])
	n := r.Uvarint()
	if n > maxJournalCalls {
		return nil, nil, fmt.Errorf("%w: %d host calls", errBadEffects, n)
	}
	calls = make([]hostRecord, 0, min(n, uint64(len(b))))
	for k := uint64(0); k < n && r.Err() == nil; k++ {
		var c hostRecord
		if i := r.Byte(); i == 0 {
			c.fn = string(r.Bytes(maxJournalCallResult))
		} else if int(i) <= len(journalCallNames) {
			c.fn = journalCallNames[i-1]
		} else {
			r.Fail("an unknown host function")
		}
		c.ret = r.Uvarint()
		if res := r.Bytes(maxJournalCallResult); len(res) > 0 {
			c.result = res
		}
		if mem := r.Bytes(maxJournalCallResult); len(mem) > 0 {
			c.mem = mem
		}
		calls = append(calls, c)
	}
	if r.Byte() == 1 {
		x := r.Bytes(maxJournalCallResult)
		if r.Err() == nil {
			extras = &entityExtras{}
			if err := cbor.Unmarshal(x, extras); err != nil {
				return nil, nil, fmt.Errorf("%w: timers and subscriptions: %w", errBadEffects, err)
			}
		}
	}
	if err := r.Done(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errBadEffects, err)
	}
	return calls, extras, nil
}

// heldTell is a tell a gated message made, sent by ReleaseEffects.
type heldTell struct {
	ctx context.Context // the guest call's (its span), without its cancellation and deadline
	m   sharding.Message
}

var _ sharding.JournaledEntity = (*wasmEntity)(nil)

// JournalEffects implements sharding.JournaledEntity: the answers of the last
// message's host calls, with the entity's timers and subscriptions when the message
// changed them; journal is false when the guest did not return (a trap, its deadline,
// its call budget: its state is as before the message).
func (e *wasmEntity) JournalEffects() ([]byte, bool) {
	if !e.lastReturned {
		return nil, false
	}
	var extras *entityExtras
	if e.extrasChanged || e.inst.m.Digest != e.journalModule {
		// The extras name the module (entityExtras.Module): a record made by another
		// module than the records before it says so.
		x := e.extras()
		extras = &x
		e.journalModule = x.Module
	}
	b, err := encodeEffects(e.lastCalls, extras)
	if err != nil {
		// Not expected (the extras are plain values); journaled without them, the
		// timers of a later activation are the base's.
		e.n.log.Warn("entity's timers not journaled", "entity", e.name(), "err", err)
		b, _ = encodeEffects(e.lastCalls, nil)
	}
	return b, true
}

var _ sharding.OutboxEntity = (*wasmEntity)(nil)

// TakeTells implements sharding.OutboxEntity: the held tells, which sharding's outbox
// then delivers (effectively once) instead of ReleaseEffects.
func (e *wasmEntity) TakeTells() []sharding.Message {
	if len(e.held) == 0 {
		return nil
	}
	tells := make([]sharding.Message, len(e.held))
	for k, h := range e.held {
		tells[k] = h.m
		e.held[k] = heldTell{}
	}
	e.held = e.held[:0]
	return tells
}

// ReleaseEffects implements sharding.JournaledEntity: the held tells leave, in the
// order the guest made them, and the held timers are armed. A tell that fails now is a
// dead letter of the sharding layer (logged), no longer the guest's error.
func (e *wasmEntity) ReleaseEffects(ctx context.Context) {
	for k, h := range e.held {
		if err := e.n.sharding.TellMessage(h.ctx, h.m); err != nil {
			e.n.log.Debug("tell not delivered", "entity", e.name(), "to", h.m.EntityType+"/"+h.m.EntityID, "err", err)
		}
		e.held[k] = heldTell{}
	}
	e.held = e.held[:0]
	for k, t := range e.heldTimers {
		if e.timers[t.name] == t && t.t == nil && !e.stopped.Load() {
			e.start(t)
		}
		e.heldTimers[k] = nil
	}
	e.heldTimers = e.heldTimers[:0]
	e.releaseReminders(ctx)
}

// Replay implements sharding.JournaledEntity: each record's message runs again with its
// host calls answered from the record (nothing is sent, nothing armed), and is added to
// the in-memory recovery record; then the timers and subscriptions of the last record
// that changed them replace the base's. Errors: a record whose effects do not decode
// (errBadEffects), a guest that traps or makes other host calls than the record holds
// (errReplayDiverged): the entity does not activate.
func (e *wasmEntity) Replay(ctx context.Context, entries []sharding.JournalEntry) error {
	var extras *entityExtras
	for _, en := range entries {
		calls, x, err := decodeEffects(en.Effects)
		if err != nil {
			return fmt.Errorf("record %d: %w", en.Seq, err)
		}
		if x != nil && x.Module != "" {
			if x.Module != e.inst.m.Digest {
				// Made by another module than the instance's: replayed on it.
				if err := e.switchModule(ctx, x.Module, en.Seq-1); err != nil {
					return fmt.Errorf("record %d: %w", en.Seq, err)
				}
			}
			e.journalModule = x.Module
		}
		e.fresh = false
		info := sharding.MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask}
		start := time.Now()
		if err := e.inst.replay(receiveOp(info), en.Payload, info, calls); err != nil {
			return fmt.Errorf("record %d: %w", en.Seq, err)
		}
		if e.inst.Closed() {
			return fmt.Errorf("record %d: %w", en.Seq, ErrInstanceClosed)
		}
		took := time.Since(start)
		e.sinceBaseCost += took
		if e.rec != nil {
			e.logMessage(en.Payload, info, calls, took)
		}
		if x != nil {
			extras = x
		}
	}
	if extras != nil {
		e.resetExtras(ctx, *extras)
	}
	return nil
}

// BaseDue implements sharding.JournaledEntity: the guest time of the messages since the
// last saved base is past recoveryReplayFactor snapshots.
func (e *wasmEntity) BaseDue() bool {
	if e.replayMoved {
		return true // the saved state is another module's (replayupgrade.go)
	}
	snap := time.Duration(0)
	if e.rec != nil {
		snap = e.rec.snapCost
	}
	if snap == 0 && e.inst != nil {
		snap = time.Duration(e.inst.MemorySize() / recoverySnapshotBytesPerNs)
	}
	return e.sinceBaseCost >= recoveryReplayFactor*max(snap, time.Microsecond)
}

// resetExtras replaces the entity's timers and subscriptions by x's.
func (e *wasmEntity) resetExtras(ctx context.Context, x entityExtras) {
	for name, t := range e.timers {
		if t.t != nil {
			t.t.Stop()
		}
		delete(e.timers, name)
	}
	now := time.Now()
	for _, t := range x.Timers {
		e.arm(&entityTimer{name: t.Name, msg: t.Message, interval: time.Duration(t.Interval)}, time.Unix(0, t.Due).Sub(now))
	}
	keep := map[string]bool{}
	for _, key := range x.Subscriptions {
		keep[key] = true
	}
	for key := range e.subs {
		if !keep[key] {
			e.unsubscribe(key)
		}
	}
	for _, key := range x.Subscriptions {
		if err := e.subscribe(ctx, key); err != nil {
			e.n.log.Warn("entity subscription not renewed", "entity", e.name(), "key", key, "err", err)
		}
	}
}

// Module versions. A record whose extras name a module (entityExtras.Module) was made
// by it, and so were the records after it until one names another; a base's extras name
// the module of the records after it. So an activation replays every record on the
// module that made it (switchModule), whatever was deployed since, and then an entity
// with explicit state moves to the type's module of its activation (moveTo), with its
// state, before its first message; one with transparent state keeps the module its
// state was made by. Records saved before modules were named are replayed on the
// module the entity activated on.

// switchModule puts the entity on the module digest before a record that module made
// (the records through upTo were made by others): a new instance of it when no message
// ran yet (the journal's first records), else the entity's explicit state moved to it,
// or a transparent one rebuilt on it by replaying the journal through upTo, when the
// type keeps all of it (replayupgrade.go: the module was given the state so before
// those records). Errors: the module is unavailable; the state cannot move
// (ErrNotSnapshottable, ErrReplayUpgrade); the guest's.
func (e *wasmEntity) switchModule(ctx context.Context, digest string, upTo uint64) error {
	info, _ := e.n.catalog.entry(e.typ)
	mod, err := e.n.modules.get(ctx, digest, e.n.moduleSources(info))
	if err != nil {
		return err
	}
	mod.CompileInBackground()
	var inst *wasmInstance
	switch {
	case e.fresh:
		if inst, err = mod.Instantiate(ctx, e.typ, e.id); err == nil {
			inst.svc = e
			if err = inst.Activate(ctx); err != nil {
				inst.Close(ctx)
			}
		}
	case e.ver.transparent:
		inst, err = e.replayMovedInstance(ctx, mod, upTo)
	default:
		inst, err = e.movedInstance(ctx, mod)
	}
	if err != nil {
		return err
	}
	e.replaceInstance(ctx, inst)
	return nil
}

// movedInstance returns a new instance of mod holding the entity's explicit state (its
// guest snapshot, restored). Errors: ErrNotSnapshottable for a transparent state; the
// guest's.
func (e *wasmEntity) movedInstance(ctx context.Context, mod *wasmModule) (*wasmInstance, error) {
	state, ok, err := e.inst.GuestSnapshot()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s keeps its state in a transparent snapshot, which belongs to module %.12s",
			ErrNotSnapshottable, e.name(), e.inst.m.Digest)
	}
	inst, err := mod.MigrateGuest(ctx, e.typ, e.id, e.n.versionOf(e.typ, e.inst.m.Digest), state)
	if err != nil {
		return nil, err
	}
	inst.svc = e
	return inst, nil
}

// versionOf returns the newest version number of the type typ whose module is digest;
// 0 when its history does not list it.
func (n *Node) versionOf(typ, digest string) uint64 {
	info, _ := n.catalog.entry(typ)
	for _, v := range info.Versions() {
		if v.Digest == digest {
			return v.Version
		}
	}
	return 0
}

// replaceInstance makes inst the entity's instance, in place of its current one.
func (e *wasmEntity) replaceInstance(ctx context.Context, inst *wasmInstance) {
	old := e.inst
	e.inst, e.mod = inst, inst.m
	if e.cp != nil {
		e.cp.stop() // its chain is the old instance's memory: the next checkpoint is a base
	}
	if old != nil {
		old.Close(ctx)
	}
	if e.rec != nil {
		// In-memory recovery starts from the new instance.
		start := time.Now()
		if snap, err := inst.Snapshot(); err == nil {
			e.setBase(snap, time.Since(start))
		} else {
			e.n.log.Warn("entity without in-memory recovery: its state cannot be snapshotted", "entity", e.name(), "err", err)
			e.rec = nil
		}
	}
	e.countAs(inst.m.Digest, e.ver.transparent)
}

// moveTo moves an entity to the type's module of its activation (target), once, before
// its first message: its explicit state, or a transparent one rebuilt by a replay of
// its journal when the type keeps all of it (replayupgrade.go). When that fails the
// entity goes on on its module, logged and counted there (versions.go), and moves at a
// later activation.
func (e *wasmEntity) moveTo(ctx context.Context) {
	target := e.target
	e.target = ""
	if e.inst == nil || e.inst.Closed() || e.inst.m.Digest == target {
		return
	}
	info, _ := e.n.catalog.entry(e.typ)
	if e.ver.transparent && !info.Settings().KeepsAllHistory() {
		return // its state belongs to its module (docs/state.md)
	}
	mod, err := e.n.modules.get(ctx, target, e.n.moduleSources(info))
	var inst *wasmInstance
	switch {
	case err != nil:
	case e.ver.transparent:
		inst, err = e.replayMovedInstance(ctx, mod, 0)
	default:
		inst, err = e.movedInstance(ctx, mod)
	}
	if err != nil {
		e.moveErr = err
		e.n.tel.upgrades.Add(context.Background(), 1, e.n.tel.attrs.Get([2]string{e.typ, "o:failed"}))
		e.n.log.Warn("entity not moved to its type's current module: it goes on on its own", "entity", e.name(),
			"module", e.inst.m.Digest[:12], "current", target[:min(12, len(target))], "err", err)
		return
	}
	e.moveErr = nil
	e.n.tel.upgrades.Add(context.Background(), 1, e.n.tel.attrs.Get([2]string{e.typ, "o:ok"}))
	from := e.inst.m.Digest
	e.replaceInstance(ctx, inst)
	e.n.log.Info("entity moved to its type's current module", "entity", e.name(), "from", from[:12], "to", target[:12])
}
