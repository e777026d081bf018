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
// Build it as a WASI reactor with TinyGo (a module of tens of KiB that starts in tens of
// microseconds) or with Go's wasip1 port (megabytes, milliseconds):
//
//	tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o counter.wasm .
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter.wasm .
//
// The SDK behaves the same under both. TinyGo 0.34 wants `go 1.23` or lower in go.mod and
// has no net package; with -scheduler=none an entity starts no goroutines (it needs
// none: the host delivers one message at a time); and a panic is never recovered, so it
// fails the message as a trap, as under Go's port when nothing recovers it.
//
// An entity's state is best explicit: an entity that implements Snapshotter saves its
// state in its own encoding, so that the state survives a redeploy with new code (embed
// Stateful for a state value that implements encoding.BinaryMarshaler and
// encoding.BinaryUnmarshaler, written with StateWriter and read with StateReader). An
// entity that does not, as the counter above, opts in to transparent state: the host
// snapshots the instance's memory, which only the same module can take up, so after a
// redeploy the entity stays on its old module (docs/state.md in the shardhost
// repository). Context.Passivate asks the host to passivate the entity; Activator and
// Passivator are called as an incarnation starts and stops.
//
// Through its Context an entity also talks to other entities (Tell, Ask, Forward; Sender
// and Kind tell where the current message comes from; TellWithKey and AskWithKey send
// with an idempotency key, so that the receiver handles a repeat once), uses the cluster's distributed
// data (the typed helpers PNCounter, ORSet, LWWMap and the others, or DDataUpdate,
// DDataGet and DDataDelete; Subscribe delivers a key's changes as messages of
// KindChanged), starts timers (StartTimer, StartRepeatingTimer: messages of KindTimer),
// reads the host's clocks (Now, Monotonic), random bytes (Random) and adds trace events.
// Host functions that fail return a *HostError, which errors.Is matches against ErrTimeout,
// ErrNotFound and the other sentinels.
//
// The SDK implements ABI version 1 (abi/SPEC.md in the shardhost repository). It uses no
// reflection and no dependencies beyond the standard library.
// Entity code is tested without a host with Harness, which fakes every host function.
package shardhost

import (
	"errors"
	"fmt"
	"strconv"
)

// ABIVersion is the host ABI version this SDK implements: a module built with it exports
// shardhost_abi_v1.
const ABIVersion = 1

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

// Migrator is implemented by a Snapshotter whose state's encoding changed between
// versions of its module: when the host moves an entity's state to a new version of
// the entity type's module (at the entity's next activation after a deploy, or by
// shardhost upgrade), it calls Migrate instead of Restore, with the type's version
// number of the module that saved the state (0 when the host does not know it), and
// the state that module's Snapshot gave. Migrate converts it and takes it up, as
// Restore would; an error (or a panic) refuses it, and the entity stays on the module
// that saved its state: nothing of the conversion is kept. An entity without Migrator
// gets such a state through Restore (abi/SPEC.md, "State: migrations").
type Migrator interface {
	Migrate(fromVersion uint64, state []byte) error
}

// Activator is implemented by an entity that does something as each incarnation starts:
// OnActivate is called once, before the first message, after the state is restored and
// after the host re-armed the timers and subscriptions saved with it (start timers or
// subscribe here). An error fails the activation: the message that caused it fails, and
// the next one tries again with a new instance. The Context is valid during the call;
// Kind is KindMessage and Sender empty.
type Activator interface {
	OnActivate(ctx *Context) error
}

// Passivator is implemented by an entity that does something before it stops for
// passivation, handoff or shutdown: OnPassivate is called once, before the host saves
// its state (not after a trap or a crash). It may use the Context except Tell, Ask,
// Forward and Passivate (the host refuses them with ErrNotAllowed). It is called after
// the last message and before Snapshot.
type Passivator interface {
	OnPassivate(ctx *Context)
}

// MaxSnapshotSize is the largest state Snapshotter.Snapshot may return, in bytes (4 MiB):
// abi.MaxSnapshotSize, the cap a host puts on a guest-level snapshot.
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
// The methods that return a Code also return the result (the value or the error text).
type host interface {
	entityID() string
	entityType() string
	log(level LogLevel, msg string)
	passivate()

	// v1; messageKind is called only during receive.
	messageKind() MessageKind
	sender() string
	tell(typ, id string, msg []byte) (Code, []byte)
	ask(typ, id string, msg []byte, timeoutMS int32) (Code, []byte)
	tellKey(typ, id string, msg []byte, key string) (Code, []byte)
	askKey(typ, id string, msg []byte, key string, timeoutMS int32) (Code, []byte)
	forward(typ, id string) (Code, []byte)
	ddataGet(key, cons string, timeoutMS int32) (Code, []byte)
	ddataUpdate(key, typ, op, cons string, timeoutMS int32) (Code, []byte)
	ddataDelete(key, cons string, timeoutMS int32) (Code, []byte)
	ddataSubscribe(key string) (Code, []byte)
	ddataUnsubscribe(key string) (Code, []byte)
	timerStart(name string, msg []byte, delayMS, intervalMS int64) (Code, []byte)
	timerCancel(name string) bool
	reminderSet(name string, dueMS, intervalMS int64, payload []byte) (Code, []byte)
	reminderCancel(name string) (Code, []byte)
	reminderList() (Code, []byte)
	reminderDue() int64
	now(clock int32) int64
	random(b []byte)
	traceEvent(name string)
}

// phase is the export the SDK is running in: some host functions are valid only in some.
type phase uint8

const (
	phaseIdle      phase = iota
	phaseReceive         // shardhost_receive
	phaseActivate        // shardhost_on_activate
	phasePassivate       // shardhost_on_passivate
)

// Status codes the exports return (abi.Status).
const (
	statusOK         int32 = 0
	statusError      int32 = 1
	statusNoSnapshot int32 = 2
	// statusNoHook, from shardhost_on_passivate: the entity has no hook; nothing ran.
	statusNoHook int32 = 2
)

// Context gives an entity access to the host during Receive (and the lifecycle hooks).
// It is valid only during the call it was passed to.
type Context struct {
	h     host
	phase phase
	// The current message's kind and sender, read from the host once per message: every
	// host call counts against the message's call budget.
	kind     MessageKind
	kindRead bool
	from     string
	fromRead bool
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
// Outside Receive it does nothing.
func (c *Context) Passivate() {
	if c.phase == phaseReceive {
		c.h.passivate()
	}
}

// begin prepares the context for a call of the entity in phase p.
func (c *Context) begin(p phase) {
	c.phase = p
	c.kind, c.kindRead = KindMessage, false
	c.from, c.fromRead = "", false
}

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
	// err is the error of the last receive (the entity's own, or its creation's), nil
	// after a reply: the Harness returns it as it is.
	err error
}

// end leaves the entity's call: the context is idle until the next one.
func (d *dispatcher) end() { d.ctx.phase = phaseIdle }

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
	d.err = nil
	if d.entity == nil {
		if err := d.create(); err != nil {
			d.err = err
			return []byte(err.Error()), true
		}
	}
	d.ctx.begin(phaseReceive)
	defer d.end()
	out, err := d.entity.Receive(&d.ctx, msg)
	if err != nil {
		d.err = err
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
		return nil, true, snapshotTooLarge(len(state))
	}
	return state, true, nil
}

// snapshotTooLarge is the error of a snapshot of size bytes, over MaxSnapshotSize: it
// wraps ErrSnapshotTooLarge. It is built without fmt, which would more than double a
// TinyGo module with explicit state.
type snapshotTooLarge int

func (n snapshotTooLarge) Error() string {
	return ErrSnapshotTooLarge.Error() + ": " + strconv.Itoa(int(n)) + " bytes, the cap is " + strconv.Itoa(MaxSnapshotSize)
}

func (n snapshotTooLarge) Unwrap() error { return ErrSnapshotTooLarge }

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

// migrate is restore for a state another version of the module saved: the entity's
// Migrator takes it up, or its Restore when it has none.
func (d *dispatcher) migrate(fromVersion uint64, state []byte) error {
	if d.entity != nil {
		return ErrRestoreAfterStart
	}
	if err := d.create(); err != nil {
		d.entity = nil
		return err
	}
	m, ok := d.entity.(Migrator)
	if !ok {
		d.entity = nil
		return d.restore(state)
	}
	if _, ok := d.entity.(Snapshotter); !ok {
		d.entity = nil
		return ErrNotSnapshotter
	}
	if err := m.Migrate(fromVersion, state); err != nil {
		d.entity = nil
		return err
	}
	return nil
}

// activate runs the entity's Activator, creating the entity first if no restore did. On
// an error the entity is dropped, so that the next message starts from a fresh one (the
// host uses a new instance).
func (d *dispatcher) activate() error {
	if d.entity == nil {
		if err := d.create(); err != nil {
			return err
		}
	}
	a, ok := d.entity.(Activator)
	if !ok {
		return nil
	}
	d.ctx.begin(phaseActivate)
	defer d.end()
	if err := a.OnActivate(&d.ctx); err != nil {
		d.entity = nil
		return err
	}
	return nil
}

// passivate runs the entity's Passivator, if there is an entity, and reports whether it
// ran one.
func (d *dispatcher) passivate() bool {
	p, ok := d.entity.(Passivator)
	if !ok {
		return false
	}
	d.ctx.begin(phasePassivate)
	defer d.end()
	p.OnPassivate(&d.ctx)
	return true
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
