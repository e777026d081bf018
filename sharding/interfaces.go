// What sharding needs of the embedder and of package cluster: the entities and their
// factory, the type resolver, membership and messaging.

package sharding

import (
	"context"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// Membership is what sharding needs of cluster membership; *cluster.Membership has it.
// The shard coordinator runs as a cluster singleton, which needs View, Self, Subscribe
// and RegisterLeaveHook (cluster.SingletonMembership); regions and the state store read
// the members.
type Membership interface {
	cluster.SingletonMembership
	Members() []cluster.Member
	Member(address string) (cluster.Member, bool)
	// Now reads the clock of View.MajorityContact: the hosting lease and the
	// DownRemovalMargin are measured on it.
	Now() time.Time
}

// Messenger is what sharding needs of node-to-node messaging; *cluster.Messenger has it.
// Its methods must not keep body once they return (sharding sends from pooled buffers),
// as *cluster.Messenger's do not: its transport encodes the frame before Send returns.
type Messenger interface {
	Handle(topic string, h cluster.Handler)
	Tell(addr, topic string, body []byte) error
	TellContext(ctx context.Context, addr, topic string, body []byte) error
	Request(ctx context.Context, addr, topic string, body []byte) ([]byte, error)
	RequestAsync(addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error))
	RequestAsyncContext(ctx context.Context, addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error))
}

// Entity is one active entity. Calls come from one goroutine at a time.
type Entity interface {
	// Receive handles one message and returns the reply. Errors should be CodedErrors
	// so that remote askers learn their kind.
	Receive(ctx context.Context, payload []byte) ([]byte, error)
	// Snapshot returns the entity's state, to be given to NewEntity of a later
	// incarnation (after passivation, handoff or a crash); nil if it keeps none. It is
	// called between messages.
	Snapshot(ctx context.Context) ([]byte, error)
	// Stop releases the entity; no call follows.
	Stop(ctx context.Context)
}

// EntityLifecycle is implemented by an Entity that can end, or ask to end, on its own;
// the region asks after each message.
type EntityLifecycle interface {
	// Terminated reports that the entity is gone (a wasm instance that trapped): the
	// region stops it without saving its state, and the next message activates it again
	// from its last saved state.
	Terminated() bool
	// PassivationRequested reports that the entity asked to be passivated after the
	// message (Akka's context.passivate), and clears the request. Its state is saved and
	// it is stopped; messages that arrive meanwhile go to the next incarnation.
	PassivationRequested() bool
}

// EntityStopHook is implemented by an Entity that wants to act before it is stopped with
// its state saved (passivation, handoff, shutdown; not after a failure nor when fenced).
// BeforeStop runs on the entity's mailbox goroutine just before the final Snapshot and
// reports whether it may have changed the entity's state.
type EntityStopHook interface {
	BeforeStop(ctx context.Context) bool
}

// EntityStateSaved is implemented by an Entity that wants to know when the state its
// last Snapshot returned is stored (an entity whose snapshots are deltas against an
// earlier saved state, host/checkpoint.go, chains a delta only to a state the store
// acknowledged). StateSaved runs on the entity's mailbox goroutine right after the
// store acknowledged a Save of it, before the next message. It is not called when the
// Save failed, nor for the snapshots a handoff saves in batches (the entity stops).
type EntityStateSaved interface {
	StateSaved()
}

// EntityFactory activates entities. NewEntity is called on the entity's mailbox
// goroutine when its first message arrives, and may block for the activation. state is
// the entity's last saved snapshot, or nil for a new entity.
type EntityFactory interface {
	NewEntity(ctx context.Context, entityType, entityID string, state []byte) (Entity, error)
}

// TypeResolver tells sharding about the entity types of the cluster.
type TypeResolver interface {
	// EntityType returns the settings of a type deployed in the cluster, making it
	// available on this member if needed (which may take network round trips). It
	// returns an error wrapping ErrUnknownEntityType for a type nobody deployed.
	EntityType(ctx context.Context, name string) (TypeSettings, error)
}
