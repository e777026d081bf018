package ddata

import (
	"errors"
	"fmt"
	"sync"
)

// maxDurableKeyLen is the longest key, in bytes, that a DurableStore accepts: bbolt's
// limit (bbolt.MaxKeySize, 32 KiB). MemoryStore enforces the same limit so that tests on
// it see what production sees.
const maxDurableKeyLen = 32 << 10

// checkDurableEntries rejects a Store batch that a durable store cannot write: an empty
// key (bbolt has no empty key) or a key longer than maxDurableKeyLen. The whole batch is
// refused, so nothing of it is written.
func checkDurableEntries(entries map[string][]byte) error {
	for k := range entries {
		switch {
		case k == "":
			return fmt.Errorf("%w: empty key", ErrStoreFailure)
		case len(k) > maxDurableKeyLen:
			return fmt.Errorf("%w: key of %d bytes, longer than %d", ErrStoreFailure, len(k), maxDurableKeyLen)
		}
	}
	return nil
}

// errStoreClosed is returned, wrapped with the store's name, by Load and Store after
// Close.
var errStoreClosed = fmt.Errorf("%w: store closed", ErrStoreFailure)

// errInjected is the failure FailNext(nil) injects.
var errInjected = errors.New("injected failure")

// MemoryStore is the in-memory DurableStore: the twin of BoltStore for deterministic
// tests of the replicator. It keeps the same contract, without a disk: Store is atomic
// (all of a batch or nothing), a nil value deletes and an empty non-nil value is a value,
// keys are 1 to 32 KiB bytes, and Load and Store copy, so callers may reuse their slices
// and maps. Calls after Close fail with an error wrapping ErrStoreFailure.
//
// For the "stop every member and start again" case, Reopen returns a new store holding
// what this one holds, as reopening a BoltStore's directory would. FailNext injects a
// failure into the next Store.
//
// A MemoryStore is safe for concurrent use; its zero value is not usable, call
// NewMemoryStore.
type MemoryStore struct {
	mu       sync.Mutex
	entries  map[string][]byte
	closed   bool
	failNext error // non-nil: the next Store fails with it and writes nothing
	stores   int   // successful Store calls
}

var _ DurableStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty, open MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: make(map[string][]byte)}
}

// Load returns a copy of every stored entry, key → bytes; values are never nil (an empty
// value loads as an empty non-nil slice). The map and slices belong to the caller.
// After Close it returns an error wrapping ErrStoreFailure.
func (s *MemoryStore) Load() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("memory store: %w", errStoreClosed)
	}
	return cloneDurableEntries(s.entries), nil
}

// Store writes every entry at once, or none: a nil value deletes its key (deleting an
// absent key is not an error), any other value, empty included, is stored as a copy.
// It fails, writing nothing, with an error wrapping ErrStoreFailure when a key is empty
// or longer than 32 KiB, after Close, or when FailNext armed a failure. An empty or nil
// map is a no-op that still counts as a Store.
func (s *MemoryStore) Store(entries map[string][]byte) error {
	if err := checkDurableEntries(entries); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory store: %w", errStoreClosed)
	}
	if err := s.failNext; err != nil {
		s.failNext = nil
		return fmt.Errorf("%w: memory store: %w", ErrStoreFailure, err)
	}
	for k, v := range entries {
		if v == nil {
			delete(s.entries, k)
			continue
		}
		s.entries[k] = append(make([]byte, 0, len(v)), v...)
	}
	s.stores++
	return nil
}

// Close marks the store closed; later Load and Store calls fail. The entries stay, for
// Reopen. Idempotent, and always returns nil.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// FailNext makes the next Store call fail with an error wrapping both ErrStoreFailure and
// err (a generic injected failure when err is nil), and write nothing. The failure is
// used once; a second FailNext before that Store replaces the first. For tests of how the
// replicator reports a failed write.
func (s *MemoryStore) FailNext(err error) {
	if err == nil {
		err = errInjected
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = err
}

// Stores returns how many Store calls have succeeded: a count of transactions, for tests
// of write batching.
func (s *MemoryStore) Stores() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stores
}

// Reopen returns a new, open MemoryStore holding a copy of this store's entries, whether
// this one is closed or not: what reopening a BoltStore's directory after a restart
// would find. The new store's Stores count starts at 0 and no failure is armed.
func (s *MemoryStore) Reopen() *MemoryStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &MemoryStore{entries: cloneDurableEntries(s.entries)}
}

// cloneDurableEntries copies a map of entries and every value in it, keeping empty values
// non-nil.
func cloneDurableEntries(entries map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(entries))
	for k, v := range entries {
		out[k] = append(make([]byte, 0, len(v)), v...)
	}
	return out
}
