package ddata

import (
	"errors"
	"fmt"
)

// Errors of ddata.
var (
	ErrTypeMismatch = errors.New("ddata: values of different types")
	ErrMalformed    = errors.New("ddata: malformed encoded data")
	ErrUnknownType  = errors.New("ddata: unknown data type")
)

// NodeID identifies a replica: a member's unique address, "host:port#uid". NodeIDs are
// ordered by string comparison (Akka orders UniqueAddress the same way: address, then
// UID), which breaks ties such as LWWRegister's.
type NodeID string

// DataType names a CRDT type in encodings, the ABI and the CLI.
type DataType string

// The data types.
const (
	TypeGCounter     DataType = "gcounter"
	TypePNCounter    DataType = "pncounter"
	TypeGSet         DataType = "gset"
	TypeORSet        DataType = "orset"
	TypeORMap        DataType = "ormap"
	TypeORMultiMap   DataType = "ormultimap"
	TypeLWWMap       DataType = "lwwmap"
	TypePNCounterMap DataType = "pncountermap"
	TypeLWWRegister  DataType = "lwwregister"
	TypeFlag         DataType = "flag"
	TypeEpochMap     DataType = "epochmap"
)

// ReplicatedData is a state-based CRDT: a value of a join-semilattice.
type ReplicatedData interface {
	// Type returns the value's data type.
	Type() DataType
	// Merge returns the least upper bound of the receiver and other; neither changes.
	// It returns an error wrapping ErrTypeMismatch when other is of another type.
	Merge(other ReplicatedData) (ReplicatedData, error)
	// Value returns the value as plain Go data for JSON: a counter as *big.Int, a set
	// as a sorted []string, a map as map[string]any, a register as its value, a flag
	// as bool.
	Value() any
}

// DeltaReplicatedData is implemented by types whose updates return deltas.
type DeltaReplicatedData interface {
	ReplicatedData
	// RequiresCausalDeliveryOfDeltas reports whether the replicator must deliver a
	// node's deltas in the order they were made (Akka's RequiresCausalDeliveryOfDeltas).
	RequiresCausalDeliveryOfDeltas() bool
}

// RemovedNodePruning is implemented by types that keep data per node (Akka's
// RemovedNodePruning): when a member is removed, its part is collapsed into another
// node's so that the value stops growing with every member that ever took part.
type RemovedNodePruning interface {
	ReplicatedData
	// ModifiedByNodes lists the nodes that have data in the value, sorted.
	ModifiedByNodes() []NodeID
	// NeedPruningFrom reports whether removed has data in the value.
	NeedPruningFrom(removed NodeID) bool
	// Prune moves removed's data to collapseInto, keeping the value's Value.
	Prune(removed, collapseInto NodeID) ReplicatedData
	// PruningCleanup drops what is left of removed's data after pruning, so that an old
	// replica's data for removed cannot come back.
	PruningCleanup(removed NodeID) ReplicatedData
}

// mismatch returns the error for a merge of different types. It never calls a method
// of got, which may be a typed nil pointer.
func mismatch(want DataType, got ReplicatedData) error {
	if got == nil {
		return fmt.Errorf("%w: %s with nil", ErrTypeMismatch, want)
	}
	return fmt.Errorf("%w: %s with %T", ErrTypeMismatch, want, got)
}
