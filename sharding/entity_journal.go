// The journal on an entity's mailbox: each handled message's record appended before
// anything the message caused leaves (an output gate), bases saved now and then, and
// an activation's replay of the records since its base. docs/design.md, "The journal".

package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardhost/shardhost/internal/obs"
	"go.opentelemetry.io/otel/trace"
)

// journalBaseEvery is how many records an entity's journal takes between two bases,
// unless the entity asks for one sooner (JournaledEntity.BaseDue), which it may after
// journalBaseMin records: an activation replays at most about journalBaseEvery
// messages, and a revert reaches back at least journalBaseMin.
const (
	journalBaseEvery = 1000
	journalBaseMin   = 100
)

// outcomeForwarded is the Outcome of a record of a message the entity passed on.
const outcomeForwarded = "forwarded"

// journals reports whether the entity's type journals its messages here: its policy
// is the journal and the state store keeps journals.
func (e *entity) journals() bool {
	return e.r.s.journal != nil && e.r.Settings().Checkpoint == CheckpointJournal
}

// saveEvery is after how many messages the entity saves a snapshot before its reply:
// the policy's number (checkpointEvery), and 1 for a journaling type whose store keeps
// no journals (what is acknowledged is still durable).
func (e *entity) saveEvery() int {
	policy := e.r.Settings().Checkpoint
	if policy == CheckpointJournal && e.r.s.journal == nil {
		return 1
	}
	every, _ := checkpointEvery(policy)
	return every
}

// journalMessage appends the record of the message Receive just handled (out and err
// its result, fwd where it passed the message on, if it did), then releases what the
// entity held back. It reports whether the message was journaled: not when the entity
// says it left its state as it was (a trap), nor a failed message of an entity that
// records nothing more than its messages. Errors: the append's (ErrStaleEpoch,
// ErrStoreUnavailable, ErrNoMajority, ...).
func (e *entity) journalMessage(ctx context.Context, d *delivery, out []byte, err error, fwd *ForwardTo) (bool, error) {
	s := e.r.s
	journal := err == nil
	var effects []byte
	je, _ := e.inst.(JournaledEntity)
	if je != nil {
		effects, journal = je.JournalEffects()
	}
	if !journal {
		return false, nil
	}
	sends, serr := e.takeSends()
	if serr != nil {
		return false, serr
	}
	if len(sends) > 0 {
		e.markOutbox(ctx) // before the record: a shard's next home finds the outbox
	}
	entry := JournalEntry{Seq: e.seq + 1, Time: s.cfg.Now(), Kind: d.env.Kind, Sender: d.env.Sender, Tag: d.env.Tag,
		Ask: d.ask && d.env.Acked == 0, Payload: d.env.Payload, Effects: effects, ReplyDigest: ReplyDigest(out),
		IdempotencyKey: d.env.IdempotencyKey, SenderSeq: d.env.SenderSeq, Sends: sends}
	if e.sendSeqMoved {
		entry.SendSeq = e.sendSeq
	}
	switch {
	case fwd != nil:
		entry.Outcome, entry.ReplyDigest = outcomeForwarded, 0
	case err != nil:
		entry.Outcome = ErrorCode(err)
	}
	if entry.IdempotencyKey != "" {
		entry.Reply = rememberedReply(out, err, fwd)
	} else if entry.SenderSeq != 0 {
		entry.Reply = markReply(*d, out, err)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		entry.TraceID = sc.TraceID()
	}
	if err := e.appendRecords(ctx, entry); err != nil {
		return false, err
	}
	if entry.IdempotencyKey != "" {
		e.remember(entry.IdempotencyKey, entry.Seq, entry.Time, entry.Outcome, entry.Reply)
	}
	if entry.SenderSeq != 0 {
		reply := entry.Reply
		if entry.IdempotencyKey != "" {
			reply = markReply(*d, out, err)
		}
		e.markSender(entry.Sender, entry.SenderSeq, entry.Payload, entry.Time, entry.Outcome, reply)
	}
	e.addSends(sends)
	if je != nil {
		je.ReleaseEffects(ctx)
	}
	return true, nil
}

// rememberedReply is what an idempotency key keeps of a message's outcome: its reply,
// an error's text, or a forward's target as "TYPE\x00ID".
func rememberedReply(out []byte, err error, fwd *ForwardTo) []byte {
	switch {
	case fwd != nil:
		return []byte(fwd.EntityType + "\x00" + fwd.EntityID)
	case err != nil:
		return []byte(err.Error())
	}
	return out
}

// rememberOutcome remembers key with a message's outcome, at record seq (0 when the
// message was not journaled).
func (e *entity) rememberOutcome(key string, seq uint64, out []byte, fwd *ForwardTo) {
	outcome := ""
	if fwd != nil {
		outcome = outcomeForwarded
	}
	e.remember(key, seq, e.r.s.cfg.Now(), outcome, rememberedReply(out, nil, fwd))
}

// remember remembers an idempotency key and its message's outcome and reply.
func (e *entity) remember(key string, seq uint64, at time.Time, outcome string, reply []byte) {
	e.keys.put(&idemEntry{key: key, seq: seq, at: at.UnixMilli(), outcome: outcome, reply: reply},
		e.r.s.cfg.Now(), e.r.Settings().IdempotencyRetention)
}

// answerRemembered answers a message whose idempotency key the entity remembers with
// the first message's outcome: its reply, its error (with its code), or the same
// forward (whose target, given the same key, answers with its own first reply).
func (e *entity) answerRemembered(d delivery, ke *idemEntry, done msgDone) {
	s := e.r.s
	switch ke.outcome {
	case "":
		done.finish(nil)
		if d.ask {
			d.answer(Reply{Payload: ke.reply, Node: s.self}, nil)
		}
	case outcomeForwarded:
		done.finish(nil)
		typ, id, _ := strings.Cut(string(ke.reply), "\x00")
		s.forward(d, &ForwardTo{EntityType: typ, EntityID: id})
	default:
		err := &RemoteError{Code: ke.outcome, Message: string(ke.reply), Node: s.self}
		done.finish(err)
		d.fail(err)
	}
}

// appendRecords appends the entries to the entity's journal under its shard's epoch,
// waiting no longer than the hosting lease lasts (as save does), and whatever the
// context of the message: a record that may or may not be in the store leaves the
// entity to stop. On success the entity's seq is the last entry's.
func (e *entity) appendRecords(ctx context.Context, entries ...JournalEntry) error {
	s := e.r.s
	left := s.leaseLeft()
	if left <= 0 {
		return ErrNoMajority
	}
	key := e.key()
	recs := make([]JournalRecord, len(entries))
	for k := range entries {
		recs[k] = JournalRecord{Seq: entries[k].Seq, Data: entries[k].Encode(key)}
	}
	actx, cancel := s.writeContext(ctx, min(s.cfg.RequestTimeout, left), left)
	defer cancel()
	epoch := e.currentEpoch()
	if err := s.journal.AppendJournal(actx, key, epoch, recs); err != nil {
		if errors.Is(err, ErrStaleEpoch) {
			e.fenced.Store(true)
			e.r.dropStale(e.shard, epoch+1)
		}
		return err
	}
	e.seq = entries[len(entries)-1].Seq
	return nil
}

// finishJournaled answers a journaled message (its record durable), saves a base when
// one is due, and passivates the entity if it asked to be.
func (e *entity) finishJournaled(ctx context.Context, d delivery, out []byte, done msgDone, lc EntityLifecycle, span trace.Span, passivateAsked bool) {
	s := e.r.s
	e.unsaved++
	if e.inst != nil && !s.hostingAllowed() {
		// The lease lapsed: the shard may move, so the instance goes, unsaved. The
		// record is durable, and its append was fenced: a new home fences the shard
		// before it reads, so it reads the record and the reply stands.
		e.stop(ctx, false)
	}
	done.finish(nil)
	if d.ask {
		d.answer(Reply{Payload: out, Node: s.self}, nil)
	}
	if e.inst == nil {
		return
	}
	if je, ok := e.inst.(JournaledEntity); e.seq-e.baseSeq >= journalBaseEvery || ok && e.seq-e.baseSeq >= journalBaseMin && je.BaseDue() {
		// After the reply: a base shortens the next activation's replay, the message
		// is durable without it.
		if err := e.save(context.WithoutCancel(ctx)); err != nil {
			s.log.WarnContext(ctx, "entity base not saved (its journal holds its messages)", "entity", e.name(), "err", err)
		} else {
			e.keepHistory(ctx, false)
		}
	}
	if lc != nil && (passivateAsked || lc.PassivationRequested()) {
		e.passivateNow(context.WithoutCancel(ctx), causeRequested, span.SpanContext())
	}
}

// baseAtStop reports whether a stop that saves (passivation, handoff, graceful stop)
// saves a base: always, but under the journal, which holds every message since the
// last base (the next activation replays them, at most journalBaseEvery), only when the
// entity's stop hook changed its state, which no record holds. So a passivated entity
// keeps its records since its last periodic base replayable, and revertible.
func (e *entity) baseAtStop(hooked bool) bool {
	return !e.journaled || hooked
}

// snapshot returns the entity's state to save: its Snapshot, as the base after its
// last journal record when the store keeps journals (so that an activation knows which
// records follow it); nil when it keeps none.
func (e *entity) snapshot(ctx context.Context) ([]byte, error) {
	state, err := e.inst.Snapshot(ctx)
	if err != nil || state == nil || e.r.s.journal == nil {
		return state, err
	}
	return EncodeBase(Base{Seq: e.seq, Keys: e.keys.encode(), State: state, History: e.histBase, HistoryAt: e.histAt,
		Delivery: e.encodeDelivery()}), nil
}

// based notes that the base after record e.seq is saved: without a history, the
// journal before it goes (with one, keepHistory decides).
func (e *entity) based(ctx context.Context) {
	e.baseSeq = e.seq
	e.ob.forgetAckedUpTo(e.sendSeq) // their records are behind the base
	if e.r.s.journal != nil && e.seq > 0 && (!e.journaled || !e.r.Settings().keepsHistory()) {
		e.truncate(ctx, e.seq+1)
	}
}

// keepHistory follows a base saved after the entity's last record (e.baseSeq ==
// e.seq) under a history: the journal keeps every record behind the base that the
// history asks for, from a copy of an earlier base that a revert starts from. When the
// last such copy (a KindBase record) is as far back as the history reaches (or force:
// after a time travel, whose state no replay makes), the base is copied to the
// journal as a new one, and, in the first case, the records before the previous copy
// go (under HistoryAll, none goes). So a journal holds at most about twice its
// history, and each of its records can be reverted to (historyAt). A copy that fails is tried again at the next base.
func (e *entity) keepHistory(ctx context.Context, force bool) {
	s := e.r.s
	st := e.r.Settings()
	if s.journal == nil || !e.journaled || !st.keepsHistory() || e.baseSeq != e.seq || e.inst == nil || e.fenced.Load() {
		return
	}
	now := s.cfg.Now()
	due := e.histBase == 0 || st.historyPassed(e.seq-e.histBase, now.Sub(time.UnixMilli(e.histAt)))
	if !due && !force {
		return
	}
	left := s.leaseLeft()
	if left <= 0 {
		return
	}
	lctx, cancel := context.WithTimeout(WithReadEpoch(context.WithoutCancel(ctx), e.currentEpoch()), min(s.cfg.RequestTimeout, left))
	defer cancel()
	// The state as the store holds it (with the delta records a store's decorator
	// keeps beside a base): a copy that needs nothing else.
	saved, err := s.cfg.States.Load(lctx, e.key())
	if err != nil {
		s.log.DebugContext(ctx, "no copy of the base for the history", "entity", e.name(), "err", err)
		return
	}
	prev := e.histBase
	entry := JournalEntry{Seq: e.seq + 1, Time: now, Kind: KindBase, Payload: saved}
	if err := e.appendRecords(lctx, entry); err != nil {
		if errors.Is(err, ErrStateTooLarge) && due {
			// A state over the store's cap of a record: reverts reach back to the base
			// alone, and the journal keeps the history's count of records (or the
			// default's) behind it for `shardhost history`.
			s.log.InfoContext(ctx, "the history keeps no copy of the entity's base: reverts reach back to its last base only",
				"entity", e.name(), "bytes", len(saved), "err", err)
			keep := uint64(DefaultHistory)
			if st.History > 0 {
				keep = uint64(st.History)
			}
			if e.seq+1 > keep && !st.KeepsAllHistory() {
				e.truncate(ctx, e.seq+1-keep)
			}
			return
		}
		s.log.DebugContext(ctx, "no copy of the base for the history", "entity", e.name(), "err", err)
		return
	}
	e.histBase, e.histAt = entry.Seq, entry.Time.UnixMilli()
	if prev != 0 && due && !st.KeepsAllHistory() {
		e.truncate(ctx, prev)
	}
}

// truncate deletes the entity's journal records before record before, as far as the
// hosting lease lets it; a truncation that fails is tried again at the next base.
func (e *entity) truncate(ctx context.Context, before uint64) {
	s := e.r.s
	left := s.leaseLeft()
	if left <= 0 {
		return
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.RequestTimeout, left))
	defer cancel()
	if err := s.journal.TruncateJournal(tctx, e.key(), e.currentEpoch(), before); err != nil {
		s.log.DebugContext(ctx, "journal not truncated", "entity", e.name(), "before", before, "err", err)
	}
}

// learnHistory notes the last KindBase record among entries, records an activation
// read after its base.
func (e *entity) learnHistory(entries []JournalEntry) {
	for k := len(entries) - 1; k >= 0; k-- {
		if entries[k].Kind == KindBase {
			e.histBase, e.histAt = entries[k].Seq, entries[k].Time.UnixMilli()
			return
		}
	}
}

// historyAt finds where a revert or a fork to record a.upTo, before the entity's base,
// starts: the latest copy of a base in the journal at or before it (a KindBase record
// after record a.upTo at the latest), or a new entity when the journal still holds its
// first record; it returns that base and the records from it to a.upTo. Errors:
// ErrNotInHistory (a.upTo before the history the journal keeps), the store's,
// ErrCorruptRecord.
func (e *entity) historyAt(ctx context.Context, epoch uint64, a *activation) (Base, []JournalEntry, error) {
	all, err := e.readJournal(ctx, epoch, 0, true, a.from)
	if err != nil {
		return Base{}, nil, err
	}
	start := -1 // the index of the copy a revert starts from; -1: none
	for k, en := range all {
		if en.Seq > a.upTo+1 {
			break
		}
		if en.Kind == KindBase {
			start = k
		}
	}
	var b Base
	var entries []JournalEntry
	switch {
	case start >= 0:
		if b, err = DecodeBase(all[start].Payload); err != nil {
			return Base{}, nil, err
		}
		b.Seq = all[start].Seq // the copy's own record: replay goes on after it
		entries = cutBetween(all[start+1:], a.upTo)
	case len(all) > 0 && all[0].Seq == 1:
		entries = cutBetween(all, a.upTo)
	}
	if start >= 0 || len(entries) > 0 {
		for _, en := range entries {
			if en.Kind == kindRevert || en.Kind == kindFork {
				// Its state is in the base saved then, which no copy here holds.
				return Base{}, nil, fmt.Errorf("%w: the %s of record %d lies between record %d and the journal's last copy of a base before it",
					ErrNotInHistory, en.Kind, en.Seq, a.upTo)
			}
		}
		return b, entries, nil
	}
	for _, en := range all {
		if en.Kind == KindBase {
			return Base{}, nil, fmt.Errorf("%w: record %d is before the oldest a revert reaches, %d: the type keeps %s of history (deploy --history)",
				ErrNotInHistory, a.upTo, en.Seq-1, e.r.Settings().historyLimit())
		}
	}
	return Base{}, nil, fmt.Errorf("%w: record %d is before the entity's last base, after record %d, and its journal holds no copy of an earlier base (the type keeps %s of history: deploy --history)",
		ErrNotInHistory, a.upTo, e.seq, e.r.Settings().historyLimit())
}

// cutBetween returns the entries up to record upTo.
func cutBetween(entries []JournalEntry, upTo uint64) []JournalEntry {
	n := 0
	for n < len(entries) && entries[n].Seq <= upTo {
		n++
	}
	return entries[:n]
}

// loadJournal reads the journal records that follow the base after record seq, and
// decodes them: what an activation replays. It tries again as loadState does.
// Errors: the store's, ErrCorruptRecord, and a gap in the records (ErrCorruptRecord).
func (e *entity) loadJournal(ctx context.Context, epoch, seq uint64, from *EntityKey) ([]JournalEntry, error) {
	return e.readJournal(ctx, epoch, seq, false, from)
}

// readJournal is loadJournal; with anyStart, the records read may begin after seq+1
// (the whole journal kept, read from seq 0, starts where it was truncated).
func (e *entity) readJournal(ctx context.Context, epoch, seq uint64, anyStart bool, from *EntityKey) ([]JournalEntry, error) {
	s := e.r.s
	key, rctx := e.key(), WithReadEpoch(ctx, epoch)
	if from != nil {
		key, rctx = *from, ctx // another entity's, in another shard: no read epoch of ours
	}
	var recs []JournalRecord
	var err error
	for attempt, pause := 0, 50*time.Millisecond; ; attempt, pause = attempt+1, pause*4 {
		lctx, cancel := context.WithTimeout(rctx, s.cfg.RequestTimeout)
		recs, err = s.journal.ReadJournal(lctx, key, seq+1, 0)
		cancel()
		if err == nil || errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrCorruptRecord) || attempt == 2 || ctx.Err() != nil {
			break
		}
		s.log.DebugContext(ctx, "entity journal not read yet", "entity", e.name(), "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
	}
	if err != nil {
		return nil, err
	}
	if anyStart && len(recs) > 0 {
		seq = recs[0].Seq - 1
	}
	entries := make([]JournalEntry, len(recs))
	for k, r := range recs {
		if r.Seq != seq+1+uint64(k) {
			return nil, fmt.Errorf("%w: %s: record %d follows %d", ErrCorruptRecord, e.name(), r.Seq, seq+uint64(k))
		}
		if entries[k], err = DecodeJournalEntry(key, r); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// replay brings the instance just made from its base to the state after entries: the
// entity's own Replay (JournaledEntity), or its messages handed to Receive again.
func (e *entity) replay(ctx context.Context, entries []JournalEntry) error {
	// The records of time travel and pausing are the entity's own, not messages (a
	// time travel's base holds its state): never replayed.
	entries = slices.DeleteFunc(slices.Clone(entries), func(en JournalEntry) bool { return isControlRecord(en.Kind) })
	if len(entries) == 0 {
		return nil
	}
	if je, ok := e.inst.(JournaledEntity); ok {
		if err := je.Replay(ctx, entries); err != nil {
			return fmt.Errorf("replay of records %d to %d: %w", entries[0].Seq, entries[len(entries)-1].Seq, err)
		}
		return nil
	}
	for _, en := range entries {
		if en.Outcome != "" && en.Outcome != outcomeForwarded {
			continue
		}
		mctx := withMessageInfo(ctx, MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask, Seq: en.Seq, Replay: true})
		if _, err := e.inst.Receive(mctx, en.Payload); err != nil && forwardOf(err) == nil {
			return fmt.Errorf("replay of record %d: %w", en.Seq, err)
		}
	}
	if lc, ok := e.inst.(EntityLifecycle); ok {
		lc.PassivationRequested() // a replayed message's request was carried out then
	}
	return nil
}

// sharedDeadline is a context with a deadline that store writes share
// (Sharding.writeContext).
type sharedDeadline struct {
	ctx      context.Context
	deadline time.Time
	// cancel is not called: the context's timer ends it at its deadline, since writes
	// still under way may share it until then.
	cancel context.CancelFunc
}

// writeContext returns the context of a store write made under ctx that must end
// within limit from now, and no later than left from now (what is left of the hosting
// lease), whatever ctx's cancellation, and the function to call once the write is done.
// Untraced, it is a context shared with other writes, made for an earlier one, while its
// deadline is within both bounds and at least limit/2 away; else a new one, which later
// writes share (a context.WithTimeout of each journal append was a timer and four
// allocations of every journaled message). In a traced ctx, the write's own (ctx's
// values without its cancellation), so that the store's span is the message's child.
func (s *Sharding) writeContext(ctx context.Context, limit, left time.Duration) (context.Context, context.CancelFunc) {
	if s.tel.traced && obs.Traced(ctx) {
		return context.WithTimeout(context.WithoutCancel(ctx), limit)
	}
	now := time.Now()
	if sd := s.writeCtx.Load(); sd != nil && !sd.deadline.After(now.Add(left)) && sd.deadline.Sub(now) >= limit/2 {
		return sd.ctx, noCancel
	}
	deadline := now.Add(limit)
	c, cancel := context.WithDeadline(context.Background(), deadline)
	s.writeCtx.Store(&sharedDeadline{ctx: c, deadline: deadline, cancel: cancel})
	return c, noCancel
}

// noCancel is the cancel function of a shared context: nothing to release.
func noCancel() {}
