package host

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

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
		"function names":          nameSection(1, huge),
		"local names":             nameSection(2, append([]byte{1, 0}, huge...)),
	}
	for name, wasm := range cases {
		if err := checkWasmBounds(wasm); !errors.Is(err, ErrInvalidModule) {
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
		if err := checkWasmBounds(wasm); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCompileRefusesAModuleThatStatesMoreThanItHolds: a 15-byte module that states 2²⁵
// exports (which wazero alone turns into 2.7 GB of allocations) is refused having
// allocated next to nothing.
func TestCompileRefusesAModuleThatStatesMoreThanItHolds(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	wasm := newWasm().raw(secExport, []byte{0xff, 0xff, 0xff, 0x0f, 0x00}).bytes()
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

// FuzzCheckWasmBounds: the check never panics and its errors are ErrInvalidModule.
func FuzzCheckWasmBounds(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(newWasm().raw(secExport, huge).bytes())
	f.Add(newWasm().section(secMemory, []byte{0x00, 0x01}).raw(secData, []byte{1, 0x00, 0x41, 0x0a, 0x0b, 0x02, 0x68, 0x69}).bytes())
	f.Add(newWasm().raw(secElement, vecOf([]byte{1}, append([]byte{0x00, 0x41, 0x00, 0x0b}, 2, 0, 0)...)).bytes())
	f.Fuzz(func(t *testing.T, wasm []byte) {
		if err := checkWasmBounds(wasm); err != nil && !errors.Is(err, ErrInvalidModule) {
			t.Fatalf("error %v does not wrap ErrInvalidModule", err)
		}
	})
}
