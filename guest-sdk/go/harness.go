package shardhost

import "errors"

// Harness runs an entity without a host, for unit tests of entity code: it plays the
// host's part of the ABI (entity ID and type, log) and delivers messages through the same
// path as the wasm exports.
type Harness struct {
	typ, id string
	f       Factory
	d       dispatcher
	// Logs holds every line the entity logged, as "LEVEL text".
	Logs []string
}

// NewHarness returns a harness for one entity of the given type and ID, created by f.
func NewHarness(entityType, entityID string, f Factory) *Harness {
	h := &Harness{typ: entityType, id: entityID, f: f}
	h.d.h = h
	return h
}

// Send delivers msg to the entity (creating it on the first call) and returns its reply,
// or its error.
func (h *Harness) Send(msg []byte) ([]byte, error) {
	saved := registered
	registered = h.f
	defer func() { registered = saved }()
	out, isErr := h.d.receive(msg)
	if isErr {
		return nil, errors.New(string(out))
	}
	return out, nil
}

func (h *Harness) entityID() string   { return h.id }
func (h *Harness) entityType() string { return h.typ }
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
