// Time travel on the journal (docs/design.md, "The journal"): an entity reverted to
// the state it had after one of its records, and a new entity forked from another's
// state after one of its records. Both run on the entity's mailbox, after the messages
// before them, as a passivation asked from outside does.

package sharding

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/shardhost/shardhost/abi"
)

// Errors of time travel.
var (
	// ErrNotInHistory: the record named is not in the entity's journal: before the
	// history it keeps (TypeSettings.History), past its last record, or the type does
	// not journal its messages.
	ErrNotInHistory = errors.New("sharding: the record is not in the entity's journal")
	// ErrEntityExists: a fork onto an entity that has state, a journal or an instance.
	ErrEntityExists = errors.New("sharding: the entity exists")
)

// Kinds of the control messages of time travel; they never reach the entity.
const (
	kindRevert MessageKind = 4
	kindFork   MessageKind = 5
)

// Revert makes entity typ/id's state what it was after its journal record toSeq: its
// instance stops, a new one starts from the entity's last base (or an earlier one)
// with the records up to toSeq replayed, its state is saved as a new base, and a record of the revert follows
// the journal's last. Messages before it are handled first; those after it see the
// reverted state. What the reverted messages did outside the entity (tells, asks,
// distributed data) is not undone. It returns the revert's own record number.
// A record before the entity's base is reached from the journal's latest copy of an
// earlier base (a KindBase record) at or before it, or from the journal's first record.
// Errors: ErrNotInHistory (toSeq before the history the type keeps, past its journal's
// end, or 0; or a type without a journal), the errors of AskMessage and of the state store.
func (s *Sharding) Revert(ctx context.Context, typ, id string, toSeq uint64) (uint64, error) {
	if toSeq == 0 {
		return 0, fmt.Errorf("%w: record 0 (records count from 1)", ErrNotInHistory)
	}
	return s.revert(ctx, typ, id, binary.AppendUvarint(nil, toSeq))
}

// RevertMessages is Revert to the state before the entity's last n journal records.
func (s *Sharding) RevertMessages(ctx context.Context, typ, id string, n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("%w: 0 messages back", ErrNotInHistory)
	}
	return s.revert(ctx, typ, id, append(binary.AppendUvarint(nil, n), revertBack))
}

// revertBack, after a revert's number, makes it a count of records back from the last.
const revertBack = 'b'

func (s *Sharding) revert(ctx context.Context, typ, id string, payload []byte) (uint64, error) {
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindRevert, Payload: payload})
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(r.Payload), 10, 64)
}

// Fork starts entity typ/newID from entity typ/id's state after its journal record
// atSeq (0: its last): newID's first base holds that state, its journal a record of
// the fork. newID must not exist. Errors: ErrEntityExists, ErrNotInHistory, the errors
// of AskMessage and of the state store.
func (s *Sharding) Fork(ctx context.Context, typ, id, newID string, atSeq uint64) error {
	if id == "" || newID == "" {
		return ErrEmptyEntityID
	}
	if id == newID {
		return fmt.Errorf("%w: %s/%s onto itself", ErrEntityExists, typ, id)
	}
	payload := binary.AppendUvarint(nil, atSeq)
	_, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: newID, Kind: kindFork, Payload: append(payload, id...)})
	return err
}

// cutAt returns the entries of a journal read from the base after record base, up to
// record upTo. Errors: ErrNotInHistory when upTo is before the base or past the last.
func cutAt(entries []JournalEntry, base, upTo uint64) ([]JournalEntry, error) {
	if upTo < base {
		return nil, fmt.Errorf("%w: record %d is before the entity's last base, after record %d: the journal replays from there, no earlier", ErrNotInHistory, upTo, base)
	}
	last := base
	if n := len(entries); n > 0 {
		last = entries[n-1].Seq
	}
	if upTo > last {
		return nil, fmt.Errorf("%w: record %d is past the journal's last, %d", ErrNotInHistory, upTo, last)
	}
	return entries[:upTo-base], nil
}

// timeTravel handles a revert or a fork (process, before any activation).
func (e *entity) timeTravel(ctx context.Context, d delivery, done msgDone) {
	s := e.r.s
	fail := func(err error) {
		done.finish(err)
		d.fail(err)
	}
	if !e.journals() || s.cfg.States == nil {
		fail(fmt.Errorf("%w: type %s does not journal its messages (checkpoint %s)", ErrNotInHistory, e.r.settings.Name, e.r.Settings().Checkpoint))
		return
	}
	seq, n := binary.Uvarint(d.env.Payload)
	if n <= 0 {
		fail(fmt.Errorf("%w: a time travel message without its record", ErrMalformedMessage))
		return
	}
	a := &activation{upTo: seq}
	what := ""
	if d.env.Kind == kindRevert {
		what = "revert to record " + strconv.FormatUint(seq, 10)
		if rest := d.env.Payload[n:]; len(rest) == 1 && rest[0] == revertBack {
			a.upTo, a.back = 0, seq
			what = "revert of the last " + strconv.FormatUint(seq, 10) + " records"
		}
		if e.inst != nil {
			// Its state is in the journal: the instance goes without a base.
			e.release(ctx, true)
		}
	} else {
		source := string(d.env.Payload[n:])
		key := EntityKey{Type: e.r.settings.Name, Shard: abi.ShardID(source, e.r.settings.NumberOfShards), ID: source}
		a.from = &key
		what = "fork of " + e.r.settings.Name + "/" + source
		if seq > 0 {
			what += " at record " + strconv.FormatUint(seq, 10)
		}
		if err := e.mustNotExist(ctx); err != nil {
			fail(err)
			return
		}
	}
	if err := e.activateFrom(ctx, d.deadline, a); err != nil {
		fail(err)
		return
	}
	if a.from != nil {
		a.lastSeq = 0 // the fork's own journal starts here
	}
	// The new base holds the record of the time travel; the record follows it, so
	// that a crash between the two leaves the new state, its record missing at most.
	e.seq = a.lastSeq + 1
	if err := e.save(ctx); err != nil {
		e.stop(ctx, false)
		fail(wrapCause(ErrStateNotSaved, e.name(), err))
		return
	}
	entry := JournalEntry{Seq: e.seq, Time: s.cfg.Now(), Kind: d.env.Kind, Payload: []byte(what)}
	if err := e.appendRecords(ctx, entry); err != nil {
		s.log.WarnContext(ctx, "the record of a time travel was not appended (its base holds its state)", "entity", e.name(), "what", what, "err", err)
	} else {
		e.keepHistory(ctx, true) // a revert or a fork to come starts after this one
	}
	rec := entry.Seq
	s.log.InfoContext(ctx, "entity "+what, "entity", e.name(), "record", rec)
	done.finish(nil)
	if d.ask {
		d.answer(Reply{Payload: []byte(strconv.FormatUint(rec, 10)), Node: s.self}, nil)
	}
}

// mustNotExist fails with ErrEntityExists when the entity has an instance, state or a
// journal.
func (e *entity) mustNotExist(ctx context.Context) error {
	s := e.r.s
	if e.inst != nil {
		return fmt.Errorf("%w: %s is active", ErrEntityExists, e.name())
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	_, err := s.cfg.States.Load(lctx, e.key())
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s has saved state", ErrEntityExists, e.name())
	case !errors.Is(err, ErrNoState):
		return err
	}
	recs, err := s.journal.ReadJournal(lctx, e.key(), 1, 1)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		return fmt.Errorf("%w: %s has a journal", ErrEntityExists, e.name())
	}
	return nil
}
