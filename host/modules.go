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
)

// moduleStore keeps entity modules as content-addressed files under the data directory
// (modules/<sha256>.wasm) and their compiled forms in memory. A module this member lacks
// is fetched from a peer that has it and checked against its digest.
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

// put validates and compiles a module, stores it, and returns it.
func (s *moduleStore) put(ctx context.Context, wasm []byte) (*Module, error) {
	m, err := s.rt.Compile(ctx, wasm)
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

func (s *moduleStore) write(digest string, wasm []byte) error {
	if _, err := os.Stat(s.path(digest)); err == nil {
		return nil
	}
	tmp, err := os.CreateTemp(s.dir, "incoming-*.wasm")
	if err != nil {
		return fmt.Errorf("host: storing module: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(wasm); err != nil {
		tmp.Close()
		return fmt.Errorf("host: storing module: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("host: storing module: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path(digest)); err != nil {
		return fmt.Errorf("host: storing module: %w", err)
	}
	return nil
}

// get returns the compiled module with the digest: from memory, from its file, or
// fetched from the members at from. Concurrent calls for one digest share the work.
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
