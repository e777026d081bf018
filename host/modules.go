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
// A module enters the store validated by wasmRuntime.Load (on wazero's interpreter,
// unless the compilation cache has it) and its file written and fsynced;
// wasmModule.CompileInBackground compiles it. A member stores only what it has validated itself,
// and holds in memory only modules whose files are stored.
type moduleStore struct {
	rt  *wasmRuntime
	dir string
	log *slog.Logger
	// fetch gets a module's bytes from the members at the given addresses, in order.
	fetch func(ctx context.Context, digest string, from []string) ([]byte, error)

	mu       sync.Mutex
	compiled map[string]*wasmModule
	// storing counts the stores under way, by digest: discard leaves those modules be.
	storing map[string]int
	group   singleflight.Group
}

// tmpPattern names the files a module is written to before it is validated and renamed.
const tmpPattern = ".tmp-*"

func newModuleStore(rt *wasmRuntime, dir string, log *slog.Logger) (*moduleStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("host: module directory: %w", err)
	}
	// Files of modules being stored when the process stopped: never validated, or
	// never renamed into place.
	if stale, err := filepath.Glob(filepath.Join(dir, "*"+tmpPattern)); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	return &moduleStore{rt: rt, dir: dir, log: log, compiled: map[string]*wasmModule{}, storing: map[string]int{}}, nil
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

// validDigest reports whether d is a hex SHA-256 as moduleDigest writes it: only such names
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

// put validates a module whose moduleDigest is digest (wasmRuntime.Load), stores it
// durably, and returns it, with wrote true if this call (or one it joined) wrote its
// file; it runs on the interpreter until wasmModule.CompileInBackground has compiled
// it. Nothing is stored of a module that fails its validation. Concurrent calls for one
// digest share the work, with get's too.
func (s *moduleStore) put(ctx context.Context, digest string, wasm []byte) (m *wasmModule, wrote bool, err error) {
	if m := s.loaded(digest); m != nil {
		return m, false, nil
	}
	v, err, _ := s.group.Do(digest, func() (any, error) { return s.store(ctx, digest, wasm) })
	if err != nil {
		return nil, false, err
	}
	r := v.(stored)
	return r.m, r.wrote, nil
}

// stored is what store did.
type stored struct {
	m     *wasmModule
	wrote bool // the file was written, not found
}

// store is put's and get's work, under their singleflight: it validates the module
// and, meanwhile, writes and fsyncs it to a temporary file that it renames into place
// (and fsyncs the directory) once the module is valid, unless the file is there.
func (s *moduleStore) store(ctx context.Context, digest string, wasm []byte) (stored, error) {
	if m := s.loaded(digest); m != nil {
		return stored{m: m}, nil
	}
	s.mu.Lock()
	s.storing[digest]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.storing[digest]--; s.storing[digest] == 0 {
			delete(s.storing, digest)
		}
		s.mu.Unlock()
	}()
	type written struct {
		tmp string
		err error
	}
	var wrote chan written
	if _, err := os.Stat(s.path(digest)); err != nil {
		// The write and its fsync overlap the validation, which is CPU work.
		wrote = make(chan written, 1)
		go func() { // no owner: the call waits for it (<-wrote) on every path
			tmp, err := writeTemp(s.dir, digest+".wasm", wasm)
			wrote <- written{tmp, err}
		}()
	}
	m, err := s.rt.loadDigest(ctx, wasm, digest)
	if wrote != nil {
		w := <-wrote
		if err == nil && w.err == nil {
			if w.err = os.Rename(w.tmp, s.path(digest)); w.err == nil {
				w.tmp = "" // renamed into place
				w.err = boltfile.SyncDir(s.dir)
			}
		}
		if w.tmp != "" {
			os.Remove(w.tmp) // refused, or not renamed
		}
		if err == nil && w.err != nil {
			m.Close(ctx)
			err = fmt.Errorf("host: storing module: %w", w.err)
		}
	}
	if err != nil {
		return stored{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.compiled[digest]; ok {
		m.Close(ctx)
		return stored{m: prev, wrote: wrote != nil}, nil
	}
	s.compiled[digest] = m
	return stored{m: m, wrote: wrote != nil}, nil
}

// writeTemp writes b to a new temporary file in dir named after name, fsynced, and
// returns its path; on an error it leaves no file.
func writeTemp(dir, name string, b []byte) (string, error) {
	tmp, err := os.CreateTemp(dir, name+tmpPattern)
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// get returns the module with the digest: from memory, from its file, or fetched from
// the members at from (and then validated and stored as by put). Concurrent calls for
// one digest share the work. It does not start the module's compilation (compile).
func (s *moduleStore) get(ctx context.Context, digest string, from []string) (*wasmModule, error) {
	if !validDigest(digest) {
		return nil, fmt.Errorf("%w: bad module digest %q", ErrModuleUnavailable, digest)
	}
	if m := s.loaded(digest); m != nil {
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
		if got := moduleDigest(wasm); got != digest {
			return nil, fmt.Errorf("%w: module %s arrived with digest %s", ErrModuleUnavailable, digest, got)
		}
		return s.store(ctx, digest, wasm)
	})
	if err != nil {
		return nil, err
	}
	return v.(stored).m, nil
}

// discard removes a module that a deploy stored here and then abandoned (its deployer
// refused it), unless a catalog entry names it (referenced) or a store of it is under
// way. It reports whether it removed the module.
func (s *moduleStore) discard(ctx context.Context, digest string, referenced func(digest string) bool) (bool, error) {
	if !validDigest(digest) {
		return false, fmt.Errorf("%w: bad module digest %q", ErrBadRequest, digest)
	}
	// Under the lock throughout: a get that finds the module in memory finds its file.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.storing[digest] > 0 || referenced(digest) {
		return false, nil
	}
	if m, ok := s.compiled[digest]; ok {
		delete(s.compiled, digest)
		m.Close(ctx)
	}
	err := os.Remove(s.path(digest))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		err = boltfile.SyncDir(s.dir)
	}
	if err != nil {
		return false, fmt.Errorf("host: discarding module %.12s: %w", digest, err)
	}
	return true, nil
}

// loaded returns the module with the digest if this member has loaded it, nil otherwise.
func (s *moduleStore) loaded(digest string) *wasmModule {
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
