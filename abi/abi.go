// Package abi is the contract between a shardhost host and the wasm modules it runs:
// the ABI version, the names and signatures of the exports a module provides and of the
// host functions it may import, their encodings and error codes, and the stable shard
// hash that hosts and guest SDKs share. SPEC.md in this directory is the normative text;
// this package holds the same facts as Go constants.
//
// The package uses the standard library only, so that guest SDKs built with TinyGo or
// Go's wasip1 port can depend on it.
package abi

// Version is the ABI version this package describes. A module declares the version it was
// built for by exporting the function named VersionMarker(Version).
const Version = 0

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
	// ExportGlobalPrefix is reserved: the host exports a module's mutable globals under
	// names "shardhost_g<index>" for transparent snapshots. A module must not use it.
	ExportGlobalPrefix = "shardhost_g"
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
// bytes (4 MiB): a snapshot travels in one frame of the entity state store.
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
