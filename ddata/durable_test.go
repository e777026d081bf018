package ddata

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
)

// durableImpl opens an implementation of DurableStore for the contract tests. open
// returns a new, empty store and a reopen function that returns the store a restart
// would find: what the last opened store held (the previous one must be closed first).
// Every store opened is closed at the end of the test.
type durableImpl struct {
	name string
	open func(t testing.TB) (DurableStore, func() (DurableStore, error))
}

var durableImpls = []durableImpl{
	{name: "Bolt", open: func(t testing.TB) (DurableStore, func() (DurableStore, error)) {
		dir := t.TempDir()
		s, err := OpenBoltStore(dir)
		if err != nil {
			t.Fatalf("OpenBoltStore: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, func() (DurableStore, error) {
			s, err := OpenBoltStore(dir)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, nil
		}
	}},
	{name: "Memory", open: func(t testing.TB) (DurableStore, func() (DurableStore, error)) {
		cur := NewMemoryStore()
		return cur, func() (DurableStore, error) {
			cur = cur.Reopen()
			return cur, nil
		}
	}},
}

// TestDurableStoreContract runs the DurableStore contract against every implementation.
func TestDurableStoreContract(t *testing.T) {
	for _, impl := range durableImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Run("EmptyAtFirst", func(t *testing.T) { testStoreEmptyAtFirst(t, impl) })
			t.Run("RoundTrip", func(t *testing.T) { testStoreRoundTrip(t, impl) })
			t.Run("DeleteWithNil", func(t *testing.T) { testStoreDeleteWithNil(t, impl) })
			t.Run("ManyKeysOneTransaction", func(t *testing.T) { testStoreManyKeys(t, impl) })
			t.Run("BinaryKeysAndValues", func(t *testing.T) { testStoreBinary(t, impl) })
			t.Run("InvalidKeysWriteNothing", func(t *testing.T) { testStoreInvalidKeys(t, impl) })
			t.Run("CallerOwnsSlices", func(t *testing.T) { testStoreCopies(t, impl) })
			t.Run("Reopen", func(t *testing.T) { testStoreReopen(t, impl) })
			t.Run("Concurrent", func(t *testing.T) { testStoreConcurrent(t, impl) })
			t.Run("Close", func(t *testing.T) { testStoreClose(t, impl) })
		})
	}
}

// mustStore stores entries or fails the test.
func mustStore(t testing.TB, s DurableStore, entries map[string][]byte) {
	t.Helper()
	if err := s.Store(entries); err != nil {
		t.Fatalf("Store: %v", err)
	}
}

// mustLoadEqual loads and compares with want, telling nil from empty values apart (a
// loaded value is never nil).
func mustLoadEqual(t testing.TB, s DurableStore, want map[string][]byte) {
	t.Helper()
	got, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got == nil {
		t.Fatalf("Load returned a nil map")
	}
	for k, v := range got {
		if v == nil {
			t.Errorf("Load: key %q has a nil value", k)
		}
	}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("Load = %s, want %s", describeEntries(got), describeEntries(want))
	}
}

// describeEntries prints a small map in full and a large one by size.
func describeEntries(m map[string][]byte) string {
	if len(m) > 8 {
		return fmt.Sprintf("%d entries", len(m))
	}
	return fmt.Sprintf("%q", m)
}

func testStoreEmptyAtFirst(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	mustLoadEqual(t, s, map[string][]byte{})
	mustStore(t, s, nil)
	mustStore(t, s, map[string][]byte{})
	mustLoadEqual(t, s, map[string][]byte{})
}

func testStoreRoundTrip(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	mustStore(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	// A Store changes the keys it names and leaves the others.
	mustStore(t, s, map[string][]byte{"a": []byte("3"), "c": []byte("4")})
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("3"), "b": []byte("2"), "c": []byte("4")})
}

func testStoreDeleteWithNil(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	mustStore(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	// Deletes, an absent key's delete and a put in one transaction.
	mustStore(t, s, map[string][]byte{"a": nil, "absent": nil, "c": []byte("3")})
	mustLoadEqual(t, s, map[string][]byte{"b": []byte("2"), "c": []byte("3")})
	mustStore(t, s, map[string][]byte{"b": nil, "c": nil})
	mustLoadEqual(t, s, map[string][]byte{})
}

func testStoreManyKeys(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	const n = 10_000
	want := make(map[string][]byte, n)
	for i := range n {
		want[fmt.Sprintf("key/%05d", i)] = bytes.Repeat([]byte{byte(i)}, 100+i%50)
	}
	before := storesOf(s)
	mustStore(t, s, want)
	if m, ok := s.(*MemoryStore); ok && m.Stores() != before+1 {
		t.Fatalf("Stores = %d after one Store of %d keys, want %d", m.Stores(), n, before+1)
	}
	mustLoadEqual(t, s, want)

	// Delete every other key and rewrite the rest, again in one transaction.
	change := make(map[string][]byte, n)
	for i := range n {
		k := fmt.Sprintf("key/%05d", i)
		if i%2 == 0 {
			change[k] = nil
			delete(want, k)
		} else {
			change[k] = []byte(k)
			want[k] = []byte(k)
		}
	}
	mustStore(t, s, change)
	mustLoadEqual(t, s, want)
}

// storesOf returns a MemoryStore's Stores count, 0 for other stores.
func storesOf(s DurableStore) int {
	if m, ok := s.(*MemoryStore); ok {
		return m.Stores()
	}
	return 0
}

func testStoreBinary(t *testing.T, impl durableImpl) {
	s, reopen := impl.open(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	want := map[string][]byte{
		"\x00":                      []byte("nul key"),
		"a\x00b":                    {0, 0, 0},
		"\xff\xfe\xfd":              all,
		"ключ/鍵":                    []byte("utf-8"),
		"empty":                     {}, // an empty non-nil value is a value, not a delete
		strings.Repeat("k", 32<<10): []byte("longest key"),
	}
	mustStore(t, s, want)
	mustLoadEqual(t, s, want)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := reopen()
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	mustLoadEqual(t, s2, want)
}

func testStoreInvalidKeys(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	mustStore(t, s, map[string][]byte{"keep": []byte("1")})
	for name, bad := range map[string]string{"empty": "", "too long": strings.Repeat("k", 32<<10+1)} {
		err := s.Store(map[string][]byte{"new": []byte("2"), bad: []byte("3"), "keep": nil})
		if !errors.Is(err, ErrStoreFailure) {
			t.Errorf("Store with an %s key: err = %v, want ErrStoreFailure", name, err)
		}
	}
	// Nothing of the failed batches was written.
	mustLoadEqual(t, s, map[string][]byte{"keep": []byte("1")})
}

func testStoreCopies(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	v := []byte("abc")
	in := map[string][]byte{"k": v}
	mustStore(t, s, in)
	v[0] = 'X'
	in["other"] = []byte("x")
	mustLoadEqual(t, s, map[string][]byte{"k": []byte("abc")})

	got, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	got["k"][0] = 'Y'
	got["new"] = []byte("y")
	mustLoadEqual(t, s, map[string][]byte{"k": []byte("abc")})
}

// testStoreReopen is "stop every member, start again" at the store's level: what a
// closed store held is there when it is opened again.
func testStoreReopen(t *testing.T, impl durableImpl) {
	s, reopen := impl.open(t)
	mustStore(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	mustStore(t, s, map[string][]byte{"b": nil, "c": []byte("3")})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := reopen()
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	mustLoadEqual(t, s2, map[string][]byte{"a": []byte("1"), "c": []byte("3")})
	mustStore(t, s2, map[string][]byte{"d": []byte("4")})
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s3, err := reopen()
	if err != nil {
		t.Fatalf("second reopen: %v", err)
	}
	mustLoadEqual(t, s3, map[string][]byte{"a": []byte("1"), "c": []byte("3"), "d": []byte("4")})
}

// testStoreConcurrent runs writers and readers at once (for -race) and checks that a
// transaction is atomic to readers: each writer stores a pair of keys with the same value
// in one Store, and no Load sees the pair torn.
func testStoreConcurrent(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	const writers, rounds = 6, 15
	var wg, readers sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, writers+2)
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := s.Load()
				if err != nil {
					errc <- err
					return
				}
				for w := range writers {
					x, y := got[fmt.Sprintf("w%d/x", w)], got[fmt.Sprintf("w%d/y", w)]
					if !bytes.Equal(x, y) {
						errc <- fmt.Errorf("torn transaction: w%d x=%q y=%q", w, x, y)
						return
					}
				}
			}
		})
	}
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				v := fmt.Appendf(nil, "%d", r)
				err := s.Store(map[string][]byte{
					fmt.Sprintf("w%d/x", w):        v,
					fmt.Sprintf("w%d/y", w):        v,
					fmt.Sprintf("w%d/r%d", w, r):   v,
					fmt.Sprintf("w%d/r%d", w, r-1): nil,
					"shared":                       v,
				})
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	want := map[string][]byte{}
	last := fmt.Appendf(nil, "%d", rounds-1)
	for w := range writers {
		want[fmt.Sprintf("w%d/x", w)] = last
		want[fmt.Sprintf("w%d/y", w)] = last
		want[fmt.Sprintf("w%d/r%d", w, rounds-1)] = last
	}
	want["shared"] = last
	mustLoadEqual(t, s, want)
}

func testStoreClose(t *testing.T, impl durableImpl) {
	s, _ := impl.open(t)
	mustStore(t, s, map[string][]byte{"a": []byte("1")})
	for i := range 3 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := s.Load(); !errors.Is(err, ErrStoreFailure) {
		t.Errorf("Load after Close: err = %v, want ErrStoreFailure", err)
	}
	if err := s.Store(map[string][]byte{"b": []byte("2")}); !errors.Is(err, ErrStoreFailure) {
		t.Errorf("Store after Close: err = %v, want ErrStoreFailure", err)
	}
	if err := s.Store(nil); !errors.Is(err, ErrStoreFailure) {
		t.Errorf("empty Store after Close: err = %v, want ErrStoreFailure", err)
	}
}

var errDiskFull = errors.New("disk full")

func TestMemoryStoreFailNext(t *testing.T) {
	s := NewMemoryStore()
	mustStore(t, s, map[string][]byte{"a": []byte("1")})

	s.FailNext(errDiskFull)
	err := s.Store(map[string][]byte{"a": nil, "b": []byte("2")})
	if !errors.Is(err, ErrStoreFailure) || !errors.Is(err, errDiskFull) {
		t.Fatalf("armed Store: err = %v, want ErrStoreFailure and errDiskFull", err)
	}
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("1")}) // nothing written
	if s.Stores() != 1 {
		t.Errorf("Stores = %d, want 1 (the failed Store does not count)", s.Stores())
	}

	// The failure is used once.
	mustStore(t, s, map[string][]byte{"b": []byte("2")})
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})

	// FailNext(nil) injects a generic failure.
	s.FailNext(nil)
	if err := s.Store(map[string][]byte{"c": []byte("3")}); !errors.Is(err, ErrStoreFailure) {
		t.Fatalf("Store after FailNext(nil): err = %v, want ErrStoreFailure", err)
	}
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	if s.Stores() != 2 {
		t.Errorf("Stores = %d, want 2", s.Stores())
	}
}

func TestMemoryStoreReopenIsIndependent(t *testing.T) {
	s := NewMemoryStore()
	mustStore(t, s, map[string][]byte{"a": []byte("1")})
	s.FailNext(errDiskFull)
	r := s.Reopen() // while s is open: a copy, not a view
	mustStore(t, r, map[string][]byte{"b": []byte("2")})
	mustLoadEqual(t, s, map[string][]byte{"a": []byte("1")})
	mustLoadEqual(t, r, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	if r.Stores() != 1 {
		t.Errorf("reopened Stores = %d, want 1", r.Stores())
	}
}
