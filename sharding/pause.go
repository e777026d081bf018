// Pause on failure (docs/sharding.md, "Pause on failure"): a message no one waits for
// (a tell, a timer's, a change's) that fails the same way, a trap or the deadline,
// TypeSettings.MaxRetries times in a row, with backoff, parks its entity: it is
// paused, the message (the poison) kept at the head of its mailbox instead of becoming
// a dead letter. Tells keep queuing, up to the mailbox's size; asks are refused at once
// with ErrEntityPaused (safe to send again once the entity resumes). Resume retries the
// poison (after a fixed module is deployed, say); Skip drops it, a dead letter with
// reason "skipped". Under the journal the pause, the resume and the skip are records,
// so a paused entity is paused again wherever and whenever it is activated next.
//
// An operator may pause an entity too (Pause): it is paused as on a poison, but on no
// message (a hold); messages queue and are refused the same way. Resume (or Skip, which
// has nothing to drop) ends the hold, and what queued is handled in order.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of paused entities.
var (
	// ErrEntityPaused: the entity is paused on a message that kept failing: an ask,
	// or a tell beyond its mailbox, is refused. Nothing was handled: send it again
	// once the entity is resumed (Resume) or its poison skipped (Skip).
	ErrEntityPaused = errors.New("sharding: the entity is paused")
	// errHeld: the cause of an operator's pause (Pause).
	errHeld = errors.New("paused by an operator")
	// errSkipped: the poison of a paused entity was skipped (Skip): its dead letter.
	errSkipped = errors.New("sharding: a paused entity's failing message was skipped")
)

// CodeEntityPaused is ErrEntityPaused's code.
const CodeEntityPaused = "entity-paused"

// Kinds of the control records and messages of pausing; they never reach the entity.
const (
	kindPause  MessageKind = 6 // a record: the entity paused on the poison it holds
	kindResume MessageKind = 7 // a message and a record: resume the entity
	kindSkip   MessageKind = 8 // a message and a record: skip its poison
	// kindHold is an operator's pause (Pause): a message, and the kind of the poison
	// of a pause on no message (its kindPause record's Effects hold it).
	kindHold MessageKind = 18
)

// DefaultMaxRetries is TypeSettings.MaxRetries's default.
const DefaultMaxRetries = 3

// Backoff between the attempts of a failing message no one waits for.
const (
	retryBackoffMin = 100 * time.Millisecond
	retryBackoffMax = 5 * time.Second
)

// The replies of Resume and Skip.
const (
	ResumeDone      = "resumed"
	SkipDone        = "skipped"
	ResumeNotPaused = "not-paused"
	PauseDone       = "paused"
	PauseAlready    = "already-paused"
)

// Pause pauses entity typ/id at the operator's request, activating it if it is not
// active: once the messages ahead of the request are handled, asks are refused with
// ErrEntityPaused (code entity-paused) and tells queue up to the mailbox's size
// (Config.MailboxSize; beyond it they are refused the same way) until Resume or
// Skip. paused is false when it was already paused (on a poison or by an operator).
// Under the journal the pause is a record, so it lasts across passivations and
// handoffs; without it, it lasts as long as the entity's instance (a passivation ends
// it). Errors: those of AskMessage.
func (s *Sharding) Pause(ctx context.Context, typ, id string) (paused bool, err error) {
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindHold})
	if err != nil {
		return false, err
	}
	return string(r.Payload) == PauseDone, nil
}

// Resume resumes entity typ/id if it is paused: its poison is handled again first (with
// MaxRetries attempts again), then what queued behind it. resumed is false when it was
// not paused. Errors: those of AskMessage.
func (s *Sharding) Resume(ctx context.Context, typ, id string) (resumed bool, err error) {
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindResume})
	if err != nil {
		return false, err
	}
	return string(r.Payload) == ResumeDone, nil
}

// Skip drops the poison of entity typ/id if it is paused (a dead letter with reason
// "skipped"), and resumes it. skipped is false when it was not paused. Errors: those
// of AskMessage.
func (s *Sharding) Skip(ctx context.Context, typ, id string) (skipped bool, err error) {
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindSkip})
	if err != nil {
		return false, err
	}
	return string(r.Payload) == SkipDone, nil
}

// isPauseControl reports whether a message is Resume's, Skip's or Pause's: handled
// while the entity is paused.
func isPauseControl(k MessageKind) bool { return k == kindResume || k == kindSkip || k == kindHold }

// isControlRecord reports whether a journal record is the entity's own (a time
// travel's, a pause's), not a message: never replayed.
func isControlRecord(k MessageKind) bool {
	return k == kindRevert || k == kindFork || k == kindPause || k == kindResume || k == kindSkip || k == KindBase
}

// guestFailure reports whether err is a failure a retry may get past or that repeats:
// a trap, the deadline, the host call budget, or the rest its host gives an entity
// that keeps failing.
func guestFailure(err error) bool {
	switch ErrorCode(err) {
	case CodeGuestTrap, CodeGuestDeadline, CodeBackoff:
		return true
	}
	return false
}

// pauses reports whether a failed delivery counts towards a pause: a message no one
// waits for, of a type that pauses.
func (e *entity) pauses(d *delivery) bool {
	// An outbox's tell (Acked) is a tell: its sender waits only for it to count.
	return (!d.ask || d.env.Acked != 0) && !d.start && e.r.Settings().MaxRetries > 0
}

// EntityForgiver is implemented by an EntityFactory that rests entities which keep
// failing (the host's backoff): Forgive forgets an entity's failures, so that a resumed
// entity is tried at once. It may be called from any goroutine.
type EntityForgiver interface {
	Forgive(entityType, entityID string)
}

// retryOrPause handles a guest failure of d, a message no one waits for (pauses): it
// puts d back at the head of the mailbox after a backoff, or, at its MaxRetries-th
// failure in a row, pauses the entity with d as its poison. It reports whether it took
// d (the caller neither fails nor answers it).
func (e *entity) retryOrPause(ctx context.Context, d delivery, err error) bool {
	s := e.r.s
	e.failures++
	if e.failures < e.r.Settings().MaxRetries {
		wait := min(retryBackoffMin<<(e.failures-1), retryBackoffMax)
		s.log.DebugContext(ctx, "message failed; trying again", "entity", e.name(), "attempt", e.failures, "in", wait, "err", err)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.owner.Done():
			return false
		}
		e.requeue(d)
		return true
	}
	e.pause(ctx, d, err)
	return true
}

// requeue puts d back at the head of the mailbox.
func (e *entity) requeue(d delivery) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.head > 0 {
		e.head--
		e.queue[e.head] = d
		return
	}
	e.queue = append([]delivery{d}, e.queue...)
}

// pause parks the entity with d, which failed with err, as its poison: a record of it
// under the journal, the asks waiting failed, the pause logged and counted.
func (e *entity) pause(ctx context.Context, d delivery, err error) {
	s := e.r.s
	if e.journaled {
		entry := JournalEntry{Seq: e.seq + 1, Time: s.cfg.Now(), Kind: kindPause, Sender: d.env.Sender, Tag: d.env.Tag,
			Payload: d.env.Payload, Effects: []byte{byte(d.env.Kind)}, Outcome: ErrorCode(err),
			SenderSeq: d.env.SenderSeq} // not a mark (a control record): the poison's number, for a skip
		if aerr := e.appendRecords(ctx, entry); aerr != nil {
			s.log.WarnContext(ctx, "the record of a pause was not appended: the pause lasts while this instance does", "entity", e.name(), "err", aerr)
		}
	}
	e.setPaused(&d, err)
	s.log.WarnContext(ctx, "entity paused: a message failed "+fmt.Sprint(e.failures)+" times; resume or skip it (shardhost resume|skip)",
		"entity", e.name(), "err", err)
	e.failQueuedAsks()
}

// setPaused marks the entity paused on poison (nil: resumed), counting it.
func (e *entity) setPaused(poison *delivery, err error) {
	s := e.r.s
	if poison != nil {
		p := *poison
		p.reply, p.waiter, p.tell, p.teller, p.ask = nil, nil, nil, nil, false // its asker, if any, had its answer
		poison = &p
	}
	e.mu.Lock()
	was := e.poison != nil
	e.poison, e.poisonErr = poison, err
	e.mu.Unlock()
	switch {
	case poison != nil && !was:
		s.tel.paused.Add(context.Background(), 1, e.r.tel.typeOnly)
	case poison == nil && was:
		s.tel.paused.Add(context.Background(), -1, e.r.tel.typeOnly)
	}
}

// paused reports whether the entity is paused; e.mu is held.
func (e *entity) pausedLocked() bool { return e.poison != nil }

// failQueuedAsks fails the asks in the mailbox with ErrEntityPaused (nothing handled
// them); the tells stay, behind the poison.
func (e *entity) failQueuedAsks() {
	e.mu.Lock()
	var asks []delivery
	kept := e.queue[:e.head]
	for _, d := range e.queue[e.head:] {
		if d.ask && !isPauseControl(d.env.Kind) {
			asks = append(asks, d)
		} else {
			kept = append(kept, d)
		}
	}
	clear(e.queue[len(kept):])
	e.queue = kept
	e.mu.Unlock()
	for _, d := range asks {
		d.fail(e.pausedError())
	}
}

// pausedError is ErrEntityPaused with the entity and its poison's failure.
func (e *entity) pausedError() error {
	e.mu.Lock()
	cause := e.poisonErr
	e.mu.Unlock()
	if cause == nil {
		return fmt.Errorf("%w: %s", ErrEntityPaused, e.name())
	}
	return wrapCause(ErrEntityPaused, e.name()+" (resume or skip it)", cause)
}

// hold handles Pause's message (process): the entity pauses on no message.
func (e *entity) hold(ctx context.Context, d delivery, done msgDone) {
	s := e.r.s
	e.mu.Lock()
	was := e.poison != nil
	e.mu.Unlock()
	out := PauseAlready
	if !was {
		if e.journaled {
			entry := JournalEntry{Seq: e.seq + 1, Time: s.cfg.Now(), Kind: kindPause, Effects: []byte{byte(kindHold)}}
			if err := e.appendRecords(ctx, entry); err != nil {
				err = wrapCause(ErrStateNotSaved, e.name(), err)
				done.finish(err)
				d.fail(err)
				return
			}
		}
		e.setPaused(&delivery{ctx: context.Background(), env: envelope{EntityType: e.r.settings.Name, EntityID: e.id, Kind: kindHold}}, errHeld)
		s.log.InfoContext(ctx, "entity paused by an operator; resume it (shardhost resume)", "entity", e.name())
		e.failQueuedAsks()
		out = PauseDone
	}
	done.finish(nil)
	if d.ask {
		d.answer(Reply{Payload: []byte(out), Node: s.self}, nil)
	}
}

// resumeOrSkip handles Resume's, Skip's and Pause's message (process). A skip of an
// operator's pause drops nothing: it resumes.
func (e *entity) resumeOrSkip(ctx context.Context, d delivery, done msgDone) {
	if d.env.Kind == kindHold {
		e.hold(ctx, d, done)
		return
	}
	s := e.r.s
	e.mu.Lock()
	poison := e.poison
	e.mu.Unlock()
	out := ResumeNotPaused
	if poison != nil {
		if e.journaled {
			entry := JournalEntry{Seq: e.seq + 1, Time: s.cfg.Now(), Kind: d.env.Kind}
			if d.env.Kind == kindSkip && poison.env.SenderSeq != 0 {
				// A skipped numbered tell counts as handled: its sender's outbox,
				// which sends it again, is answered from the mark.
				entry.Sender, entry.SenderSeq, entry.Payload = poison.env.Sender, poison.env.SenderSeq, poison.env.Payload
			}
			if err := e.appendRecords(ctx, entry); err != nil {
				err = wrapCause(ErrStateNotSaved, e.name(), err)
				done.finish(err)
				d.fail(err)
				return
			}
		}
		e.failures = 0
		e.setPaused(nil, nil)
		if f, ok := s.cfg.Factory.(EntityForgiver); ok {
			f.Forgive(e.r.settings.Name, e.id)
		}
		switch {
		case poison.env.Kind == kindHold:
			out = ResumeDone
			if d.env.Kind == kindSkip {
				out = SkipDone
			}
			s.log.InfoContext(ctx, "entity resumed from an operator's pause", "entity", e.name())
		case d.env.Kind == kindResume:
			out = ResumeDone
			e.requeue(*poison)
			s.log.InfoContext(ctx, "entity resumed: its paused message is tried again", "entity", e.name())
		default:
			out = SkipDone
			e.markSender(poison.env.Sender, poison.env.SenderSeq, poison.env.Payload, s.cfg.Now(), "", nil)
			s.countDeadLetter(ctx, poison.env, errSkipped)
			s.log.InfoContext(ctx, "entity resumed: its paused message was skipped (a dead letter)", "entity", e.name())
		}
	}
	done.finish(nil)
	if d.ask {
		d.answer(Reply{Payload: []byte(out), Node: s.self}, nil)
	}
}

// unpauseAtStop ends a pause as the entity's instance stops: under the journal its
// record holds it (the next activation pauses again); otherwise the poison is lost, a
// dead letter with reason entity-paused, said in the log.
func (e *entity) unpauseAtStop(ctx context.Context) {
	e.mu.Lock()
	poison, cause := e.poison, e.poisonErr
	e.mu.Unlock()
	if poison == nil {
		return
	}
	if !e.journaled && poison.env.Kind == kindHold {
		e.r.s.log.InfoContext(ctx, "an entity paused by an operator stopped: without the journal, the pause ends with the instance", "entity", e.name())
	} else if !e.journaled {
		s := e.r.s
		s.log.WarnContext(ctx, "a paused entity stopped: the message it was paused on is dropped (without the journal, a pause lasts as long as the instance)",
			"entity", e.name(), "err", cause)
		s.countDeadLetter(ctx, poison.env, e.pausedError())
	}
	e.setPaused(nil, nil)
}

// pausedAfter returns the poison of the pause that the entries leave in force (a pause
// record not followed by a resume or a skip), or nil.
func pausedAfter(entries []JournalEntry, typ, id string) *delivery {
	var last *JournalEntry
	for k := range entries {
		switch entries[k].Kind {
		case kindPause:
			last = &entries[k]
		case kindResume, kindSkip:
			last = nil
		}
	}
	if last == nil {
		return nil
	}
	kind := KindMessage
	if len(last.Effects) == 1 {
		kind = MessageKind(last.Effects[0])
	}
	return &delivery{ctx: context.Background(), env: envelope{EntityType: typ, EntityID: id, Payload: last.Payload,
		Sender: last.Sender, Tag: last.Tag, Kind: kind, SenderSeq: last.SenderSeq}}
}
