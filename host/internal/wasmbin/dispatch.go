package wasmbin

import (
	"fmt"
	"math/bits"

	"github.com/shardhost/shardhost/abi"
)

// The dispatch export: one export through which the host calls all the others.
//
// wazero gives every export the host looks up (api.Module.ExportedFunction) a call
// engine of its own, with a 10 KiB stack that is allocated and zeroed. An activation
// used to look up three or four (the start function, _initialize, shardhost_alloc,
// shardhost_receive, shardhost_on_activate): about a tenth of the CPU of an activation
// through a member in a profile of BenchmarkMemberActivation, and two of the stacks
// stayed with the instance for its life. addDeadlineChecks therefore adds the function
//
//	shardhost_dispatch(op i32, a i32, b i32) -> i32
//
// which calls the function op names (Op) with a, or a and b, as its parameters,
// and returns its result, or 0 for a function without one. The host looks up this one
// export per instance and calls every other through it. An op whose function the module
// does not export, or exports with another type than the ABI's (host's checkShape refuses
// such a module), traps with unreachable.

// DispatchExport is the name of the export the rewrite adds, through which the host
// calls every other (the ops below).
const DispatchExport = "shardhost_dispatch"

// Op selects the function shardhost_dispatch calls.
type Op uint32

const (
	// OpStart is the module's start function, which the rewrite takes out of the
	// start section: the host runs it first, as instantiation would have. The other
	// ops call the ABI's exports (abi/SPEC.md) of dispatchTargets.
	OpStart Op = iota
	OpInitialize
	OpAlloc
	OpReceive
	OpOnActivate
	OpOnPassivate
	OpSnapshot
	OpRestore
	OpMigrate
	OpQuery
	OpHTTP
	numOps
)

// dispatchTargets are what each op calls: the function exported under name, with the
// ABI's type for it (abi/SPEC.md; host's checkShape checks the same types).
var dispatchTargets = [numOps]struct {
	name            string
	params, results []byte
}{
	OpStart:       {"", nil, nil}, // the start section's function, ()->() by validation
	OpInitialize:  {abi.ExportInitialize, nil, nil},
	OpAlloc:       {abi.ExportAlloc, []byte{valI32}, []byte{valI32}},
	OpReceive:     {abi.ExportReceive, []byte{valI32, valI32}, []byte{valI32}},
	OpOnActivate:  {abi.ExportOnActivate, nil, []byte{valI32}},
	OpOnPassivate: {abi.ExportOnPassivate, nil, []byte{valI32}},
	OpSnapshot:    {abi.ExportSnapshot, nil, []byte{valI32}},
	OpRestore:     {abi.ExportRestore, []byte{valI32, valI32}, []byte{valI32}},
	OpMigrate:     {abi.ExportMigrate, []byte{valI32, valI32}, []byte{valI32}},
	OpQuery:       {abi.ExportQuery, []byte{valI32, valI32}, []byte{valI32}},
	OpHTTP:        {abi.ExportHTTP, []byte{valI32, valI32}, []byte{valI32}},
}

// Ops is a set of ops: bit op is set when shardhost_dispatch calls op's function.
type Ops uint32

func (s Ops) Has(op Op) bool { return s&(1<<op) != 0 }

func (s Ops) String() string {
	if s == 0 {
		return "none"
	}
	out := ""
	for ; s != 0; s &= s - 1 {
		op := Op(bits.TrailingZeros32(uint32(s)))
		name := dispatchTargets[op].name
		if op == OpStart {
			name = "start"
		}
		if out != "" {
			out += ","
		}
		out += name
	}
	return out
}

// funcType is a function type of the type section.
type funcType struct{ params, results []byte }

// readTypes reads a type section: function types only (0x60), as WebAssembly 2.0 has.
func readTypes(sec []byte) ([]funcType, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	types := make([]funcType, 0, min(n, uint32(len(sec))))
	vec := func() ([]byte, error) {
		k, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(k) > uint64(len(r.b)-r.off) {
			return nil, fmt.Errorf("%d value types past the section's end", k)
		}
		v := r.b[r.off : r.off+int(k)]
		r.off += int(k)
		return v, nil
	}
	for i := uint32(0); i < n; i++ {
		form, err := r.byte()
		if err == nil && form != 0x60 {
			err = fmt.Errorf("form %#x, not a function type", form)
		}
		var t funcType
		if err == nil {
			t.params, err = vec()
		}
		if err == nil {
			t.results, err = vec()
		}
		if err != nil {
			return nil, fmt.Errorf("type %d: %v", i, err)
		}
		types = append(types, t)
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%d bytes after the last type", len(r.b)-r.off)
	}
	return types, nil
}

// readFunctions reads a function section: the type index of each defined function.
func readFunctions(sec []byte) ([]uint32, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	idx := make([]uint32, 0, min(n, uint32(len(sec))))
	for i := uint32(0); i < n; i++ {
		t, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		idx = append(idx, t)
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%d bytes after the last function", len(r.b)-r.off)
	}
	return idx, nil
}

// dispatchPlan is what adding shardhost_dispatch to a module takes: the new type,
// function and code entries, and the function's index.
type dispatchPlan struct {
	typeSec, funcSec []byte // the sections' new contents
	body             []byte // the code entry (size and body) to append to the code section
	fn               uint32 // shardhost_dispatch's function index
	ops              Ops
}

// planDispatch builds shardhost_dispatch for a module: typeSec, importFuncTypes (the
// import section's functions), funcSec are its sections (nil when absent), funcExports
// its function exports by name, and start the start section's function (-1: none).
// Malformed sections are errors.
func planDispatch(typeSec []byte, importFuncTypes []uint32, funcSec []byte, funcExports map[string]uint32, start int64) (dispatchPlan, error) {
	var p dispatchPlan
	var types []funcType
	var err error
	if typeSec != nil {
		if types, err = readTypes(typeSec); err != nil {
			return p, fmt.Errorf("type section: %v", err)
		}
	}
	var defined []uint32
	if funcSec != nil {
		if defined, err = readFunctions(funcSec); err != nil {
			return p, fmt.Errorf("function section: %v", err)
		}
	}
	typeOf := func(fn uint32) (funcType, bool) {
		var t uint32
		switch {
		case fn < uint32(len(importFuncTypes)):
			t = importFuncTypes[fn]
		case fn-uint32(len(importFuncTypes)) < uint32(len(defined)):
			t = defined[fn-uint32(len(importFuncTypes))]
		default:
			return funcType{}, false
		}
		if t >= uint32(len(types)) {
			return funcType{}, false
		}
		return types[t], true
	}

	// The type (i32, i32, i32) -> i32, appended to the type section.
	typeIdx := uint32(len(types))
	p.typeSec = appendU32(nil, typeIdx+1)
	if typeSec != nil {
		tr := reader{b: typeSec}
		if _, err := tr.u32(); err != nil {
			return p, err
		}
		p.typeSec = append(p.typeSec, typeSec[tr.off:]...)
	}
	p.typeSec = append(p.typeSec, 0x60, 3, valI32, valI32, valI32, 1, valI32)
	p.fn = uint32(len(importFuncTypes) + len(defined))
	p.funcSec = appendU32(nil, uint32(len(defined))+1)
	for _, t := range defined {
		p.funcSec = appendU32(p.funcSec, t)
	}
	p.funcSec = appendU32(p.funcSec, typeIdx)

	// The body: for each op with a function,
	//	local.get 0; i32.const op; i32.eq; if; local.get 1 ...; call f; [i32.const 0]; return; end
	// and unreachable after the last.
	body := []byte{0} // no locals
	for op := range numOps {
		want := dispatchTargets[op]
		var fn uint32
		var ok bool
		if op == OpStart {
			fn, ok = uint32(start), start >= 0
		} else {
			fn, ok = funcExports[want.name]
		}
		if !ok {
			continue
		}
		if t, known := typeOf(fn); !known || string(t.params) != string(want.params) || string(t.results) != string(want.results) {
			continue
		}
		p.ops |= 1 << op
		body = appendS32(append(body, 0x20, 0, 0x41), int32(op))
		body = append(body, 0x46, 0x04, 0x40)
		for i := range want.params {
			body = append(body, 0x20, byte(i+1))
		}
		body = appendU32(append(body, 0x10), fn)
		if len(want.results) == 0 {
			body = append(body, 0x41, 0)
		}
		body = append(body, 0x0f, 0x0b)
	}
	body = append(body, 0x00, 0x0b)
	p.body = append(appendU32(nil, uint32(len(body))), body...)
	return p, nil
}
