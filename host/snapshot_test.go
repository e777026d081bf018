package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// restorePaths are the two ways Restore makes an instance: from the restore image
// without running the module's initialisation (what Restore does for Go and Rust
// guests), and by instantiating the module, running _initialize, and overwriting.
var restorePaths = []struct {
	name       string
	initialise bool
}{{"image", false}, {"initialise", true}}

func ask(t testing.TB, inst *wasmInstance, msg string) string {
	t.Helper()
	out, err := inst.Receive(context.Background(), []byte(msg))
	if err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	return string(out)
}

func snapshot(t testing.TB, inst *wasmInstance) *instanceSnapshot {
	t.Helper()
	s, err := inst.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func restore(t testing.TB, m *wasmModule, typ, id string, s *instanceSnapshot, initialise bool) *wasmInstance {
	t.Helper()
	inst, err := m.restore(context.Background(), typ, id, s, initialise)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}

// roundTrip encodes and decodes a snapshot, as a store and another host would.
func roundTrip(t testing.TB, rt *wasmRuntime, s *instanceSnapshot) *instanceSnapshot {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	again, err := rt.UnmarshalSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	return again
}

// memoryOf copies an instance's linear memory.
func memoryOf(t testing.TB, inst *wasmInstance) []byte {
	t.Helper()
	b, ok := inst.mem.Read(0, inst.mem.Size())
	if !ok {
		t.Fatal("memory read failed")
	}
	return append([]byte(nil), b...)
}

// globalsOf reads every mutable global of an instance.
func globalsOf(t testing.TB, inst *wasmInstance) []uint64 {
	t.Helper()
	var out []uint64
	for _, g := range inst.m.snap.globals {
		out = append(out, canonicalBits(g.Type, inst.mod.ExportedGlobal(g.Export).Get()))
	}
	return out
}

// otherHost is a second "host": a runtime of its own, with a compilation cache of its
// own (shared by the tests of this file, so that the race detector's slow compiles of
// a Go guest happen once).
func otherHost(t testing.TB) *wasmRuntime {
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.CacheDir = filepath.Join(cacheDir, "other-host") })
	return rt
}

// compileWith compiles examples/wasm/NAME built by c (TinyGo or Go's port).
func compileWith(t testing.TB, rt *wasmRuntime, c testwasm.Compiler, name string) *wasmModule {
	t.Helper()
	m, err := rt.Compile(context.Background(), c.Bytes(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The Go counter, built by TinyGo and by Go's port, moved by a transparent snapshot.
func TestSnapshotRestoreGoCounter(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testSnapshotRestoreGoCounter(t, c) })
	}
}

func testSnapshotRestoreGoCounter(t *testing.T, c testwasm.Compiler) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, nil)
	m := compileWith(t, rt, c, "counter")
	rt2 := otherHost(t)
	m2 := compileWith(t, rt2, c, "counter")
	for _, path := range restorePaths {
		t.Run(path.name, func(t *testing.T) {
			inst, err := m.Instantiate(ctx, "counter", "alice")
			if err != nil {
				t.Fatal(err)
			}
			ask(t, inst, "inc 40")
			ask(t, inst, "inc")
			if got := ask(t, inst, "inc"); got != "42" {
				t.Fatalf("count %s", got)
			}
			s := snapshot(t, inst)
			inst.Close(ctx)

			// The same host.
			r := restore(t, m, "counter", "alice", s, path.initialise)
			if got := ask(t, r, "get"); got != "42" {
				t.Fatalf("restored get = %s, want 42", got)
			}
			if got := ask(t, r, "inc"); got != "43" {
				t.Fatalf("restored inc = %s, want 43", got)
			}

			// Another host: its own runtime and compilation cache, the same upload, the
			// snapshot through its encoding.
			r2 := restore(t, m2, "counter", "alice", roundTrip(t, rt2, s), path.initialise)
			if got := ask(t, r2, "get"); got != "42" {
				t.Fatalf("get on the other host = %s, want 42", got)
			}
			if got := ask(t, r2, "inc"); got != "43" {
				t.Fatalf("inc on the other host = %s, want 43", got)
			}
			// The snapshot is a value: restoring it again gives the same entity again.
			r3 := restore(t, m, "counter", "alice", s, path.initialise)
			if got := ask(t, r3, "inc 10"); got != "52" {
				t.Fatalf("second restore: inc 10 = %s, want 52", got)
			}
		})
	}
}

// TestRestoredStateIsExact: after a restore, memory and every mutable global are those
// of the instance the snapshot was taken from, byte for byte, on both paths.
func TestRestoredStateIsExact(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	type exactCase struct {
		name    string
		compile func(testing.TB) *wasmModule
		msg     string
	}
	cases := []exactCase{
		{"rust", func(t testing.TB) *wasmModule { return compileRust(t, rt, echoRust) }, "echo seven"},
		// TinyGo's default scheduler adds asyncify's two globals to __stack_pointer; at
		// rest between calls they are zero.
		{"tinygo-asyncify", func(t testing.TB) *wasmModule {
			m, err := rt.Compile(context.Background(), testwasm.TinyGoBytesWith(t, "counter", tinyGoAsyncify))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, "inc 7"},
	}
	for _, c := range testwasm.GoCompilers {
		cases = append(cases, exactCase{c.Name, func(t testing.TB) *wasmModule { return compileWith(t, rt, c, "counter") }, "inc 7"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testRestoredStateIsExact(t, rt, c.compile(t), c.msg) })
	}
}

// tinyGoAsyncify are the TinyGo flags of a module built with TinyGo's default scheduler
// (asyncify), which the Makefile's -scheduler=none leaves out.
var tinyGoAsyncify = []string{"-target=wasip1", "-buildmode=c-shared", "-no-debug"}

func testRestoredStateIsExact(t *testing.T, rt *wasmRuntime, m *wasmModule, msg string) {
	if err := m.PrepareRestore(context.Background()); err != nil {
		t.Fatal(err)
	}
	orig, err := m.Instantiate(context.Background(), "exact", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { orig.Close(context.Background()) }()
	for i := 0; i < 50; i++ {
		ask(t, orig, msg)
	}
	s := snapshot(t, orig)
	wantMem, wantGlobals := memoryOf(t, orig), globalsOf(t, orig)
	for _, path := range restorePaths {
		r := restore(t, m, "exact", "x", roundTrip(t, rt, s), path.initialise)
		if !path.initialise && m.snap.image == nil {
			t.Fatalf("no restore image: the module's initialisation ran")
		}
		if got := memoryOf(t, r); !bytes.Equal(got, wantMem) {
			t.Errorf("%s: restored memory differs (%d bytes, want %d)", path.name, len(got), len(wantMem))
		}
		if got := globalsOf(t, r); fmt.Sprint(got) != fmt.Sprint(wantGlobals) {
			t.Errorf("%s: globals %x, want %x", path.name, got, wantGlobals)
		}
		if got := r.clock.state(); got != orig.clock.state() {
			t.Errorf("%s: clock %+v, want %+v", path.name, got, orig.clock.state())
		}
		// And both go on alike.
		if a, b := ask(t, r, msg), ask(t, orig, msg); a != b {
			t.Errorf("%s: restored replies %q, the original %q", path.name, a, b)
		}
		if !bytes.Equal(memoryOf(t, r), memoryOf(t, orig)) {
			t.Errorf("%s: memories differ after one more message", path.name)
		}
		// Take orig back to the snapshot's state for the next path.
		orig.Close(context.Background())
		orig = restore(t, m, "exact", "x", s, false)
	}
}

func TestSnapshotRestoreRustEcho(t *testing.T) {
	for _, path := range restorePaths {
		t.Run(path.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, nil)
			m := compileRust(t, rt, echoRust)
			inst := mustInstantiate(t, m, echoRust, "r")
			for i := 0; i < 9; i++ {
				ask(t, inst, "echo "+strings.Repeat("x", i*100))
			}
			if got := ask(t, inst, "count"); got != "10" {
				t.Fatalf("count %s", got)
			}
			s := snapshot(t, inst)
			inst.Close(context.Background())
			rt2 := otherHost(t)
			m2 := compileRust(t, rt2, echoRust)
			r := restore(t, m2, echoRust, "r", roundTrip(t, rt2, s), path.initialise)
			if got := ask(t, r, "count"); got != "11" {
				t.Fatalf("restored count = %s, want 11", got)
			}
			if got := ask(t, r, "id"); got != echoRust+"/r" {
				t.Fatalf("id %s", got)
			}
		})
	}
}

// TestGoGuestRunsOnAfterRestores: 2000 messages that allocate (the Go guest's GC runs
// many times), with the entity moved through an encoded snapshot every 250 messages,
// by either restore path; replies stay right and nothing traps. (Moves between hosts
// are TestCounterMovesManyTimes.)
func TestGoGuestRunsOnAfterRestores(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testGoGuestRunsOnAfterRestores(t, c) })
	}
}

func testGoGuestRunsOnAfterRestores(t *testing.T, c testwasm.Compiler) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, nil)
	m := compileWith(t, rt, c, "faulty")
	inst, err := m.Instantiate(ctx, "faulty", "gc")
	if err != nil {
		t.Fatal(err)
	}
	hops := 0
	for i := 0; i < 2000; i++ {
		want := strings.Repeat(strconv.Itoa(i%10), 1+(i*37)%8192)
		if got := ask(t, inst, "echo "+want); got != want {
			t.Fatalf("message %d: reply of %d bytes, want %d", i, len(got), len(want))
		}
		if i%250 == 249 {
			s := snapshot(t, inst)
			inst.Close(ctx)
			hops++
			inst = restore(t, m, "faulty", "gc", roundTrip(t, rt, s), hops%3 == 2)
		}
	}
	defer inst.Close(ctx)
	if _, err := inst.Receive(ctx, []byte("fail")); err == nil || !strings.Contains(err.Error(), "failure requested") {
		t.Fatalf("fail: %v", err)
	}
	if got := ask(t, inst, "echo done"); got != "done" {
		t.Fatalf("last echo %q", got)
	}
	t.Logf("%d hops, memory %d KiB at the end", hops, inst.MemorySize()>>10)
}

// TestCounterMovesManyTimes: a counter moved after every few messages between two hosts
// keeps its count exactly.
func TestCounterMovesManyTimes(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testCounterMovesManyTimes(t, c) })
	}
}

func testCounterMovesManyTimes(t *testing.T, c testwasm.Compiler) {
	ctx := context.Background()
	rt1, _ := newTestRuntime(t, nil)
	mods := []*wasmModule{compileWith(t, rt1, c, "counter"), compileWith(t, otherHost(t), c, "counter")}
	inst, err := mods[0].Instantiate(ctx, "counter", "mover")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for hop := 1; hop <= 40; hop++ {
		for j := 0; j < hop%7+1; j++ {
			n++
			if got := ask(t, inst, "inc"); got != strconv.Itoa(n) {
				t.Fatalf("hop %d: inc = %s, want %d", hop, got, n)
			}
		}
		s := snapshot(t, inst)
		inst.Close(ctx)
		inst = restore(t, mods[hop%2], "counter", "mover", roundTrip(t, mods[hop%2].rt, s), false)
	}
	if got := ask(t, inst, "get"); got != strconv.Itoa(n) {
		t.Fatalf("get = %s, want %d", got, n)
	}
}

// TestGuestClockContinuesAcrossRestore: the guest's clocks go on from where the snapshot
// left them, instead of starting again.
func TestGuestClockContinuesAcrossRestore(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "counter")
	inst, err := m.Instantiate(context.Background(), "counter", "c")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	ask(t, inst, "inc")
	s := snapshot(t, inst)
	if s.Clock.Monotonic <= 0 || s.Clock.Wall < fakeEpochNanos {
		t.Fatalf("a Go guest reads its clocks while starting; clock %+v", s.Clock)
	}
	r := restore(t, m, "counter", "c", s, false)
	if got := r.clock.nanotime(); got != s.Clock.Monotonic {
		t.Fatalf("next monotonic reading %d, want %d", got, s.Clock.Monotonic)
	}
}

func TestSnapshotSizes(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	cases := []struct {
		name string
		m    *wasmModule
		msg  string
	}{
		{"go counter", compile(t, rt, "counter"), "inc"},
		{"rust echo", compileRust(t, rt, echoRust), "echo hello"},
	}
	if testwasm.HaveTinyGo(t) {
		cases = append(cases, struct {
			name string
			m    *wasmModule
			msg  string
		}{"tinygo counter", compileWith(t, rt, testwasm.GoCompilers[0], "counter"), "inc"})
	}
	for _, c := range cases {
		inst, err := c.m.Instantiate(context.Background(), "t", "sizes")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			ask(t, inst, c.msg)
		}
		s := snapshot(t, inst)
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: memory %d KiB (%d pages), %d non-zero pages = %d KiB sparse, %d KiB encoded; %d globals",
			c.name, s.MemoryPages*64, s.MemoryPages, len(s.Pages), s.SparseSize()>>10, len(b)>>10, len(s.Globals))
		if s.SparseSize() > int(s.MemoryPages)*wasmPageSize || len(b) >= s.SparseSize()/2 {
			t.Errorf("%s: encoding of %d bytes for %d bytes of non-zero pages", c.name, len(b), s.SparseSize())
		}
		// Deterministic: the same snapshot encodes to the same bytes.
		if b2, _ := s.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Errorf("%s: two encodings differ", c.name)
		}
		inst.Close(context.Background())
	}
}

// fixChecksum recomputes the checksum of an encoding whose body was changed, so that
// decoding reaches the checks behind it.
func fixChecksum(b []byte) []byte {
	b = append([]byte(nil), b...)
	if len(b) >= 4 {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	}
	return b
}

// smallSnapshot is a valid snapshot made up without wasm.
func smallSnapshot() *instanceSnapshot {
	page := func(fill byte) []byte { return bytes.Repeat([]byte{fill}, wasmPageSize) }
	return &instanceSnapshot{
		Version:      snapshotVersion,
		ModuleDigest: moduleDigest([]byte("module")),
		MemoryPages:  5,
		Pages:        []snapshotPage{{1, page(1)}, {4, page(0xaa)}},
		Globals:      []snapshotGlobal{{0, api.ValueTypeI32, 7}, {3, api.ValueTypeI64, 1 << 40}, {4, api.ValueTypeF64, 0x3ff0000000000000}},
		Clock:        snapshotClock{Monotonic: 5e6, Wall: fakeEpochNanos + 5e6},
	}
}

func TestSnapshotEncodingRoundTrip(t *testing.T) {
	s := smallSnapshot()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := unmarshalSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", s) {
		t.Fatalf("round trip changed the snapshot:\n%+v\n%+v", got, s)
	}
	t.Logf("%d KiB sparse in %d bytes", s.SparseSize()>>10, len(b))
}

func TestBadSnapshotsAreRefused(t *testing.T) {
	good, err := smallSnapshot().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// encoded encodes a snapshot that fails validation, as a faulty or hostile writer
	// would, with a correct checksum.
	encoded := func(mutate func(*instanceSnapshot)) []byte {
		s := smallSnapshot()
		mutate(s)
		b, err := s.encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"empty":          nil,
		"not a snapshot": []byte("hello, world"),
		"version 2":      encoded(func(s *instanceSnapshot) { s.Version = 2 }),
		"over wasm32":    encoded(func(s *instanceSnapshot) { s.MemoryPages = 1<<16 + 1 }),
		"page beyond":    encoded(func(s *instanceSnapshot) { s.Pages[1].Index = 5 }),
		"pages order":    encoded(func(s *instanceSnapshot) { s.Pages[0].Index, s.Pages[1].Index = 4, 1 }),
		"too many pages": encoded(func(s *instanceSnapshot) { s.MemoryPages = 1 }),
		"zero page":      encoded(func(s *instanceSnapshot) { s.Pages[0].Data = make([]byte, wasmPageSize) }),
		"global type":    encoded(func(s *instanceSnapshot) { s.Globals[1].Type = 0x70 }),
		"i32 high bits":  encoded(func(s *instanceSnapshot) { s.Globals[0].Bits = 1 << 32 }),
		"globals order":  encoded(func(s *instanceSnapshot) { s.Globals[1].Index = 0 }),
		"trailing":       fixChecksum(append(append([]byte(nil), good[:len(good)-4]...), 0, 0, 0, 0, 0)),
	}
	for n := 0; n < len(good); n++ {
		cases["truncated to "+strconv.Itoa(n)] = good[:n]
	}
	for i := 0; i < len(good); i += 3 {
		c := append([]byte(nil), good...)
		c[i] ^= 0x20
		cases["corrupted at "+strconv.Itoa(i)] = c
	}
	for name, b := range cases {
		if s, err := unmarshalSnapshot(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, %v; want ErrBadSnapshot", name, s != nil, err)
		}
	}
	// Snapshots that do not encode.
	for name, mutate := range map[string]func(*instanceSnapshot){
		"page beyond":   func(s *instanceSnapshot) { s.Pages[1].Index = 5 },
		"pages order":   func(s *instanceSnapshot) { s.Pages[0].Index, s.Pages[1].Index = 4, 1 },
		"short page":    func(s *instanceSnapshot) { s.Pages[0].Data = s.Pages[0].Data[:100] },
		"digest":        func(s *instanceSnapshot) { s.ModuleDigest = "abc" },
		"i32 high bits": func(s *instanceSnapshot) { s.Globals[0].Bits = 1 << 32 },
		"globals order": func(s *instanceSnapshot) { s.Globals[1].Index = 0 },
		"version":       func(s *instanceSnapshot) { s.Version = 0 },
		"over wasm32":   func(s *instanceSnapshot) { s.MemoryPages = 1<<16 + 1 },
		"v128 global":   func(s *instanceSnapshot) { s.Globals[0].Type = api.ValueType(0x7b) },
	} {
		s := smallSnapshot()
		mutate(s)
		if _, err := s.MarshalBinary(); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("marshal %s: %v, want ErrBadSnapshot", name, err)
		}
	}
}

func TestRestoreRefusesOtherModulesAndCaps(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, nil)
	counter := compile(t, rt, "counter")
	faulty := compile(t, rt, "faulty")
	inst, err := counter.Instantiate(ctx, "counter", "x")
	if err != nil {
		t.Fatal(err)
	}
	ask(t, inst, "inc 3")
	s := snapshot(t, inst)
	inst.Close(ctx)
	if _, err := faulty.Restore(ctx, "faulty", "x", s); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "taken from module") {
		t.Fatalf("restore into another module: %v", err)
	}
	if _, err := counter.Restore(ctx, "counter", "x", nil); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("nil snapshot: %v", err)
	}
	globals := *s
	globals.Globals = s.Globals[1:]
	if _, err := counter.Restore(ctx, "counter", "x", &globals); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("missing global: %v", err)
	}
	// A host with a lower memory cap refuses the snapshot, encoded or not.
	small, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.MemoryLimit = uint64(s.MemoryPages-1) * wasmPageSize })
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.UnmarshalSnapshot(b); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "over the cap") {
		t.Fatalf("decode over the cap: %v", err)
	}
	if m, err := small.Compile(ctx, testwasm.Bytes(t, "counter")); err == nil {
		if _, err := m.Restore(ctx, "counter", "x", s); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("restore over the cap: %v", err)
		}
	}
	// A snapshot smaller than a new instance's memory cannot be restored.
	shrunk := *s
	shrunk.MemoryPages, shrunk.Pages = 1, nil
	if _, err := counter.Restore(ctx, "counter", "x", &shrunk); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("memory smaller than the module's minimum: %v", err)
	}
}

// snapshotLogHandler takes a snapshot of an instance when the guest logs, that is,
// from inside a host function, during a message.
type snapshotLogHandler struct {
	slog.Handler
	inst **wasmInstance
	err  error
}

func (h *snapshotLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if *h.inst != nil && r.Message == "echo-rust: panicking as asked" {
		_, h.err = (*h.inst).Snapshot()
	}
	return nil
}

func TestSnapshotRefusedDuringACallOrAfterClose(t *testing.T) {
	var inst *wasmInstance
	h := &snapshotLogHandler{Handler: slog.NewTextHandler(&bytes.Buffer{}, nil), inst: &inst}
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.Logger = slog.New(h) })
	m := compileRust(t, rt, echoRust)
	inst = mustInstantiate(t, m, echoRust, "busy")
	ask(t, inst, "count")
	inst.Receive(context.Background(), []byte("panic")) // logs, then traps
	if !errors.Is(h.err, ErrNotSnapshottable) {
		t.Fatalf("snapshot from a host function during a message: %v", h.err)
	}
	if _, err := inst.Snapshot(); !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("snapshot after a trap: %v", err)
	}
	inst2 := mustInstantiate(t, m, echoRust, "closed")
	inst2.Close(context.Background())
	if _, err := inst2.Snapshot(); !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("snapshot after Close: %v", err)
	}
}

// FuzzUnmarshalSnapshot: decoding never panics, refuses with ErrBadSnapshot, and what
// it accepts encodes back to the same snapshot. Each input is also tried with a correct
// checksum, so that the fuzzer reaches the checks behind it.
func FuzzUnmarshalSnapshot(f *testing.F) {
	good, err := smallSnapshot().MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	empty, _ := (&instanceSnapshot{Version: snapshotVersion, ModuleDigest: moduleDigest(nil)}).MarshalBinary()
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixChecksum(b)} {
			s, err := unmarshalSnapshot(in)
			if err != nil {
				if !errors.Is(err, ErrBadSnapshot) {
					t.Fatalf("error %v does not wrap ErrBadSnapshot", err)
				}
				continue
			}
			again, err := s.MarshalBinary()
			if err != nil {
				t.Fatalf("a decoded snapshot does not encode: %v", err)
			}
			s2, err := unmarshalSnapshot(again)
			if err != nil || fmt.Sprintf("%+v", s2) != fmt.Sprintf("%+v", s) {
				t.Fatalf("re-encoding changed the snapshot: %v", err)
			}
		}
	})
}
