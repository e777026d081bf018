package host

import (
	"context"
	"encoding/binary"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/sharding"
)

// Fuzzing of every host function's decoding of what a guest gives it: pointers and
// lengths anywhere in (and past) memory, huge lengths, bytes that are not UTF-8, bad
// operations and consistency levels. A module built here exports, for each host
// function, a function "call_NAME" with the same signature that calls it, so the fuzzer
// drives the host functions directly. Whatever the arguments, a call either traps (the
// guest's call fails) or returns; it never takes the host down, and codes stay within
// the ABI's.

type hostFn struct {
	name            string
	params, results []api.ValueType
}

// allHostFunctions lists every host function with its signature.
func allHostFunctions() []hostFn {
	fns := []hostFn{
		{abi.ImportReply, []api.ValueType{i32, i32}, nil},
		{abi.ImportEntityID, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportEntityType, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ImportLog, []api.ValueType{i32, i32, i32}, nil},
		{abi.ImportPassivate, nil, nil},
	}
	for _, f := range v1Functions {
		fns = append(fns, hostFn{f.name, f.params, f.results})
	}
	return fns
}

// wasm encoding helpers.
func uleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func wasmName(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }

func section(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = uleb(b, uint64(len(body)))
	return append(b, body...)
}

func valTypes(b []byte, ts []api.ValueType) []byte {
	b = uleb(b, uint64(len(ts)))
	return append(b, ts...)
}

// callerModule builds an ABI v1 module that imports fns from the shardhost module and
// exports "call_NAME" for each, plus the required exports and a one-page memory.
func callerModule(fns []hostFn) []byte {
	type fnType struct{ params, results []api.ValueType }
	var types []fnType
	typeIdx := func(p, r []api.ValueType) int {
		for i, t := range types {
			if string(t.params) == string(p) && string(t.results) == string(r) {
				return i
			}
		}
		types = append(types, fnType{p, r})
		return len(types) - 1
	}
	imports := make([]int, len(fns))
	for i, f := range fns {
		imports[i] = typeIdx(f.params, f.results)
	}
	tMarker := typeIdx(nil, nil)
	tAlloc := typeIdx([]api.ValueType{i32}, []api.ValueType{i32})
	tReceive := typeIdx([]api.ValueType{i32, i32}, []api.ValueType{i32})

	var typeSec []byte
	typeSec = uleb(typeSec, uint64(len(types)))
	for _, t := range types {
		typeSec = append(typeSec, 0x60)
		typeSec = valTypes(typeSec, t.params)
		typeSec = valTypes(typeSec, t.results)
	}
	var importSec []byte
	importSec = uleb(importSec, uint64(len(fns)))
	for i, f := range fns {
		importSec = wasmName(importSec, abi.ImportModule)
		importSec = wasmName(importSec, f.name)
		importSec = append(importSec, 0x00)
		importSec = uleb(importSec, uint64(imports[i]))
	}
	// Defined functions: the three required exports, then one caller per import.
	defined := append([]int{tMarker, tAlloc, tReceive}, imports...)
	var funcSec []byte
	funcSec = uleb(funcSec, uint64(len(defined)))
	for _, t := range defined {
		funcSec = uleb(funcSec, uint64(t))
	}
	memSec := []byte{1, 0x00, 1} // one memory, min 1 page
	var exportSec []byte
	exportSec = uleb(exportSec, uint64(1+len(defined)))
	exportSec = wasmName(exportSec, "memory")
	exportSec = append(exportSec, 0x02, 0)
	base := len(fns)
	for i, name := range []string{abi.VersionMarker(1), abi.ExportAlloc, abi.ExportReceive} {
		exportSec = wasmName(exportSec, name)
		exportSec = append(exportSec, 0x00)
		exportSec = uleb(exportSec, uint64(base+i))
	}
	for i, f := range fns {
		exportSec = wasmName(exportSec, "call_"+f.name)
		exportSec = append(exportSec, 0x00)
		exportSec = uleb(exportSec, uint64(base+3+i))
	}
	var codeSec []byte
	codeSec = uleb(codeSec, uint64(len(defined)))
	body := func(instrs ...byte) {
		b := append([]byte{0}, instrs...) // no locals
		b = append(b, 0x0b)
		codeSec = uleb(codeSec, uint64(len(b)))
		codeSec = append(codeSec, b...)
	}
	body()                 // marker
	body(0x41, 0x80, 0x08) // alloc: i32.const 1024
	body(0x41, 0x00)       // receive: i32.const 0
	for i, f := range fns {
		var instrs []byte
		for p := range f.params {
			instrs = append(instrs, 0x20)
			instrs = uleb(instrs, uint64(p))
		}
		instrs = append(instrs, 0x10)
		instrs = uleb(instrs, uint64(i))
		body(instrs...)
	}
	var b []byte
	b = append(b, "\x00asm\x01\x00\x00\x00"...)
	b = section(b, 1, typeSec)
	b = section(b, 2, importSec)
	b = section(b, 3, funcSec)
	b = section(b, 5, memSec)
	b = section(b, 7, exportSec)
	b = section(b, 10, codeSec)
	return b
}

// fakeServices answers the v1 host functions in memory, with real CRDTs, for the
// fuzzer and the sandbox tests.
type fakeServices struct {
	data   map[string]ddata.ReplicatedData
	timers map[string]bool
	subs   map[string]bool
	// reminders are the entity's, by name.
	reminders map[string]sharding.Reminder
	calls     int
	// last is the last message told or asked.
	last sharding.Message
}

func newFakeServices() *fakeServices {
	return &fakeServices{data: map[string]ddata.ReplicatedData{}, timers: map[string]bool{}, subs: map[string]bool{}}
}

func (f *fakeServices) tell(ctx context.Context, m sharding.Message) error {
	f.calls++
	f.last = m
	if m.EntityID == "" {
		return sharding.ErrEmptyEntityID
	}
	return nil
}

func (f *fakeServices) ask(ctx context.Context, m sharding.Message) ([]byte, error) {
	f.calls++
	f.last = m
	if m.EntityID == "" {
		return nil, sharding.ErrEmptyEntityID
	}
	return append([]byte("re: "), m.Payload...), nil
}

func (f *fakeServices) ddataGet(ctx context.Context, key string, rc ddata.ReadConsistency) (ddata.ReplicatedData, error) {
	d, ok := f.data[key]
	if !ok {
		return nil, ddata.ErrNotFound
	}
	return d, nil
}

func (f *fakeServices) ddataUpdate(ctx context.Context, key string, typ ddata.DataType, op ddata.Op, wc ddata.WriteConsistency) (ddata.ReplicatedData, error) {
	cur, ok := f.data[key]
	if !ok {
		var err error
		if cur, err = ddata.Empty(typ); err != nil {
			return nil, err
		}
	} else if cur.Type() != typ {
		return nil, ddata.ErrTypeMismatch
	}
	next, _, err := op.Modify("n1", nil)(cur)
	if err != nil {
		return nil, err
	}
	f.data[key] = next
	return next, nil
}

func (f *fakeServices) ddataDelete(ctx context.Context, key string, wc ddata.WriteConsistency) error {
	delete(f.data, key)
	return nil
}

func (f *fakeServices) subscribe(_ context.Context, key string) error { f.subs[key] = true; return nil }
func (f *fakeServices) unsubscribe(key string)                        { delete(f.subs, key) }

func (f *fakeServices) startTimer(name string, msg []byte, delay, interval time.Duration) error {
	f.timers[name] = true
	return nil
}

func (f *fakeServices) cancelTimer(name string) bool {
	ok := f.timers[name]
	delete(f.timers, name)
	return ok
}

func (f *fakeServices) setReminder(ctx context.Context, r sharding.Reminder) error {
	f.calls++
	if f.reminders == nil {
		f.reminders = map[string]sharding.Reminder{}
	}
	if _, ok := f.reminders[r.Name]; !ok && len(f.reminders) >= sharding.MaxRemindersPerEntity {
		return sharding.ErrTooManyReminders
	}
	f.reminders[r.Name] = r
	return nil
}

func (f *fakeServices) cancelReminder(ctx context.Context, name string) (bool, error) {
	f.calls++
	_, ok := f.reminders[name]
	delete(f.reminders, name)
	return ok, nil
}

func (f *fakeServices) listReminders(ctx context.Context) ([]sharding.Reminder, error) {
	f.calls++
	var out []sharding.Reminder
	for _, r := range f.reminders {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b sharding.Reminder) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fuzzInstance is an instance of the caller module with fake services.
func fuzzInstance(tb testing.TB) (*wasmInstance, []hostFn) {
	tb.Helper()
	rt, _ := newTestRuntime(tb, nil)
	fns := allHostFunctions()
	m, err := rt.Compile(context.Background(), callerModule(fns))
	if err != nil {
		tb.Fatalf("caller module: %v", err)
	}
	inst, err := m.Instantiate(context.Background(), "fuzz", "x")
	if err != nil {
		tb.Fatal(err)
	}
	inst.svc = newFakeServices()
	return inst, fns
}

// callHost calls the host function fns[k] through its caller with args; the instance
// looks as if a message were being handled. It returns the code (if the function has a
// result) and the call's error (a trap).
func callHost(inst *wasmInstance, fn hostFn, args []uint64) (uint64, error) {
	inst.inCall, inst.phase, inst.replyCap, inst.calls = true, phaseReceive, 1<<20, 0
	inst.msg = sharding.MessageInfo{Sender: "fuzz/y", Ask: true, Chain: []string{"fuzz/z"}}
	defer func() { inst.inCall, inst.phase = false, phaseNone }()
	res, err := inst.mod.ExportedFunction("call_"+fn.name).Call(inst.ctx, args[:len(fn.params)]...)
	if err != nil || len(res) == 0 {
		return 0, err
	}
	return res[0], nil
}

// codeResults are the host functions whose i32 result is an abi.Code.
var codeResults = map[string]bool{
	abi.ImportTell: true, abi.ImportAsk: true, abi.ImportForward: true, abi.ImportDDataGet: true,
	abi.ImportDDataUpdate: true, abi.ImportDDataDelete: true, abi.ImportDDataSubscribe: true,
	abi.ImportDDataUnsubscribe: true, abi.ImportTimerStart: true, abi.ImportTellKey: true, abi.ImportAskKey: true,
	abi.ImportHTTPRequest: true,
}

func TestCallerModuleCallsEveryHostFunction(t *testing.T) {
	inst, fns := fuzzInstance(t)
	mem := inst.mod.Memory()
	put := func(off uint32, s string) (uint64, uint64) {
		mem.Write(off, []byte(s))
		return uint64(off), uint64(len(s))
	}
	byName := map[string]hostFn{}
	for _, f := range fns {
		byName[f.name] = f
	}
	kp, kn := put(100, "cart-items")
	tp, tn := put(200, "pncounter")
	op, on := put(300, "incr 7")
	cp, cn := put(400, "majority")
	code, err := callHost(inst, byName[abi.ImportDDataUpdate], []uint64{kp, kn, tp, tn, op, on, cp, cn, 0})
	if err != nil || code != 0 || string(inst.result) != "7" {
		t.Fatalf("ddata_update: code %d, result %q, %v", code, inst.result, err)
	}
	// Not UTF-8, a bad consistency, a pointer past memory.
	bp, bn := put(500, "\xff\xfe")
	if code, err := callHost(inst, byName[abi.ImportDDataGet], []uint64{bp, bn, cp, cn, 0}); err != nil || code != uint64(abi.CodeBadRequest) {
		t.Fatalf("ddata_get of a non-UTF-8 key: %d %v", code, err)
	}
	xp, xn := put(600, "sometimes")
	if code, err := callHost(inst, byName[abi.ImportDDataGet], []uint64{kp, kn, xp, xn, 0}); err != nil || code != uint64(abi.CodeBadRequest) {
		t.Fatalf("ddata_get with a bad consistency: %d %v", code, err)
	}
	if _, err := callHost(inst, byName[abi.ImportDDataGet], []uint64{65530, 100, cp, cn, 0}); err == nil || !strings.Contains(err.Error(), "outside its memory") {
		t.Fatalf("ddata_get past memory: %v", err)
	}
	// An ask of an entity in the chain is a cycle; the result holds the text.
	ep, en := put(700, "fuzz")
	ip, in := put(710, "z")
	if code, err := callHost(inst, byName[abi.ImportAsk], []uint64{ep, en, ip, in, 0, 0, 0}); err != nil || code != uint64(abi.CodeAskCycle) ||
		!strings.Contains(string(inst.result), "fuzz/z → fuzz/x → fuzz/z") {
		t.Fatalf("ask cycle: %d %q %v", code, inst.result, err)
	}
	// tell_key and ask_key send with the key; a key over the cap, or not UTF-8, is a bad
	// request that sends nothing, and an empty key is none.
	svc := inst.svc.(*fakeServices)
	mp, mn := put(720, "count")
	kyp, kyn := put(730, "retry-1")
	if code, err := callHost(inst, byName[abi.ImportTellKey], []uint64{ep, en, ip, in, mp, mn, kyp, kyn}); err != nil || code != 0 ||
		svc.last.IdempotencyKey != "retry-1" || string(svc.last.Payload) != "count" || svc.last.EntityID != "z" {
		t.Fatalf("tell_key: %d %v, sent %+v", code, err, svc.last)
	}
	wp, wn := put(740, "w")
	if code, err := callHost(inst, byName[abi.ImportAskKey], []uint64{ep, en, wp, wn, mp, mn, kyp, kyn, 0}); err != nil || code != 0 ||
		svc.last.IdempotencyKey != "retry-1" || string(inst.result) != "re: count" || !slices.Equal(svc.last.Chain, []string{"fuzz/z", "fuzz/x"}) {
		t.Fatalf("ask_key: %d %q %v, sent %+v", code, inst.result, err, svc.last)
	}
	if code, err := callHost(inst, byName[abi.ImportAskKey], []uint64{ep, en, wp, wn, mp, mn, kyp, 0, 0}); err != nil || code != 0 ||
		svc.last.IdempotencyKey != "" {
		t.Fatalf("ask_key with an empty key: %d %v, sent %+v", code, err, svc.last)
	}
	// A cycle is refused as ask refuses it.
	if code, err := callHost(inst, byName[abi.ImportAskKey], []uint64{ep, en, ip, in, mp, mn, kyp, kyn, 0}); err != nil || code != uint64(abi.CodeAskCycle) {
		t.Fatalf("ask_key cycle: %d %q %v", code, inst.result, err)
	}
	calls := svc.calls
	lp, ln := put(1000, strings.Repeat("k", abi.MaxIdempotencyKey+1))
	for _, fn := range []string{abi.ImportTellKey, abi.ImportAskKey} {
		if code, err := callHost(inst, byName[fn], []uint64{ep, en, wp, wn, mp, mn, lp, ln, 0}); err != nil || code != uint64(abi.CodeBadRequest) ||
			!strings.Contains(string(inst.result), "at most 256") {
			t.Fatalf("%s with a key of %d bytes: %d %q %v", fn, ln, code, inst.result, err)
		}
		if code, err := callHost(inst, byName[fn], []uint64{ep, en, wp, wn, mp, mn, bp, bn, 0}); err != nil || code != uint64(abi.CodeBadRequest) ||
			!strings.Contains(string(inst.result), "idempotency key is not UTF-8") {
			t.Fatalf("%s with a key not UTF-8: %d %q %v", fn, code, inst.result, err)
		}
	}
	if code, err := callHost(inst, byName[abi.ImportTellKey], []uint64{ep, en, wp, wn, mp, mn, lp, abi.MaxIdempotencyKey}); err != nil || code != 0 ||
		len(svc.last.IdempotencyKey) != abi.MaxIdempotencyKey {
		t.Fatalf("tell_key with a key of %d bytes: %d %q %v", abi.MaxIdempotencyKey, code, inst.result, err)
	}
	if svc.calls != calls+1 {
		t.Fatalf("refused keys reached the services: %d calls, want %d", svc.calls, calls+1)
	}
	if abi.MaxIdempotencyKey != sharding.MaxIdempotencyKeyLen {
		t.Fatalf("abi.MaxIdempotencyKey %d, sharding.MaxIdempotencyKeyLen %d", abi.MaxIdempotencyKey, sharding.MaxIdempotencyKeyLen)
	}
	// result copies the text when it fits, and tells its length either way.
	n, err := callHost(inst, byName[abi.ImportResult], []uint64{1000, 4})
	if err != nil || int(n) != len(inst.result) {
		t.Fatalf("result: %d %v", n, err)
	}
	// The budget: the call past it traps.
	inst.inCall, inst.phase, inst.calls = true, phaseReceive, 0
	for i := 0; i < abi.DefaultCallBudget; i++ {
		if _, err := inst.mod.ExportedFunction("call_"+abi.ImportNow).Call(inst.ctx, 0); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if _, err := inst.mod.ExportedFunction("call_"+abi.ImportNow).Call(inst.ctx, 0); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("call past the budget: %v", err)
	}
}

func FuzzHostFunctions(f *testing.F) {
	f.Add(uint8(0), []byte("hello"), uint64(0), uint64(5), uint64(1), int64(2))
	f.Add(uint8(12), []byte("k\x00pncounter\x00incr 5"), uint64(0), uint64(1), uint64(2), int64(9))
	f.Add(uint8(7), []byte("orset"), uint64(1<<32-1), uint64(1<<32-1), uint64(0), int64(-1))
	f.Add(uint8(17), []byte{0xff, 0xfe, 0xfd}, uint64(65535), uint64(2), uint64(3), int64(1<<40))
	inst, fns := fuzzInstance(f)
	f.Fuzz(func(t *testing.T, which uint8, data []byte, a, b, c uint64, d int64) {
		if inst.Closed() {
			t.Skip()
		}
		fn := fns[int(which)%len(fns)]
		mem := inst.mod.Memory()
		if len(data) > 4096 {
			data = data[:4096]
		}
		mem.Write(0, data)
		// Arguments: mostly ranges inside data (so parsing is reached), sometimes raw.
		r := rand.New(rand.NewSource(int64(a ^ b<<1 ^ c<<2)))
		args := make([]uint64, 9)
		for i := range args {
			switch r.Intn(4) {
			case 0:
				args[i] = uint64(uint32(a))
			case 1:
				args[i] = uint64(r.Intn(len(data) + 1))
			case 2:
				args[i] = uint64(uint32(c))
			default:
				args[i] = uint64(d)
			}
		}
		if len(data) >= 16 {
			// Named ranges from the data itself: offsets and lengths it declares.
			for i := 0; i+1 < len(args) && 8+4*i+4 <= len(data); i += 2 {
				args[i] = uint64(binary.LittleEndian.Uint16(data[4*i:]))
				args[i+1] = uint64(binary.LittleEndian.Uint16(data[4*i+2:]) % 256)
			}
		}
		for i, p := range fn.params {
			if p == i32 {
				args[i] = uint64(uint32(args[i]))
			}
		}
		code, err := callHost(inst, fn, args)
		if err == nil && codeResults[fn.name] && code > uint64(abi.CodeEgressRateLimited) {
			t.Fatalf("%s returned code %d", fn.name, code)
		}
	})
}
