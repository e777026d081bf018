package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/shardhost/shardhost/internal/boltfile"
)

// moduleStore keeps entity modules as content-addressed files under the data directory
// (modules/<sha256>.wasm) and their compiled forms in memory, one per digest. A module
// this member lacks is fetched from a peer that has it and checked against its digest.
//
// A module enters the store validated by Runtime.Load (on wazero's interpreter, unless
// the compilation cache has it) and its file written and fsynced; Module.
// CompileInBackground compiles it.
type moduleStore struct {
	rt  *Runtime
	dir string
	log *slog.Logger
	// fetch gets a module's bytes from the members at the given addresses, in order.
	fetch func(ctx context.Context, digest string, from []string) ([]byte, error)

	mu       sync.Mutex
	compiled map[string]*Module
	group    singleflight.Group
}

func newModuleStore(rt *Runtime, dir string, log *slog.Logger) (*moduleStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("host: module directory: %w", err)
	}
	return &moduleStore{rt: rt, dir: dir, log: log, compiled: map[string]*Module{}}, nil
}

func (s *moduleStore) path(digest string) string { return filepath.Join(s.dir, digest+".wasm") }

// has reports whether the module's file is in this member's store.
func (s *moduleStore) has(digest string) bool {
	if !validDigest(digest) {
		return false
	}
	_, err := os.Stat(s.path(digest))
	return err == nil
}

// validDigest reports whether d is a hex SHA-256 as Digest writes it: only such names
// ever become file names.
func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// put validates a module (Runtime.Load), stores it durably, and returns it; it runs on
// the interpreter until Module.CompileInBackground has compiled it. Nothing is stored
// of a module that fails its validation.
func (s *moduleStore) put(ctx context.Context, wasm []byte) (*Module, error) {
	m, err := s.rt.Load(ctx, wasm)
	if err != nil {
		return nil, err
	}
	if err := s.write(m.Digest, wasm); err != nil {
		m.Close(ctx)
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.compiled[m.Digest]; ok {
		m.Close(ctx)
		return prev, nil
	}
	s.compiled[m.Digest] = m
	return m, nil
}

// write stores a module's file, fsynced with its directory entry, unless it is there.
func (s *moduleStore) write(digest string, wasm []byte) error {
	if _, err := os.Stat(s.path(digest)); err == nil {
		return nil
	}
	if err := writeFileAtomic(s.path(digest), wasm); err != nil {
		return fmt.Errorf("host: storing module: %w", err)
	}
	if err := boltfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("host: storing module: %w", err)
	}
	return nil
}

// get returns the module with the digest: from memory, from its file, or fetched from
// the members at from (and then validated and stored as by put). Concurrent calls for
// one digest share the work. It does not start the module's compilation (compile).
func (s *moduleStore) get(ctx context.Context, digest string, from []string) (*Module, error) {
	if !validDigest(digest) {
		return nil, fmt.Errorf("%w: bad module digest %q", ErrModuleUnavailable, digest)
	}
	s.mu.Lock()
	m, ok := s.compiled[digest]
	s.mu.Unlock()
	if ok {
		return m, nil
	}
	v, err, _ := s.group.Do(digest, func() (any, error) {
		wasm, err := os.ReadFile(s.path(digest))
		if errors.Is(err, os.ErrNotExist) {
			if s.fetch == nil {
				return nil, fmt.Errorf("%w: module %s is not on this member", ErrModuleUnavailable, digest)
			}
			wasm, err = s.fetch(ctx, digest, from)
		}
		if err != nil {
			return nil, err
		}
		if got := Digest(wasm); got != digest {
			return nil, fmt.Errorf("%w: module %s arrived with digest %s", ErrModuleUnavailable, digest, got)
		}
		return s.put(ctx, wasm)
	})
	if err != nil {
		return nil, err
	}
	return v.(*Module), nil
}

// loaded returns the module with the digest if this member has loaded it, nil otherwise.
func (s *moduleStore) loaded(digest string) *Module {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compiled[digest]
}

// bytes returns a stored module's bytes, for a peer that fetches it.
func (s *moduleStore) bytes(digest string) ([]byte, error) {
	if !validDigest(digest) {
		return nil, fmt.Errorf("%w: bad module digest %q", ErrBadRequest, digest)
	}
	b, err := os.ReadFile(s.path(digest))
	if err != nil {
		return nil, fmt.Errorf("%w: module %s is not on this member", ErrModuleUnavailable, digest)
	}
	return b, nil
}
