package shardhost

import (
	"math"
	"time"
)

// MessageKind is the kind of the message an entity receives (SPEC.md, "v1: messages").
type MessageKind int32

const (
	// KindMessage is a message from another entity (Sender is its "TYPE/ID") or from
	// outside the cluster's entities (Sender is empty).
	KindMessage MessageKind = 0
	// KindTimer is the message of a timer the entity started; Sender is its name.
	KindTimer MessageKind = 1
	// KindChanged is the new value, as JSON, of a distributed data key the entity
	// subscribed to; Sender is the key.
	KindChanged MessageKind = 2
	// KindReminder is the message of a durable reminder of the entity (SetReminder);
	// Sender is its name, and ReminderDue its due time.
	KindReminder MessageKind = 10
)

// String returns "message", "timer", "changed", "reminder" or "http".
func (k MessageKind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindTimer:
		return "timer"
	case KindChanged:
		return "changed"
	case KindReminder:
		return "reminder"
	case KindHTTP:
		return "http"
	}
	return "kind " + itoa(int64(k))
}

// Kind returns the kind of the current message. Outside Receive it is KindMessage.
func (c *Context) Kind() MessageKind {
	if c.phase != phaseReceive {
		return KindMessage
	}
	if !c.kindRead {
		c.kind, c.kindRead = c.h.messageKind(), true
	}
	return c.kind
}

// Sender returns the source of the current message: the sending entity as "TYPE/ID"
// (empty for a message from outside the cluster's entities) for KindMessage, the timer's
// name for KindTimer, the key for KindChanged. Outside Receive it is empty.
func (c *Context) Sender() string {
	if c.phase != phaseReceive {
		return ""
	}
	if !c.fromRead {
		c.from, c.fromRead = c.h.sender(), true
	}
	return c.from
}

// Tell sends msg to the entity typ/id without waiting for a reply; that entity sees this
// one as its Sender. A nil error means the message was routed from this member, not that
// it was delivered. Errors are *HostError: ErrUnavailable, ErrBadRequest (an empty ID,
// an oversize message), ErrNotAllowed (in Snapshot, Restore or OnPassivate).
func (c *Context) Tell(typ, id string, msg []byte) error {
	code, res := c.h.tell(typ, id, msg)
	return codeError(code, res)
}

// Ask sends msg to the entity typ/id and waits for its reply, at most timeout (0: the
// host's default ask timeout) and never past the current message's deadline. Meanwhile
// this entity is blocked: its messages queue.
//
// An error reply of the asked entity is a *HostError matching ErrEntityError whose Text
// is that entity's error text. An ask that would deadlock (the entity asks itself, or an
// entity that is, directly or through others, asking it) fails at once with
// ErrAskCycle; ErrTimeout, ErrUnavailable, ErrBadRequest and ErrNotAllowed as for Tell.
func (c *Context) Ask(typ, id string, msg []byte, timeout time.Duration) ([]byte, error) {
	code, res := c.h.ask(typ, id, msg, millis32(timeout))
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	return res, nil
}

// MaxIdempotencyKey is the longest idempotency key of TellWithKey and AskWithKey, in
// bytes (abi.MaxIdempotencyKey).
const MaxIdempotencyKey = 256

// TellWithKey is Tell with an idempotency key: the receiving entity handles the message
// once, however many times it is sent with that key, and drops a repeat. It remembers
// the key for its type's idempotency retention (24 h by default); under the journal (the
// default durability) across crashes and moves, otherwise as long as its instance lives.
// Keys belong to the receiver: the same key sent to two entities is two messages. Use a
// key that a retry of the send computes again (from the current message, say), so that
// a message this entity handles again after a crash does not send twice. The key is at
// most MaxIdempotencyKey bytes of UTF-8; an empty key is none. Errors: those of Tell, and
// ErrBadRequest for a key over the cap or not UTF-8 (nothing is sent).
//
// A module that calls TellWithKey or AskWithKey imports the host functions tell_key and
// ask_key (abi/SPEC.md, "Idempotency keys"); a host without them refuses it at deploy.
func (c *Context) TellWithKey(typ, id string, msg []byte, key string) error {
	code, res := c.h.tellKey(typ, id, msg, key)
	return codeError(code, res)
}

// AskWithKey is Ask with an idempotency key: the asked entity handles the message once
// and answers a repeat with the first reply (or the first error, under the journal)
// without handling it again, so an ask that timed out (ErrTimeout) can be retried
// safely with the same key. The key is as for TellWithKey. Errors: those of Ask, and
// ErrBadRequest for a key over the cap or not UTF-8 (nothing is sent).
func (c *Context) AskWithKey(typ, id string, msg []byte, key string, timeout time.Duration) ([]byte, error) {
	code, res := c.h.askKey(typ, id, msg, key, millis32(timeout))
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	return res, nil
}

// Forward passes the current message on to the entity typ/id unchanged, with its
// original sender and asker: that entity's reply (or error) answers the asker, and the
// reply Receive returns is dropped. The forward happens when Receive returns with a nil
// error (with an error, the asker gets the error instead); calling Forward again replaces
// the target. Only messages of KindMessage can be forwarded; outside Receive the host
// refuses it.
func (c *Context) Forward(typ, id string) error {
	code, res := c.h.forward(typ, id)
	return codeError(code, res)
}

// millis32 converts a timeout to the ABI's milliseconds: 0 stays 0 (the host's default),
// a positive duration under a millisecond becomes 1, and the value is capped at the
// largest i32. A negative duration is 0.
func millis32(d time.Duration) int32 {
	ms := millis64(d)
	if ms > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(ms)
}

// millis64 converts a duration to whole milliseconds, rounding up, negative to 0.
func millis64(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// itoa formats n in decimal.
func itoa(n int64) string {
	var b [20]byte
	return string(appendInt(b[:0], n))
}

func appendInt(dst []byte, n int64) []byte {
	if n < 0 {
		dst = append(dst, '-')
		if n == math.MinInt64 {
			return append(dst, "9223372036854775808"...)
		}
		n = -n
	}
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}
