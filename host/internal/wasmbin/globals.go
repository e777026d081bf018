package wasmbin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
)

// The deploy-time rewrite that makes an instance's whole state reachable from the host.
//
// A module's state between two calls is its linear memory and its mutable globals.
// Memory is exported by every entity module (abi/SPEC.md); globals usually are not (a Go
// guest keeps SP, CTXT, g, RET0–RET3 and PAUSE in unexported globals, a Rust or TinyGo
// guest its __stack_pointer, and TinyGo's default asyncify scheduler adds
// __asyncify_state and __asyncify_data, both zero between calls). exportGlobals adds an
// export for each of them, so that wazero's api.Module.ExportedGlobal reaches them and a
// snapshot can read and restore them. Nothing else is assumed of them: every mutable
// global is saved and restored, whatever the toolchain calls it.
//
// The pass relies on this much of the binary format (WebAssembly 1.0, plus what Go's
// wasip1 port, TinyGo and rustc emit: bulk memory, sign extension, non-trapping float-to-int,
// mutable globals, reference types, and the extended-constant and SIMD constants in
// global initialisers):
//
//	module   = magic "\0asm" version 01 00 00 00 section*
//	section  = id:byte size:u32 contents:byte[size]
//	ids        0 custom (anywhere), then in this order: 1 type, 2 import, 3 function,
//	           4 table, 5 memory, 13 tag, 6 global, 7 export, 8 start, 9 element,
//	           12 data count, 10 code, 11 data
//	import   = module:name field:name desc
//	desc     = 0x00 typeidx | 0x01 reftype limits | 0x02 limits | 0x03 valtype mut
//	           | 0x04 0x00 typeidx (tag)
//	limits   = 0x00 min | 0x01 min max | 0x02 min | 0x03 min max (shared)
//	           | 0x04–0x07: the same with u64 bounds (memory64)
//	global   = valtype mut:0x00|0x01 expr
//	expr     = constant instructions up to 0x0b (end)
//	export   = name kind:0x00 func|0x01 table|0x02 memory|0x03 global|0x04 tag index:u32
//	name     = len:u32 utf8:byte[len]
//
// Only the import, global and export sections are parsed; every other section is copied
// byte for byte. The export section is the only one that changes (or is added, right
// after the global section, when the module has none). The rewrite is a pure function of
// the input bytes, so every host that rewrites a module gets the same binary.

// globalExportPrefix starts the name of the exports the rewrite adds: global index i of
// the module's global index space (imported globals first) is exported as
// "shardhost_g<i>". A module that exports anything else under such a name is refused
// (which keeps the rewrite idempotent).
const globalExportPrefix = abi.ExportGlobalPrefix

// Section ids of the binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank is the position of a known non-custom section in the order the binary
// format prescribes; 0 means unknown.
var sectionRank = [...]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11,
	secCode: 12, secData: 13,
}

// Import and export kinds.
const (
	kindFunc   = 0x00
	kindTable  = 0x01
	kindMemory = 0x02
	kindGlobal = 0x03
	kindTag    = 0x04
)

// Value types that may appear in a global.
const (
	valI32       = 0x7f
	valI64       = 0x7e
	valF32       = 0x7d
	valF64       = 0x7c
	valV128      = 0x7b
	valFuncref   = 0x70
	valExternref = 0x6f
)

// Global is a mutable global a module defines, and the export that reaches it.
type Global struct {
	// Index is the global's index in the module's global index space.
	Index uint32
	// Type is its value type (api.ValueTypeI32 etc.; the binary format's byte).
	Type api.ValueType
	// Export is the name of an export of it in the rewritten module.
	Export string
}

// exportGlobals rewrites a module binary so that every mutable global it defines is
// exported: a global not yet exported under any name gets the export
// globalExportPrefix+index. It returns the new binary and the number of exports added;
// a module that already exports every mutable global comes back unchanged (the same
// slice), which makes the rewrite idempotent. Malformed input is an error wrapping
// ErrInvalidModule; the function never panics, whatever the input.
func exportGlobals(wasm []byte) ([]byte, int, error) {
	out, _, added, err := rewriteGlobals(wasm)
	return out, added, err
}

// rewriteGlobals is exportGlobals that also returns the module's mutable globals, in
// index order, each with the name of an export that reaches it in the result.
func rewriteGlobals(wasm []byte) (out []byte, globals []Global, added int, err error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, nil, 0, fmt.Errorf("%w: not a WebAssembly binary (no \\0asm header)", ErrInvalidModule)
	}
	if v := wasm[4:8]; v[0] != 1 || v[1] != 0 || v[2] != 0 || v[3] != 0 {
		return nil, nil, 0, fmt.Errorf("%w: binary format version %x, want 01000000", ErrInvalidModule, v)
	}
	type span struct{ start, end int } // a section's contents, start < 0 when absent
	var (
		importSec, globalSec, exportSec = span{-1, -1}, span{-1, -1}, span{-1, -1}
		exportHeader                    = -1 // offset of the export section's id byte
		globalEnd                       = -1 // offset just past the global section
		lastRank                        = 0
	)
	r := reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		header := r.off
		id, err := r.byte()
		if err != nil {
			return nil, nil, 0, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: section %d size: %v", ErrInvalidModule, id, err)
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			return nil, nil, 0, fmt.Errorf("%w: section %d of %d bytes at offset %d runs past the end", ErrInvalidModule, id, size, header)
		}
		body := span{r.off, r.off + int(size)}
		r.off = body.end
		if id == secCustom {
			continue
		}
		if int(id) >= len(sectionRank) || sectionRank[id] == 0 {
			return nil, nil, 0, fmt.Errorf("%w: unknown section id %d at offset %d", ErrInvalidModule, id, header)
		}
		if rank := sectionRank[id]; rank <= lastRank {
			return nil, nil, 0, fmt.Errorf("%w: section %d at offset %d is out of order or repeated", ErrInvalidModule, id, header)
		} else {
			lastRank = rank
		}
		switch id {
		case secImport:
			importSec = body
		case secGlobal:
			globalSec, globalEnd = body, body.end
		case secExport:
			exportSec, exportHeader = body, header
		}
	}

	// Imported globals come first in the global index space.
	var imported uint32
	if importSec.start >= 0 {
		im, err := scanImports(wasm[importSec.start:importSec.end])
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: import section: %v", ErrInvalidModule, err)
		}
		imported = im.globals
	}
	if globalSec.start >= 0 {
		globals, err = mutableGlobals(wasm[globalSec.start:globalSec.end], imported)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: global section: %v", ErrInvalidModule, err)
		}
	}
	var (
		exportCount uint32
		entries     []byte // the export section's entries, after its count
	)
	names := map[string]struct{}{}
	exportedAs := map[uint32]string{} // global index -> first export name
	if exportSec.start >= 0 {
		er := reader{b: wasm[exportSec.start:exportSec.end]}
		if exportCount, err = er.u32(); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: export section: %v", ErrInvalidModule, err)
		}
		entries = er.b[er.off:]
		for i := uint32(0); i < exportCount; i++ {
			name, err := er.name()
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%w: export %d: %v", ErrInvalidModule, i, err)
			}
			kind, err := er.byte()
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%w: export %q: %v", ErrInvalidModule, name, err)
			}
			idx, err := er.u32()
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%w: export %q: %v", ErrInvalidModule, name, err)
			}
			if kind > kindTag {
				return nil, nil, 0, fmt.Errorf("%w: export %q has unknown kind %d", ErrInvalidModule, name, kind)
			}
			if _, dup := names[name]; dup {
				return nil, nil, 0, fmt.Errorf("%w: export name %q is used twice", ErrInvalidModule, name)
			}
			if strings.HasPrefix(name, globalExportPrefix) && (kind != kindGlobal || name != globalExportPrefix+strconv.FormatUint(uint64(idx), 10)) {
				return nil, nil, 0, fmt.Errorf("%w: export name %q: names beginning with %q are reserved for the host", ErrInvalidModule, name, globalExportPrefix)
			}
			names[name] = struct{}{}
			if _, seen := exportedAs[idx]; kind == kindGlobal && !seen {
				exportedAs[idx] = name
			}
		}
		if er.off != len(er.b) {
			return nil, nil, 0, fmt.Errorf("%w: export section has %d bytes after its last entry", ErrInvalidModule, len(er.b)-er.off)
		}
	}

	var add []byte
	for i := range globals {
		g := &globals[i]
		if name, ok := exportedAs[g.Index]; ok {
			g.Export = name
			continue
		}
		g.Export = globalExportPrefix + strconv.FormatUint(uint64(g.Index), 10)
		if _, taken := names[g.Export]; taken {
			return nil, nil, 0, fmt.Errorf("%w: export name %q is reserved for global %d", ErrInvalidModule, g.Export, g.Index)
		}
		add = appendName(add, g.Export)
		add = append(add, kindGlobal)
		add = appendU32(add, g.Index)
		added++
	}
	if added == 0 {
		return wasm, globals, 0, nil
	}
	if uint64(exportCount)+uint64(added) > 1<<32-1 {
		return nil, nil, 0, fmt.Errorf("%w: too many exports", ErrInvalidModule)
	}

	// The new export section: the old entries byte for byte, then the new ones.
	var content []byte
	content = appendU32(content, exportCount+uint32(added))
	content = append(content, entries...)
	content = append(content, add...)
	if uint64(len(content)) > 1<<32-1 {
		return nil, nil, 0, fmt.Errorf("%w: export section too large", ErrInvalidModule)
	}
	section := append([]byte{secExport}, appendU32(nil, uint32(len(content)))...)
	section = append(section, content...)

	// Replace the export section in place, or insert one right after the global section
	// (mutable globals imply a global section, and export comes next in the order).
	var before, after []byte
	if exportSec.start >= 0 {
		before, after = wasm[:exportHeader], wasm[exportSec.end:]
	} else {
		before, after = wasm[:globalEnd], wasm[globalEnd:]
	}
	out = make([]byte, 0, len(before)+len(section)+len(after))
	out = append(out, before...)
	out = append(out, section...)
	out = append(out, after...)
	return out, globals, added, nil
}

// moduleImports is what a module imports, as the index spaces need it.
type moduleImports struct {
	globals, memories uint32 // how many globals and memories it imports
	// funcTypes is the type index of each function it imports, in the order of the
	// function index space.
	funcTypes []uint32
}

// scanImports reads an import section.
func scanImports(sec []byte) (im moduleImports, err error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return im, err
	}
	for i := uint32(0); i < n; i++ {
		if _, err := r.name(); err != nil {
			return im, fmt.Errorf("import %d module name: %v", i, err)
		}
		if _, err := r.name(); err != nil {
			return im, fmt.Errorf("import %d field name: %v", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return im, fmt.Errorf("import %d: %v", i, err)
		}
		switch kind {
		case kindFunc:
			var typ uint32
			if typ, err = r.u32(); err == nil {
				im.funcTypes = append(im.funcTypes, typ)
			}
		case kindTable:
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case kindMemory:
			err = r.limits()
			im.memories++
		case kindGlobal:
			if _, err = r.valType(); err == nil {
				_, err = r.mutability()
			}
			im.globals++
		case kindTag:
			var attr byte
			if attr, err = r.byte(); err == nil && attr != 0 {
				err = fmt.Errorf("tag attribute %d", attr)
			}
			if err == nil {
				_, err = r.u32()
			}
		default:
			err = fmt.Errorf("unknown kind %d", kind)
		}
		if err != nil {
			return im, fmt.Errorf("import %d: %v", i, err)
		}
	}
	if r.off != len(r.b) {
		return im, fmt.Errorf("%d bytes after the last import", len(r.b)-r.off)
	}
	return im, nil
}

// mutableGlobals returns the mutable globals a global section defines; first is the
// index of its first global (the number of imported globals).
func mutableGlobals(sec []byte, first uint32) ([]Global, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if uint64(first)+uint64(n) > 1<<32 {
		return nil, fmt.Errorf("%d globals after %d imported ones overflow the index space", n, first)
	}
	var out []Global
	for i := uint32(0); i < n; i++ {
		t, err := r.valType()
		if err != nil {
			return nil, fmt.Errorf("global %d: %v", first+i, err)
		}
		mut, err := r.mutability()
		if err != nil {
			return nil, fmt.Errorf("global %d: %v", first+i, err)
		}
		if err := r.constExpr(); err != nil {
			return nil, fmt.Errorf("global %d initialiser: %v", first+i, err)
		}
		if mut {
			out = append(out, Global{Index: first + i, Type: t})
		}
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%d bytes after the last global", len(r.b)-r.off)
	}
	return out, nil
}

// reader decodes the binary format. Its methods return an error, never panic, at the
// end of the input or on a malformed value.
type reader struct {
	b   []byte
	off int
}

var errEOF = errors.New("unexpected end")

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errEOF
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) skip(n int) error {
	if n > len(r.b)-r.off {
		return errEOF
	}
	r.off += n
	return nil
}

// uleb reads an unsigned LEB128 value of at most bits bits, refusing encodings longer
// than ceil(bits/7) bytes and unused bits set in the last byte, as the format does.
func (r *reader) uleb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift+7 >= bits && shift < bits && c&0x80 == 0 && uint64(c)>>(bits-shift) != 0 {
			return 0, errors.New("LEB128 value out of range")
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
		if shift+7 >= bits {
			return 0, errors.New("LEB128 encoding too long")
		}
	}
}

// sleb skips a signed LEB128 value of at most bits bits.
func (r *reader) sleb(bits uint) error {
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
		if shift+7 >= bits {
			return errors.New("LEB128 encoding too long")
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return "", errEOF
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	bits := uint(32)
	if flags&0x04 != 0 {
		bits = 64
	}
	if flags > 0x07 {
		return fmt.Errorf("limits flags %#x", flags)
	}
	if _, err := r.uleb(bits); err != nil {
		return err
	}
	if flags&0x01 != 0 {
		_, err = r.uleb(bits)
	}
	return err
}

func (r *reader) valType() (api.ValueType, error) {
	t, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch t {
	case valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		return t, nil
	}
	return 0, fmt.Errorf("unknown value type %#x", t)
}

func (r *reader) mutability() (bool, error) {
	m, err := r.byte()
	if err != nil {
		return false, err
	}
	if m > 1 {
		return false, fmt.Errorf("mutability %d", m)
	}
	return m == 1, nil
}

// constExpr skips a constant expression, its end (0x0b) included.
func (r *reader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41: // i32.const
			err = r.sleb(32)
		case 0x42: // i64.const
			err = r.sleb(64)
		case 0x43: // f32.const
			err = r.skip(4)
		case 0x44: // f64.const
			err = r.skip(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null
			_, err = r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended const: i32/i64 add, sub, mul
		case 0xfd: // v128.const
			var sub uint64
			if sub, err = r.uleb(32); err == nil {
				if sub != 12 {
					return fmt.Errorf("opcode 0xfd %d in a constant expression", sub)
				}
				err = r.skip(16)
			}
		default:
			return fmt.Errorf("opcode %#x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

// RestoreImage derives, from a (rewritten) module, the module a snapshot is restored
// into without running any of the module's own initialisation: the same module without
// its start, data count and data sections. Instantiated with no start functions, it
// comes up with all-zero memory of the module's minimum size, the mutable globals at
// their initial values and the tables filled by the element segments, and runs no guest
// code; the host then writes the snapshot's memory and globals over it.
//
// That is the same instance state as the module's own, provided nothing in the snapshot's
// past changed what memory and globals do not hold: a table (table.set, table.grow,
// table.fill, table.copy, table.init, elem.drop) or a data segment (memory.init reads one,
// data.drop drops it). sound reports whether a scan of every function body found none of
// those instructions and nothing it does not know (the scan knows WebAssembly 1.0, sign
// extension, non-trapping float-to-int, bulk memory, reference types, multi-memory and
// tail calls, which covers what Go and rustc emit without SIMD, atomics or exceptions).
// When it is false, image is nil and the host instantiates the module itself.
func RestoreImage(wasm []byte) (image []byte, sound bool, err error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, false, fmt.Errorf("%w: not a WebAssembly binary (no \\0asm header)", ErrInvalidModule)
	}
	image = append(make([]byte, 0, len(wasm)), wasm[:8]...)
	r := reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		header := r.off
		id, err := r.byte()
		if err != nil {
			return nil, false, err
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return nil, false, fmt.Errorf("%w: section %d at offset %d is truncated", ErrInvalidModule, id, header)
		}
		body := r.b[r.off : r.off+int(size)]
		r.off += int(size)
		switch id {
		case secStart, secDataCount, secData:
			continue
		case secCode:
			ok, err := codeIsSnapshotSafe(body)
			if err != nil {
				return nil, false, fmt.Errorf("%w: code section: %v", ErrInvalidModule, err)
			}
			if !ok {
				return nil, false, nil
			}
		}
		image = append(image, wasm[header:r.off]...)
	}
	return image, true, nil
}

// codeIsSnapshotSafe scans a code section: false when a function changes a table or
// uses a data segment, or uses an instruction the scan does not know.
func codeIsSnapshotSafe(sec []byte) (bool, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return false, err
	}
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return false, err
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			return false, fmt.Errorf("function body %d: %v", i, errEOF)
		}
		body := reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)
		ok, err := body.scanFunction()
		if err != nil {
			return false, fmt.Errorf("function body %d: %v", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	if r.off != len(r.b) {
		return false, fmt.Errorf("%d bytes after the last function body", len(r.b)-r.off)
	}
	return true, nil
}

// scanFunction reads a function body (locals, then instructions to its end) and reports
// whether it is free of the instructions RestoreImage cannot allow.
func (r *reader) scanFunction() (bool, error) {
	groups, err := r.u32()
	if err != nil {
		return false, err
	}
	for i := uint32(0); i < groups; i++ {
		if _, err := r.u32(); err != nil {
			return false, err
		}
		if _, err := r.valType(); err != nil {
			return false, err
		}
	}
	for r.off < len(r.b) {
		op, _ := r.byte()
		var err error
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			err = r.blockType()
		case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b, op == 0xd1,
			op >= 0x45 && op <= 0xc4: // no immediates
		case op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 || op == 0xd2 ||
			op >= 0x20 && op <= 0x25 || op == 0x3f || op == 0x40: // one index
			_, err = r.u32()
		case op == 0x0e: // br_table
			var n uint32
			if n, err = r.u32(); err == nil {
				for j := uint64(0); j <= uint64(n) && err == nil; j++ {
					_, err = r.u32()
				}
			}
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op == 0x1c: // select t*
			var n uint32
			if n, err = r.u32(); err == nil {
				for j := uint32(0); j < n && err == nil; j++ {
					_, err = r.valType()
				}
			}
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = r.memArg()
		case op == 0x41:
			err = r.sleb(32)
		case op == 0x42:
			err = r.sleb(64)
		case op == 0x43:
			err = r.skip(4)
		case op == 0x44:
			err = r.skip(8)
		case op == 0xd0: // ref.null t
			_, err = r.byte()
		case op == 0xfc:
			var sub uint32
			if sub, err = r.u32(); err != nil {
				break
			}
			switch {
			case sub <= 7: // saturating truncations
			case sub == 10 || sub == 14: // memory.copy, table.copy
				if _, err = r.u32(); err == nil {
					_, err = r.u32()
				}
				if sub == 14 {
					return false, err
				}
			case sub == 11 || sub == 16: // memory.fill, table.size
				_, err = r.u32()
			default: // memory.init, data.drop, table.init, elem.drop, table.grow, table.fill, unknown
				return false, nil
			}
		default: // table.set, exceptions, SIMD, atomics, anything newer
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

func (r *reader) blockType() error {
	if r.off >= len(r.b) {
		return errEOF
	}
	switch c := r.b[r.off]; c {
	case 0x40, valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		r.off++
		return nil
	}
	return r.sleb(33) // a type index
}

// memArg skips a memory argument: alignment (bit 6: a memory index follows) and offset.
func (r *reader) memArg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: a memory index follows
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.uleb(64)
	return err
}
