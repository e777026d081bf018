package host

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// The runtime's side of the deploy-time checks and rewrites (host/internal/wasmbin,
// whose own tests cover the binaries they make): what they do to modules the runtime
// compiles and runs.

// TestCompileRefusesAModuleThatStatesMoreThanItHolds: a 15-byte module that states 2²⁵
// exports (which wazero alone turns into 2.7 GB of allocations) is refused having
// allocated next to nothing.
func TestCompileRefusesAModuleThatStatesMoreThanItHolds(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	// The header, then an export section (7) of 5 bytes whose count is 2²⁵.
	wasm := []byte("\x00asm\x01\x00\x00\x00\x07\x05\xff\xff\xff\x0f\x00")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := rt.Compile(context.Background(), wasm)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "entries with") {
		t.Fatalf("err = %v, want ErrInvalidModule naming the count", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("refusing it allocated %d MiB", got>>20)
	}
}

// loopModule returns an ABI v0 module whose shardhost_receive never returns (loop; br 0)
// and whose start section runs a function that returns, or never returns when spin is
// set. (wasmbin's tests build the same module with more options.)
func loopModule(t testing.TB, spin bool) []byte {
	t.Helper()
	section := func(id byte, body []byte) []byte {
		if len(body) > 127 {
			t.Fatal("section too long for this encoder")
		}
		return append([]byte{id, byte(len(body))}, body...)
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	// Types: 0 ()->(), 1 (i32)->i32, 2 (i32,i32)->i32.
	types := []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7f}
	funcs := []byte{4, 0, 1, 2, 0} // marker, alloc, receive, start
	mem := []byte{1, 0x00, 1}
	exp := []byte{4}
	exp = append(exp, append(name(abi.VersionMarker(0)), 0, 0)...)
	exp = append(exp, append(name(abi.ExportAlloc), 0, 1)...)
	exp = append(exp, append(name(abi.ExportReceive), 0, 2)...)
	exp = append(exp, append(name("memory"), 2, 0)...)
	body := func(b ...byte) []byte { return append([]byte{byte(len(b))}, b...) }
	code := []byte{4}
	code = append(code, body(0, 0x0b)...)                                           // marker
	code = append(code, body(0, 0x41, 0x80, 0x08, 0x0b)...)                         // alloc: i32.const 1024
	code = append(code, body(0, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00, 0x0b)...) // receive: loop br 0 end; i32.const 0
	if spin {
		code = append(code, body(0, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b)...)
	} else {
		code = append(code, body(0, 0x0b)...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, section(1, types)...)     // type
	b = append(b, section(3, funcs)...)     // function
	b = append(b, section(5, mem)...)       // memory
	b = append(b, section(7, exp)...)       // export
	b = append(b, section(8, []byte{3})...) // start
	return append(b, section(10, code)...)  // code
}

// A loop in a message stops at the message deadline, and a loop in the module's start
// function at the activation deadline: Compile refuses such a module instead of hanging.
func TestDeadlineStopsLoopsInMessagesAndStart(t *testing.T) {
	const deadline = 300 * time.Millisecond
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) {
		c.MessageDeadline, c.ActivationDeadline = deadline, deadline
	})
	ctx := context.Background()
	m, err := rt.Compile(ctx, loopModule(t, false))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, "loop", "a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inst.Receive(ctx, []byte("x"))
	var ge *GuestError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGuestDeadline) || ge.Ran < deadline {
		t.Fatalf("loop: %v, want ErrGuestDeadline after at least %v", err, deadline)
	}
	if !inst.Closed() {
		t.Fatal("instance survived its deadline")
	}
	_, err = rt.Compile(ctx, loopModule(t, true))
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), ErrGuestDeadline.Error()) {
		t.Fatalf("a start function that never returns: %v, want ErrInvalidModule for the deadline", err)
	}
}

// TestCounterModuleGlobalsAreReachable: the Go counter, compiled from its rewrite (its
// 8 mutable globals exported: wasmbin's TestCounterModuleExportsItsGlobals), keeps the
// upload's digest and size, its instances reach every global, and it has a sound restore
// image.
func TestCounterModuleGlobalsAreReachable(t *testing.T) {
	wasm := testwasm.Bytes(t, "counter")
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "counter") // validation passes on the rewritten module
	if m.Digest != moduleDigest(wasm) || m.Size != len(wasm) {
		t.Fatalf("digest and size must be the upload's: %s %d", m.Digest, m.Size)
	}
	inst, err := m.Instantiate(context.Background(), "counter", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	for i := 0; i < 8; i++ {
		g := inst.mod.ExportedGlobal(abi.ExportGlobalPrefix + strconv.Itoa(i))
		if _, ok := g.(api.MutableGlobal); !ok {
			t.Errorf("instance lacks a mutable global %s%d: %v", abi.ExportGlobalPrefix, i, g)
		}
	}
	if m.snap.imageWasm == nil {
		t.Error("the Go counter should have a sound restore image")
	}
}
