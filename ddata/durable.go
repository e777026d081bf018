package ddata

import "errors"

// ErrStoreFailure wraps a failure of the durable store: the update may be in memory and
// replicated, but it is not on disk.
var ErrStoreFailure = errors.New("ddata: durable store failure")

// DurableStore keeps the entries of durable keys on disk, so that they survive a restart
// of every member (Akka's durable storage). Entries are the replicator's encoded
// envelopes, opaque to the store. Implementations are safe for concurrent use.
type DurableStore interface {
	// Load returns every stored entry, key → bytes.
	Load() (map[string][]byte, error)
	// Store writes the entries in one transaction and returns once they are on disk
	// (fsync). A nil value removes the key.
	Store(entries map[string][]byte) error
	// Close releases the store. Idempotent.
	Close() error
}
