package sharding

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shardhost/shardhost/internal/binread"
)

// Idempotency keys (Message.IdempotencyKey): an entity remembers, for its type's
// IdempotencyRetention, the key of each message it handled and the message's reply or
// error; a message with a key it remembers is answered from there without being
// handled again. Under the journal the memory is durable: each keyed message's record
// holds its key and reply, and each base the keys remembered then (Base.Keys), so an
// activation, after a crash or a handoff, remembers them as well.

// Bounds of an entity's remembered keys: past them the oldest are forgotten early.
const (
	maxIdempotencyKeys  = 10_000
	maxIdempotencyBytes = 4 << 20
)

// DefaultIdempotencyRetention is TypeSettings.IdempotencyRetention's default.
const DefaultIdempotencyRetention = 24 * time.Hour

// idemEntry is a remembered key: the message's sequence number in the journal (0 when
// not journaled), when it was handled, and its outcome ("" for success, an error's
// code, or outcomeForwarded) and reply.
type idemEntry struct {
	key     string
	seq     uint64
	at      int64 // Unix milliseconds
	outcome string
	reply   []byte
}

func (e *idemEntry) size() int { return len(e.key) + len(e.outcome) + len(e.reply) + 48 }

// idemTable is an entity's remembered keys, oldest first. It is used on the entity's
// mailbox goroutine.
//
// A reminder's firings (reminderIdempotencyKey) are remembered by the reminder's name:
// only the latest due handled of each name is kept, since a reminder is moved on to a
// later due only after its firing was handled, so no earlier due of that name is fired
// again but by a duplicate (a home that read the reminder before it moved on). A firing
// of a due at or before the latest one handled of its name is answered as that one.
// An interval reminder so costs one remembered key, not one a firing for the
// retention (a reminder a minute kept 1,440 a day).
type idemTable struct {
	byKey      map[string]*idemEntry
	byReminder map[string]*idemEntry // a reminder's name → the entry of its latest due
	order      []*idemEntry          // by at, oldest first; forgotten entries are nil
	head       int
	bytes      int
}

// get returns the entry of key if it is remembered and not older than retention; for
// a reminder's firing, the entry of its name's latest due if that is not earlier.
func (t *idemTable) get(key string, now time.Time, retention time.Duration) (*idemEntry, bool) {
	e, ok := t.byKey[key]
	if !ok {
		name, due, isReminder := parseReminderIdempotencyKey(key)
		if !isReminder {
			return nil, false
		}
		if e, ok = t.byReminder[name]; !ok {
			return nil, false
		}
		if _, latest, _ := parseReminderIdempotencyKey(e.key); latest < due {
			return nil, false
		}
	}
	if now.UnixMilli()-e.at > retention.Milliseconds() {
		return nil, false
	}
	return e, true
}

// put remembers e (replacing an entry of its key, and for a reminder's firing the
// entry of an earlier due of its name), then forgets what is older than retention and,
// past the bounds, the oldest.
func (t *idemTable) put(e *idemEntry, now time.Time, retention time.Duration) {
	if t.byKey == nil {
		t.byKey = map[string]*idemEntry{}
	}
	if old, ok := t.byKey[e.key]; ok {
		t.forget(old)
	}
	if name, due, ok := parseReminderIdempotencyKey(e.key); ok {
		if old, ok := t.byReminder[name]; ok {
			if _, oldDue, _ := parseReminderIdempotencyKey(old.key); oldDue > due {
				return // a later due of the name is remembered already
			}
			t.forget(old)
		}
		if t.byReminder == nil {
			t.byReminder = map[string]*idemEntry{}
		}
		t.byReminder[name] = e
	}
	t.byKey[e.key] = e
	t.order = append(t.order, e)
	t.bytes += e.size()
	t.expire(now, retention)
}

// forget drops e from the table (its place in order is left nil).
func (t *idemTable) forget(e *idemEntry) {
	t.unindex(e)
	t.bytes -= e.size()
	for k := t.head; k < len(t.order); k++ {
		if t.order[k] == e {
			t.order[k] = nil
			return
		}
	}
}

// unindex drops e from byKey and, a reminder's firing, from byReminder.
func (t *idemTable) unindex(e *idemEntry) {
	delete(t.byKey, e.key)
	if name, _, ok := parseReminderIdempotencyKey(e.key); ok && t.byReminder[name] == e {
		delete(t.byReminder, name)
	}
}

// expire forgets the entries older than retention, and the oldest while the table is
// over its bounds.
func (t *idemTable) expire(now time.Time, retention time.Duration) {
	limit := now.UnixMilli() - retention.Milliseconds()
	for t.head < len(t.order) {
		e := t.order[t.head]
		if e != nil && e.at >= limit && len(t.byKey) <= maxIdempotencyKeys && t.bytes <= maxIdempotencyBytes {
			break
		}
		if e != nil {
			t.unindex(e)
			t.bytes -= e.size()
		}
		t.order[t.head] = nil
		t.head++
	}
	if t.head > 64 && t.head > len(t.order)/2 {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
}

// encode returns the remembered keys as a base keeps them (Base.Keys): a count, then
// per entry its key, sequence number, time, outcome and reply, oldest first; nil for
// none.
func (t *idemTable) encode() []byte {
	if len(t.byKey) == 0 {
		return nil
	}
	b := binary.AppendUvarint(make([]byte, 0, t.bytes), uint64(len(t.byKey)))
	for _, e := range t.order[t.head:] {
		if e == nil {
			continue
		}
		b = appendString(b, e.key)
		b = binary.AppendUvarint(b, e.seq)
		b = binary.AppendVarint(b, e.at)
		b = appendString(b, e.outcome)
		b = binary.AppendUvarint(b, uint64(len(e.reply)))
		b = append(b, e.reply...)
	}
	return b
}

// decodeIdemTable reads what encode wrote, forgetting what is older than retention.
// Errors: ErrCorruptRecord.
func decodeIdemTable(b []byte, now time.Time, retention time.Duration) (idemTable, error) {
	var t idemTable
	if len(b) == 0 {
		return t, nil
	}
	r := binread.New(b)
	n := r.Uvarint()
	for k := uint64(0); k < n && r.Err() == nil; k++ {
		e := &idemEntry{key: string(r.Bytes(maxJournalString)), seq: r.Uvarint(), at: r.Varint(),
			outcome: string(r.Bytes(maxJournalString))}
		if reply := r.Bytes(maxJournalBytes); len(reply) > 0 {
			e.reply = append([]byte(nil), reply...)
		}
		if r.Err() == nil {
			t.put(e, now, retention)
		}
	}
	if err := r.Done(); err != nil {
		return idemTable{}, fmt.Errorf("%w: the idempotency keys of a base: %w", ErrCorruptRecord, err)
	}
	return t, nil
}
