package sharding

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"go.opentelemetry.io/otel/trace"
)

// Errors of sharding. Each has an error code (ErrorCode) that survives crossing members.
var (
	ErrUnknownEntityType = errors.New("sharding: unknown entity type")
	ErrEmptyEntityID     = errors.New("sharding: empty entity ID")
	ErrBufferFull        = errors.New("sharding: buffer full, message dropped (dead letter)")
	ErrMailboxFull       = errors.New("sharding: entity mailbox full, message dropped (dead letter)")
	ErrShardUnavailable  = errors.New("sharding: shard home could not be resolved")
	// ErrStateNotSaved: the entity handled the message but its state could not be
	// saved (a checkpoint): the reply is withheld, and the instance is stopped without
	// saving, so the change may or may not last (the write may have reached some
	// replicas); the next message activates the entity from its saved state.
	ErrStateNotSaved = errors.New("sharding: the message was handled but the entity's state was not saved")
	// ErrStateNotLoaded: the entity's saved state could not be read, so it was not
	// started (starting without it would lose it). A later message tries again.
	ErrStateNotLoaded = errors.New("sharding: the entity's saved state could not be loaded")
	errNotCoordinator = errors.New("sharding: this member is not the shard coordinator")
	ErrRoutingLoop    = errors.New("sharding: message forwarded too many times")
	// ErrAskTimeout: the ask's deadline passed before its reply came. The error of
	// such an ask is also ErrOutcomeUnknown, or ErrNotDelivered when the message had
	// not left this member's buffers by then (it is dropped there).
	ErrAskTimeout = errors.New("sharding: ask timed out")
	ErrStopped    = errors.New("sharding: stopped")
	// ErrInvalidIdempotencyKey: an idempotency key over MaxIdempotencyKeyLen bytes, or
	// not UTF-8.
	ErrInvalidIdempotencyKey = errors.New("sharding: invalid idempotency key")
	errLeaving               = errors.New("sharding: this member is leaving and takes no new shards")
	ErrMalformedMessage      = errors.New("sharding: malformed message from a member")
	// ErrNoMajority: this member has not had a heartbeat round trip with a majority of
	// the members within its hosting lease (Config.HostingLease), so it may be on the
	// losing side of a partition, and the majority may soon move its shards: it does not
	// activate entities, handle their messages or save their state until it has. A
	// message that fails for it may have been handled before the lease lapsed: its
	// code is CodeOutcomeUnknown.
	ErrNoMajority = errors.New("sharding: this member has no recent contact with a majority of the cluster (hosting lease lapsed)")
	// ErrNotDelivered: the message never reached its entity, so it had no effect and
	// sending it again is safe. It could not be sent to the member hosting its entity
	// (the connection refused: the member is gone; the transport closed; a send queue
	// full), its shard had no home, it was routed too often, the member stopped, or its
	// deadline passed before it left a buffer. Its code is CodeNotDelivered, which
	// ErrShardUnavailable, ErrStopped and ErrRoutingLoop have too; a failure of that
	// code that Ask, AskMessage, Passivate or TellMessage returns matches it with
	// errors.Is (and a RemoteError of that code matches them all). Other failures
	// before the entity took the message keep their own codes (CodeOverloaded,
	// CodeUnknownType, CodeStateNotLoaded).
	ErrNotDelivered = errors.New("sharding: message not delivered")
	// ErrOutcomeUnknown: the message may or may not have been handled: it was sent to
	// the member hosting its entity, or was in its entity's mailbox, and no answer came
	// before the ask's deadline, or the connection broke after it was sent, or the
	// member hosting it lost its hosting lease (ErrNoMajority); or an entity that
	// handled it passed it on (ForwardTo) and it went no further. Sending it again may
	// have it handled twice: retry only with an idempotency key, or a message whose
	// second handling does no harm. Its code is CodeOutcomeUnknown, which ErrAskTimeout
	// and ErrNoMajority have too; a failure of that code that Ask, AskMessage,
	// Passivate or TellMessage returns matches it with errors.Is.
	ErrOutcomeUnknown = errors.New("sharding: outcome unknown")
	// errExpired: the message's deadline passed before its entity took it: it is
	// dropped, a dead letter with reason "expired" (an asker gave up already).
	errExpired = errors.New("sharding: the message's deadline passed before its entity took it (dead letter)")
)

// codeHandedOff answers a forwarded ask whose shard the region is handing off: the
// sender's region routes it again, ahead of what it buffered since.
const codeHandedOff = "handed-off"

// Error codes: stable names for the kinds of failure a caller can tell apart, carried
// across members and mapped to HTTP statuses by the API.
const (
	CodeEntityError     = "entity-error"        // the entity refused the message
	CodeGuestTrap       = "guest-trap"          // the guest trapped; the message failed
	CodeGuestDeadline   = "guest-deadline"      // the guest ran past its deadline
	CodeReplyTooLarge   = "reply-too-large"     // the entity's reply was over the cap; the entity goes on
	CodeUnknownType     = "unknown-entity-type" // no such entity type is deployed
	CodeBadRequest      = "bad-request"         // empty entity ID, message too large, ...
	CodeOverloaded      = "overloaded"          // a buffer or mailbox was full
	CodeNotDelivered    = "not-delivered"       // it never reached its entity: safe to send again (ErrNotDelivered)
	CodeOutcomeUnknown  = "outcome-unknown"     // it may have been handled: no answer came (ErrOutcomeUnknown)
	CodeUnavailable     = "unavailable"         // the member is stopping (its runtime or the entity's instance closed)
	CodeStateNotSaved   = "state-not-saved"     // handled, but its checkpoint failed (ErrStateNotSaved)
	CodeStateNotLoaded  = "state-not-loaded"    // the saved state could not be read (ErrStateNotLoaded)
	CodeInternal        = "internal"            // anything else
	CodeActivationError = "activation-failed"   // the entity could not be created
	CodeBackoff         = "entity-backoff"      // the entity keeps failing and rests
)

// CodedError is an error with a code from the list above. Entity factories return such
// errors so that a caller on another member learns what kind of failure happened.
type CodedError interface {
	error
	ErrorCode() string
}

// RemoteError is a failure reported by another member, with its code.
type RemoteError struct {
	Code    string
	Message string
	// Node is the member that reported it.
	Node string
}

func (e *RemoteError) Error() string { return e.Message }

// ErrorCode returns the code the remote member gave.
func (e *RemoteError) ErrorCode() string { return e.Code }

// Is makes a remote error match the local sentinel of the same code, so that
// errors.Is(err, ErrUnknownEntityType) works wherever the failure happened.
func (e *RemoteError) Is(target error) bool {
	return target != nil && codeOfSentinel(target) == e.Code && e.Code != CodeInternal
}

// ErrorCode returns the code of err: its own if it is a CodedError, else the code of a
// sharding sentinel it wraps, else CodeInternal.
func ErrorCode(err error) string {
	var ce CodedError
	if errors.As(err, &ce) {
		return ce.ErrorCode()
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return codeOfSentinel(s)
		}
	}
	return CodeInternal
}

// sentinels are in order of precedence: an error that wraps two (a state not saved
// because no shard home was found) has the code of the first. Those of an unknown
// outcome come before those of a message not delivered: an error that is both may
// have been handled.
var sentinels = []error{ErrUnknownEntityType, ErrEmptyEntityID, ErrInvalidIdempotencyKey, ErrNotInHistory, ErrEntityExists,
	ErrInvalidReminder, ErrTooManyReminders, ErrInvalidScheduled, ErrTooManyScheduled, ErrScheduledNotFound, ErrRepeatForgotten,
	ErrEntityPaused, ErrBufferFull, ErrMailboxFull, ErrOutboxFull,
	ErrStateNotSaved, ErrStateNotLoaded,
	ErrOutcomeUnknown, ErrAskTimeout, ErrNoMajority,
	ErrNotDelivered, ErrShardUnavailable, errNotCoordinator, ErrRoutingLoop, ErrStopped, errLeaving, errExpired}

func codeOfSentinel(err error) string {
	switch err {
	case ErrUnknownEntityType:
		return CodeUnknownType
	case ErrEmptyEntityID, ErrInvalidIdempotencyKey, ErrNotInHistory, ErrEntityExists, ErrInvalidReminder, ErrTooManyReminders,
		ErrRepeatForgotten, ErrInvalidScheduled, ErrTooManyScheduled:
		return CodeBadRequest
	case ErrScheduledNotFound:
		return CodeNotFound
	case ErrBufferFull, ErrMailboxFull, ErrOutboxFull:
		return CodeOverloaded
	case ErrEntityPaused:
		return CodeEntityPaused
	case ErrStateNotSaved:
		return CodeStateNotSaved
	case ErrStateNotLoaded:
		return CodeStateNotLoaded
	case ErrNotDelivered, ErrShardUnavailable, errNotCoordinator, ErrStopped, ErrRoutingLoop, errLeaving, errExpired:
		return CodeNotDelivered
	case ErrOutcomeUnknown, ErrAskTimeout, ErrNoMajority:
		return CodeOutcomeUnknown
	}
	return CodeInternal
}

// outcomeError is a failure of a message whose code is CodeNotDelivered or
// CodeOutcomeUnknown, as its sender gets it (classified): errors.Is matches it to
// ErrNotDelivered or ErrOutcomeUnknown by that code, whatever sentinel err wraps.
type outcomeError struct {
	code string
	err  error
}

func (e *outcomeError) Error() string     { return e.err.Error() }
func (e *outcomeError) Unwrap() error     { return e.err }
func (e *outcomeError) ErrorCode() string { return e.code }
func (e *outcomeError) Is(target error) bool {
	return (target == ErrNotDelivered || target == ErrOutcomeUnknown) && codeOfSentinel(target) == e.code
}

// classified returns a message's failure as its sender gets it: one of code
// CodeNotDelivered matches ErrNotDelivered, and one of code CodeOutcomeUnknown
// ErrOutcomeUnknown, with errors.Is (an error of ErrShardUnavailable, say, does not
// itself); others are returned as they are. Nil stays nil.
func classified(err error) error {
	if err == nil {
		return nil
	}
	switch code := ErrorCode(err); {
	case code == CodeNotDelivered && !errors.Is(err, ErrNotDelivered),
		code == CodeOutcomeUnknown && !errors.Is(err, ErrOutcomeUnknown):
		return &outcomeError{code: code, err: err}
	}
	return err
}

// retrySafeCode reports whether code is that of a failure that leaves a message
// unhandled: it never reached its entity, or its entity was not started, so that a
// client may send it again (docs/cli.md, "Errors").
func retrySafeCode(code string) bool {
	switch code {
	case CodeNotDelivered, CodeOverloaded, CodeStateNotLoaded, CodeUnavailable, CodeBackoff:
		return true
	}
	return false
}

// passedOnFailure is the failure of a message that an entity handled and passed on
// (ForwardTo, forwards times in all) as its asker gets it: one that left it unhandled
// further on (retrySafeCode) has an unknown outcome all the same, for the entity that
// passed it on handled it; others are returned as they are. The error keeps err's text,
// not its kind: it does not match ErrNotDelivered.
func passedOnFailure(err error, forwards uint8) error {
	if !retrySafeCode(ErrorCode(err)) {
		return err
	}
	return fmt.Errorf("%w: an entity handled the message and passed it on (%d times), then: %s",
		ErrOutcomeUnknown, forwards, strings.TrimPrefix(err.Error(), "sharding: "))
}

// causedError is an error of a kind (a sentinel above) with a cause: errors.Is and
// errors.As see both, and ErrorCode gives the kind's code.
type causedError struct {
	kind, cause error
	msg         string
}

func (e *causedError) Error() string   { return e.msg }
func (e *causedError) Unwrap() []error { return []error{e.kind, e.cause} }

// ErrorCode is the code of the error's kind.
func (e *causedError) ErrorCode() string { return codeOfSentinel(e.kind) }

// wrapCause returns an error of kind, with detail, caused by cause. Its text is
// "KIND: DETAIL: CAUSE", where CAUSE drops what would repeat: its own "sharding: "
// prefix and the kind's text when cause is of the same kind already.
func wrapCause(kind error, detail string, cause error) error {
	msg := kind.Error()
	if detail != "" {
		msg += ": " + detail
	}
	text := strings.TrimPrefix(cause.Error(), kind.Error()+": ")
	text = strings.TrimPrefix(text, "sharding: ")
	return &causedError{kind: kind, cause: cause, msg: msg + ": " + text}
}

// envelope is a message on its way to an entity.
type envelope struct {
	EntityType string `cbor:"1,keyasint"`
	EntityID   string `cbor:"2,keyasint"`
	Payload    []byte `cbor:"3,keyasint,omitempty"`
	// Key 4 was the trace context; it travels in the frame now (cluster.Frame.Trace).
	// Hops counts forwards between regions; a message is refused past maxHops.
	Hops uint8 `cbor:"5,keyasint,omitempty"`
	// Origin is the member whose region first routed the message (the sender's). A
	// region handing the shard off returns the message there, so that it keeps its
	// place in that region's order.
	Origin string `cbor:"6,keyasint,omitempty"`
	// Epoch is the allocation epoch of the shard home the sender forwarded to: a
	// region hosting the shard under an older epoch learns its allocation is stale.
	Epoch uint64 `cbor:"7,keyasint,omitempty"`
	// Sender, Kind, Tag and Chain are what the receiving entity learns of the message
	// (Message).
	Sender string      `cbor:"8,keyasint,omitempty"`
	Kind   MessageKind `cbor:"9,keyasint,omitempty"`
	Tag    uint64      `cbor:"10,keyasint,omitempty"`
	Chain  []string    `cbor:"11,keyasint,omitempty"`
	// Forwards counts how often entities passed the message on (Forward); a message is
	// refused past maxForwards.
	Forwards uint8 `cbor:"12,keyasint,omitempty"`
	// TimeLeft is how long the message had left until its deadline when this member
	// sent it, in nanoseconds (at least 1); 0: it has no deadline (a tell whose sender's
	// context had none, or a sender of an older version). An ask always has one. It is
	// a duration, not an instant, so that the members' clocks need not agree: the
	// receiver's deadline is its own clock at arrival plus TimeLeft, later than the
	// sender's by the time in transit, so a message is never dropped before its sender
	// gave up (delivery.deadline, handleDeliver).
	TimeLeft uint64 `cbor:"13,keyasint,omitempty"`
	// IdempotencyKey is the message's key (Message.IdempotencyKey), if any.
	IdempotencyKey string `cbor:"14,keyasint,omitempty"`
	// SenderSeq is the message's sender sequence (Message.SenderSeq), if any.
	SenderSeq uint64 `cbor:"15,keyasint,omitempty"`
	// Acked makes an ask of a tell: the entity handles it as a tell (MessageInfo.Ask
	// is false), and its empty reply acknowledges it to the sender's outbox once it
	// counts (delivery.go).
	// (1; 0: an ordinary tell or ask).
	Acked uint8 `cbor:"16,keyasint,omitempty"`
}

// MessageKind says where a message comes from (abi.MessageKind).
type MessageKind uint8

const (
	// KindMessage is a message from an entity or from outside.
	KindMessage MessageKind = 0
	// KindTimer is a timer's message to its own entity; Sender is the timer's name.
	KindTimer MessageKind = 1
	// KindChanged is a distributed data change for a subscribed entity; Sender is the
	// key.
	KindChanged MessageKind = 2
	// kindPassivate asks the entity's region to passivate it (Sharding.Passivate). It
	// never reaches the entity.
	kindPassivate MessageKind = 3
	// KindBase is a journal record that holds a copy of the entity's base, the state
	// a revert to the record before it starts from (TypeSettings.History); never a
	// message.
	KindBase MessageKind = 9
	// KindReminder is a durable reminder's message to its own entity (Reminder):
	// Sender is the reminder's name and Tag its due time, in Unix milliseconds, which
	// the entity compares with its clock to learn how late it comes.
	KindReminder MessageKind = 10
	// KindHTTP is an HTTP request routed to its entity (a type's HTTP routes, in host):
	// the payload is the request in abi/SPEC.md's HTTP request encoding and the reply the
	// response. The entity handles it as any message it is asked: journaled, replayed,
	// with an idempotency key if the request has one.
	KindHTTP MessageKind = 11
)

// Handled reports whether k is a message its entity handles, and so a journal record
// that a replay runs again: message, timer, changed, reminder, http. The others are
// never delivered to an entity (passivate) or are a journal's records of time travel
// and its bases.
func (k MessageKind) Handled() bool {
	switch k {
	case KindMessage, KindTimer, KindChanged, KindReminder, KindHTTP:
		return true
	}
	return false
}

// String names the kind: message, timer, changed, reminder, and, in a journal's history, the
// records of time travel (revert, fork).
func (k MessageKind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindTimer:
		return "timer"
	case KindChanged:
		return "changed"
	case kindPassivate:
		return "passivate"
	case kindRevert:
		return "revert"
	case kindFork:
		return "fork"
	case kindPause:
		return "pause"
	case kindResume:
		return "resume"
	case kindSkip:
		return "skip"
	case kindHold:
		return "hold"
	case KindBase:
		return "base"
	case KindReminder:
		return "reminder"
	case KindHTTP:
		return "http"
	case kindExpire:
		return "expire"
	case kindSchedule:
		return "schedule"
	case kindUnschedule:
		return "unschedule"
	}
	return "kind-" + strconv.Itoa(int(k))
}

// The replies of a kindPassivate ask.
const (
	PassivateDone     = "passivated" // the entity was active; its state is saved and it stopped
	PassivateInactive = "inactive"   // the entity was not active here
)

// Message is a message for an entity with what the receiver learns of it, for
// TellMessage and AskMessage.
type Message struct {
	EntityType, EntityID string
	Payload              []byte
	// Sender is the sending entity as "type/id", a timer's name or a changed key; empty
	// from outside the cluster's entities.
	Sender string
	Kind   MessageKind
	// Tag is the sender's own mark (a timer's generation), given back unchanged.
	Tag uint64
	// Chain lists the entities ("type/id") that wait, directly or through others, for
	// the reply of this ask, oldest first; an entity that would ask one of them would
	// deadlock.
	Chain []string
	// Link, if valid, makes the message (a timer's, a subscription's) start a trace of
	// its own, linked to this span: the one that set the timer or subscribed.
	Link trace.SpanContext
	// IdempotencyKey, if set, makes the message count once: an entity whose type
	// journals its messages answers a later message with the same key, within the
	// type's IdempotencyRetention, with the first one's reply (or error) without
	// handling it again, across crashes and handoffs. At most MaxIdempotencyKeyLen
	// bytes of UTF-8 (ErrInvalidIdempotencyKey).
	IdempotencyKey string
	// SenderSeq, when not 0, is the message's place in its sender's sequence: an entity
	// of a type with DeliveryEffectivelyOnce numbers what it sends (delivery.go), and
	// the receiver handles each (Sender, SenderSeq) once. Set by sharding, not callers.
	SenderSeq uint64
	// acked: sent by an outbox, as an ask whose reply acknowledges a tell.
	acked bool
}

// MaxIdempotencyKeyLen caps Message.IdempotencyKey, in bytes.
const MaxIdempotencyKeyLen = 256

// CheckIdempotencyKey refuses a key over MaxIdempotencyKeyLen bytes or not UTF-8:
// ErrInvalidIdempotencyKey.
func CheckIdempotencyKey(key string) error {
	switch {
	case len(key) > MaxIdempotencyKeyLen:
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidIdempotencyKey, len(key), MaxIdempotencyKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidIdempotencyKey)
	}
	return nil
}

// MessageInfo is what an entity learns of the message it is handling: Entity.Receive's
// context carries it (MessageInfoFrom).
type MessageInfo struct {
	Sender string
	Kind   MessageKind
	Tag    uint64
	Chain  []string
	// Ask says the sender waits for the reply.
	Ask bool
	// Gated says the message is journaled behind an output gate: the entity holds
	// back its tells and timers until ReleaseEffects (JournaledEntity), which comes
	// once the message's record is durable.
	Gated bool
	// Seq is the sequence number the message's journal record takes (or took, for a
	// Replay) when the entity's type keeps a journal; 0 otherwise.
	Seq uint64
	// Replay says the message is a journal record replayed at activation: it ran
	// before, and its output (logs) was seen then.
	Replay bool
}

type messageInfoKey struct{}

// messageCtx is the context of an Entity.Receive: its parent's, with the message's
// MessageInfo. One allocation, where context.WithValue would make two (its context and
// the MessageInfo boxed); Value hands out a pointer to info, which nothing changes.
type messageCtx struct {
	context.Context
	info MessageInfo
	// sender, if set, is the entity whose message this is, when it numbers its sends
	// (delivery.go: WithSender, numberAsk).
	sender *entity
}

func (c *messageCtx) Value(key any) any {
	switch key {
	case messageInfoKey{}:
		return &c.info
	case senderEntityKey{}:
		if c.sender != nil {
			return c.sender
		}
	}
	return c.Context.Value(key)
}

// withMessageInfo returns ctx carrying mi for MessageInfoFrom.
func withMessageInfo(ctx context.Context, mi MessageInfo) context.Context {
	return &messageCtx{Context: ctx, info: mi}
}

// MessageInfoFrom returns the MessageInfo of the message an Entity.Receive context
// belongs to.
func MessageInfoFrom(ctx context.Context) (MessageInfo, bool) {
	if mi, ok := ctx.Value(messageInfoKey{}).(*MessageInfo); ok {
		return *mi, true
	}
	return MessageInfo{}, false
}

// ForwardTo is what Entity.Receive returns, as its error, to pass the message on to
// another entity unchanged: the sender, its reply and its deadline go with it (Akka's
// forward). The reply of the entity it reaches answers the asker.
type ForwardTo struct {
	EntityType, EntityID string
}

func (f *ForwardTo) Error() string {
	return "sharding: forwarded to " + f.EntityType + "/" + f.EntityID
}

// Reply is an entity's answer to an ask.
type Reply struct {
	Payload []byte
	// Node is the address of the member whose region hosts the entity.
	Node string
}

// wireReply is the body of a reply to a forwarded ask.
type wireReply struct {
	Payload []byte `cbor:"1,keyasint,omitempty"`
	Node    string `cbor:"2,keyasint,omitempty"`
	Code    string `cbor:"3,keyasint,omitempty"`
	Error   string `cbor:"4,keyasint,omitempty"`
}

// shardRef names a shard of an entity type.
type shardRef struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	// Requester is the region (member address) asking for the shard's home, or handing
	// the shard off.
	Requester string `cbor:"3,keyasint,omitempty"`
	// Leaving marks a handoff by a region that is leaving: it takes no new shards.
	Leaving bool `cbor:"4,keyasint,omitempty"`
	// Epoch is the allocation's fencing epoch (HostShard).
	Epoch uint64 `cbor:"5,keyasint,omitempty"`
	// HandOff is the span context of the handoff (BeginHandOff), for the messages it
	// holds to link to (encodeSpanContext); empty when it is not traced.
	HandOff string `cbor:"6,keyasint,omitempty"`
	// UID is the incarnation of the process a HostShard is for (cluster.Member.UID as
	// the coordinator saw the member up at the region's address); a process with
	// another UID at that address refuses it. 0: any (a coordinator of an older
	// version).
	UID uint64 `cbor:"7,keyasint,omitempty"`
}

// encodeSpanContext packs a span context as the hex of its trace ID, span ID and flags
// (50 characters), or "" when it is not valid.
func encodeSpanContext(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, 25)
	b = append(b, tid[:]...)
	b = append(b, sid[:]...)
	return hex.EncodeToString(append(b, byte(sc.TraceFlags())))
}

// decodeSpanContext unpacks encodeSpanContext's text as a remote span context; an
// invalid one for anything else.
func decodeSpanContext(text string) trace.SpanContext {
	b, err := hex.DecodeString(text)
	if err != nil || len(b) != 25 {
		return trace.SpanContext{}
	}
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], b[:16])
	copy(sid[:], b[16:24])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(b[24]), Remote: true})
}

func (r shardRef) String() string { return fmt.Sprintf("%s/%d", r.Type, r.Shard) }

// shardHome answers a GetShardHome request.
type shardHome struct {
	Region string `cbor:"1,keyasint"` // member address
	Epoch  uint64 `cbor:"2,keyasint,omitempty"`
	// Process is the UID of the process at Region the shard is allocated to, when the
	// coordinator knows it (0: not known, or a coordinator of an older version): a
	// process restarted at that address does not take its previous incarnation's
	// allocation for its own (faults seed 2443).
	Process uint64 `cbor:"3,keyasint,omitempty"`
}

// ShardState is one shard of a region: its ID and its active entities.
type ShardState struct {
	Type     string   `cbor:"1,keyasint" json:"type"`
	ID       int      `cbor:"2,keyasint" json:"id"`
	Entities []string `cbor:"3,keyasint,omitempty" json:"entity_ids,omitempty"`
	Epoch    uint64   `cbor:"4,keyasint,omitempty" json:"epoch,omitempty"`
}

// RegionState is what one member hosts, for inspection and coordinator recovery.
type RegionState struct {
	Node   string       `cbor:"1,keyasint" json:"node"`
	Shards []ShardState `cbor:"2,keyasint" json:"shards"`
	// Counters of the member's regions since it started.
	Passivations          uint64 `cbor:"3,keyasint,omitempty" json:"passivations"`
	BufferedDuringHandoff uint64 `cbor:"4,keyasint,omitempty" json:"buffered_during_handoff"`
	DeadLetters           uint64 `cbor:"5,keyasint,omitempty" json:"dead_letters"`
}

var (
	encMode = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	decMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			MaxNestedLevels:  8,
			MaxArrayElements: 1 << 20,
			MaxMapPairs:      64,
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

func encode(v any) []byte {
	b, err := encMode.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sharding: encoding %T: %v", v, err)) // only our own types get here
	}
	return b
}

func decode(b []byte, v any) error {
	if err := decMode.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformedMessage, v, err)
	}
	return nil
}
