package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
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
	abi.ImportRandom, abi.ImportTellKey, abi.ImportAskKey, abi.ImportReminderSet, abi.ImportReminderCancel,
	abi.ImportReminderList,
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
	if e.extrasChanged {
		x := e.extras()
		extras = &x
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
		info := sharding.MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask}
		start := time.Now()
		if err := e.inst.replay(wasmbin.OpReceive, en.Payload, info, calls); err != nil {
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
