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
// reports whether it may have changed the entity's state, or that the state is to be
// saved whole anyway (under the journal, a base instead of the records since the last:
// a wasm entity whose type has a newer module says so, so that its next activation
// starts from its state rather than replaying its records on the newer code).
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

// JournaledEntity is implemented by an Entity whose messages a journal records with
// more than their payload (docs/design.md, "The journal"). Without it, a journaled
// entity's record holds the message alone, and a replay hands the entity its journaled
// messages again through Receive, which suits an entity whose Receive is a function of
// its state and the message.
//
// The calls come from the entity's mailbox goroutine, as Receive's do.
type JournaledEntity interface {
	Entity
	// JournalEffects returns, after a Receive whose MessageInfo says Gated, what the
	// record of the message keeps beyond it (for a wasm entity, the answers of its
	// host calls, which a replay gives again), and whether the message is to be
	// journaled at all: false when it left the entity's state as it was (a trap, after
	// which the entity was restored without it).
	JournalEffects() (effects []byte, journal bool)
	// ReleaseEffects releases what the gated Receives since the last release held back
	// (their tells and their timers), in the order they were made: their records are
	// durable. Several messages may be handled before one release, when their records
	// are appended together. After a failed append no call comes: the entity
	// is stopped without saving, and what it held is dropped.
	ReleaseEffects(ctx context.Context)
	// Replay brings an entity just made by NewEntity from its base to the state after
	// entries, the journal's records since that base, in order; it releases nothing
	// (their effects were released when they were handled). An error leaves the entity
	// unusable: the activation fails and the entity is stopped.
	Replay(ctx context.Context, entries []JournalEntry) error
	// BaseDue reports that the entity would be better served by a new base than by a
	// longer replay (a wasm entity: replaying its journal since the last base would take
	// longer than about 20 snapshots). Sharding then saves a base after the message.
	BaseDue() bool
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
