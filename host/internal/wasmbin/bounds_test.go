package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// huge is the LEB128 encoding of 2³²−1, a count no module of ours can hold.
var huge = []byte{0xff, 0xff, 0xff, 0xff, 0x0f}

// vecOf is a vector count followed by entries.
func vecOf(count []byte, entries ...byte) []byte {
	return append(append([]byte{}, count...), entries...)
}

func TestCheckWasmBoundsRefusesCountsPastTheBytes(t *testing.T) {
	locals := func(groups ...uint32) []byte { // one function body declaring i32 locals
		b := appendU32(nil, uint32(len(groups)))
		for _, g := range groups {
			b = append(appendU32(b, g), valI32)
		}
		b = append(b, 0x0b)
		return append(appendU32(nil, uint32(len(b))), b...)
	}
	manyFunctions := newWasm().section(secCode, func() [][]byte {
		var bodies [][]byte
		for range maxModuleLocals/maxFunctionLocals + 1 {
			bodies = append(bodies, locals(maxFunctionLocals))
		}
		return bodies
	}()...).bytes()
	nameSection := func(sub byte, contents []byte) []byte {
		c := appendName(nil, "name")
		c = append(c, sub)
		c = appendU32(c, uint32(len(contents)))
		return newWasm().raw(secCustom, append(c, contents...)).bytes()
	}
	cases := map[string][]byte{
		"exports":              newWasm().raw(secExport, huge).bytes(),
		"types":                newWasm().raw(secType, huge).bytes(),
		"a type's parameters":  newWasm().raw(secType, vecOf([]byte{1}, append([]byte{0x60}, huge...)...)).bytes(),
		"imports":              newWasm().raw(secImport, huge).bytes(),
		"functions":            newWasm().raw(secFunction, huge).bytes(),
		"tables":               newWasm().raw(secTable, huge).bytes(),
		"memories":             newWasm().raw(secMemory, huge).bytes(),
		"globals":              newWasm().raw(secGlobal, huge).bytes(),
		"tags":                 newWasm().raw(secTag, huge).bytes(),
		"element segments":     newWasm().raw(secElement, huge).bytes(),
		"a segment's elements": newWasm().raw(secElement, vecOf([]byte{1}, append([]byte{0x00, 0x41, 0x00, 0x0b}, huge...)...)).bytes(),
		"a segment's expressions": newWasm().raw(secElement,
			vecOf([]byte{1}, append([]byte{0x05, 0x70}, huge...)...)).bytes(),
		"function bodies":         newWasm().raw(secCode, huge).bytes(),
		"a body past the section": newWasm().raw(secCode, vecOf([]byte{1}, append(huge, 0x00, 0x0b)...)).bytes(),
		"a function's locals":     newWasm().section(secCode, locals(30_000, 30_000)).bytes(),
		"the module's locals":     manyFunctions,
		"local groups":            newWasm().section(secCode, append([]byte{6}, append(huge, 0x0b)...)).bytes(),
		"data segments":           newWasm().raw(secData, huge).bytes(),
		"a data segment's bytes":  newWasm().raw(secData, vecOf([]byte{1}, append([]byte{0x00, 0x41, 0x00, 0x0b}, huge...)...)).bytes(),
		"tables past the cap": newWasm().section(secTable,
			append([]byte{0x70, 0x00}, appendU32(nil, maxTableElements/2+1)...),
			append([]byte{0x70, 0x00}, appendU32(nil, maxTableElements/2+1)...)).bytes(),
		"function names": nameSection(1, huge),
		"local names":    nameSection(2, append([]byte{1, 0}, huge...)),
	}
	for name, wasm := range cases {
		if err := CheckBounds(wasm); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidModule", name, err)
		}
	}
}

// TestCheckWasmBoundsPassesWhatToolchainsBuild: the examples as Go's port and rustc
// build them, their counts all within their bytes.
func TestCheckWasmBoundsPassesWhatToolchainsBuild(t *testing.T) {
	for name, wasm := range map[string][]byte{
		"go counter":   testwasm.Bytes(t, "counter"),
		"rust counter": testwasm.RustBytes(t, "counter-rust"),
	} {
		if err := CheckBounds(wasm); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if name == "rust counter" && !bytes.Equal(capTables(wasm), wasm) {
			t.Errorf("%s: its table, whose maximum is its size, was rewritten", name)
		}
	}
}

// TestCapTablesBoundsTableGrow: after the rewrite, a table.grow past maxTableElements
// fails (-1) instead of allocating 8 bytes an element (1 GiB here), one within it
// still grows the table, and a table whose maximum is lower keeps it.
func TestCapTablesBoundsTableGrow(t *testing.T) {
	grow := func(n int32) []byte { // () -> i32: table.grow 0 by n null references
		body := append([]byte{0x00, 0xd0, 0x70, 0x41}, appendS32(nil, n)...)
		body = append(body, 0xfc, 15, 0x00, 0x0b)
		return append(appendU32(nil, uint32(len(body))), body...)
	}
	module := func(table []byte) []byte {
		return newWasm().
			section(secType, []byte{0x60, 0, 1, valI32}).
			section(secFunction, []byte{0}, []byte{0}).
			section(secTable, table).
			section(secExport, export("huge", kindFunc, 0), export("small", kindFunc, 1)).
			section(secCode, grow(1<<27), grow(10)).
			bytes()
	}
	in := module([]byte{0x70, 0x00, 0x01}) // funcref, min 1, no maximum
	out := capTables(in)
	tables, err := readTables(sectionOf(t, out, secTable))
	if err != nil || len(tables) != 1 || !tables[0].hasMax || tables[0].max != maxTableElements {
		t.Fatalf("tables after the rewrite: %+v, %v; want one of maximum %d", tables, err, maxTableElements)
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	m, err := r.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := m.ExportedFunction("huge").Call(ctx)
	runtime.ReadMemStats(&after)
	if err != nil || int32(res[0]) != -1 {
		t.Fatalf("table.grow by 2^27: %v %v, want -1", res, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("the refused table.grow allocated %d MiB", got>>20)
	}
	if res, err := m.ExportedFunction("small").Call(ctx); err != nil || res[0] != 1 {
		t.Fatalf("table.grow by 10: %v %v, want 1 (the old size)", res, err)
	}
	// A maximum within the cap stays, byte for byte.
	if kept := module([]byte{0x70, 0x01, 0x01, 0x05}); !bytes.Equal(capTables(kept), kept) {
		t.Fatal("a table with a maximum of 5 was rewritten")
	}
}

// FuzzCheckWasmBounds: the check never panics and its errors are ErrInvalidModule.
func FuzzCheckWasmBounds(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(newWasm().raw(secExport, huge).bytes())
	f.Add(newWasm().section(secMemory, []byte{0x00, 0x01}).raw(secData, []byte{1, 0x00, 0x41, 0x0a, 0x0b, 0x02, 0x68, 0x69}).bytes())
	f.Add(newWasm().raw(secElement, vecOf([]byte{1}, append([]byte{0x00, 0x41, 0x00, 0x0b}, 2, 0, 0)...)).bytes())
	f.Fuzz(func(t *testing.T, wasm []byte) {
		if err := CheckBounds(wasm); err != nil && !errors.Is(err, ErrInvalidModule) {
			t.Fatalf("error %v does not wrap ErrInvalidModule", err)
		}
	})
}
