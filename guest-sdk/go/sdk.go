// Package shardhost is the Go guest SDK for shardhost entities: with it an entity is a
// type with a Receive method and one call to Register.
//
//	type counter struct{ n int }
//
//	func (c *counter) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
//		c.n++
//		return []byte(strconv.Itoa(c.n)), nil
//	}
//
//	func init() { shardhost.Register(func(id string) shardhost.Entity { return &counter{} }) }
//	func main() {}
//
// Build with Go's wasip1 port (or TinyGo) as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter.wasm .
//
// An entity that also implements Snapshotter saves its state in its own encoding, so that
// the state survives a redeploy with new code; otherwise the host snapshots the instance's
// memory. Context.Passivate asks the host to passivate the entity.
//
// The SDK implements ABI version 0 (abi/SPEC.md in the shardhost repository). It uses no
// reflection and no dependencies beyond the standard library, so TinyGo can build it.
// Entity code is tested without a host with Harness.
package shardhost

import (
	"errors"
	"fmt"
)

// ABIVersion is the host ABI version this SDK implements.
const ABIVersion = 0

// Entity is the code of one entity. The host calls Receive for each message, one at a
// time and in order; the returned bytes are the reply to the asker (ignored for a tell),
// and a non-nil error is delivered to the asker as an error. An entity keeps its state in
// its own fields: one wasm instance hosts exactly one entity. The host saves that state
// between messages (on passivation, handoff, shutdown, and as the type's checkpoint policy
// says) and the next incarnation starts from it: see Snapshotter.
type Entity interface {
	Receive(ctx *Context, msg []byte) ([]byte, error)
}

// Snapshotter is implemented by an entity that saves its state itself (a guest-level
// snapshot) instead of leaving it to the host.
//
// Such state survives a redeploy of the entity type with new code: the next incarnation
// runs the new code, whose Restore reads the state the old code's Snapshot gave, so the
// encoding is the entity's to version. Without Snapshotter the host takes a transparent
// snapshot: a copy of the instance's linear memory and globals, which only the module it
// was taken from can take up (after a redeploy the entity goes on running its old module
// until its state is guest-level).
//
// The host calls Snapshot between messages, never during Receive. The state is capped at
// MaxSnapshotSize bytes (abi.MaxSnapshotSize, 4 MiB); a larger one fails the snapshot
// with ErrSnapshotTooLarge, as does an error from Snapshot. The host copies the bytes.
//
// Restore is called at most once, on an entity fresh from the Factory, before its first
// message, with a state that Snapshot gave (possibly in an earlier version of the code).
// It may keep state: the SDK does not reuse the buffer. An error fails the activation;
// the host keeps the state for a later attempt, which starts from a new instance.
type Snapshotter interface {
	// Snapshot returns the entity's state in its own encoding.
	Snapshot() ([]byte, error)
	// Restore takes up a state that Snapshot gave, before the first message.
	Restore(state []byte) error
}

// MaxSnapshotSize is the largest state Snapshotter.Snapshot may return, in bytes (4 MiB):
// abi.MaxSnapshotSize, the size of one frame of the host's entity state store.
const MaxSnapshotSize = 4 << 20

// Factory creates the entity with the given ID. It is called once per instance: when the
// first message arrives, or before it when the host restores a guest-level snapshot.
type Factory func(entityID string) Entity

// Register sets the factory of the module's entities. Call it from an init function (a
// reactor module's main is never run). Registering twice panics.
func Register(f Factory) {
	if f == nil {
		panic("shardhost: Register(nil)")
	}
	if registered != nil {
		panic("shardhost: Register called twice")
	}
	registered = f
}

var registered Factory

// LogLevel is the level of a log line; the values are log/slog's.
type LogLevel int32

const (
	LevelDebug LogLevel = -4
	LevelInfo  LogLevel = 0
	LevelWarn  LogLevel = 4
	LevelError LogLevel = 8
)

// host is what the SDK needs from the host: the real one (wasm imports) or a Harness.
type host interface {
	entityID() string
	entityType() string
	log(level LogLevel, msg string)
	passivate()
}

// Status codes the exports return (abi.Status).
const (
	statusOK         int32 = 0
	statusError      int32 = 1
	statusNoSnapshot int32 = 2
)

// Context gives an entity access to the host during Receive. It is valid only during the
// Receive call it was passed to.
type Context struct {
	h host
}

// EntityID returns the entity's ID.
func (c *Context) EntityID() string { return c.h.entityID() }

// EntityType returns the name of the entity's type.
func (c *Context) EntityType() string { return c.h.entityType() }

// Log writes msg into the host's log at level.
func (c *Context) Log(level LogLevel, msg string) { c.h.log(level, msg) }

// Logf formats and writes a line into the host's log at level.
func (c *Context) Logf(level LogLevel, format string, args ...any) {
	c.h.log(level, fmt.Sprintf(format, args...))
}

// Passivate asks the host to passivate the entity once the current message is handled:
// the host saves its state (through Snapshot for a Snapshotter) and releases its instance,
// and messages that arrive meanwhile go to the next incarnation, which starts from that
// state: Akka's Passivate, Orleans' DeactivateOnIdle. The reply to the current message
// is delivered as usual; calling Passivate again changes nothing.
func (c *Context) Passivate() { c.h.passivate() }

var (
	// ErrNotRegistered is returned for every message of a module that never called
	// Register.
	ErrNotRegistered = errors.New("shardhost: no entity registered (call shardhost.Register in an init function)")
	// ErrNotSnapshotter fails a restore of guest-level state into an entity that does not
	// implement Snapshotter.
	ErrNotSnapshotter = errors.New("shardhost: entity does not implement Snapshotter")
	// ErrSnapshotTooLarge fails a snapshot whose state is over MaxSnapshotSize bytes.
	ErrSnapshotTooLarge = errors.New("shardhost: snapshot too large")
	// ErrRestoreAfterStart fails a restore into an entity that already exists: a state is
	// taken up only before the first message.
	ErrRestoreAfterStart = errors.New("shardhost: restore after the entity started")

	errNilEntity = errors.New("shardhost: the factory returned a nil entity")
)

// dispatcher delivers messages, snapshots and restores to the one entity of an instance.
// The wasm exports and Harness both go through it.
type dispatcher struct {
	h      host
	ctx    Context
	entity Entity
}

// create makes the entity through the registered factory.
func (d *dispatcher) create() error {
	if registered == nil {
		return ErrNotRegistered
	}
	d.ctx.h = d.h
	d.entity = registered(d.h.entityID())
	if d.entity == nil {
		return errNilEntity
	}
	return nil
}

// receive hands msg to the entity, creating it first if needed, and returns the reply
// and whether it is an error text.
func (d *dispatcher) receive(msg []byte) (reply []byte, isErr bool) {
	if d.entity == nil {
		if err := d.create(); err != nil {
			return []byte(err.Error()), true
		}
	}
	out, err := d.entity.Receive(&d.ctx, msg)
	if err != nil {
		return []byte(err.Error()), true
	}
	return out, false
}

// snapshot returns the entity's guest-level state. ok is false when there is none to
// take, because no entity exists yet or it does not implement Snapshotter: the host then
// takes a transparent snapshot. An error (ok is true) fails the snapshot.
func (d *dispatcher) snapshot() (state []byte, ok bool, err error) {
	s, ok := d.entity.(Snapshotter)
	if !ok {
		return nil, false, nil
	}
	state, err = s.Snapshot()
	if err != nil {
		return nil, true, err
	}
	if len(state) > MaxSnapshotSize {
		return nil, true, fmt.Errorf("%w: %d bytes, the cap is %d", ErrSnapshotTooLarge, len(state), MaxSnapshotSize)
	}
	return state, true, nil
}

// restore creates the entity and hands it state. On an error the entity is dropped, so
// that a later attempt starts from a fresh one.
func (d *dispatcher) restore(state []byte) error {
	if d.entity != nil {
		return ErrRestoreAfterStart
	}
	if err := d.create(); err != nil {
		d.entity = nil
		return err
	}
	s, ok := d.entity.(Snapshotter)
	if !ok {
		d.entity = nil
		return ErrNotSnapshotter
	}
	if err := s.Restore(state); err != nil {
		d.entity = nil
		return err
	}
	return nil
}

// ShardID returns the shard of an entity: the 64-bit FNV-1a hash of the entity ID's
// UTF-8 bytes modulo numberOfShards, exactly as the host computes it (abi/SPEC.md).
// numberOfShards must be positive.
func ShardID(entityID string, numberOfShards int) int {
	if numberOfShards <= 0 {
		panic("shardhost: number of shards must be positive")
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(entityID); i++ {
		h ^= uint64(entityID[i])
		h *= 1099511628211
	}
	return int(h % uint64(numberOfShards))
}
