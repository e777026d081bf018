package wasmbin

import "fmt"

// The deploy-time rewrite that lets the host stop a guest at its deadline.
//
// wazero stops a running guest only when its runtime is configured with
// WithCloseOnContextDone: its compiler then makes every loop iteration leave the
// machine code for a Go function that checks whether the module was closed, and every
// call of an export start a goroutine that closes the module when the call's context
// is done. Both cost: the goroutine alone is most of a short message's cost (a Rust
// echo message: about 0.6 µs without it, 2–4 µs with it on a loaded 2-core machine), and
// a compute loop pays an exit to Go per iteration.
//
// addDeadlineChecks instead adds to the module mutable i32 globals, stop (exported as
// StopGlobalExport) and a loop counter, and at the head of every loop a check
// (loopCheck) that counts the iteration in machine code and, every loopFuel iterations,
// visits Go and traps if stop is set. The host sets stop from the deadline timer (or
// when the runtime closes the module under a call): the guest traps within loopFuel
// iterations, and the host reports the deadline. Code without a
// loop runs for a bounded time (recursion ends in a stack overflow). A third global,
// exported as LastGrowExport, keeps what the guest's last memory.grow returned. The
// module's start
// section, which wazero would run inside instantiation before the host can reach the
// global, is removed and its function exported as startExport: the host calls it first,
// under the activation deadline, as instantiation would have.
//
// The pass parses the import, function, global, export, start and code sections; the
// code section is decoded instruction by instruction (WebAssembly 2.0 with SIMD, plus
// tail calls, threads and exception handling, which wazero may enable), and an opcode it
// does not know refuses the module rather than leave a loop unchecked. Every other
// section is copied byte for byte. Like exportGlobals, it is a pure function of its
// input.

// The exports the rewrite adds besides shardhost_dispatch (DispatchExport).
const (
	// StopGlobalExport is the export of the global the host sets to stop the guest.
	StopGlobalExport = "shardhost_stop"
	// LastGrowExport is the export of the global that holds what the guest's last
	// memory.grow returned: the old size in pages, or -1 (as an i32) when the memory
	// could not grow. A trap that follows a failed grow is the guest running out of
	// memory under the cap, whether or not its runtime said so (a Rust guest aborts on
	// a failed allocation without a word).
	LastGrowExport = "shardhost_last_grow"
	// startExport is the export of the module's start function, when it had one.
	startExport = "shardhost_start"
)

// deadlineRewrite is what addDeadlineChecks did: the index of the stop global, and
// whether the module had a start function (now exported as startExport).
type deadlineRewrite struct {
	stopGlobal uint32
	growGlobal uint32 // LastGrowExport's global
	hasStart   bool
	loops      int // loop heads checked
	ops        Ops // the functions shardhost_dispatch calls
}

// addDeadlineChecks rewrites a module as described above. Errors wrap ErrInvalidModule.
func addDeadlineChecks(wasm []byte) ([]byte, deadlineRewrite, error) {
	var dr deadlineRewrite
	sections, err := splitSections(wasm)
	if err != nil {
		return nil, dr, err
	}
	content := func(id byte) []byte {
		for _, s := range sections {
			if s.id == id {
				return wasm[s.start:s.end]
			}
		}
		return nil
	}

	// The global index space: imported globals, then defined ones; the new global is last.
	var importedGlobals uint32
	var importFuncTypes []uint32
	if sec := content(secImport); sec != nil {
		im, err := scanImports(sec)
		if err != nil {
			return nil, dr, fmt.Errorf("%w: import section: %v", ErrInvalidModule, err)
		}
		importedGlobals, importFuncTypes = im.globals, im.funcTypes
	}
	var definedGlobals uint32
	var globalEntries []byte
	if sec := content(secGlobal); sec != nil {
		gr := reader{b: sec}
		n, err := gr.u32()
		if err != nil {
			return nil, dr, fmt.Errorf("%w: global section: %v", ErrInvalidModule, err)
		}
		definedGlobals, globalEntries = n, sec[gr.off:]
	}
	dr.stopGlobal = importedGlobals + definedGlobals
	fuel := dr.stopGlobal + 1
	dr.growGlobal = dr.stopGlobal + 2
	newGlobals := appendU32(nil, definedGlobals+3)
	newGlobals = append(newGlobals, globalEntries...)
	newGlobals = append(newGlobals, valI32, 1, 0x41, 0, 0x0b) // stop: mut i32 = 0
	newGlobals = append(newGlobals, valI32, 1, 0x41)          // fuel: mut i32 = loopFuel
	newGlobals = appendS32(newGlobals, loopFuel)
	newGlobals = append(newGlobals, 0x0b)
	newGlobals = append(newGlobals, valI32, 1, 0x41, 0, 0x0b) // last grow: mut i32 = 0

	// Exports: the old ones, the stop global, the start function and the dispatch
	// function (dispatch.go).
	var exportCount uint32
	var exportEntries []byte
	funcExports := map[string]uint32{}
	if sec := content(secExport); sec != nil {
		er := reader{b: sec}
		n, err := er.u32()
		if err != nil {
			return nil, dr, fmt.Errorf("%w: export section: %v", ErrInvalidModule, err)
		}
		exportCount, exportEntries = n, sec[er.off:]
		for i := uint32(0); i < n; i++ {
			var kind byte
			var index uint32
			name, err := er.name()
			if err == nil {
				kind, err = er.byte()
			}
			if err == nil {
				index, err = er.u32()
			}
			if err != nil {
				return nil, dr, fmt.Errorf("%w: export %d: %v", ErrInvalidModule, i, err)
			}
			if name == StopGlobalExport || name == LastGrowExport || name == startExport || name == DispatchExport {
				return nil, dr, fmt.Errorf("%w: export name %q is reserved for the host", ErrInvalidModule, name)
			}
			if kind == kindFunc {
				funcExports[name] = index
			}
		}
	}
	add := appendName(nil, StopGlobalExport)
	add = append(add, kindGlobal)
	add = appendU32(add, dr.stopGlobal)
	add = appendName(add, LastGrowExport)
	add = append(add, kindGlobal)
	add = appendU32(add, dr.growGlobal)
	added := uint32(2)
	start := int64(-1)
	if sec := content(secStart); sec != nil {
		sr := reader{b: sec}
		fn, err := sr.u32()
		if err != nil {
			return nil, dr, fmt.Errorf("%w: start section: %v", ErrInvalidModule, err)
		}
		dr.hasStart, start = true, int64(fn)
		add = appendName(add, startExport)
		add = append(add, kindFunc)
		add = appendU32(add, fn)
		added++
	}
	dispatch, err := planDispatch(content(secType), importFuncTypes, content(secFunction), funcExports, start)
	if err != nil {
		return nil, dr, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	dr.ops = dispatch.ops
	add = appendName(add, DispatchExport)
	add = append(add, kindFunc)
	add = appendU32(add, dispatch.fn)
	added++
	newExports := appendU32(nil, exportCount+added)
	newExports = append(newExports, exportEntries...)
	newExports = append(newExports, add...)

	// Code: the check at every loop head, the last grow's result kept after every
	// memory.grow, and the dispatch function's body last.
	check := loopCheck(dr.stopGlobal, fuel, content(secMemory) != nil)
	bodies, entries := uint32(0), []byte(nil)
	if sec := content(secCode); sec != nil {
		code, loops, err := instrumentCode(sec, check, growRecord(dr.growGlobal), dr.stopGlobal)
		if err != nil {
			return nil, dr, fmt.Errorf("%w: code section: %v", ErrInvalidModule, err)
		}
		cr := reader{b: code}
		if bodies, err = cr.u32(); err != nil {
			return nil, dr, fmt.Errorf("%w: code section: %v", ErrInvalidModule, err)
		}
		dr.loops, entries = loops, code[cr.off:]
	}
	newCode := appendU32(nil, bodies+1)
	newCode = append(newCode, entries...)
	newCode = append(newCode, dispatch.body...)

	// Reassemble in the format's order: the type, function, global, export and code
	// sections replaced or inserted at their rank, the start section dropped.
	out := make([]byte, 0, len(wasm)+len(wasm)/8+64)
	out = append(out, wasm[:8]...)
	emit := func(id byte, c []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(c)))
		out = append(out, c...)
	}
	pending := []struct {
		id byte
		c  []byte
	}{{secType, dispatch.typeSec}, {secFunction, dispatch.funcSec}, {secGlobal, newGlobals}, {secExport, newExports},
		{secCode, newCode}}
	flush := func(beforeRank int) {
		for len(pending) > 0 && sectionRank[pending[0].id] < beforeRank {
			emit(pending[0].id, pending[0].c)
			pending = pending[1:]
		}
	}
	for _, s := range sections {
		if s.id != secCustom {
			flush(sectionRank[s.id])
		}
		switch s.id {
		case secType, secFunction, secGlobal, secExport, secCode:
			flush(sectionRank[s.id] + 1)
		case secStart:
		default:
			out = append(out, wasm[s.header:s.end]...)
		}
	}
	flush(len(sectionRank) + 1)
	return out, dr, nil
}

// loopFuel is how many loop iterations run between two visits to Go (a memory.grow by
// 0 pages): a goroutine running wasm machine code cannot be preempted, so a guest that
// loops without leaving it would hold up the Go runtime's stop-the-world phases (and
// with them the timer that sets the stop global). An iteration costs a few instructions
// of machine code; the visit, 30–50 ns every loopFuel iterations.
const loopFuel = 10000

// loopCheck is the code at the head of every loop:
//
//	global.get $fuel
//	i32.eqz
//	if
//	  i32.const loopFuel
//	  global.set $fuel
//	  i32.const 0
//	  memory.grow 0      ;; leaves the machine code for Go: a preemption point
//	  drop
//	  global.get $stop
//	  if
//	    unreachable
//	  end
//	end
//	global.get $fuel
//	i32.const 1
//	i32.sub
//	global.set $fuel
//
// Without a memory (such a module is refused anyway), no memory.grow.
func loopCheck(stop, fuel uint32, memory bool) []byte {
	b := append(appendU32([]byte{0x23}, fuel), 0x45, 0x04, 0x40, 0x41)
	b = appendS32(b, loopFuel)
	b = appendU32(append(b, 0x24), fuel)
	if memory {
		b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a)
	}
	b = appendU32(append(b, 0x23), stop)
	b = append(b, 0x04, 0x40, 0x00, 0x0b, 0x0b)
	b = appendU32(append(b, 0x23), fuel)
	b = append(b, 0x41, 0x01, 0x6b, 0x24)
	return appendU32(b, fuel)
}

// growRecord is the code after every memory.grow of the guest's: it keeps the result in
// the last-grow global and leaves it on the stack, as it was.
//
//	global.set $last_grow
//	global.get $last_grow
func growRecord(grow uint32) []byte {
	b := appendU32([]byte{0x24}, grow)
	return appendU32(append(b, 0x23), grow)
}

// appendS32 appends v as a signed LEB128.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// refType reads a value type: one byte, or a typed reference (0x63, 0x64) and its heap
// type.
func (r *reader) refType() (byte, error) {
	t, err := r.byte()
	if err != nil {
		return 0, err
	}
	if t == 0x63 || t == 0x64 {
		err = r.sleb(33)
	}
	return t, err
}

// instrumentCode returns a code section with check inserted after the block type of
// every loop instruction and afterGrow after every memory.grow, and how many loops it
// checked. The module's own code may only name
// the globals it defines or imports (fewer than globals): one that names the host's
// globals, which do not exist before the rewrite, is refused, as validation would have
// refused it, rather than let the guest reset its own stop or counter.
func instrumentCode(sec, check, afterGrow []byte, globals uint32) ([]byte, int, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, 0, err
	}
	out := appendU32(make([]byte, 0, len(sec)+len(sec)/8), n)
	loops := 0
	var body []byte
	for f := uint32(0); f < n; f++ {
		size, err := r.u32()
		if err != nil {
			return nil, 0, err
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			return nil, 0, fmt.Errorf("function %d: body runs past the section", f)
		}
		fb := reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)
		// Locals: vec(count, type).
		groups, err := fb.u32()
		if err != nil {
			return nil, 0, fmt.Errorf("function %d: %v", f, err)
		}
		for g := uint32(0); g < groups; g++ {
			if _, err = fb.u32(); err == nil {
				_, err = fb.refType()
			}
			if err != nil {
				return nil, 0, fmt.Errorf("function %d: locals: %v", f, err)
			}
		}
		body = append(body[:0], fb.b[:fb.off]...)
		copied := fb.off
		for fb.off < len(fb.b) {
			at := fb.off
			op, _ := fb.byte()
			if err := fb.immediates(op); err != nil {
				return nil, 0, fmt.Errorf("function %d: opcode %#x at body offset %d: %v", f, op, at, err)
			}
			if op == 0x23 || op == 0x24 { // global.get, global.set
				g := reader{b: fb.b, off: at + 1}
				if idx, _ := g.u32(); idx >= globals {
					return nil, 0, fmt.Errorf("function %d: global %d does not exist", f, idx)
				}
			}
			if op == 0x03 { // loop bt
				body = append(body, fb.b[copied:fb.off]...)
				body = append(body, check...)
				copied = fb.off
				loops++
			}
			if op == 0x40 { // memory.grow
				body = append(body, fb.b[copied:fb.off]...)
				body = append(body, afterGrow...)
				copied = fb.off
			}
		}
		body = append(body, fb.b[copied:]...)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.off != len(r.b) {
		return nil, 0, fmt.Errorf("%d bytes after the last function body", len(r.b)-r.off)
	}
	return out, loops, nil
}

// immediates skips the immediates of the instruction whose opcode op was just read.
func (r *reader) immediates(op byte) error {
	var err error
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06: // block, loop, if, try: block type
		err = r.sleb(33)
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0a || op == 0x0b || op == 0x0f ||
		op == 0x19 || op == 0x1a || op == 0x1b || op == 0xd1 || op == 0xd3 || op == 0xd4:
		// unreachable, nop, else, throw_ref, end, return, catch_all, drop, select,
		// ref.is_null, ref.eq, ref.as_non_null
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0x0c || op == 0x0d ||
		op == 0x10 || op == 0x12 || op == 0x14 || op == 0x15 || op == 0xd2 || op == 0xd5 || op == 0xd6 ||
		(op >= 0x20 && op <= 0x26) || op == 0x3f || op == 0x40:
		// catch, throw, rethrow, delegate, br, br_if, call, return_call, call_ref,
		// return_call_ref, ref.func, br_on_null, br_on_non_null, local.*, global.*,
		// table.get/set, memory.size/grow
		_, err = r.u32()
	case op == 0x0e: // br_table
		var n uint32
		if n, err = r.u32(); err == nil {
			for i := uint32(0); i <= n && err == nil; i++ {
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
			for i := uint32(0); i < n && err == nil; i++ {
				_, err = r.refType()
			}
		}
	case op == 0x1f: // try_table bt catch*
		if err = r.sleb(33); err != nil {
			return err
		}
		var n uint32
		if n, err = r.u32(); err != nil {
			return err
		}
		for i := uint32(0); i < n && err == nil; i++ {
			var kind byte
			if kind, err = r.byte(); err != nil {
				return err
			}
			switch kind {
			case 0, 1: // catch, catch_ref: tag, label
				if _, err = r.u32(); err == nil {
					_, err = r.u32()
				}
			case 2, 3: // catch_all, catch_all_ref: label
				_, err = r.u32()
			default:
				err = fmt.Errorf("catch clause kind %d", kind)
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
	case op >= 0x45 && op <= 0xc4: // numeric, sign extension
	case op == 0xd0: // ref.null ht
		err = r.sleb(33)
	case op == 0xfc:
		var sub uint32
		if sub, err = r.u32(); err != nil {
			return err
		}
		switch {
		case sub <= 7: // saturating truncations
		case sub == 8 || sub == 10 || sub == 12 || sub == 14: // memory.init, memory.copy, table.init, table.copy
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17): // data.drop, memory.fill, elem.drop, table.grow/size/fill
			_, err = r.u32()
		default:
			err = fmt.Errorf("0xfc %d", sub)
		}
	case op == 0xfd:
		var sub uint32
		if sub, err = r.u32(); err != nil {
			return err
		}
		switch {
		case sub <= 11 || sub == 92 || sub == 93: // v128 loads and stores
			err = r.memArg()
		case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
			err = r.skip(16)
		case sub >= 21 && sub <= 34: // extract and replace lane
			err = r.skip(1)
		case sub >= 84 && sub <= 91: // load and store lane
			if err = r.memArg(); err == nil {
				err = r.skip(1)
			}
		case sub <= 0x113: // the other SIMD instructions (relaxed SIMD included)
		default:
			err = fmt.Errorf("0xfd %d", sub)
		}
	case op == 0xfe: // atomics
		var sub uint32
		if sub, err = r.u32(); err != nil {
			return err
		}
		switch {
		case sub == 3: // atomic.fence
			err = r.skip(1)
		case sub <= 0x4e:
			err = r.memArg()
		default:
			err = fmt.Errorf("0xfe %d", sub)
		}
	default:
		err = fmt.Errorf("unknown opcode")
	}
	return err
}
