package wasmbin

import (
	"errors"
	"fmt"
)

// The check that keeps wazero's decoder from allocating what a module does not hold.
//
// wazero sizes what it decodes by the counts a module states, before it reads the
// entries: a vector of n exports becomes make([]Export, n) and a map of n entries, a
// data segment of n bytes make([]byte, n), a function's locals make([]ValueType, sum).
// A 14-byte module stating 2³²−1 exports so has it allocate tens of gigabytes, and a
// host dies of it (the Go runtime does not survive running out of memory). Every
// entry of such a vector takes at least one byte of the module, so CheckBounds
// refuses, before wazero sees the module, any count larger than the bytes left to hold
// its entries, and caps the locals a function declares (which take no bytes each) as
// browsers do.

// maxFunctionLocals caps the locals one function declares: 50,000, the limit of V8
// (kV8MaxWasmFunctionLocals) and of the WebAssembly JavaScript API's implementations.
const maxFunctionLocals = 50_000

// maxModuleLocals caps the locals all of a module's functions declare together: 4 Mi
// (a function's locals cost wazero a byte each to decode and more to compile).
const maxModuleLocals = 4 << 20

// maxTableElements caps the elements of the tables a module defines, together: 1 Mi,
// 8 MiB an instance (wazero allocates a table whole, 8 bytes an element, at
// instantiation and at each table.grow). The Go counter's one table has 5,932, Rust's
// and TinyGo's under 50. capTables makes it hold after table.grow too.
const maxTableElements = 1 << 20

// CheckBounds walks a module binary's sections and refuses (an error wrapping
// ErrInvalidModule) a vector count larger than the bytes left in its section (or
// subsection), a function body larger than its section, locals past
// maxFunctionLocals or maxModuleLocals, and tables past maxTableElements. It reads the vectors wazero sizes up front: the
// outer vector of every section, a function type's parameters and results, the element
// segments' entries, the code section's bodies and locals, the data segments' bytes,
// and the "name" custom section's function and local name maps. A section it cannot
// read otherwise it leaves to wazero, which refuses it with its own account.
func CheckBounds(wasm []byte) error {
	sections, err := splitSections(wasm)
	if err != nil {
		return err
	}
	for _, s := range sections {
		sec := wasm[s.start:s.end]
		var err error
		switch s.id {
		case secType:
			err = checkTypes(sec)
		case secImport, secFunction, secMemory, secGlobal, secExport, secTag:
			r := reader{b: sec}
			_, err = r.count()
		case secTable:
			err = checkTables(sec)
		case secElement:
			err = checkElements(sec)
		case secCode:
			err = checkCode(sec)
		case secData:
			err = checkData(sec)
		case secCustom:
			r := reader{b: sec}
			if name, nerr := r.name(); nerr == nil && name == "name" {
				err = checkNames(sec[r.off:])
			}
		}
		if errors.Is(err, errPastBounds) {
			return fmt.Errorf("%w: section %d at offset %d: %v", ErrInvalidModule, s.id, s.header, err)
		}
	}
	return nil
}

// errPastBounds marks CheckBounds' refusals; its check functions' other errors
// (what they cannot read) are left to wazero.
var errPastBounds = errors.New("more than the module holds")

// count reads a vector count and refuses one larger than the bytes left after it.
func (r *reader) count() (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if left := len(r.b) - r.off; uint64(n) > uint64(left) {
		return 0, fmt.Errorf("a vector of %d entries with %d bytes left: %w", n, left, errPastBounds)
	}
	return n, nil
}

// checkTypes checks a type section's function types' parameter and result counts.
func checkTypes(sec []byte) error {
	r := reader{b: sec}
	n, err := r.count()
	for i := uint32(0); i < n && err == nil; i++ {
		_, err = r.byte()                      // 0x60, or wazero refuses it
		for k := 0; k < 2 && err == nil; k++ { // parameters, then results
			var size uint32
			if size, err = r.count(); err == nil {
				r.off += int(size)
			}
		}
		if err != nil {
			return fmt.Errorf("type %d: %w", i, err)
		}
	}
	return err
}

// checkTables checks a table section's count, and its tables' initial sizes against
// maxTableElements.
func checkTables(sec []byte) error {
	tables, err := readTables(sec)
	if err != nil {
		return err
	}
	var sum uint64
	for _, t := range tables {
		sum += uint64(t.min)
	}
	if sum > maxTableElements {
		return fmt.Errorf("tables of %d elements in all, more than the host allows (%d): %w", sum, maxTableElements, errPastBounds)
	}
	return nil
}

// tableType is a table a table section defines: its limits, and where their encoding
// is in the section.
type tableType struct {
	min, max   uint32
	hasMax     bool
	start, end int // the limits' bytes
}

// readTables reads a table section (a table's type may start with 0x40 0x00 and end
// with an initial value, as wazero reads it). Its errors say what it cannot read.
func readTables(sec []byte) ([]tableType, error) {
	r := reader{b: sec}
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	tables := make([]tableType, 0, n)
	for i := uint32(0); i < n; i++ {
		init := false
		if r.off+1 < len(r.b) && r.b[r.off] == 0x40 && r.b[r.off+1] == 0x00 {
			init = true
			r.off += 2
		}
		if _, err := r.refType(); err != nil {
			return nil, fmt.Errorf("table %d: %w", i, err)
		}
		t := tableType{start: r.off}
		flags, err := r.byte()
		if err == nil && flags > 1 {
			err = fmt.Errorf("limits flags %#x", flags) // shared, or 64-bit: wazero refuses them
		}
		if err == nil {
			t.min, err = r.u32()
		}
		if err == nil && flags == 1 {
			t.hasMax = true
			t.max, err = r.u32()
		}
		t.end = r.off
		if err == nil && init {
			err = r.constExpr()
		}
		if err != nil {
			return nil, fmt.Errorf("table %d: %w", i, err)
		}
		tables = append(tables, t)
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%d bytes after the last table", len(r.b)-r.off)
	}
	return tables, nil
}

// checkElements reads an element section's segments (the eight forms of WebAssembly
// 2.0) far enough to check the count of each one's entries.
func checkElements(sec []byte) error {
	r := reader{b: sec}
	n, err := r.count()
	for i := uint32(0); i < n && err == nil; i++ {
		var flags, entries uint32
		if flags, err = r.u32(); err == nil && flags > 7 {
			return nil // wazero's account
		}
		if err == nil && flags&2 != 0 && flags&1 == 0 { // an explicit table index
			_, err = r.u32()
		}
		if err == nil && flags&1 == 0 { // active: an offset expression
			err = r.constExpr()
		}
		if err == nil && flags&3 != 0 { // an element kind (function indices) or a reference type
			if flags&4 == 0 {
				_, err = r.byte()
			} else {
				_, err = r.refType()
			}
		}
		if err == nil {
			entries, err = r.count()
		}
		for k := uint32(0); k < entries && err == nil; k++ {
			if flags&4 == 0 {
				_, err = r.u32() // a function index
			} else {
				err = r.constExpr()
			}
		}
		if err != nil {
			return fmt.Errorf("element segment %d: %w", i, err)
		}
	}
	return err
}

// checkCode checks a code section's bodies against the section and their locals
// against maxFunctionLocals and maxModuleLocals.
func checkCode(sec []byte) error {
	r := reader{b: sec}
	n, err := r.count()
	var total uint64
	for f := uint32(0); f < n && err == nil; f++ {
		var size, groups uint32
		if size, err = r.u32(); err != nil {
			break
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			return fmt.Errorf("function body %d of %d bytes runs past the section: %w", f, size, errPastBounds)
		}
		body := reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)
		groups, err = body.count()
		var locals uint64
		for g := uint32(0); g < groups && err == nil; g++ {
			var k uint32
			if k, err = body.u32(); err == nil {
				_, err = body.refType()
			}
			if locals += uint64(k); locals > maxFunctionLocals {
				return fmt.Errorf("function body %d declares more than %d locals: %w", f, maxFunctionLocals, errPastBounds)
			}
		}
		if total += locals; total > maxModuleLocals {
			return fmt.Errorf("the functions declare more than %d locals in all: %w", maxModuleLocals, errPastBounds)
		}
		if err != nil {
			return fmt.Errorf("function body %d: locals: %w", f, err)
		}
	}
	return err
}

// checkData checks a data section's segments' sizes against the section.
func checkData(sec []byte) error {
	r := reader{b: sec}
	n, err := r.count()
	for i := uint32(0); i < n && err == nil; i++ {
		var flags, size uint32
		flags, err = r.u32()
		switch {
		case err != nil, flags == 1: // passive: no memory, no offset
		case flags == 0:
			err = r.constExpr()
		case flags == 2:
			if _, err = r.u32(); err == nil {
				err = r.constExpr()
			}
		default:
			return nil // wazero's account
		}
		if err == nil {
			size, err = r.count()
		}
		if err != nil {
			return fmt.Errorf("data segment %d: %w", i, err)
		}
		r.off += int(size)
	}
	return err
}

// checkNames checks the counts of a "name" custom section's function names (subsection
// 1) and local names (subsection 2) against their subsections.
func checkNames(sec []byte) error {
	r := reader{b: sec}
	for r.off < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return err
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return nil // wazero's account
		}
		sub := reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)
		if id != 1 && id != 2 {
			continue
		}
		n, err := sub.count()
		for i := uint32(0); i < n && err == nil; i++ {
			var locals uint32
			if _, err = sub.u32(); err == nil && id == 1 {
				_, err = sub.name()
				continue
			}
			if err == nil {
				locals, err = sub.count()
			}
			for k := uint32(0); k < locals && err == nil; k++ {
				if _, err = sub.u32(); err == nil {
					_, err = sub.name()
				}
			}
		}
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
	}
	return nil
}

// wasmSection is one section of a module binary.
type wasmSection struct {
	id         byte
	header     int // offset of the id byte
	start, end int // the contents
}

// splitSections splits a module binary into its sections. Errors (wrapping
// ErrInvalidModule): no header, a section running past the end, an unknown section id
// or a repeated one.
func splitSections(wasm []byte) ([]wasmSection, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, fmt.Errorf("%w: not a WebAssembly binary (no \\0asm header)", ErrInvalidModule)
	}
	var sections []wasmSection
	var seen [len(sectionRank)]bool
	r := reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		header := r.off
		id, err := r.byte()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return nil, fmt.Errorf("%w: section %d at offset %d: bad size", ErrInvalidModule, id, header)
		}
		if id != secCustom {
			if int(id) >= len(sectionRank) || sectionRank[id] == 0 || seen[id] {
				return nil, fmt.Errorf("%w: section %d at offset %d is unknown or repeated", ErrInvalidModule, id, header)
			}
			seen[id] = true
		}
		sections = append(sections, wasmSection{id: id, header: header, start: r.off, end: r.off + int(size)})
		r.off += int(size)
	}
	return sections, nil
}

// capTables returns wasm with a maximum on every table it defines, so that table.grow
// keeps them within maxTableElements together: each table may grow by an equal share
// of what their initial sizes leave, a declared maximum that is lower staying. A
// table.grow past it fails as the format lets it (it returns -1). wasm itself comes
// back when every table has such a maximum already, or when the table section cannot
// be read (wazero refuses the module) or its tables start past the cap (CheckBounds
// refuses it). Like the other rewrites, a pure function of its input.
func capTables(wasm []byte) []byte {
	sections, err := splitSections(wasm)
	if err != nil {
		return wasm
	}
	for _, s := range sections {
		if s.id != secTable {
			continue
		}
		sec := wasm[s.start:s.end]
		tables, err := readTables(sec)
		if err != nil || len(tables) == 0 {
			return wasm
		}
		var sum uint64
		for _, t := range tables {
			sum += uint64(t.min)
		}
		if sum > maxTableElements {
			return wasm
		}
		share := (maxTableElements - sum) / uint64(len(tables))
		var content []byte
		prev, changed := 0, false
		for _, t := range tables {
			max := uint64(t.min) + share
			if t.hasMax && uint64(t.max) <= max {
				continue
			}
			changed = true
			content = append(content, sec[prev:t.start]...)
			content = append(content, 0x01)
			content = appendU32(content, t.min)
			content = appendU32(content, uint32(max))
			prev = t.end
		}
		if !changed {
			return wasm
		}
		content = append(content, sec[prev:]...)
		out := make([]byte, 0, len(wasm)+len(content)-len(sec))
		out = append(out, wasm[:s.header]...)
		out = append(out, secTable)
		out = appendU32(out, uint32(len(content)))
		out = append(out, content...)
		return append(out, wasm[s.end:]...)
	}
	return wasm
}
