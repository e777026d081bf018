package wasmbin

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// dataSeg is an active data segment of memory 0 at offset, for the hand-built modules.
func dataSeg(offset int32, init string) []byte {
	b := appendS32([]byte{0x00, 0x41}, offset)
	b = append(b, 0x0b)
	b = appendU32(b, uint32(len(init)))
	return append(b, init...)
}

// memoryModule is a module with one page of memory of its own, exported, and the given
// data segments.
func memoryModule(segs ...[]byte) []byte {
	return newWasm().
		section(secMemory, []byte{0x00, 0x01}).
		section(secExport, export("memory", kindMemory, 0)).
		section(secData, segs...).
		bytes()
}

// initialMemory instantiates wasm without running its start functions, every import
// a function that traps, and returns a copy of its memory 0; ok is false when
// CheckBounds or wazero refuses it.
func initialMemory(tb testing.TB, wasm []byte) (mem []byte, ok bool) {
	tb.Helper()
	if CheckBounds(wasm) != nil {
		return nil, false // wazero would allocate what the module states
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(64))
	defer r.Close(ctx)
	c, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return nil, false
	}
	builders := map[string]wazero.HostModuleBuilder{}
	for _, f := range c.ImportedFunctions() {
		mod, name, _ := f.Import()
		b := builders[mod]
		if b == nil {
			b = r.NewHostModuleBuilder(mod)
			builders[mod] = b
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) { panic("called") }),
				f.ParamTypes(), f.ResultTypes()).
			Export(name)
	}
	for mod, b := range builders {
		if _, err := b.Instantiate(ctx); err != nil {
			tb.Fatalf("stub imports of %s: %v", mod, err)
		}
	}
	m, err := r.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, false
	}
	if m.Memory() == nil {
		return []byte{}, true
	}
	b, _ := m.Memory().Read(0, m.Memory().Size())
	return bytes.Clone(b), true
}

func TestCoalesceDataKeepsTheInitialMemory(t *testing.T) {
	in := memoryModule(
		dataSeg(100, "abc"),
		dataSeg(10, "hello"), // 10–15
		dataSeg(20, "world"), // 5 bytes after hello: joined
		dataSeg(167, "x"),    // 64 bytes after abc (100–103): joined
		dataSeg(300, ""),     // an empty segment, far from the rest
		dataSeg(5000, "far"),
		dataSeg(65530, "edge!!"), // ends at the memory's end
	)
	out, fewer := coalesceData(in)
	if fewer != 2 {
		t.Fatalf("%d segments fewer, want 2 (hello+world, abc+x)", fewer)
	}
	segs, ok := activeDataSegments(sectionOf(t, out, secData))
	if !ok {
		t.Fatal("the rewritten data section does not read back")
	}
	want := []dataSegment{{10, []byte("hello\x00\x00\x00\x00\x00world")}, {100, []byte("abc" + string(make([]byte, 64)) + "x")},
		{300, []byte{}}, {5000, []byte("far")}, {65530, []byte("edge!!")}}
	if len(segs) != len(want) {
		t.Fatalf("segments %v, want %v", segs, want)
	}
	for i := range want {
		if segs[i].offset != want[i].offset || !bytes.Equal(segs[i].init, want[i].init) {
			t.Errorf("segment %d: %d %q, want %d %q", i, segs[i].offset, segs[i].init, want[i].offset, want[i].init)
		}
	}
	before, ok1 := initialMemory(t, in)
	after, ok2 := initialMemory(t, out)
	if !ok1 || !ok2 || !bytes.Equal(before, after) {
		t.Fatalf("initial memory differs after the rewrite (instantiated: %v, %v)", ok1, ok2)
	}
	if again, n := coalesceData(out); n != 0 || !bytes.Equal(again, out) {
		t.Errorf("rewriting the output again changed it (%d fewer)", n)
	}
}

// sectionOf returns the contents of wasm's section id.
func sectionOf(t *testing.T, wasm []byte, id byte) []byte {
	t.Helper()
	sections, err := splitSections(wasm)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sections {
		if s.id == id {
			return wasm[s.start:s.end]
		}
	}
	t.Fatalf("no section %d", id)
	return nil
}

func TestCoalesceDataLeavesWhatItCannotShowTheSame(t *testing.T) {
	near := [][]byte{dataSeg(10, "hello"), dataSeg(20, "world")} // would be joined
	cases := map[string][]byte{
		"overlapping segments": memoryModule(dataSeg(10, "hello"), dataSeg(12, "XY")),
		"a data count section": newWasm().
			section(secMemory, []byte{0x00, 0x01}).
			raw(secDataCount, appendU32(nil, 2)).
			section(secData, near...).
			bytes(),
		"an imported memory": newWasm().
			section(secImport, append(appendName(appendName(nil, "env"), "memory"), kindMemory, 0x00, 0x01)).
			section(secData, near...).
			bytes(),
		"an offset read from a global": newWasm().
			section(secImport, importGlobal("env", "base", valI32, false)).
			section(secMemory, []byte{0x00, 0x01}).
			section(secData, near[0], []byte{0x00, 0x23, 0x00, 0x0b, 0x01, 'z'}).
			bytes(),
		"a passive segment":  memoryModule(near[0], near[1], []byte{0x01, 0x02, 'h', 'i'}),
		"segments far apart": memoryModule(dataSeg(10, "hello"), dataSeg(80, "world")),
		"one segment":        memoryModule(dataSeg(10, "hello")),
		"a truncated data section": newWasm().
			section(secMemory, []byte{0x00, 0x01}).
			raw(secData, append(appendU32(nil, 2), near[0]...)).
			bytes(),
		"no data section": newWasm().section(secMemory, []byte{0x00, 0x01}).bytes(),
		"not a module":    []byte("\x00asx\x01\x00\x00\x00"),
	}
	for name, in := range cases {
		out, fewer := coalesceData(in)
		if fewer != 0 || !bytes.Equal(out, in) {
			t.Errorf("%s: the module changed (%d segments fewer)", name, fewer)
		}
	}
}

// TestGoGuestDataIsCoalesced: the module Go's wasip1 port builds loses almost all of
// its tens of thousands of data segments, and an instance of it starts with the same
// memory.
func TestGoGuestDataIsCoalesced(t *testing.T) {
	in := testwasm.Bytes(t, "counter")
	before, ok := activeDataSegments(sectionOf(t, in, secData))
	if !ok {
		t.Fatal("the Go counter's data section does not read")
	}
	out, fewer := coalesceData(in)
	after, ok := activeDataSegments(sectionOf(t, out, secData))
	if !ok || fewer != len(before)-len(after) {
		t.Fatalf("rewritten data section: readable %v, %d fewer, %d before and %d after", ok, fewer, len(before), len(after))
	}
	t.Logf("data segments: %d before, %d after; module %d bytes, then %d", len(before), len(after), len(in), len(out))
	if len(before) < 1000 || len(after) > 100 {
		t.Errorf("data segments: %d before, %d after; want over 1,000 before and at most 100 after", len(before), len(after))
	}
	m1, ok1 := initialMemory(t, in)
	m2, ok2 := initialMemory(t, out)
	if !ok1 || !ok2 || !bytes.Equal(m1, m2) {
		t.Fatalf("initial memory differs after the rewrite (instantiated: %v, %v)", ok1, ok2)
	}
}

// FuzzCoalesceData: the rewrite never panics, changes nothing when it says so, is a
// fixed point, and what it makes of a module wazero instantiates starts with the same
// memory.
func FuzzCoalesceData(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(memoryModule(dataSeg(100, "abc"), dataSeg(10, "hello"), dataSeg(20, "world"), dataSeg(65530, "edge!!")))
	f.Add(memoryModule(dataSeg(10, "hello"), dataSeg(12, "XY")))
	f.Add(memoryModule(dataSeg(65534, "abc"), dataSeg(65500, "x")))
	f.Add(memoryModule(dataSeg(-1, "a"), dataSeg(-4, "b")))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, fewer := coalesceData(wasm)
		if fewer == 0 {
			if !bytes.Equal(out, wasm) {
				t.Fatal("no segment fewer, yet the module changed")
			}
			return
		}
		if again, n := coalesceData(out); n != 0 || !bytes.Equal(again, out) {
			t.Fatalf("rewriting the output again: %d fewer", n)
		}
		before, ok1 := initialMemory(t, wasm)
		after, ok2 := initialMemory(t, out)
		if ok1 != ok2 || !bytes.Equal(before, after) {
			t.Fatalf("instantiates: %v before, %v after; same memory: %v", ok1, ok2, bytes.Equal(before, after))
		}
	})
}
