package wasmbin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/shardhost/shardhost/abi"
)

// shardhost_dispatch calls each export the module has with the ABI's type, passes the
// parameters through and returns the result (0 for a function without one); an op
// whose export is missing, or has another type, traps.
func TestDispatchCallsTheExports(t *testing.T) {
	// receive: local.get 0; local.get 1; i32.add. The extra export names the marker,
	// ()->(), shardhost_on_activate, whose type is ()->i32: dispatch leaves it out.
	in := loopModuleWith(t, false, abi.ExportOnActivate, []byte{0, 0x20, 0, 0x20, 1, 0x6a, 0x0b})
	out, dr, err := addDeadlineChecks(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := Ops(1<<OpStart | 1<<OpAlloc | 1<<OpReceive); dr.ops != want {
		t.Fatalf("ops %v, want %v", dr.ops, want)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	mod, err := r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		t.Fatalf("wazero refuses the rewritten module: %v", err)
	}
	dispatch := mod.ExportedFunction(DispatchExport)
	if dispatch == nil {
		t.Fatalf("no %s export", DispatchExport)
	}
	for _, c := range []struct {
		op   Op
		a, b uint64
		want uint64
	}{
		{OpStart, 0, 0, 0},
		{OpAlloc, 99, 0, 1024}, // alloc: i32.const 1024
		{OpReceive, 3, 4, 7},
		{OpReceive, 0xffffffff, 2, 1},
	} {
		res, err := dispatch.Call(ctx, uint64(c.op), c.a, c.b)
		if err != nil || res[0] != c.want {
			t.Errorf("dispatch(%v, %d, %d) = %v, %v; want %d", Ops(1<<c.op), c.a, c.b, res, err, c.want)
		}
	}
	for _, op := range []Op{OpInitialize, OpOnActivate, OpSnapshot, OpRestore, numOps, 1 << 20} {
		if _, err := dispatch.Call(ctx, uint64(op), 0, 0); err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("dispatch(op %d), which the module lacks: %v, want a trap", op, err)
		}
	}
	if _, _, err := addDeadlineChecks(loopModule(t, false, DispatchExport)); !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("a module exporting %s: %v, want ErrInvalidModule", DispatchExport, err)
	}
}

// An export may be an imported function, and a module may have no type or function
// section: dispatch numbers functions and types after the imported and existing ones,
// and wazero accepts what the rewrite makes.
func TestDispatchNumbersAfterImportsAndExistingTypes(t *testing.T) {
	for name, in := range map[string][]byte{
		"imported alloc": newWasm().
			section(secType, []byte{0x60, 1, valI32, 1, valI32}).
			section(secImport, importFunc("env", "f", 0)).
			section(secExport, export(abi.ExportAlloc, kindFunc, 0)).
			bytes(),
		"no types, functions or code": newWasm().
			section(secMemory, []byte{0x00, 1}).
			bytes(),
		"defined after imported": newWasm().
			section(secType, []byte{0x60, 0, 0}, []byte{0x60, 2, valI32, valI32, 1, valI32}).
			section(secImport, importFunc("env", "f", 0)).
			section(secFunction, []byte{1}).
			section(secExport, export(abi.ExportReceive, kindFunc, 1), export(abi.ExportInitialize, kindFunc, 0)).
			section(secCode, []byte{4, 0, 0x20, 1, 0x0b}).
			bytes(),
	} {
		out, dr, err := addDeadlineChecks(in)
		r := wazero.NewRuntime(context.Background())
		defer r.Close(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := r.CompileModule(context.Background(), out)
		if err != nil {
			t.Fatalf("%s: wazero refuses the rewritten module (ops %v): %v", name, dr.ops, err)
		}
		fn, ok := c.ExportedFunctions()[DispatchExport]
		if !ok || len(fn.ParamTypes()) != 3 || len(fn.ResultTypes()) != 1 {
			t.Fatalf("%s: %s is %v", name, DispatchExport, fn)
		}
		want := map[string]Ops{
			"imported alloc":              1 << OpAlloc,
			"no types, functions or code": 0,
			"defined after imported":      1<<OpReceive | 1<<OpInitialize,
		}[name]
		if dr.ops != want {
			t.Errorf("%s: ops %v, want %v", name, dr.ops, want)
		}
	}
}

// FuzzAddDeadlineChecks: the rewrite never panics, its errors are ErrInvalidModule,
// and what it makes of a module wazero accepts, wazero accepts too.
func FuzzAddDeadlineChecks(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(loopModuleWith(f, false, abi.ExportOnActivate, []byte{0, 0x20, 0, 0x20, 1, 0x6a, 0x0b}))
	f.Add(loopModule(f, true, ""))
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	f.Cleanup(func() { r.Close(ctx) })
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, _, err := addDeadlineChecks(wasm)
		if err != nil {
			if !errors.Is(err, ErrInvalidModule) {
				t.Fatalf("error %v does not wrap ErrInvalidModule", err)
			}
			return
		}
		if CheckBounds(wasm) != nil {
			return // wazero would allocate what the module states
		}
		c, err := r.CompileModule(ctx, wasm)
		if err != nil {
			return
		}
		c.Close(ctx)
		if c, err = r.CompileModule(ctx, out); err != nil {
			t.Fatalf("wazero accepts the module but not its rewrite: %v", err)
		}
		c.Close(ctx)
	})
}
