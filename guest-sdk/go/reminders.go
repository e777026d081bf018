package shardhost

import (
	"encoding/binary"
	"time"
)

// Limits of durable reminders (abi.MaxReminderName and the others).
const (
	// MaxReminderName is the longest reminder name, in bytes.
	MaxReminderName = 128
	// MaxReminderPayload is the largest reminder payload, in bytes (64 KiB).
	MaxReminderPayload = 64 << 10
	// MaxReminders is the most reminders one entity may have.
	MaxReminders = 100
	// MinReminderInterval is the shortest interval of a repeating reminder.
	MinReminderInterval = time.Second
)

// Reminder is a durable reminder of the entity (SPEC.md, "v1: reminders").
type Reminder struct {
	Name string
	// Due is when it comes next; Interval, if positive, how often it comes again.
	Due      time.Time
	Interval time.Duration
	Payload  []byte
}

// SetReminder sets the durable reminder name: at due (in the past: at once) payload
// comes to this entity as a message of KindReminder whose Sender is name, even if the
// entity is passivated or its member died meanwhile; with interval > 0 it comes again
// every interval after due (missed intervals are skipped). Setting a name that is set
// replaces it. Delivery is at least once: a firing may come twice after a crash (under
// the journal the host drops the repeat), each with the same due time (ReminderDue).
// Errors (*HostError, CodeBadRequest): a name empty or over MaxReminderName bytes, an
// interval under MinReminderInterval, a payload over MaxReminderPayload, more than
// MaxReminders; CodeUnavailable when the state store cannot be reached.
func (c *Context) SetReminder(name string, due time.Time, interval time.Duration, payload []byte) error {
	code, res := c.h.reminderSet(name, due.UnixMilli(), interval.Milliseconds(), payload)
	return codeError(code, res)
}

// CancelReminder deletes the reminder name and reports whether the entity had it. A
// firing already under way may still come.
func (c *Context) CancelReminder(name string) (bool, error) {
	code, res := c.h.reminderCancel(name)
	if code == CodeNotFound {
		return false, nil
	}
	return code == CodeOK, codeError(code, res)
}

// Reminders returns the entity's reminders, by name.
func (c *Context) Reminders() ([]Reminder, error) {
	code, res := c.h.reminderList()
	if code != CodeOK {
		return nil, codeError(code, res)
	}
	return decodeReminders(res)
}

// ReminderDue returns the due time of the current KindReminder message (compare it
// with Now to learn how late it comes, after an outage say), and false for other
// messages.
func (c *Context) ReminderDue() (time.Time, bool) {
	if c.Kind() != KindReminder {
		return time.Time{}, false
	}
	ms := c.h.reminderDue()
	return time.UnixMilli(ms), ms != 0
}

// ScheduledDue returns the due time of the current message if it is a scheduled message
// (a KindMessage from outside, sent with a delivery time: shardhost tell --at/--in,
// POST /v1/tell with deliver_at), and false for other messages. Compare it with Now to
// learn how late it comes: after an outage it is delivered at once, with its original
// due time.
func (c *Context) ScheduledDue() (time.Time, bool) {
	if c.Kind() != KindMessage || c.Sender() != "" {
		return time.Time{}, false
	}
	ms := c.h.reminderDue()
	return time.UnixMilli(ms), ms != 0
}

// decodeReminders reads reminder_list's encoding: per reminder, little-endian, u32
// name length, name, i64 due ms, i64 interval ms, u32 payload length, payload.
func decodeReminders(b []byte) ([]Reminder, error) {
	var out []Reminder
	bad := &HostError{Code: CodeError, Text: "malformed reminder list from the host"}
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, bad
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n)+20 {
			return nil, bad
		}
		r := Reminder{Name: string(b[:n])}
		b = b[n:]
		r.Due = time.UnixMilli(int64(binary.LittleEndian.Uint64(b)))
		r.Interval = time.Duration(int64(binary.LittleEndian.Uint64(b[8:]))) * time.Millisecond
		p := binary.LittleEndian.Uint32(b[16:])
		b = b[20:]
		if uint64(len(b)) < uint64(p) {
			return nil, bad
		}
		r.Payload = append([]byte(nil), b[:p]...)
		b = b[p:]
		out = append(out, r)
	}
	return out, nil
}

// encodeReminders is decodeReminders' inverse (the Harness's reminder_list).
func encodeReminders(rs []Reminder) []byte {
	var b []byte
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Name)))
		b = append(b, r.Name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Due.UnixMilli()))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Interval.Milliseconds()))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Payload)))
		b = append(b, r.Payload...)
	}
	return b
}
