package abi

// Version is the ABI version this package describes. A module declares the version it was
// built for by exporting the function named VersionMarker(Version). Version 1 keeps all
// of version 0, and a host speaking 1 runs modules built for 0.
const Version = 1

// MarkerPrefix prefixes the name of the version marker export: a module built for ABI
// version N exports a function named "shardhost_abi_vN" with no parameters and no results.
const MarkerPrefix = "shardhost_abi_v"

// VersionMarker returns the name of the marker export for ABI version v,
// for example "shardhost_abi_v0".
func VersionMarker(v int) string { return MarkerPrefix + itoa(v) }

// Exports a module must provide (besides the version marker).
const (
	// ExportAlloc is `shardhost_alloc(size i32) -> i32`: the guest returns the address
	// of a buffer of at least size bytes that stays valid until the next call of
	// ExportAlloc or ExportReceive. The host writes an incoming message there.
	ExportAlloc = "shardhost_alloc"
	// ExportReceive is `shardhost_receive(ptr i32, len i32) -> i32`: the guest handles
	// the message of len bytes at ptr and returns a Status. During the call it may
	// call ImportReply once or more; the last reply wins.
	ExportReceive = "shardhost_receive"
)

// Exports a module may provide.
const (
	// ExportInitialize is the WASI reactor initialiser (`_initialize() -> ()`), called
	// once after instantiation and before any other export. Go's wasip1 port and TinyGo
	// produce it with -buildmode=c-shared.
	ExportInitialize = "_initialize"
	// ExportSnapshot is `shardhost_snapshot() -> i32`: the guest-level snapshot. The
	// guest calls ImportReply with its state (at most MaxSnapshotSize bytes) and returns
	// StatusOK; StatusNoSnapshot asks the host for a transparent snapshot of the
	// instance's memory and globals instead; StatusError fails the snapshot with the
	// reply as its text. Called between messages. A module exports ExportSnapshot and
	// ExportRestore together or neither.
	ExportSnapshot = "shardhost_snapshot"
	// ExportRestore is `shardhost_restore(ptr i32, len i32) -> i32`: the guest takes up
	// the state of len bytes at ptr (written into a buffer from ExportAlloc), which an
	// earlier incarnation's ExportSnapshot returned, and returns StatusOK or StatusError
	// (the reply is the error text). Called once, after _initialize and before the
	// first message.
	ExportRestore = "shardhost_restore"
	// ExportMigrate (v1, optional) is `shardhost_migrate(ptr i32, len i32) -> i32`,
	// shardhost_migrate(from_version) in abi/SPEC.md: the guest takes up, converted, a
	// state that another version of its entity type's module saved. The len bytes at
	// ptr (written into a buffer from ExportAlloc) are from_version, the type's version
	// number of the module that saved the state (8 bytes, little-endian; 0 when not
	// known), then the state its ExportSnapshot returned. It returns StatusOK, or
	// StatusError with the reply as the error text: the entity then stays on the
	// module that saved its state. Called instead of ExportRestore when the host moves
	// an entity's state to another module; a module that exports it exports
	// ExportRestore too.
	ExportMigrate = "shardhost_migrate"
	// ExportGlobalPrefix is reserved: the host exports a module's mutable globals under
	// names "shardhost_g<index>" for transparent snapshots. A module must not use it.
	ExportGlobalPrefix = "shardhost_g"
	// ExportOnActivate (v1) is `shardhost_on_activate() -> i32`: called once per
	// incarnation before the first message, after any restore and after the saved
	// timers and subscriptions are re-armed. StatusError (with the reply as text) fails
	// the activation.
	ExportOnActivate = "shardhost_on_activate"
	// ExportOnPassivate (v1) is `shardhost_on_passivate() -> i32`: called once before
	// the host saves the state of an entity it stops (passivation, handoff, shutdown).
	// StatusNoHook says nothing ran; another non-zero status is logged; the stop goes on.
	ExportOnPassivate = "shardhost_on_passivate"
	// ExportQuery (v1, optional) is `shardhost_query(ptr i32, len i32) -> i32`: a
	// read-only question about the entity's state, of len bytes at ptr (written into a
	// buffer from ExportAlloc). The guest replies with ImportReply and returns StatusOK,
	// or StatusError with the reply as its text. The host calls it on a throwaway
	// instance made from the entity's saved state, never on the entity's own: what the
	// guest changes is dropped, and host functions that would change anything (tell,
	// ask, forward, distributed data updates, timers, passivate) fail with
	// CodeReadOnly (abi/SPEC.md, "Queries").
	ExportQuery = "shardhost_query"
	// ExportHTTP (v1, optional) is `shardhost_http(ptr i32, len i32) -> i32`: an HTTP
	// request routed to the entity (a type's HTTP routes), of len bytes at ptr in the
	// HTTP request encoding (abi/SPEC.md, "HTTP routes"). The guest replies with
	// ImportReply in the HTTP response encoding and returns StatusOK, StatusError with
	// the reply as its text, or StatusNoHTTP. It runs as ExportReceive does: the request
	// is the entity's message, of KindHTTP, journaled and replayed like any other.
	ExportHTTP = "shardhost_http"
)

// ImportModule is the module name under which the host provides its functions.
const ImportModule = "shardhost"

// Host functions in ImportModule. Pointers and lengths are i32 offsets into the guest's
// exported memory "memory"; a range outside it traps the call.
const (
	// ImportReply is `reply(ptr i32, len i32) -> ()`: sets the reply to the current
	// message to the len bytes at ptr (copied by the host). With StatusError the reply
	// is the error text.
	ImportReply = "reply"
	// ImportEntityID is `entity_id(ptr i32, cap i32) -> i32`: writes the entity's ID
	// (UTF-8) at ptr if it fits in cap bytes, and returns its length in bytes either way.
	ImportEntityID = "entity_id"
	// ImportEntityType is `entity_type(ptr i32, cap i32) -> i32`: as ImportEntityID, for
	// the name of the entity type.
	ImportEntityType = "entity_type"
	// ImportLog is `log(level i32, ptr i32, len i32) -> ()`: writes the UTF-8 text at ptr
	// into the host's log at level (a LogLevel).
	ImportLog = "log"
	// ImportPassivate is `passivate() -> ()`: asks the host to passivate the entity once
	// the current message is handled (its state saved, its instance released); messages
	// that arrive meanwhile go to the next incarnation. Valid only during
	// ExportReceive; elsewhere it traps.
	ImportPassivate = "passivate"
)

// Host functions added in version 1 (SPEC.md, "v1"). Those returning an i32 return a
// Code and set the instance's result, which ImportResult copies.
const (
	// ImportResult is `result(ptr i32, cap i32) -> i32`: copies the current result if
	// it fits in cap bytes; returns its length either way.
	ImportResult = "result"
	// ImportMessageKind is `message_kind() -> i32`: the MessageKind of the current
	// message.
	ImportMessageKind = "message_kind"
	// ImportSender is `sender(ptr i32, cap i32) -> i32`: the source of the current
	// message: "TYPE/ID" of the sending entity (empty from outside), the timer's name,
	// or the changed key.
	ImportSender = "sender"
	// ImportTell is `tell(type_ptr, type_len, id_ptr, id_len, msg_ptr, msg_len) -> code`.
	ImportTell = "tell"
	// ImportAsk is `ask(type_ptr, type_len, id_ptr, id_len, msg_ptr, msg_len,
	// timeout_ms) -> code`; the reply (or the entity's error text) is the result.
	ImportAsk = "ask"
	// ImportForward is `forward(type_ptr, type_len, id_ptr, id_len) -> code`.
	ImportForward = "forward"
	// ImportTellKey is `tell_key(type_ptr, type_len, id_ptr, id_len, msg_ptr, msg_len,
	// key_ptr, key_len) -> code`: ImportTell with an idempotency key (at most
	// MaxIdempotencyKey bytes of UTF-8; empty is none).
	ImportTellKey = "tell_key"
	// ImportAskKey is `ask_key(type_ptr, type_len, id_ptr, id_len, msg_ptr, msg_len,
	// key_ptr, key_len, timeout_ms) -> code`: ImportAsk with an idempotency key.
	ImportAskKey = "ask_key"
	// ImportDDataGet is `ddata_get(key_ptr, key_len, cons_ptr, cons_len, timeout_ms)
	// -> code`; the value as JSON is the result.
	ImportDDataGet = "ddata_get"
	// ImportDDataUpdate is `ddata_update(key_ptr, key_len, type_ptr, type_len, op_ptr,
	// op_len, cons_ptr, cons_len, timeout_ms) -> code`; the new value is the result.
	ImportDDataUpdate = "ddata_update"
	// ImportDDataDelete is `ddata_delete(key_ptr, key_len, cons_ptr, cons_len,
	// timeout_ms) -> code`.
	ImportDDataDelete = "ddata_delete"
	// ImportDDataSubscribe is `ddata_subscribe(key_ptr, key_len) -> code`.
	ImportDDataSubscribe = "ddata_subscribe"
	// ImportDDataUnsubscribe is `ddata_unsubscribe(key_ptr, key_len) -> code`.
	ImportDDataUnsubscribe = "ddata_unsubscribe"
	// ImportTimerStart is `timer_start(name_ptr, name_len, msg_ptr, msg_len,
	// delay_ms i64, interval_ms i64) -> code`.
	ImportTimerStart = "timer_start"
	// ImportTimerCancel is `timer_cancel(name_ptr, name_len) -> i32`: 1 if the timer was
	// running.
	ImportTimerCancel = "timer_cancel"
	// ImportNow is `now(clock i32) -> i64`: ClockWall or ClockMonotonic, nanoseconds.
	ImportNow = "now"
	// ImportRandom is `random(ptr i32, len i32) -> ()`: random bytes, at most
	// MaxRandom per call.
	ImportRandom = "random"
	// ImportTraceEvent is `trace_event(ptr i32, len i32) -> ()`: an event on the
	// current message's span.
	ImportTraceEvent = "trace_event"
	// ImportHTTPRequest is `http_request(method_ptr, method_len, url_ptr, url_len,
	// headers_ptr, headers_len, body_ptr, body_len, timeout_ms) -> code`: an outbound
	// HTTP request under the entity type's egress allowlist (SPEC.md, "v1: outbound
	// HTTP"). Headers are "Name: value" lines ended by "\n". On CodeOK the result is the
	// response: status (u32 LE), the headers' length (u32 LE), the headers as lines, the
	// body. Codes: CodeEgressDenied, CodeEgressTooLarge, CodeEgressFailed,
	// CodeEgressRateLimited, CodeTimeout, CodeBadRequest, CodeNotAllowed.
	ImportHTTPRequest = "http_request"
	// ImportReminderSet is `reminder_set(name_ptr, name_len, due_unix_ms i64,
	// interval_ms i64, payload_ptr, payload_len) -> code`: a durable reminder.
	ImportReminderSet = "reminder_set"
	// ImportReminderCancel is `reminder_cancel(name_ptr, name_len) -> code`: 0
	// cancelled, CodeNotFound if the entity had no reminder of that name.
	ImportReminderCancel = "reminder_cancel"
	// ImportReminderList is `reminder_list() -> code`: the entity's reminders as the
	// result, in the reminder list encoding (abi/SPEC.md, "v1: reminders").
	ImportReminderList = "reminder_list"
	// ImportReminderDue is `reminder_due() -> i64`: the due time of the current
	// KindReminder message, or of a scheduled KindMessage from outside (its source
	// empty), in Unix milliseconds; 0 for other messages.
	ImportReminderDue = "reminder_due"
)

// V0Imports are the host functions a module built for ABI version 0 may import.
var V0Imports = []string{ImportReply, ImportEntityID, ImportEntityType, ImportLog, ImportPassivate}

// MessageKind is what ImportMessageKind returns.
type MessageKind int32

const (
	// KindMessage is a message from an entity (the source is "TYPE/ID") or from
	// outside (the source is empty).
	KindMessage MessageKind = 0
	// KindTimer is a timer's message; the source is the timer's name.
	KindTimer MessageKind = 1
	// KindChanged is the new value (JSON) of a subscribed distributed data key; the
	// source is the key.
	KindChanged MessageKind = 2
	// KindReminder is a durable reminder's message; the source is the reminder's name,
	// and ImportReminderDue gives its due time.
	KindReminder MessageKind = 10
	// KindHTTP is an HTTP request routed to the entity, handled by ExportHTTP (never by
	// ExportReceive); the source is empty.
	KindHTTP MessageKind = 11
)

// Code is what the v1 host functions return.
type Code int32

const (
	CodeOK           Code = 0
	CodeError        Code = 1
	CodeNotFound     Code = 2
	CodeDeleted      Code = 3
	CodeTimeout      Code = 4
	CodeAskCycle     Code = 5
	CodeUnavailable  Code = 6
	CodeBadRequest   Code = 7
	CodeNotAllowed   Code = 8
	CodeEntityError  Code = 9
	CodeTypeMismatch Code = 10
	// Outbound HTTP (ImportHTTPRequest): the URL, or a redirect, is off the type's
	// allowlist or reaches a private address not named in it; the response is over the
	// type's cap; the request failed (connection, DNS, TLS, too many redirects); the
	// entity's request rate is spent.
	CodeEgressDenied      Code = 11
	CodeEgressTooLarge    Code = 12
	CodeEgressFailed      Code = 13
	CodeEgressRateLimited Code = 14
	// CodeReadOnly: the call would change something, inside shardhost_query.
	CodeReadOnly Code = 15
)

// Clocks of ImportNow.
const (
	ClockWall      int32 = 0
	ClockMonotonic int32 = 1
)

// Limits of the v1 host functions.
const (
	// MaxTimerName is the longest timer name, in bytes.
	MaxTimerName = 256
	// MaxTimerMessage is the largest timer message, in bytes (64 KiB).
	MaxTimerMessage = 64 << 10
	// MaxTimers is the most timers one entity may have running.
	MaxTimers = 1000
	// MaxRandom is the most bytes one ImportRandom call fills (64 KiB).
	MaxRandom = 64 << 10
	// DefaultCallBudget is the default number of host function calls one message (or
	// hook) may make; the call past it traps.
	DefaultCallBudget = 10000
	// MaxIdempotencyKey is the longest idempotency key of ImportTellKey and
	// ImportAskKey, in bytes.
	MaxIdempotencyKey = 256
	// MaxHTTPURL is the longest URL of ImportHTTPRequest, in bytes.
	MaxHTTPURL = 8 << 10
	// MaxHTTPHeaders is the most bytes of request headers of ImportHTTPRequest (64 KiB).
	MaxHTTPHeaders = 64 << 10
	// MaxReminderName is the longest reminder name, in bytes.
	MaxReminderName = 128
	// MaxReminderPayload is the largest reminder payload, in bytes (64 KiB).
	MaxReminderPayload = 64 << 10
	// MaxReminders is the most reminders one entity may have.
	MaxReminders = 100
	// MinReminderIntervalMs is the shortest interval of a repeating reminder, in
	// milliseconds.
	MinReminderIntervalMs = 1000
)

// Status is what ExportReceive returns.
type Status int32

const (
	// StatusOK: the message was handled; the reply (possibly empty) goes to the asker.
	StatusOK Status = 0
	// StatusError: the entity rejected the message; the reply is the error text, which
	// the asker receives as an error. The entity keeps running.
	StatusError Status = 1
	// StatusNoSnapshot, from ExportSnapshot only: the guest keeps no guest-level
	// snapshot; the host takes a transparent one.
	StatusNoSnapshot Status = 2
	// StatusNoHook, from ExportOnPassivate only: the entity has no hook and nothing ran,
	// so its state is as it was (the host need not save it again).
	StatusNoHook Status = 2
	// StatusNoQuery, from ExportQuery only: the entity answers no query (an SDK's
	// entity without a query method); the host says how to add one.
	StatusNoQuery Status = 2
	// StatusNoHTTP, from ExportHTTP only: the entity serves no HTTP (an SDK's entity
	// without an HTTP handler); the caller gets 501 Not Implemented.
	StatusNoHTTP Status = 2
)

// LogLevel is the level argument of ImportLog. The values are those of log/slog.
type LogLevel int32

const (
	LogDebug LogLevel = -4
	LogInfo  LogLevel = 0
	LogWarn  LogLevel = 4
	LogError LogLevel = 8
)

// MaxMessageSize is the largest message or reply the host passes through the ABI by
// default, in bytes (1 MiB). Hosts may be configured lower or higher.
const MaxMessageSize = 1 << 20

// MaxSnapshotSize is the largest guest-level snapshot (ExportSnapshot) a host accepts, in
// bytes (4 MiB): the entity's own encoding of its state, meant to be compact. (The
// host's entity state store takes larger states, transparent snapshots of an instance's
// memory, up to its own cap, 64 MiB by default, in chunks.)
const MaxSnapshotSize = 4 << 20

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
