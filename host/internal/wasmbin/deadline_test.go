package wasmbin

import (
	"context"
	"errors"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/shardhost/shardhost/abi"
)

// loopModule returns an ABI v0 module whose shardhost_receive never returns (loop; br 0)
// and whose start section runs a function that returns, or never returns when spin is
// set. extraExport, if not empty, is one more function export of the marker.
func loopModule(t testing.TB, spin bool, extraExport string) []byte {
	t.Helper()
	// receive: loop br 0 end; i32.const 0
	return loopModuleWith(t, spin, extraExport, []byte{0, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00, 0x0b})
}

// loopModuleWith is loopModule with receive's body (locals and code) given.
func loopModuleWith(t testing.TB, spin bool, extraExport string, receive []byte) []byte {
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
	exports := [][]byte{
		append(name(abi.VersionMarker(0)), 0, 0),
		append(name(abi.ExportAlloc), 0, 1),
		append(name(abi.ExportReceive), 0, 2),
		append(name("memory"), 2, 0),
	}
	if extraExport != "" {
		exports = append(exports, append(name(extraExport), 0, 0))
	}
	exp := []byte{byte(len(exports))}
	for _, e := range exports {
		exp = append(exp, e...)
	}
	body := func(b ...byte) []byte { return append([]byte{byte(len(b))}, b...) }
	code := []byte{4}
	code = append(code, body(0, 0x0b)...)                   // marker
	code = append(code, body(0, 0x41, 0x80, 0x08, 0x0b)...) // alloc: i32.const 1024
	code = append(code, body(receive...)...)
	if spin {
		code = append(code, body(0, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b)...)
	} else {
		code = append(code, body(0, 0x0b)...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, section(secType, types)...)
	b = append(b, section(secFunction, funcs)...)
	b = append(b, section(secMemory, mem)...)
	b = append(b, section(secExport, exp)...)
	b = append(b, section(secStart, []byte{3})...)
	return append(b, section(secCode, code)...)
}

// The rewrite adds three globals and two exports, exports the start function in place of the
// start section, and puts a check at the head of every loop; wazero accepts the result.
func TestAddDeadlineChecks(t *testing.T) {
	in := loopModule(t, true, "")
	out, dr, err := addDeadlineChecks(in)
	if err != nil {
		t.Fatal(err)
	}
	if dr.stopGlobal != 0 || !dr.hasStart || dr.loops != 2 {
		t.Fatalf("rewrite: %+v, want stop global 0, a start function, 2 loops", dr)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	c, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("wazero refuses the rewritten module: %v", err)
	}
	defer c.Close(context.Background())
	if _, ok := c.ExportedFunctions()[startExport]; !ok {
		t.Fatalf("no %s export", startExport)
	}
	for _, s := range sectionsOf(t, out) {
		if s[0] == secStart {
			t.Fatal("the start section is still there")
		}
	}
	if _, _, err := addDeadlineChecks(loopModule(t, false, StopGlobalExport)); !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("a module exporting %s: %v, want ErrInvalidModule", StopGlobalExport, err)
	}
	// Code naming a global past the module's own is refused: after the rewrite it would
	// reach the host's stop global or loop counter.
	evil := loopModuleWith(t, false, "", []byte{0, 0x41, 0x00, 0x24, 0x00, 0x41, 0x00, 0x0b}) // global.set 0
	if _, _, err := addDeadlineChecks(evil); !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("code setting global 0 of a module without globals: %v, want ErrInvalidModule", err)
	}
	// A truncated section is an error, never a panic.
	for n := len(in) - 20; n < len(in); n++ { // inside the code section, the last
		if _, _, err := addDeadlineChecks(in[:n]); err == nil {
			t.Fatalf("the module cut to %d of %d bytes was rewritten", n, len(in))
		}
	}
}

// The guest's memory.grow leaves its result in the exported last-grow global: -1 after
// a grow the memory cannot make, the old size after one it can. The result stays on the
// stack for the guest, unchanged.
func TestLastGrowRecordsAFailedGrow(t *testing.T) {
	for _, c := range []struct {
		pages int32
		want  int32
	}{{100000, -1}, {1, 1}} {
		// receive: (i32.const pages) memory.grow; returned as the result.
		receive := appendS32([]byte{0, 0x41}, c.pages)
		receive = append(receive, 0x40, 0x00, 0x0b)
		out, _, err := addDeadlineChecks(loopModuleWith(t, false, "", receive))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r := wazero.NewRuntime(ctx)
		defer r.Close(ctx)
		mod, err := r.Instantiate(ctx, out)
		if err != nil {
			t.Fatalf("wazero refuses the rewritten module: %v", err)
		}
		g := mod.ExportedGlobal(LastGrowExport)
		if g == nil || g.Get() != 0 {
			t.Fatalf("no %s global, or not 0 before any grow: %v", LastGrowExport, g)
		}
		res, err := mod.ExportedFunction(abi.ExportReceive).Call(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int32(uint32(res[0])) != c.want || int32(uint32(g.Get())) != c.want {
			t.Fatalf("memory.grow %d: the guest got %d and the global holds %d; want %d for both", c.pages, int32(uint32(res[0])), int32(uint32(g.Get())), c.want)
		}
	}
	if _, _, err := addDeadlineChecks(loopModule(t, false, LastGrowExport)); !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("a module exporting %s: %v, want ErrInvalidModule", LastGrowExport, err)
	}
}
