package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/sharding"
)

// Upgrading a transparent state by replay (docs/state.md, "Upgrading a transparent
// state"). A transparent state is its module's memory, which another module cannot
// read; but when the type's journals keep every record from each entity's first
// (--history all: sharding.HistoryAll), the entity's whole history is there. A new
// instance of the new module runs every journaled message again from the first, each
// host call answered from its record (as a trial replay does: replay.go), and must do
// what the record says the old module did: the same outcome, the same reply, and the
// same host functions in the same order. Then the new instance, with the state those
// messages built, replaces the old one; where a message differs, the entity stays on
// its old module, and the error says which record and how it differs (as Golem's
// automatic update checks a replay of its oplog).

// ErrReplayUpgrade: a transparent state cannot move to another module by replaying its
// journal: the type does not keep its whole journal, the journal no longer starts at
// the entity's first message or holds a time travel, or a message replayed on the new
// module did other than its record (ReplayDivergence).
var ErrReplayUpgrade = errors.New("host: the entity's journal does not replay on the new module")

// ReplayDivergence is where a replay of an entity's journal on a new module first did
// other than the journal records: Seq is the record, Message its index among the
// entity's messages (from 1), Payload a preview of the message, Differs how it
// differed (its outcome, its reply's digest, or where its host calls left the
// record's), and Reply a preview of what the new module answered (the record keeps
// only its reply's digest).
type ReplayDivergence struct {
	Seq     uint64
	Message int
	Payload string
	Differs []string
	Reply   string
}

func (d *ReplayDivergence) Error() string {
	return fmt.Sprintf("message %d (journal record %d, %q) differs: %s; the new module answered %q", d.Message, d.Seq, d.Payload,
		strings.Join(d.Differs, "; "), d.Reply)
}

func (d *ReplayDivergence) Unwrap() error { return ErrReplayUpgrade }

// maxReplayUpgradeRecords bounds the records a replay upgrade reads: past it, the
// entity is reported as too long a history to replay.
const maxReplayUpgradeRecords = 1_000_000

// wholeJournal reads entity typ/id's journal records from its first through upTo (0:
// through the last), for a replay from a new instance. Errors: ErrReplayUpgrade when
// the type does not keep every record, the journal does not start at record 1, holds a
// time travel, or is longer than maxReplayUpgradeRecords; the store's.
func (n *Node) wholeJournal(ctx context.Context, typ, id string, upTo uint64) ([]sharding.JournalEntry, error) {
	info, ok := n.catalog.get(typ)
	if !ok {
		return nil, n.unknownType(typ)
	}
	if !info.Settings().KeepsAllHistory() {
		return nil, fmt.Errorf("%w: %s keeps its state in a transparent snapshot of its module's memory, which another module cannot read, "+
			"and its type does not keep every journal record to replay on the new one (deploy --history all)", ErrReplayUpgrade, typ+"/"+id)
	}
	journal, ok := sharding.StateStoreAs[sharding.JournalStore](n.states)
	if !ok {
		return nil, fmt.Errorf("%w: the state store keeps no journals", ErrReplayUpgrade)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	var entries []sharding.JournalEntry
	for from := uint64(1); ; {
		recs, err := journal.ReadJournal(ctx, key, from, maxJournalPage)
		if err != nil {
			return nil, withCode(err)
		}
		for _, r := range recs {
			if upTo > 0 && r.Seq > upTo {
				return entries, nil
			}
			if r.Seq != from {
				if from == 1 {
					return nil, fmt.Errorf("%w: the journal of %s starts at record %d, not at its first message: it was truncated before the type kept every record",
						ErrReplayUpgrade, typ+"/"+id, r.Seq)
				}
				return nil, fmt.Errorf("%w: the journal of %s has record %d where record %d should be", ErrReplayUpgrade, typ+"/"+id, r.Seq, from)
			}
			en, err := sharding.DecodeJournalEntry(key, r)
			if err != nil {
				return nil, err
			}
			switch en.Kind {
			case sharding.KindMessage, sharding.KindTimer, sharding.KindChanged, sharding.KindReminder:
				entries = append(entries, en)
			case sharding.KindBase: // a copy of a base, for reverts
			default:
				return nil, fmt.Errorf("%w: record %d of %s is a %s, whose state no message makes: a replay from its first message cannot go past it",
					ErrReplayUpgrade, en.Seq, typ+"/"+id, en.Kind)
			}
			from++
			if from > maxReplayUpgradeRecords {
				return nil, fmt.Errorf("%w: the journal of %s holds over %d records", ErrReplayUpgrade, typ+"/"+id, maxReplayUpgradeRecords)
			}
		}
		if len(recs) < maxJournalPage {
			if upTo > 0 && from <= upTo {
				return nil, fmt.Errorf("%w: the journal of %s ends at record %d, before record %d", ErrReplayUpgrade, typ+"/"+id, from-1, upTo)
			}
			return entries, nil
		}
	}
}

// replayedInstance returns a new instance of mod that ran entries (wholeJournal's)
// with their host calls answered from the records, checked against them; outside any
// entity (its svc is nil). Errors: *ReplayDivergence at the first message that
// differs (or fails), ErrReplayUpgrade for a record whose effects do not decode; the
// guest's, of its instantiation and on_activate.
func replayedInstance(ctx context.Context, mod *wasmModule, typ, id string, entries []sharding.JournalEntry) (*wasmInstance, error) {
	inst, err := mod.Instantiate(ctx, typ, id)
	if err != nil {
		return nil, err
	}
	if err := inst.Activate(ctx); err != nil {
		inst.Close(ctx)
		return nil, fmt.Errorf("on_activate of the new module: %w", err)
	}
	inst.trial = &trialCalls{}
	for k, en := range entries {
		calls, _, err := decodeEffects(en.Effects)
		if err != nil {
			inst.Close(ctx)
			return nil, fmt.Errorf("%w: record %d: %w", ErrReplayUpgrade, en.Seq, err)
		}
		info := sharding.MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask}
		res := inst.replayMessage(en.Payload, info, calls)
		if rec := compareReplay(en, res); len(rec.Differs) > 0 || inst.Closed() {
			inst.Close(ctx)
			d := &ReplayDivergence{Seq: en.Seq, Message: k + 1, Payload: rec.Payload, Differs: rec.Differs, Reply: rec.Reply}
			if len(d.Differs) == 0 {
				d.Differs = []string{fmt.Sprintf("the instance failed: %v", res.err)}
			}
			return nil, d
		}
	}
	inst.trial = nil
	return inst, nil
}

// trialReplayUpgrade replays entity typ/id's whole journal on the module digest, as
// the entity's move would, without touching the entity: nil when the replay matches
// the journal. Errors: those of wholeJournal and replayedInstance; the module's.
func (n *Node) trialReplayUpgrade(ctx context.Context, typ, id, digest string) error {
	info, _ := n.catalog.entry(typ)
	entries, err := n.wholeJournal(ctx, typ, id, 0)
	if err != nil {
		return err
	}
	mod, err := n.modules.get(ctx, digest, n.moduleSources(info))
	if err != nil {
		return err
	}
	inst, err := replayedInstance(ctx, mod, typ, id, entries)
	if err != nil {
		return err
	}
	inst.Close(ctx)
	return nil
}

// replayMovedInstance returns a new instance of mod with the entity's transparent
// state rebuilt by replaying its journal through record upTo (0: every record) on it
// (replayedInstance), bound to the entity. Errors: those of wholeJournal and
// replayedInstance.
func (e *wasmEntity) replayMovedInstance(ctx context.Context, mod *wasmModule, upTo uint64) (*wasmInstance, error) {
	entries, err := e.n.wholeJournal(ctx, e.typ, e.id, upTo)
	if err != nil {
		return nil, err
	}
	inst, err := replayedInstance(ctx, mod, e.typ, e.id, entries)
	if err != nil {
		return nil, err
	}
	inst.svc = e
	e.replayMoved = true
	return inst, nil
}
