// The write back of fired reminders (sharding.ReminderAdvancer): the records the due
// read read, kept until their firings are written back, and the write back of a shard's
// fired reminders in one replicated write.

package replstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/sharding"
)

// firedRecordsMax caps the reminder records a Store keeps from its due reads for the
// write backs of their firings (firedRecords); past it, a write back reads its record.
const firedRecordsMax = 1 << 16

// firedKey names an entity's reminder record: its type, shard and ID (without
// sharding.ReminderIDPrefix).
type firedKey struct {
	typ   string
	shard int
	id    string
}

// firedRecord is an entity's reminders as a due read read them (the newest version of
// a majority, as LoadReminders reads it), at the shard's epoch of that read.
type firedRecord struct {
	epoch  uint64
	token  uint64 // of the due read that made it
	loaded bool   // rs holds what the read returned (until then, the read is under way)
	rs     []sharding.Reminder
}

// firedRecords keeps, for the write back of a firing (AdvanceReminders), the reminder
// record its due read read (DueReminders), so that the write back does not read it
// again. A record is kept only while this Store writes nothing to it: each of its
// writes of a reminder record (send) forgets the record as it starts and as it ends,
// and a due read keeps what it read only if no write forgot the record since the read
// started; the deletion of a type on this member (ForgetType) forgets the type's. The
// shard's home is its records' only writer at its epoch (the store is fenced: a newer
// owner's writes make the home's fail), and its writes of a record are serialised (the
// home's per-entity lock), so a kept record is the record's newest version until the
// home itself writes it. A record is dropped once its write back takes it, when the
// next due read of its entity replaces it, and all are dropped when a due read would
// keep more than firedRecordsMax.
type firedRecords struct {
	mu    sync.Mutex
	m     map[firedKey]*firedRecord
	token uint64
}

// begin notes that a due read at epoch starts reading the records of ids of typ/shard,
// and returns its token for keep.
func (f *firedRecords) begin(typ string, shard int, epoch uint64, ids []string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token++
	if len(f.m)+len(ids) > firedRecordsMax {
		// Those of reads whose firings never wrote back (the shard left, a delivery
		// failed): the map starts afresh, its records are read again when needed.
		clear(f.m)
	}
	for _, id := range ids {
		f.m[firedKey{typ, shard, id}] = &firedRecord{epoch: epoch, token: f.token}
	}
	return f.token
}

// keep keeps the records the due read of token read (rs[i] of ids[i]), those that no
// write forgot since the read began. They are copied (the payloads too): the read's
// caller owns what it returns.
func (f *firedRecords) keep(typ string, shard int, token uint64, ids []string, rs [][]sharding.Reminder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, id := range ids {
		r := f.m[firedKey{typ, shard, id}]
		if r == nil || r.token != token {
			continue
		}
		cp := slices.Clone(rs[i])
		for k := range cp {
			cp[k].Payload = slices.Clone(cp[k].Payload)
		}
		r.rs, r.loaded = cp, true
	}
}

// take returns and forgets the record of typ/shard/id kept at epoch, if any.
func (f *firedRecords) take(typ string, shard int, id string, epoch uint64) ([]sharding.Reminder, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := firedKey{typ, shard, id}
	r := f.m[k]
	if r == nil || !r.loaded || r.epoch != epoch {
		return nil, false
	}
	delete(f.m, k)
	return r.rs, true
}

// forget forgets the reminder records that req writes.
func (f *firedRecords) forget(req *stateWriteReq) {
	var locked bool
	for i := range req.Records {
		id, ok := strings.CutPrefix(req.Records[i].ID, sharding.ReminderIDPrefix)
		if !ok {
			continue
		}
		if !locked {
			f.mu.Lock()
			locked = true
		}
		delete(f.m, firedKey{req.Type, req.Shard, id})
	}
	if locked {
		f.mu.Unlock()
	}
}

// forgetType forgets the reminder records of typ (its deletion on this member: a write
// back must not bring a deleted record back).
func (f *firedRecords) forgetType(typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.m {
		if k.typ == typ {
			delete(f.m, k)
		}
	}
}

var _ sharding.ReminderAdvancer = (*Store)(nil)

// AdvanceReminders implements sharding.ReminderAdvancer: each fired reminder's entity's
// record is the one its due read read (DueReminders, at epoch, with nothing written to
// it from here since: firedRecords), or else read as LoadReminders reads it (at read
// epoch epoch); the records that change are written in one fenced write of the shard
// (each entity's record whole: an interval reminder's due moved, a one-shot deleted, and
// an entity left without reminders forgotten as SaveReminders forgets it), which the
// replicas' due indexes follow. Errors: sharding.ErrStaleEpoch,
// sharding.ErrStoreUnavailable (the write may have landed on some replicas, as Save's),
// sharding.ErrInvalidStateKey.
func (s *Store) AdvanceReminders(ctx context.Context, typ string, shard int, epoch uint64, fired []sharding.EntityReminder, now int64) (int64, error) {
	if err := sharding.CheckStateKey(typ, shard, "", false); err != nil {
		return 0, err
	}
	byID := map[string][]sharding.EntityReminder{}
	var ids []string
	for _, f := range fired {
		if err := sharding.CheckStateKey(typ, shard, f.ID, true); err != nil {
			return 0, err
		}
		if _, ok := byID[f.ID]; !ok {
			ids = append(ids, f.ID)
		}
		byID[f.ID] = append(byID[f.ID], f)
	}
	slices.Sort(ids)
	sets := make([][]sharding.Reminder, len(ids))
	var missing []string
	var at []int
	for i, id := range ids {
		rs, ok := s.fired.take(typ, shard, id, epoch)
		if !ok {
			missing = append(missing, id)
			at = append(at, i)
			continue
		}
		sets[i] = rs
	}
	if len(missing) > 0 {
		loaded, err := s.loadRemindersOf(sharding.WithReadEpoch(ctx, epoch), typ, shard, missing)
		if err != nil {
			return 0, err
		}
		for k, i := range at {
			sets[i] = loaded[k]
		}
	}
	var recs []stateRecord
	var next int64
	for i, id := range ids {
		rs, first, changed := advanceSet(sets[i], byID[id], now)
		if !changed {
			continue
		}
		if first != 0 && (next == 0 || first < next) {
			next = first
		}
		rid := sharding.ReminderIDPrefix + id
		if len(rs) == 0 {
			// As SaveReminders forgets an entity's last: forgotten, and the record empty.
			seq := s.nextSeq()
			recs = append(recs,
				stateRecord{Kind: stateKindRemember, ID: rid, Epoch: epoch, Seq: seq},
				stateRecord{Kind: stateKindSnapshot, ID: rid, Epoch: epoch, Seq: seq, Data: []byte{}})
			continue
		}
		data, err := sharding.EncodeReminderRecord(rs)
		if err != nil {
			return 0, err
		}
		recs = append(recs, stateRecord{Kind: stateKindSnapshot, ID: rid, Epoch: epoch, Seq: s.nextSeq(), Data: data})
	}
	for len(recs) > 0 {
		n := min(len(recs), stateMaxWriteRecords)
		if n < len(recs) && recs[n-1].Kind == stateKindRemember {
			n-- // a forget and its empty record go together
		}
		if err := s.write(ctx, typ, shard, epoch, recs[:n:n]); err != nil {
			return 0, fmt.Errorf("replstore: advance the reminders of %s/%d at epoch %d: %w", typ, shard, epoch, err)
		}
		recs = recs[n:]
	}
	return next, nil
}

// advanceSet moves an entity's fired reminders on in its set rs (sorted by name; it is
// changed in place): each whose due is still the one it fired at, an interval's to its
// first due after now, a one-shot's out. It returns the set, the earliest new due
// among those it moved (0: none) and whether any moved.
func advanceSet(rs []sharding.Reminder, fired []sharding.EntityReminder, now int64) (_ []sharding.Reminder, next int64, changed bool) {
	for _, f := range fired {
		i := slices.IndexFunc(rs, func(r sharding.Reminder) bool { return r.Name == f.Name })
		if i < 0 || rs[i].Due != f.Due {
			continue // cancelled or set anew meanwhile
		}
		changed = true
		if rs[i].Interval > 0 {
			rs[i].Due = sharding.NextDue(f.Due, rs[i].Interval, now)
			if next == 0 || rs[i].Due < next {
				next = rs[i].Due
			}
			continue
		}
		rs = slices.Delete(rs, i, i+1)
	}
	return rs, next, changed
}
