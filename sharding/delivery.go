// Effectively-once messages between entities (docs/delivery.md). An entity of a type
// with DeliveryEffectivelyOnce whose messages are journaled numbers what it sends to
// other entities: its sender sequence, one counter per sending entity that only rises,
// kept with its journal (in each record that numbered a send, and in its base), so that
// it survives a crash and a handoff.
//
//   - Its tells leave from an outbox: the journal record of the message that made them
//     holds them (JournalEntry.Sends), and only once that record is durable does the
//     outbox send them, each as an ask whose empty reply acknowledges it (envelope.Acked),
//     again and again until acknowledged. An activation puts the sends of its base and of
//     the records it replays back in the outbox (but those this mailbox saw
//     acknowledged), so a crash of the sender's member after the record and before the
//     acknowledgment sends them again from the next activation; an outbox mark in the
//     store (outboxMarkPrefix) has the shard's new home make that activation at once.
//   - Its asks take the next number when made (the guest waits for the reply, so they
//     cannot wait for the record); a message that runs again after a crash asks again
//     under the same number, since the number it took was not durable.
//   - The receiver keeps, per sender, a high-water mark: the last number it handled from
//     it, the payload's digest and the outcome (and an ask's reply), in its own journal
//     records (JournalEntry.SenderSeq) and base. A message at or under the mark is a
//     repeat: answered from the mark (an ask at the mark gets the recorded reply), never
//     handled again. The outbox sends to one receiver in sequence order, one at a time,
//     and an ask waits until the outbox holds nothing for its receiver, so that a
//     receiver sees each sender's numbers rising and a mark is all it needs.

package sharding

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/internal/binread"
)

// Values of TypeSettings.Delivery.
const (
	// DeliveryEffectivelyOnce numbers an entity's sends, delivers its tells from an
	// outbox after its message's record is durable, retried until acknowledged, and
	// has receivers handle each numbered message once. It needs the journal
	// (CheckpointJournal); under the other policies sends are at most once.
	DeliveryEffectivelyOnce = "effectively-once"
	// DeliveryAtMostOnce sends a tell once, when the message's record is durable; a
	// crash before it is sent loses it.
	DeliveryAtMostOnce = "at-most-once"
)

// ErrRepeatForgotten: an ask repeats a message its receiver handled already, under a
// sender sequence below the sender's high-water mark, whose reply the receiver no
// longer keeps (it keeps the last one per sender). The message was handled once.
var ErrRepeatForgotten = errors.New("sharding: a repeat of a message handled already, whose reply is no longer kept")

// Bounds of an entity's sender marks and outbox.
const (
	// maxSenderMarks is how many senders an entity keeps a high-water mark of: past it,
	// the mark least recently moved is forgotten (a repeat from that sender is then
	// handled again).
	maxSenderMarks = 10_000
	// maxOutbox is how many unacknowledged sends an entity's outbox holds: a message
	// that would make more fails (ErrOutboxFull) and is not journaled.
	maxOutbox = 10_000
	// outboxRetryMin and outboxRetryMax bound the pause between two rounds of an outbox
	// whose sends were not acknowledged.
	outboxRetryMin = 50 * time.Millisecond
	outboxRetryMax = 5 * time.Second
)

// ErrOutboxFull: the entity's outbox holds maxOutbox unacknowledged sends; the message
// that would add more fails, unjournaled, and may be retried once the outbox drains.
var ErrOutboxFull = errors.New("sharding: the entity's outbox is full (its receivers do not acknowledge)")

// Send is a tell an entity's message made, as the message's journal record keeps it
// for the outbox: its sender sequence, its receiver, its payload and idempotency key.
type Send struct {
	Seq                  uint64
	EntityType, EntityID string
	Payload              []byte
	IdempotencyKey       string
}

// OutboxEntity is a JournaledEntity whose held tells sharding's outbox delivers when
// its type's delivery is DeliveryEffectivelyOnce. Called on the entity's mailbox
// goroutine, between Receive and JournalEffects.
type OutboxEntity interface {
	// TakeTells returns the tells the last message made and held back, in the order
	// made, and forgets them: ReleaseEffects then sends none of them.
	TakeTells() []Message
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func appendSends(b []byte, sends []Send) []byte {
	b = binary.AppendUvarint(b, uint64(len(sends)))
	for _, s := range sends {
		b = binary.AppendUvarint(b, s.Seq)
		b = appendString(b, s.EntityType)
		b = appendString(b, s.EntityID)
		b = binary.AppendUvarint(b, uint64(len(s.Payload)))
		b = append(b, s.Payload...)
		b = appendString(b, s.IdempotencyKey)
	}
	return b
}

func readSends(r *binread.Reader) []Send {
	n := r.Uvarint()
	if n > maxOutbox*4 {
		r.Fail("too many sends")
		return nil
	}
	sends := make([]Send, 0, min(n, 64))
	for k := uint64(0); k < n && r.Err() == nil; k++ {
		s := Send{Seq: r.Uvarint(), EntityType: string(r.Bytes(maxJournalString)), EntityID: string(r.Bytes(maxJournalString))}
		if p := r.Bytes(maxJournalBytes); len(p) > 0 {
			s.Payload = append([]byte(nil), p...)
		}
		s.IdempotencyKey = string(r.Bytes(maxJournalString))
		sends = append(sends, s)
	}
	return sends
}

// senderMark is a receiver's high-water mark of one sender: the last sequence number
// it handled from it, that message's payload digest (ReplyDigest), its outcome ("" or
// an error code) and reply (an ask's, or an error's text), and when (Unix ms).
type senderMark struct {
	seq     uint64
	digest  uint32
	outcome string
	reply   []byte
	at      int64
}

// senderMarks are an entity's marks by sender ("type/id"), used on its mailbox
// goroutine.
type senderMarks map[string]*senderMark

// put moves the mark of sender, forgetting the oldest past maxSenderMarks.
func (ms *senderMarks) put(sender string, m *senderMark) {
	if *ms == nil {
		*ms = senderMarks{}
	}
	(*ms)[sender] = m
	if len(*ms) > maxSenderMarks {
		oldest, at := "", int64(0)
		for s, x := range *ms {
			if oldest == "" || x.at < at {
				oldest, at = s, x.at
			}
		}
		delete(*ms, oldest)
	}
}

// repeat returns the mark of d's sender if d repeats a message handled already: a
// sender sequence under the mark, or at it with the same payload. At the mark with
// another payload, the sender lost the message it numbered so (its member crashed
// before its record) and numbered another: that one is handled.
func (ms senderMarks) repeat(d *delivery) (*senderMark, bool) {
	if d.env.SenderSeq == 0 || d.env.Sender == "" {
		return nil, false
	}
	m := ms[d.env.Sender]
	if m == nil || d.env.SenderSeq > m.seq {
		return nil, false
	}
	if d.env.SenderSeq == m.seq && m.digest != ReplyDigest(d.env.Payload) {
		return nil, false
	}
	return m, true
}

// answerRepeat answers a repeated message from its sender's mark, handling nothing: an
// acknowledged tell is acknowledged, an ask at the mark gets the recorded reply or
// error, one under it ErrRepeatForgotten.
func (e *entity) answerRepeat(d delivery, m *senderMark, done msgDone) {
	s := e.r.s
	e.r.s.tel.repeats.Add(context.Background(), 1, e.r.tel.typeOnly)
	switch {
	case !d.ask:
		done.finish(nil)
	case d.env.Acked != 0:
		done.finish(nil)
		d.answer(Reply{Node: s.self}, nil)
	case d.env.SenderSeq < m.seq:
		err := fmt.Errorf("%w: %s #%d (the last handled is #%d)", ErrRepeatForgotten, d.env.Sender, d.env.SenderSeq, m.seq)
		done.finish(nil)
		d.fail(err)
	case m.outcome == outcomeForwarded:
		// Its reply came from the entity it was passed on to, and is not kept.
		err := fmt.Errorf("%w: %s #%d was passed on to another entity", ErrRepeatForgotten, d.env.Sender, d.env.SenderSeq)
		done.finish(nil)
		d.fail(err)
	case m.outcome == "":
		done.finish(nil)
		d.answer(Reply{Payload: m.reply, Node: s.self}, nil)
	default:
		err := &RemoteError{Code: m.outcome, Message: string(m.reply), Node: s.self}
		done.finish(err)
		d.fail(err)
	}
}

// markSender moves the mark of the sender of a message handled with sender sequence
// seq (0: none) to it.
func (e *entity) markSender(sender string, seq uint64, payload []byte, at time.Time, outcome string, reply []byte) {
	if seq == 0 || sender == "" {
		return
	}
	if m := e.marks[sender]; m != nil && m.seq > seq {
		return
	}
	e.marks.put(sender, &senderMark{seq: seq, digest: ReplyDigest(payload), outcome: outcome, reply: reply, at: at.UnixMilli()})
}

// sendsOnce reports whether the entity numbers its sends: its type's delivery is
// effectively-once and its messages are journaled.
func (e *entity) sendsOnce() bool {
	return e.journaled && e.r.Settings().Delivery != DeliveryAtMostOnce
}

// senderEntityKey is the context key of the entity whose Receive runs (WithSender).
type senderEntityKey struct{}

// WithSender returns dst carrying the sending entity of src, a context an entity's
// Receive was given (or one made from it): an ask made with it by that entity takes
// the entity's next sender sequence. Without one in src, dst unchanged.
func WithSender(dst, src context.Context) context.Context {
	if src == nil {
		return dst
	}
	if e, ok := src.Value(senderEntityKey{}).(*entity); ok {
		return context.WithValue(dst, senderEntityKey{}, e)
	}
	return dst
}

// numberAsk gives m, an ask its entity makes during a message, the entity's next
// sender sequence when its sends are numbered, after waiting until the entity's outbox
// holds nothing for m's receiver (so that the ask does not overtake a tell). Errors:
// ctx's, when the outbox does not drain in time (ErrAskTimeout).
func numberAsk(ctx context.Context, m *Message) error {
	e, ok := ctx.Value(senderEntityKey{}).(*entity)
	if !ok || m.SenderSeq != 0 || m.Kind != KindMessage || m.Sender != e.name() || !e.sendsOnce() {
		return nil
	}
	if err := e.ob.waitDrained(ctx, m.EntityType, m.EntityID); err != nil {
		return fmt.Errorf("%w: %s/%s: the sender's earlier tells to it are not acknowledged yet: %w", ErrAskTimeout, m.EntityType, m.EntityID, err)
	}
	e.sendSeq++
	e.sendSeqMoved = true
	m.SenderSeq = e.sendSeq
	return nil
}

// takeSends numbers the tells the entity's last message held (OutboxEntity), for its
// record. Errors: ErrOutboxFull.
func (e *entity) takeSends() ([]Send, error) {
	oe, ok := e.inst.(OutboxEntity)
	if !ok || !e.sendsOnce() {
		return nil, nil
	}
	tells := oe.TakeTells()
	if len(tells) == 0 {
		return nil, nil
	}
	if n := e.ob.len(); n+len(tells) > maxOutbox {
		return nil, fmt.Errorf("%w: %d unacknowledged, %d more", ErrOutboxFull, n, len(tells))
	}
	sends := make([]Send, len(tells))
	for k, m := range tells {
		e.sendSeq++
		sends[k] = Send{Seq: e.sendSeq, EntityType: m.EntityType, EntityID: m.EntityID, Payload: m.Payload, IdempotencyKey: m.IdempotencyKey}
	}
	e.sendSeqMoved = true
	return sends, nil
}

// outbox is an entity's unacknowledged sends, in sequence order, and the goroutine
// that delivers them. It outlives the entity's instance: a passivated entity's outbox
// goes on until it drains, or its shard leaves this member (the next activation, on
// any member, sends it again from the journal).
type outbox struct {
	mu      sync.Mutex
	pending []Send
	running bool
	// changed is closed, and replaced, whenever a send is acknowledged.
	changed chan struct{}
	// acked are the sends acknowledged since this mailbox was made (at most maxAcked,
	// the oldest forgotten first; those of records before the last base dropped): an
	// activation here does not put them back (learnDelivery). A send forgotten is sent
	// again, and its receiver answers it as a repeat.
	acked     map[ackedSend]struct{}
	ackedFIFO []ackedSend
	// dirty: the outbox held sends since the entity's mark was last cleared (or its
	// shard's home found the mark), so the store may hold a mark to clear once it
	// drains.
	dirty bool

	// markMu serialises the writes of the entity's outbox mark (markOutbox,
	// clearOutboxMark); marked (under it): this mailbox wrote the mark and has not
	// cleared it.
	markMu sync.Mutex
	marked bool
}

// ackedSend names an acknowledged send: its sequence number, receiver and payload (a
// hash): after a revert, a send of the same number to another receiver or with another
// payload is another send.
type ackedSend struct {
	seq     uint64
	typ, id string
	digest  uint64
}

// maxAcked bounds what an outbox remembers of acknowledged sends.
const maxAcked = maxOutbox

func ackedOf(sd Send) ackedSend {
	h := fnv.New64a()
	h.Write(sd.Payload)
	return ackedSend{seq: sd.Seq, typ: sd.EntityType, id: sd.EntityID, digest: h.Sum64()}
}

// ackLocked remembers sd acknowledged; o.mu is held.
func (o *outbox) ackLocked(sd Send) {
	if o.acked == nil {
		o.acked = map[ackedSend]struct{}{}
	}
	k := ackedOf(sd)
	if _, ok := o.acked[k]; ok {
		return
	}
	o.acked[k] = struct{}{}
	o.ackedFIFO = append(o.ackedFIFO, k)
	if len(o.ackedFIFO) > maxAcked {
		delete(o.acked, o.ackedFIFO[0])
		o.ackedFIFO = o.ackedFIFO[1:]
	}
}

// forgetAckedUpTo forgets the acknowledged sends numbered up to seq: the records that
// held them are behind a base now, whose pending sends are the unacknowledged ones.
func (o *outbox) forgetAckedUpTo(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ackedFIFO = slices.DeleteFunc(o.ackedFIFO, func(k ackedSend) bool {
		if k.seq <= seq {
			delete(o.acked, k)
			return true
		}
		return false
	})
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// snapshot returns a copy of the pending sends.
func (o *outbox) snapshot() []Send {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Send(nil), o.pending...)
}

// waitDrained waits until no pending send goes to typ/id. Errors: ctx's.
func (o *outbox) waitDrained(ctx context.Context, typ, id string) error {
	for {
		o.mu.Lock()
		busy := false
		for _, s := range o.pending {
			if s.EntityType == typ && s.EntityID == id {
				busy = true
				break
			}
		}
		if !busy {
			o.mu.Unlock()
			return nil
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// addSends appends sends (numbered above the pending ones, or repeats of them, which are
// skipped) and starts the entity's outbox goroutine if it is not running.
func (e *entity) addSends(sends []Send) {
	o := e.ob
	o.mu.Lock()
	for _, s := range sends {
		if n := len(o.pending); n > 0 && s.Seq <= o.pending[n-1].Seq {
			continue
		}
		o.pending = append(o.pending, s)
	}
	if len(o.pending) > 0 {
		o.dirty = true
	}
	start := !o.running && len(o.pending) > 0
	if start {
		o.running = true
	}
	o.mu.Unlock()
	if start && !e.r.s.owner.Go(e.runOutbox) {
		o.mu.Lock()
		o.running = false
		o.mu.Unlock()
	}
}

// runOutbox delivers the entity's pending sends until none is left, the sharding
// stops, or the entity's shard leaves this member (or moves to a newer epoch here):
// each round sends the first pending send of every receiver, concurrently, and drops
// those acknowledged; a round that leaves some pauses, longer each time.
func (e *entity) runOutbox() {
	s, o := e.r.s, e.ob
	epoch := e.currentEpoch()
	pause := outboxRetryMin
	for {
		hosted := e.stillHosted(epoch)
		o.mu.Lock()
		if len(o.pending) == 0 || s.owner.Closed() || !hosted {
			drained := len(o.pending) == 0
			if !drained {
				s.log.Debug("outbox left to the entity's next activation", "entity", e.name(), "sends", len(o.pending))
			}
			o.running = false
			o.mu.Unlock()
			if drained && hosted && !e.active() {
				e.clearOutboxMark() // drained after the entity's passivation
			}
			return
		}
		heads := map[[2]string]Send{}
		var order []Send
		for _, sd := range o.pending {
			k := [2]string{sd.EntityType, sd.EntityID}
			if _, ok := heads[k]; !ok {
				heads[k] = sd
				order = append(order, sd)
			}
		}
		o.mu.Unlock()
		acked := make([]bool, len(order))
		var wg sync.WaitGroup
		for k, sd := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acked[k] = e.deliverSend(sd)
			}()
		}
		wg.Wait()
		all := true
		o.mu.Lock()
		for k, sd := range order {
			if !acked[k] {
				all = false
				continue
			}
			for i, p := range o.pending {
				if p.Seq == sd.Seq {
					o.pending = append(o.pending[:i], o.pending[i+1:]...)
					break
				}
			}
			o.ackLocked(sd)
		}
		if o.changed != nil {
			close(o.changed)
			o.changed = nil
		}
		o.mu.Unlock()
		if all {
			pause = outboxRetryMin
			continue
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-s.owner.Done():
			t.Stop()
		}
		pause = min(pause*2, outboxRetryMax)
	}
}

// stillHosted reports whether the entity's shard is hosted here at epoch still.
func (e *entity) stillHosted(epoch uint64) bool {
	if e.fenced.Load() {
		return false
	}
	r := e.r
	r.mu.Lock()
	defer r.mu.Unlock()
	sh := r.hostedLocked(e.shard)
	return sh != nil && sh.epoch == epoch
}

// deliverSend sends sd as an acknowledged tell and reports whether its receiver
// acknowledged it: it counted there (handled now or before), or the receiver's entity
// answered with an error or a trap, which count as delivered as a reminder's do. Other
// errors (unavailable, not saved, timed out) leave it pending.
func (e *entity) deliverSend(sd Send) bool {
	s := e.r.s
	ctx, cancel := context.WithTimeout(s.owner.Context(), s.cfg.AskTimeout)
	defer cancel()
	_, err := s.AskMessage(ctx, Message{EntityType: sd.EntityType, EntityID: sd.EntityID, Payload: sd.Payload,
		Sender: e.name(), Kind: KindMessage, IdempotencyKey: sd.IdempotencyKey, SenderSeq: sd.Seq, acked: true})
	switch {
	case err == nil:
		return true
	case handledError(err):
		s.log.Debug("outbox tell answered with an error: delivered", "entity", e.name(),
			"to", sd.EntityType+"/"+sd.EntityID, "seq", sd.Seq, "err", err)
		return true
	case errors.Is(err, ErrUnknownEntityType) || errors.Is(err, ErrEmptyEntityID):
		s.log.Warn("outbox tell to nowhere: dropped", "entity", e.name(), "to", sd.EntityType+"/"+sd.EntityID, "err", err)
		return true
	}
	s.log.Debug("outbox tell not acknowledged yet", "entity", e.name(), "to", sd.EntityType+"/"+sd.EntityID, "seq", sd.Seq, "err", err)
	return false
}

// Delivery state in a base (Base.Delivery): a version byte, the sender sequence, the
// pending sends, then the marks (sender, seq, digest, at, outcome, reply).
const deliveryStateVersion = 1

// encodeDelivery returns the entity's delivery state for its base; nil when it has
// none.
func (e *entity) encodeDelivery() []byte {
	pending := e.ob.snapshot()
	if e.sendSeq == 0 && len(pending) == 0 && len(e.marks) == 0 {
		return nil
	}
	b := []byte{deliveryStateVersion}
	b = binary.AppendUvarint(b, e.sendSeq)
	b = appendSends(b, pending)
	b = binary.AppendUvarint(b, uint64(len(e.marks)))
	for sender, m := range e.marks {
		b = appendString(b, sender)
		b = binary.AppendUvarint(b, m.seq)
		b = binary.LittleEndian.AppendUint32(b, m.digest)
		b = binary.AppendVarint(b, m.at)
		b = appendString(b, m.outcome)
		b = binary.AppendUvarint(b, uint64(len(m.reply)))
		b = append(b, m.reply...)
	}
	return b
}

// decodeDelivery reads what encodeDelivery wrote. Errors: ErrCorruptRecord.
func decodeDelivery(b []byte) (seq uint64, pending []Send, marks senderMarks, err error) {
	if len(b) == 0 {
		return 0, nil, nil, nil
	}
	if b[0] != deliveryStateVersion {
		return 0, nil, nil, fmt.Errorf("%w: delivery state of version %d", ErrCorruptRecord, b[0])
	}
	r := binread.New(b[1:])
	seq = r.Uvarint()
	pending = readSends(r)
	n := r.Uvarint()
	if n > maxSenderMarks*2 {
		r.Fail("too many sender marks")
	}
	for k := uint64(0); k < n && r.Err() == nil; k++ {
		sender := string(r.Bytes(maxJournalString))
		m := &senderMark{seq: r.Uvarint()}
		if d := r.Fixed(4); len(d) == 4 {
			m.digest = binary.LittleEndian.Uint32(d)
		}
		m.at = r.Varint()
		m.outcome = string(r.Bytes(maxJournalString))
		if reply := r.Bytes(maxJournalBytes); len(reply) > 0 {
			m.reply = append([]byte(nil), reply...)
		}
		if r.Err() == nil {
			marks.put(sender, m)
		}
	}
	if err := r.Done(); err != nil {
		return 0, nil, nil, fmt.Errorf("%w: the delivery state of a base: %w", ErrCorruptRecord, err)
	}
	return seq, pending, marks, nil
}

// learnDelivery takes a replayed record's delivery fields: its sender's mark, the
// entity's sender sequence, and its sends, back in the outbox.
func (e *entity) learnDelivery(en *JournalEntry) {
	if en.SenderSeq != 0 {
		e.markSender(en.Sender, en.SenderSeq, en.Payload, en.Time, en.Outcome, en.Reply)
	}
	e.sendSeq = max(e.sendSeq, en.SendSeq)
	for _, sd := range en.Sends {
		e.sendSeq = max(e.sendSeq, sd.Seq)
	}
	if len(en.Sends) > 0 {
		sends := make([]Send, len(en.Sends))
		for k, sd := range en.Sends {
			sends[k] = sd
			sends[k].Payload = append([]byte(nil), sd.Payload...)
		}
		e.ob.mu.Lock()
		for _, sd := range sends {
			if _, acked := e.ob.acked[ackedOf(sd)]; acked {
				continue // acknowledged since this mailbox was made: not sent again
			}
			if n := len(e.ob.pending); n == 0 || sd.Seq > e.ob.pending[n-1].Seq {
				e.ob.pending = append(e.ob.pending, sd)
			}
		}
		e.ob.mu.Unlock()
	}
}

// markReply is what a mark keeps of a message's outcome: an ask's reply (not an
// acknowledged tell's), or an error's text.
func markReply(d delivery, out []byte, err error) []byte {
	switch {
	case err != nil:
		return []byte(err.Error())
	case d.ask && d.env.Acked == 0:
		return out
	}
	return nil
}

// outboxMarkPrefix begins the remembered ID that marks an entity whose outbox holds
// unacknowledged tells (U+FFFE, which no entity ID holds, then "outbox:", then the
// entity's ID), among its shard's remembered IDs in the state store: a shard's new
// home (after a handoff, a crash or a restart) activates the entities its marks name,
// whose activation sends their outbox again (restartRemembered). An entity writes its mark
// before the record of its first tell since the mark was last cleared, and clears it
// once its outbox drained and it is not active (passivated, or stopped): so a mark
// may outlive its outbox (the entity was active when its member crashed), never the
// reverse, but for a mark that could not be written (logged; the outbox then waits for
// the entity's next activation, as it did without marks).
const outboxMarkPrefix = "\ufffeoutbox:"

// isOutboxMark reports whether a remembered ID is an outbox mark (outboxMarkPrefix).
func isOutboxMark(id string) bool { return strings.HasPrefix(id, outboxMarkPrefix) }

func (e *entity) outboxMarkKey() EntityKey {
	return EntityKey{Type: e.r.settings.Name, Shard: e.shard, ID: outboxMarkPrefix + e.id}
}

// markOutbox writes the entity's outbox mark unless this mailbox wrote it already:
// called before the record of a message with tells is appended. A failure is logged
// and leaves the outbox unmarked (its tells wait for the entity's next activation if
// its shard leaves before they are acknowledged).
func (e *entity) markOutbox(ctx context.Context) {
	s, o := e.r.s, e.ob
	o.markMu.Lock()
	defer o.markMu.Unlock()
	if o.marked || s.cfg.States == nil {
		return
	}
	left := s.leaseLeft()
	if left <= 0 {
		return
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.RequestTimeout, left))
	defer cancel()
	if err := s.cfg.States.Remember(mctx, e.outboxMarkKey(), e.currentEpoch(), true); err != nil {
		s.log.WarnContext(ctx, "outbox not marked: if the entity's shard leaves before its receivers acknowledge, its tells wait for its next activation",
			"entity", e.name(), "err", err)
		return
	}
	o.marked = true
	o.mu.Lock()
	o.dirty = true
	o.mu.Unlock()
}

// clearOutboxMark clears the entity's outbox mark, in the background, if its outbox
// held sends since the mark was last cleared and holds none now, and the entity is not
// active (whose next message could send more): called when the entity stops and when
// its outbox drains after.
func (e *entity) clearOutboxMark() {
	o := e.ob
	o.mu.Lock()
	dirty := o.dirty && len(o.pending) == 0
	o.mu.Unlock()
	if !dirty || e.r.s.cfg.States == nil || e.fenced.Load() {
		return
	}
	e.r.s.owner.Go(func() {
		s := e.r.s
		o.markMu.Lock()
		defer o.markMu.Unlock()
		o.mu.Lock()
		drained := o.dirty && len(o.pending) == 0
		o.mu.Unlock()
		if !drained || e.active() || e.fenced.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(s.owner.Context(), s.cfg.RequestTimeout)
		defer cancel()
		if err := s.cfg.States.Remember(ctx, e.outboxMarkKey(), e.currentEpoch(), false); err != nil {
			s.log.Debug("outbox mark not cleared (the entity's shard's next home activates it)", "entity", e.name(), "err", err)
			return
		}
		o.marked = false
		o.mu.Lock()
		if len(o.pending) == 0 {
			o.dirty = false
		}
		o.mu.Unlock()
	})
}

// busy reports whether the outbox's goroutine runs.
func (o *outbox) busy() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.running
}
