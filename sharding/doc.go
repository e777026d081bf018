// Package sharding is cluster sharding as Akka describes it: every member runs a shard
// region per entity type, which routes each message to the region that hosts the
// message's shard (at most one hop); a shard coordinator on the oldest member decides
// where shards live with a pluggable allocation strategy; regions cache shard homes and
// buffer messages while a home is being resolved. Entities are created on demand by an
// EntityFactory (the host's wasm instances) and get their messages one at a time, in
// order per sender.
//
// Design: docs/design.md ("Cluster sharding"), after Akka Cluster Sharding ("How it
// works", scenarios 1 and 2).
//
// # What an embedder uses
//
// Sharding, with New, Config and DefaultConfig, is the entry point: Tell, Ask,
// StartType and StopType, Passivate, the region states. The embedder supplies an
// EntityFactory that makes Entity values (optionally EntityLifecycle and
// EntityStopHook), a TypeResolver of TypeSettings, and the Membership and Messenger of
// package cluster. ShardAllocationStrategy, with LeastShardAllocationStrategy and
// PriorityAllocationStrategy, is the pluggable allocation. StateStore is the pluggable
// entity state store: MemoryStateStore is its in-memory twin, package replstore the
// built-in one, package pgstore the PostgreSQL one, and statestoretest the contract
// every store passes; BatchStateStore, ExternalStateStore and TypeStateDeleter are
// what a store may also do. The errors (ErrUnknownEntityType, ErrShardUnavailable,
// ErrStateNotSaved, ...) and their codes (ErrorCode, RemoteError) keep their meaning
// across members.
//
// StoredShard is what the shardhost command's state export and import move between
// stores. Everything else is unexported: the coordinator, the regions' routing and buffers,
// the state store's instrumentation, the wire messages.
package sharding
