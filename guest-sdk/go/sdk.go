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
// its own fields: one wasm instance hosts exactly one entity.
type Entity interface {
	Receive(ctx *Context, msg []byte) ([]byte, error)
}

// Factory creates the entity with the given ID. It is called once per instance, when the
// first message arrives.
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
}

// Context gives an entity access to the host during Receive.
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

// ErrNotRegistered is returned for every message of a module that never called Register.
var ErrNotRegistered = errors.New("shardhost: no entity registered (call shardhost.Register in an init function)")

// dispatcher delivers messages to the one entity of an instance.
type dispatcher struct {
	h      host
	ctx    Context
	entity Entity
}

// receive hands msg to the entity, creating it first if needed, and returns the reply
// and whether it is an error text.
func (d *dispatcher) receive(msg []byte) (reply []byte, isErr bool) {
	if d.entity == nil {
		if registered == nil {
			return []byte(ErrNotRegistered.Error()), true
		}
		d.ctx.h = d.h
		d.entity = registered(d.h.entityID())
		if d.entity == nil {
			return []byte("shardhost: the factory returned a nil entity"), true
		}
	}
	out, err := d.entity.Receive(&d.ctx, msg)
	if err != nil {
		return []byte(err.Error()), true
	}
	return out, false
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
