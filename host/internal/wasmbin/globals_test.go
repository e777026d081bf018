package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// wasmBuilder assembles small modules by hand for the rewrite's tests.
type wasmBuilder struct{ b []byte }

func newWasm() *wasmBuilder { return &wasmBuilder{b: []byte("\x00asm\x01\x00\x00\x00")} }

// section appends a section whose contents are a vector of the given entries.
func (w *wasmBuilder) section(id byte, entries ...[]byte) *wasmBuilder {
	c := appendU32(nil, uint32(len(entries)))
	for _, e := range entries {
		c = append(c, e...)
	}
	return w.raw(id, c)
}

// raw appends a section with the given contents.
func (w *wasmBuilder) raw(id byte, contents []byte) *wasmBuilder {
	w.b = append(w.b, id)
	w.b = appendU32(w.b, uint32(len(contents)))
	w.b = append(w.b, contents...)
	return w
}

func (w *wasmBuilder) bytes() []byte { return w.b }

func importGlobal(module, name string, t byte, mutable bool) []byte {
	e := appendName(appendName(nil, module), name)
	return append(e, kindGlobal, t, b2u(mutable))
}

func importFunc(module, name string, typ uint32) []byte {
	e := appendName(appendName(nil, module), name)
	return appendU32(append(e, kindFunc), typ)
}

func global(t byte, mutable bool, init ...byte) []byte {
	return append(append([]byte{t, b2u(mutable)}, init...), 0x0b)
}

func export(name string, kind byte, idx uint32) []byte {
	return appendU32(append(appendName(nil, name), kind), idx)
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// exportsOf lists a module's exports as "name kind index".
func exportsOf(t *testing.T, wasm []byte) []string {
	t.Helper()
	r := reader{b: wasm, off: 8}
	var out []string
	for r.off < len(r.b) {
		id, _ := r.byte()
		n, _ := r.u32()
		body := reader{b: r.b[r.off : r.off+int(n)]}
		r.off += int(n)
		if id != secExport {
			continue
		}
		count, _ := body.u32()
		for i := uint32(0); i < count; i++ {
			name, _ := body.name()
			kind, _ := body.byte()
			idx, _ := body.u32()
			out = append(out, name+" "+strconv.Itoa(int(kind))+" "+strconv.Itoa(int(idx)))
		}
	}
	return out
}

// compileOnly checks that wazero accepts a module (imports need not resolve to compile).
func compileOnly(t *testing.T, wasm []byte) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	c, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("wazero refuses the rewritten module: %v", err)
	}
	c.Close(ctx)
}

func TestExportGlobalsNumbersAfterImportedGlobals(t *testing.T) {
	// Two imported globals (indices 0 and 1) and a function import, then four defined
	// globals: 2 mutable i32, 3 immutable i64, 4 mutable f64 (already exported as
	// "kept"), 5 mutable i64 initialised from an imported global.
	wasm := newWasm().
		section(secType, []byte{0x60, 0, 0}).
		section(secImport,
			importGlobal("env", "a", valI32, false),
			importFunc("env", "f", 0),
			importGlobal("env", "b", valI64, false)).
		section(secGlobal,
			global(valI32, true, 0x41, 0x2a),
			global(valI64, false, 0x42, 0x7f),
			global(valF64, true, 0x44, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f),
			global(valI64, true, 0x23, 1)).
		section(secExport, export("kept", kindGlobal, 4), export("f", kindFunc, 0)).
		raw(secCustom, append(appendName(nil, "trailer"), "data"...)). // (wazero refuses an empty custom section at the end)
		bytes()
	out, added, err := exportGlobals(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if added != 2 {
		t.Fatalf("added %d exports, want 2", added)
	}
	want := []string{"kept 3 4", "f 0 0", "shardhost_g2 3 2", "shardhost_g5 3 5"}
	if got := exportsOf(t, out); !slices.Equal(got, want) {
		t.Fatalf("exports %v, want %v", got, want)
	}
	compileOnly(t, out)
	_, globals, _, _ := rewriteGlobals(wasm)
	wantGlobals := []Global{{2, api.ValueTypeI32, "shardhost_g2"}, {4, api.ValueTypeF64, "kept"}, {5, api.ValueTypeI64, "shardhost_g5"}}
	if len(globals) != len(wantGlobals) {
		t.Fatalf("globals %+v", globals)
	}
	for i := range globals {
		if globals[i] != wantGlobals[i] {
			t.Fatalf("globals %+v, want %+v", globals, wantGlobals)
		}
	}
	// Every section but the export section is byte for byte the same.
	before, after := sectionsOf(t, wasm), sectionsOf(t, out)
	if len(before) != len(after) {
		t.Fatalf("%d sections became %d", len(before), len(after))
	}
	for i := range before {
		if before[i][0] != secExport && !bytes.Equal(before[i], after[i]) {
			t.Errorf("section %d (id %d) changed", i, before[i][0])
		}
	}
	again, added, err := exportGlobals(out)
	if err != nil || added != 0 || &again[0] != &out[0] {
		t.Fatalf("second rewrite: %d added, %v, same slice %v", added, err, &again[0] == &out[0])
	}
}

func TestExportGlobalsAddsAnExportSection(t *testing.T) {
	// No export section: one is inserted right after the global section, before the
	// code section and any custom section in between.
	wasm := newWasm().
		section(secType, []byte{0x60, 0, 0}).
		section(secFunction, []byte{0}).
		section(secGlobal, global(valI32, true, 0x41, 0), global(valI32, false, 0x41, 1)).
		raw(secCustom, appendName(nil, "between")).
		section(secCode, []byte{2, 0, 0x0b}).
		bytes()
	out, added, err := exportGlobals(wasm)
	if err != nil || added != 1 {
		t.Fatalf("added %d, %v", added, err)
	}
	if got := exportsOf(t, out); !slices.Equal(got, []string{"shardhost_g0 3 0"}) {
		t.Fatalf("exports %v", got)
	}
	compileOnly(t, out)
	// The inserted section comes right after the global section.
	var ids []byte
	for _, sec := range sectionsOf(t, out) {
		ids = append(ids, sec[0])
	}
	if !bytes.Equal(ids, []byte{secType, secFunction, secGlobal, secExport, secCustom, secCode}) {
		t.Fatalf("section ids %v", ids)
	}
}

// sectionsOf splits a module into its sections, each with its id and size.
func sectionsOf(t *testing.T, wasm []byte) [][]byte {
	t.Helper()
	r := reader{b: wasm, off: 8}
	var out [][]byte
	for r.off < len(r.b) {
		start := r.off
		r.byte()
		n, err := r.u32()
		if err != nil || r.skip(int(n)) != nil {
			t.Fatalf("malformed module at %d", start)
		}
		out = append(out, wasm[start:r.off])
	}
	return out
}

func TestExportGlobalsLeavesModulesWithoutMutableGlobals(t *testing.T) {
	// One function () -> () exported as the ABI v0 marker.
	marker := newWasm().section(secType, []byte{0x60, 0, 0}).section(secFunction, []byte{0}).
		section(secExport, export("shardhost_abi_v0", kindFunc, 0)).section(secCode, []byte{2, 0, 0x0b}).bytes()
	for name, wasm := range map[string][]byte{
		"empty":          []byte("\x00asm\x01\x00\x00\x00"),
		"immutable only": newWasm().section(secGlobal, global(valI32, false, 0x41, 0)).bytes(),
		"exported":       newWasm().section(secGlobal, global(valI32, true, 0x41, 0)).section(secExport, export("sp", kindGlobal, 0)).bytes(),
		"function":       marker,
	} {
		out, added, err := exportGlobals(wasm)
		if err != nil || added != 0 || !bytes.Equal(out, wasm) {
			t.Errorf("%s: added %d, %v", name, added, err)
		}
	}
}

func TestExportGlobalsRefusesMalformedModules(t *testing.T) {
	valid := newWasm().
		section(secType, []byte{0x60, 0, 0}).
		section(secImport, importGlobal("env", "a", valI32, true)).
		section(secGlobal, global(valI64, true, 0x42, 0x80, 0x01)).
		section(secExport, export("x", kindGlobal, 0)).
		bytes()
	cases := map[string][]byte{
		"no header":      []byte("\x00asn\x01\x00\x00\x00"),
		"version 2":      []byte("\x00asm\x02\x00\x00\x00"),
		"section size":   append(newWasm().bytes(), secGlobal, 0x80, 0x80, 0x80, 0x80, 0x10),
		"past the end":   append(newWasm().bytes(), secGlobal, 5, 1),
		"unknown id":     newWasm().raw(14, nil).bytes(),
		"out of order":   newWasm().section(secGlobal).section(secType).bytes(),
		"twice":          newWasm().section(secExport).section(secExport).bytes(),
		"bad valtype":    newWasm().section(secGlobal, []byte{0x55, 1, 0x41, 0, 0x0b}).bytes(),
		"bad mut":        newWasm().section(secGlobal, []byte{valI32, 2, 0x41, 0, 0x0b}).bytes(),
		"bad init":       newWasm().section(secGlobal, []byte{valI32, 1, 0x20, 0, 0x0b}).bytes(),
		"no end":         newWasm().section(secGlobal, []byte{valI32, 1, 0x41, 0}).bytes(),
		"trailing":       newWasm().raw(secGlobal, []byte{1, valI32, 1, 0x41, 0, 0x0b, 0}).bytes(),
		"long LEB":       newWasm().raw(secGlobal, []byte{0x81, 0x80, 0x80, 0x80, 0x80, 0x00}).bytes(),
		"LEB overflow":   newWasm().raw(secGlobal, []byte{0xff, 0xff, 0xff, 0xff, 0x1f}).bytes(),
		"import kind":    newWasm().section(secImport, append(appendName(appendName(nil, "m"), "n"), 9)).bytes(),
		"export kind":    newWasm().section(secExport, export("x", 7, 0)).bytes(),
		"duplicate name": newWasm().section(secExport, export("x", kindFunc, 0), export("x", kindFunc, 1)).bytes(),
		"name taken":     newWasm().section(secGlobal, global(valI32, true, 0x41, 0)).section(secExport, export("shardhost_g0", kindFunc, 0)).bytes(),
	}
	boundaries := map[int]bool{8: true}
	end := 8
	for _, sec := range sectionsOf(t, valid) {
		end += len(sec)
		boundaries[end] = true
	}
	for n := 0; n < len(valid); n++ {
		if !boundaries[n] { // a prefix that ends between sections is a valid module
			cases["prefix "+strconv.Itoa(n)] = valid[:n]
		}
	}
	for name, wasm := range cases {
		if _, _, err := exportGlobals(wasm); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("%s: %v, want ErrInvalidModule", name, err)
		}
	}
}

// TestCounterModuleExportsItsGlobals: the Go counter's mutable globals are exported,
// and the rewrite of the result changes nothing. host's
// TestCounterModuleGlobalsAreReachable instantiates what it makes.
func TestCounterModuleExportsItsGlobals(t *testing.T) {
	wasm := testwasm.Bytes(t, "counter")
	out, added, err := exportGlobals(wasm)
	if err != nil {
		t.Fatal(err)
	}
	// Go's wasm port keeps SP, CTXT, g, RET0–RET3 and PAUSE in globals.
	if added != 8 {
		t.Errorf("added %d exports to the Go counter, want 8", added)
	}
	again, added2, err := exportGlobals(out)
	if err != nil || added2 != 0 || !bytes.Equal(again, out) {
		t.Fatalf("rewrite is not idempotent: %d added, %v", added2, err)
	}
}

func TestRestoreImageIsRefusedForTableAndSegmentChanges(t *testing.T) {
	body := func(code ...byte) []byte { // a function with no locals
		return append(appendU32(nil, uint32(len(code)+1)), append([]byte{0}, code...)...)
	}
	module := func(code []byte) []byte {
		return newWasm().
			section(secType, []byte{0x60, 0, 0}).
			section(secFunction, []byte{0}).
			section(secStart, nil).
			section(secCode, code).
			raw(secData, []byte{0}).
			bytes()
	}
	cases := map[string]struct {
		code  []byte
		sound bool
	}{
		"plain":      {body(0x41, 0x7f, 0x1a, 0x0b), true},
		"memory ops": {body(0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 10, 0, 0, 0x41, 0, 0x28, 2, 0x80, 0x01, 0x1a, 0x0b), true},
		"br_table":   {body(0x02, 0x40, 0x41, 0, 0x0e, 2, 0, 0, 0, 0x0b, 0x0b), true},
		"table.set":  {body(0x41, 0, 0xd0, 0x70, 0x26, 0, 0x0b), false},
		"table.grow": {body(0xd0, 0x70, 0x41, 1, 0xfc, 15, 0, 0x1a, 0x0b), false},
		"data.drop":  {body(0xfc, 9, 0, 0x0b), false},
		"simd":       {body(0xfd, 12, 0x0b), false},
	}
	for name, c := range cases {
		image, sound, err := RestoreImage(module(c.code))
		if err != nil || sound != c.sound {
			t.Errorf("%s: sound %v, %v; want %v", name, sound, err, c.sound)
		}
		if sound {
			if bytes.Contains(image, []byte{secStart, 0}) || image[len(image)-3] == secData {
				t.Errorf("%s: image keeps its start or data section: % x", name, image)
			}
		}
	}
}

// FuzzExportGlobals: the rewrite never panics, errors are ErrInvalidModule, and its
// output is a fixed point.
func FuzzExportGlobals(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(newWasm().
		section(secType, []byte{0x60, 0, 0}).
		section(secImport, importGlobal("env", "a", valI32, true), importFunc("env", "f", 0)).
		section(secGlobal, global(valI32, true, 0x41, 0x2a), global(valF32, false, 0x43, 0, 0, 0, 0)).
		section(secExport, export("f", kindFunc, 0)).
		section(secCode, []byte{2, 0, 0x0b}).
		bytes())
	f.Add(newWasm().section(secGlobal, global(valV128, true, 0xfd, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).bytes())
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, added, err := exportGlobals(wasm)
		if err != nil {
			if !errors.Is(err, ErrInvalidModule) {
				t.Fatalf("error %v does not wrap ErrInvalidModule", err)
			}
			return
		}
		if added == 0 && !bytes.Equal(out, wasm) {
			t.Fatal("nothing added, yet the module changed")
		}
		again, added2, err := exportGlobals(out)
		if err != nil || added2 != 0 || !bytes.Equal(again, out) {
			t.Fatalf("rewriting the output: %d added, %v", added2, err)
		}
		RestoreImage(out) // must not panic either
	})
}
