package shardhost

import "errors"

// Harness runs an entity without a host, for unit tests of entity code: it plays the
// host's part of the ABI (entity ID and type, log, passivation, snapshots) and delivers
// messages, snapshots and restores through the same path as the wasm exports.
//
// A test of a Snapshotter passivates and reactivates an entity by taking Snapshot from one
// harness and handing it to Restore of a fresh one.
type Harness struct {
	typ, id    string
	f          Factory
	d          dispatcher
	sent       bool
	passivated bool
	// Logs holds every line the entity logged, as "LEVEL text".
	Logs []string
}

var _ host = (*Harness)(nil)

// NewHarness returns a harness for one entity of the given type and ID, created by f.
func NewHarness(entityType, entityID string, f Factory) *Harness {
	h := &Harness{typ: entityType, id: entityID, f: f}
	h.d.h = h
	return h
}

// Send delivers msg to the entity (creating it on the first call) and returns its reply,
// or its error.
func (h *Harness) Send(msg []byte) ([]byte, error) {
	defer h.useFactory()()
	h.sent = true
	h.passivated = false
	out, isErr := h.d.receive(msg)
	if isErr {
		return nil, errors.New(string(out))
	}
	return out, nil
}

// Passivated reports whether the entity called Context.Passivate while it handled the
// last message Send delivered.
func (h *Harness) Passivated() bool { return h.passivated }

// Snapshot takes a snapshot of the entity as the host does between messages. ok is false
// when the entity keeps no guest-level snapshot, because it does not implement
// Snapshotter or no message has created it yet: the host would copy its memory instead.
// An error from the entity's Snapshot, or ErrSnapshotTooLarge, comes with ok true.
func (h *Harness) Snapshot() (state []byte, ok bool, err error) {
	return h.d.snapshot()
}

// Restore starts the entity from state, as the host starts a new incarnation from a
// guest-level snapshot: it creates the entity and calls its Restore with a copy of state.
// Call it on a fresh harness, before Send; afterwards it returns ErrRestoreAfterStart. It
// returns ErrNotSnapshotter for an entity that does not implement Snapshotter, or the
// entity's error; after an error the entity is dropped, so that Restore may be tried
// again or Send starts a fresh entity.
func (h *Harness) Restore(state []byte) error {
	if h.sent {
		return ErrRestoreAfterStart
	}
	defer h.useFactory()()
	return h.d.restore(append([]byte(nil), state...))
}

// useFactory makes h's factory the registered one, and returns the function that puts
// the previous one back.
func (h *Harness) useFactory() (undo func()) {
	saved := registered
	registered = h.f
	return func() { registered = saved }
}

func (h *Harness) entityID() string   { return h.id }
func (h *Harness) entityType() string { return h.typ }
func (h *Harness) passivate()         { h.passivated = true }
func (h *Harness) log(level LogLevel, msg string) {
	name := "INFO"
	switch {
	case level < LevelInfo:
		name = "DEBUG"
	case level >= LevelError:
		name = "ERROR"
	case level >= LevelWarn:
		name = "WARN"
	}
	h.Logs = append(h.Logs, name+" "+msg)
}
