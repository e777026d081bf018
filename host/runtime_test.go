package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// cacheDir is a compilation cache shared by the package's tests: a Go guest compiles in
// seconds under the race detector, and from the cache in milliseconds.
var cacheDir string

// TestMain shares the compilation cache, and checks, once every test has run, that none
// left a goroutine behind.
func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "shardhost-host-test-")
	if err != nil {
		panic(err)
	}
	cacheDir = d
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown does not wait for a probe in flight (probeNode waits for
		// its ack or the end of its probe interval, then returns), and memberlist gives
		// no way to wait for it: one can outlive the last test's members by up to a
		// probe interval, longer than goleak's retries. It is memberlist's, not ours, and
		// ends by itself; every goroutine of shardhost is still checked.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.Cleanup(func(code int) {
			os.RemoveAll(d)
			testwasm.Cleanup()
			os.Exit(code)
		}))
}

type syncBuffer = testutil.SyncBuffer

func newTestRuntime(t testing.TB, mutate func(*RuntimeConfig)) (*wasmRuntime, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := defaultRuntimeConfig()
	cfg.CacheDir = cacheDir
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mutate != nil {
		mutate(&cfg)
	}
	rt, err := newWasmRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, logs
}

func compile(t testing.TB, rt *wasmRuntime, name string) *wasmModule {
	t.Helper()
	m, err := rt.Compile(context.Background(), testwasm.Bytes(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCounterInstanceKeepsStateAndOrder(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "counter")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "counter", "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	for i := 1; i <= 100; i++ {
		out, err := inst.Receive(ctx, []byte("inc"))
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != strconv.Itoa(i) {
			t.Fatalf("inc %d replied %q", i, out)
		}
	}
	if out, err := inst.Receive(ctx, []byte("inc 900")); err != nil || string(out) != "1000" {
		t.Fatalf("inc 900: %q %v", out, err)
	}
	if out, err := inst.Receive(ctx, []byte("get")); err != nil || string(out) != "1000" {
		t.Fatalf("get: %q %v", out, err)
	}
	// An entity's own error leaves it running with its state.
	_, err = inst.Receive(ctx, []byte("bogus"))
	var ee *EntityError
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "unknown message") {
		t.Fatalf("bogus: %v", err)
	}
	if out, err := inst.Receive(ctx, []byte("get")); err != nil || string(out) != "1000" {
		t.Fatalf("get after error: %q %v", out, err)
	}
	if inst.MemorySize() == 0 || inst.MemorySize() > 64<<20 {
		t.Fatalf("memory size %d", inst.MemorySize())
	}
}

func TestInstancesAreIsolated(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "counter")
	ctx := context.Background()
	a, err := m.Instantiate(ctx, "counter", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Instantiate(ctx, "counter", "b")
	if err != nil {
		t.Fatal(err)
	}
	a.Receive(ctx, []byte("inc 5"))
	b.Receive(ctx, []byte("inc 7"))
	if out, _ := a.Receive(ctx, []byte("get")); string(out) != "5" {
		t.Fatalf("a = %q", out)
	}
	if out, _ := b.Receive(ctx, []byte("get")); string(out) != "7" {
		t.Fatalf("b = %q", out)
	}
}

func TestCompileRefusesBadModules(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	ctx := context.Background()
	cases := map[string]struct {
		wasm []byte
		want string
	}{
		"not wasm":      {[]byte("#!/bin/sh\necho hi\n"), "not a WebAssembly binary"},
		"empty":         {nil, "not a WebAssembly binary"},
		"truncated":     {[]byte("\x00asm\x01\x00\x00\x00\x01\x05"), "invalid module"},
		"no exports":    {[]byte("\x00asm\x01\x00\x00\x00"), "missing required exports shardhost_abi_v1, shardhost_alloc, shardhost_receive"},
		"other version": {moduleExporting(t, "shardhost_abi_v9"), "another ABI version (shardhost_abi_v9)"},
		// Snapshot exports (abi/SPEC.md): typed, both or neither, and the reserved prefix.
		"snapshot of the wrong type": {moduleExporting(t, abi.ExportSnapshot), "export shardhost_snapshot has type ()->(), want ()->(i32)"},
		"snapshot without restore":   {moduleExportingI32(abi.ExportSnapshot), "a module exports both or neither"},
		"reserved global name":       {moduleExportingI32(abi.ExportGlobalPrefix + "0"), "reserved for the host"},
		// What cannot run is refused with the fix: Go's port without
		// -buildmode=c-shared makes a WASI command, and a module without the marker.
		"WASI command": {moduleWithExports(t, "_start", abi.VersionMarker(1), abi.ExportAlloc, abi.ExportReceive),
			"a WASI command module (it exports _start and no _initialize)"},
		"WASI command advice": {moduleWithExports(t, "_start", abi.VersionMarker(1), abi.ExportAlloc, abi.ExportReceive),
			"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"},
		"marker missing": {moduleWithExports(t, abi.ExportAlloc, abi.ExportReceive),
			"missing export shardhost_abi_v1, the ABI version marker, while shardhost_alloc and shardhost_receive are there"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := rt.Compile(ctx, c.wasm)
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalidModule containing %q", err, c.want)
			}
		})
	}
}

// moduleExporting returns a wasm module exporting one function () -> () named name.
func moduleExporting(t *testing.T, name string) []byte {
	t.Helper()
	var b []byte
	b = append(b, "\x00asm\x01\x00\x00\x00"...)
	b = append(b, 1, 4, 1, 0x60, 0, 0) // type section: one type () -> ()
	b = append(b, 3, 2, 1, 0)          // function section: one function of type 0
	exp := []byte{1, byte(len(name))}
	exp = append(exp, name...)
	exp = append(exp, 0, 0) // func index 0
	b = append(b, 7, byte(len(exp)))
	b = append(b, exp...)
	b = append(b, 10, 4, 1, 2, 0, 0x0b) // code section: one empty body
	return b
}

// moduleWithExports returns a wasm module exporting the named functions, each with the
// type abi/SPEC.md gives it (shardhost_alloc (i32)->i32, shardhost_receive
// (i32,i32)->i32, any other ()->()), bodies returning 0.
func moduleWithExports(t *testing.T, names ...string) []byte {
	t.Helper()
	section := func(id byte, body []byte) []byte {
		if len(body) > 127 {
			t.Fatal("section too long for this encoder")
		}
		return append([]byte{id, byte(len(body))}, body...)
	}
	// Types: 0 ()->(), 1 (i32)->i32, 2 (i32,i32)->i32.
	types := []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7f}
	funcs := []byte{byte(len(names))}
	exps := []byte{byte(len(names))}
	code := []byte{byte(len(names))}
	for k, name := range names {
		typ := byte(0)
		switch name {
		case abi.ExportAlloc:
			typ = 1
		case abi.ExportReceive:
			typ = 2
		}
		funcs = append(funcs, typ)
		exps = append(append(append(exps, byte(len(name))), name...), 0, byte(k))
		if typ == 0 {
			code = append(code, 2, 0, 0x0b)
		} else {
			code = append(code, 4, 0, 0x41, 0, 0x0b)
		}
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, section(1, types)...)
	b = append(b, section(3, funcs)...)
	b = append(b, section(7, exps)...)
	return append(b, section(10, code)...)
}

func TestGuestTrapFailsOnlyThatMessage(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "faulty")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "f")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := inst.Receive(ctx, []byte("echo hi")); err != nil || string(out) != "hi" {
		t.Fatalf("echo: %q %v", out, err)
	}
	_, err = inst.Receive(ctx, []byte("trap"))
	var ge *GuestError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGuestTrap) {
		t.Fatalf("trap: %v", err)
	}
	if !strings.Contains(err.Error(), "panic: faulty: trap requested") {
		t.Fatalf("trap error lacks the panic message: %v", err)
	}
	if !inst.Closed() {
		t.Fatal("instance survived a trap")
	}
	if _, err := inst.Receive(ctx, []byte("echo x")); !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("after trap: %v", err)
	}
	// The module itself is fine: a new instance serves.
	inst2, err := m.Instantiate(ctx, "faulty", "f")
	if err != nil {
		t.Fatal(err)
	}
	defer inst2.Close(ctx)
	if out, err := inst2.Receive(ctx, []byte("echo again")); err != nil || string(out) != "again" {
		t.Fatalf("echo after trap: %q %v", out, err)
	}
}

// An infinite loop is stopped at the configured deadline: not before it (the host's own
// measure of the call), and not at some other deadline. The upper bound is loose, for a
// loaded machine, yet a deadline five times the configured one fails it.
func TestGuestLoopStopsAtDeadline(t *testing.T) {
	const deadline = time.Second
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.MessageDeadline = deadline })
	m := compile(t, rt, "faulty")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "f")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inst.Receive(ctx, []byte("loop"))
	var ge *GuestError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGuestDeadline) {
		t.Fatalf("loop: %v", err)
	}
	if !inst.Closed() {
		t.Fatal("instance survived its deadline")
	}
	if ge.Ran < deadline || ge.Ran >= 5*deadline {
		t.Fatalf("the loop ran %v by the host's measure; want at least its deadline %v and well under %v", ge.Ran, deadline, 5*deadline)
	}
	if !strings.Contains(err.Error(), "the deadline is 1s") {
		t.Fatalf("the error does not name the deadline: %v", err)
	}
}

// A memory bomb traps when the guest's memory reaches the configured cap: the memory
// it had then is at most the cap, and most of it (a cap twice as large, or none, fails);
// the error says that the cap was hit and names it. TinyGo doubles its heap at every
// grow, so it stops at just over half the cap.
func TestGuestMemoryBombHitsTheCap(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) {
			const limit = 32 << 20
			rt, _ := newTestRuntime(t, func(cfg *RuntimeConfig) { cfg.MemoryLimit = limit })
			m, err := rt.Compile(context.Background(), c.Bytes(t, "faulty"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			inst, err := m.Instantiate(ctx, "faulty", "f")
			if err != nil {
				t.Fatal(err)
			}
			_, err = inst.Receive(ctx, []byte("grow"))
			var ge *GuestError
			if !errors.As(err, &ge) || !errors.Is(err, ErrGuestTrap) || !strings.Contains(err.Error(), "out of memory") {
				t.Fatalf("grow: %v", err)
			}
			if ge.MemoryBytes > limit || ge.MemoryBytes < limit/2 {
				t.Fatalf("the guest trapped with %d MiB of memory; want the cap, %d MiB, or just over half of it", ge.MemoryBytes>>20, limit>>20)
			}
			if ge.MemoryLimit != limit || !strings.Contains(err.Error(), "memory cap hit") || !strings.Contains(err.Error(), "the cap is 32 MiB") {
				t.Fatalf("the error does not say the 32 MiB cap was hit (MemoryLimit %d): %v", ge.MemoryLimit, err)
			}
			t.Logf("out of memory at %d KiB under a cap of %d KiB: %v", ge.MemoryBytes>>10, limit>>10, err)
		})
	}
}

// A trap that is not about memory does not claim the cap.
func TestGuestTrapIsNotAMemoryCap(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "faulty")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "f")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inst.Receive(ctx, []byte("trap"))
	var ge *GuestError
	if !errors.As(err, &ge) || ge.MemoryLimit != 0 || strings.Contains(err.Error(), "memory cap") {
		t.Fatalf("a panic reads as a memory cap: %v", err)
	}
}

func TestMessageOverCapRefusedBeforeGuest(t *testing.T) {
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.MaxMessageSize = 1024 })
	m := compile(t, rt, "faulty")
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "f")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, err := inst.Receive(ctx, bytes.Repeat([]byte("x"), 1025)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	// A reply over the cap traps the call inside the host function.
	_, err = inst.Receive(ctx, append([]byte("echo "), bytes.Repeat([]byte("y"), 1019)...))
	if err != nil {
		t.Fatalf("at the cap: %v", err)
	}
}

// What a guest writes reaches the host's log with its entity: stdout at info, stderr at
// warn. A trap's error carries its panic: from stderr for Go's port, from its last line
// of output for TinyGo, which writes a panic to stdout.
func TestGuestOutputReachesHostLog(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) {
			rt, logs := newTestRuntime(t, nil)
			m, err := rt.Compile(context.Background(), c.Bytes(t, "faulty"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			inst, err := m.Instantiate(ctx, "faulty", "f-log")
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range []string{"print hello from stdout", "eprint hello from stderr"} {
				if out, err := inst.Receive(ctx, []byte(msg)); err != nil || string(out) != "printed" {
					t.Fatalf("%s: %q %v", msg, out, err)
				}
			}
			for _, want := range []string{
				`level=INFO msg="guest output" entity=faulty/f-log stream=stdout text="hello from stdout"`,
				`level=WARN msg="guest output" entity=faulty/f-log stream=stderr text="hello from stderr"`,
			} {
				if !strings.Contains(logs.String(), want) {
					t.Fatalf("log lacks %s:\n%s", want, logs)
				}
			}
			_, err = inst.Receive(ctx, []byte("trap"))
			var ge *GuestError
			if !errors.As(err, &ge) || !strings.Contains(err.Error(), "panic: faulty: trap requested") {
				t.Fatalf("the trap's error lacks the panic: %v", err)
			}
			if !strings.Contains(ge.LastOutput, "faulty: trap requested") && !strings.Contains(ge.Stderr, "faulty: trap requested") {
				t.Fatalf("the trap keeps neither the last line nor stderr: %+v", ge)
			}
			if !strings.Contains(logs.String(), "panic: faulty: trap requested") {
				t.Fatalf("log lacks the guest's panic:\n%s", logs)
			}
			t.Logf("%v", err)
		})
	}
}

// A module compiled once is in the cache directory for the next runtime: a Go and a
// Rust guest.
func TestCompilationCacheIsReused(t *testing.T) {
	for name, wasm := range map[string]func(testing.TB) []byte{
		"go":   func(tb testing.TB) []byte { return testwasm.Bytes(tb, "counter") },
		"rust": func(tb testing.TB) []byte { return testwasm.RustBytes(tb, echoRust) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			wasm := wasm(t)
			for i := 0; i < 2; i++ {
				cfg := defaultRuntimeConfig()
				cfg.CacheDir = dir
				rt, err := newWasmRuntime(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := rt.Compile(context.Background(), wasm); err != nil {
					t.Fatal(err)
				}
				rt.Close(context.Background())
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) == 0 {
				t.Fatalf("cache dir empty: %v", err)
			}
		})
	}
}

func TestRuntimeConfigValidate(t *testing.T) {
	for _, mutate := range []func(*RuntimeConfig){
		func(c *RuntimeConfig) { c.MemoryLimit = 100 },
		func(c *RuntimeConfig) { c.MemoryLimit = 5 << 30 },
		func(c *RuntimeConfig) { c.MessageDeadline = 0 },
		func(c *RuntimeConfig) { c.MaxMessageSize = -1 },
	} {
		c := defaultRuntimeConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}
