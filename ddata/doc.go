// Package ddata is Distributed Data as Akka describes it: conflict-free replicated data
// types (CRDTs) that any member updates without coordination, and the Replicator that
// spreads them (deltas, gossip of digests, pruning of removed members, durable keys)
// and reads and writes them with per-call consistency levels.
//
// The CRDT types here are pure values: no I/O, no clock, no goroutines, and immutable
// (every update returns a new value, and a delta: the smallest value of the same type
// whose merge into any replica has the update's effect). They are delta-state CRDTs
// (Almeida, Shoker, Baquero, "Delta State Replicated Data Types", 2018): a delta is an
// ordinary value of its type and joins with Merge. Merge is commutative, associative
// and idempotent for every type, which the tests check on random values.
//
// Design: docs/design.md ("Distributed data"), after Akka's Distributed Data.
//
// # What an embedder uses
//
// The ten CRDT types (GCounter, PNCounter, GSet, ORSet, Flag, LWWRegister, ORMap,
// LWWMap, PNCounterMap, ORMultiMap) with their constructors, and the Replicator with
// ReplicatorConfig: Get, Update, Delete and Subscribe at a consistency level. An
// eleventh type, EpochMap (per integer key the value of the highest epoch), holds the
// shard coordinator's allocations compactly; it has no textual operation (ParseOp), so
// the ABI and the CLI read it but do not write it. The codec is public for the host's ABI, which carries values to and from guests. The
// replicator's wire messages, pruning state and durable store are unexported.
package ddata
