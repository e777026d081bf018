package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// preinitRuntime is a runtime whose host-side sources (the shardhost module's clock and
// random) give the same to every instance, so that two instances that are the same
// answer alike.
func preinitRuntime(t testing.TB, mutate func(*RuntimeConfig)) *wasmRuntime {
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) {
		c.Clock = func() time.Time { return time.Unix(1_700_000_000, 0) }
		c.Rand = zeroReader{}
		if mutate != nil {
			mutate(c)
		}
	})
	return rt
}

// imageModes are the two ways an image gets into a new instance's memory: copied into
// it, or mapped copy-on-write (cowimage.go) whatever the image's size.
var imageModes = []struct {
	name   string
	mapped bool
}{{"copied", false}, {"mapped", true}}

// setImageMode makes the modules rt compiles from now on copy or map their images.
func setImageMode(rt *wasmRuntime, mapped bool) {
	if mapped {
		rt.cowMinBytes.Store(0)
	} else {
		rt.cowMinBytes.Store(math.MaxInt64)
	}
}

// checkImageMode fails the test unless inst's memory maps its module's image when
// mapped is set (on a system that can), and does not otherwise.
func checkImageMode(t testing.TB, inst *wasmInstance, mapped bool) {
	t.Helper()
	cow := inst.lm != nil && inst.lm.cow > 0
	switch {
	case mapped && !cow && runtime.GOOS == "linux":
		t.Fatalf("the instance's memory does not map the image (activation: %s)", inst.m.Activation())
	case !mapped && cow:
		t.Fatal("the instance's memory maps the image, want it copied")
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// freshInstance makes an instance by running the module's initialisation, as every
// instance was made before pre-initialized images.
func freshInstance(t testing.TB, m *wasmModule, typ, id string) *wasmInstance {
	t.Helper()
	inst, err := m.instantiate(context.Background(), typ, id, &restorePlan{code: m.code.Load(), start: m.start}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}

// imageInstance makes an instance from the module's image, and fails the test when
// the instance did not come from it.
func imageInstance(t testing.TB, m *wasmModule, typ, id string) *wasmInstance {
	t.Helper()
	if err := m.PrepareRestore(context.Background()); err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(context.Background(), typ, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	if inst.code == m.code.Load() {
		t.Fatal("the instance was not made from the pre-initialized image")
	}
	return inst
}

// sameState fails the test unless a and b have the same memory, mutable globals,
// clocks and position in WASI's random stream.
func sameState(t testing.TB, when string, a, b *wasmInstance) {
	t.Helper()
	sa, sb := snapshot(t, a), snapshot(t, b)
	if sa.MemoryPages != sb.MemoryPages {
		t.Fatalf("%s: memory of %d pages fresh, %d from the image", when, sa.MemoryPages, sb.MemoryPages)
	}
	if !bytes.Equal(memoryOf(t, a), memoryOf(t, b)) {
		t.Fatalf("%s: memories differ", when)
	}
	if !slices.Equal(sa.Globals, sb.Globals) {
		t.Fatalf("%s: globals %v fresh, %v from the image", when, sa.Globals, sb.Globals)
	}
	if sa.Clock != sb.Clock {
		t.Fatalf("%s: clocks %+v fresh, %+v from the image", when, sa.Clock, sb.Clock)
	}
	if a.wasiRand.off != b.wasiRand.off {
		t.Fatalf("%s: random stream read to %d fresh, %d from the image", when, a.wasiRand.off, b.wasiRand.off)
	}
}

// receiveBoth delivers msg to both instances and fails the test unless they answer
// alike; it reports whether both are still open.
func receiveBoth(t testing.TB, a, b *wasmInstance, msg string) bool {
	t.Helper()
	ra, ea := a.Receive(context.Background(), []byte(msg))
	rb, eb := b.Receive(context.Background(), []byte(msg))
	if !bytes.Equal(ra, rb) || fmt.Sprint(ea) != fmt.Sprint(eb) {
		t.Fatalf("%q: fresh answered %q %v, the image %q %v", msg, ra, ea, rb, eb)
	}
	return !a.Closed() && !b.Closed()
}

// exampleMessages are sent to every example: each understands some of them and refuses
// the others, alike from a fresh instance and from the image.
var exampleMessages = []string{"inc", "get", "inc", "count", "add 5", "deposit 10", "withdraw 3", "balance",
	"add item-1", "list", "join alice", "say alice hi", "members", "topic", "hello", "echo x", "state", ""}

// Every example, built by each toolchain, gives the same instance from its image as
// from its initialisation: memory, globals, clocks, and the replies to the same
// messages and the state they leave.
func TestPreInitializedExamplesMatchFreshInstances(t *testing.T) {
	type build struct {
		name  string
		bytes func(testing.TB) []byte
	}
	var builds []build
	for _, c := range testwasm.GoCompilers {
		for _, ex := range []string{"counter", "bank", "room", "subscription", "webhook", "abitest", "faulty"} {
			builds = append(builds, build{c.Name + "/" + ex, func(tb testing.TB) []byte { return c.Bytes(tb, ex) }})
		}
	}
	for _, ex := range []string{"counter-rust", "echo-rust", "bank-rust", "cart", "ledger", "abitest-rust"} {
		builds = append(builds, build{"rust/" + ex, func(tb testing.TB) []byte { return testwasm.RustBytes(tb, ex) }})
	}
	rt := preinitRuntime(t, func(c *RuntimeConfig) { c.InstancePoolBytes = -1 })
	for _, mode := range imageModes {
		for _, bd := range builds {
			t.Run(mode.name+"/"+bd.name, func(t *testing.T) {
				setImageMode(rt, mode.mapped)
				preInitializedMatchesFresh(t, rt, bd.bytes(t), mode.mapped)
			})
		}
	}
}

// preInitializedMatchesFresh compiles wasm and checks that an instance from its image
// is one from its initialisation; see TestPreInitializedExamplesMatchFreshInstances.
func preInitializedMatchesFresh(t *testing.T, rt *wasmRuntime, wasm []byte, mapped bool) {
	m, err := rt.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ok, why := m.PreInitialized()
	if len(m.start) == 0 {
		// A Rust cdylib: nothing to run ahead, and no image.
		if ok || why == "" {
			t.Fatalf("pre-initialized %v (%q) without initialisation, want not, with a reason", ok, why)
		}
		return
	}
	if !ok {
		t.Fatalf("not pre-initialized: %s", why)
	}
	// Twice: the second instance's slot is one the first's close gave back (with the
	// image unmapped from it, when mapped).
	for round := range 2 {
		fresh := freshInstance(t, m, "ex", "e1")
		image := imageInstance(t, m, "ex", "e1")
		checkImageMode(t, image, mapped)
		if matchFresh(t, fresh, image) && round == 0 {
			scribble(t, image, 1, 7)
		}
		fresh.Close(context.Background())
		image.Close(context.Background())
	}
}

// matchFresh checks that image, made from the image, is fresh: state, activation,
// replies to exampleMessages and the state they leave. It reports whether both are
// still open.
func matchFresh(t *testing.T, fresh, image *wasmInstance) bool {
	t.Helper()
	sameState(t, "after instantiation", fresh, image)
	if err, err2 := fresh.Activate(context.Background()), image.Activate(context.Background()); fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("activation: fresh %v, image %v", err, err2)
	}
	for _, msg := range exampleMessages {
		if !receiveBoth(t, fresh, image, msg) {
			return false
		}
	}
	sameState(t, "after the messages", fresh, image)
	return true
}

// A module whose initialisation asks the host for something an instance's own (its
// entity's ID) keeps running its initialisation, and says why; so does one that writes
// to stdout.
func TestPreInitializationRefusedForHostCalls(t *testing.T) {
	rt := preinitRuntime(t, nil)
	for _, spec := range []initSpec{{entityID: true}, {write: true}} {
		m, err := rt.Compile(context.Background(), spec.module())
		if err != nil {
			t.Fatal(err)
		}
		ok, why := m.PreInitialized()
		if ok || why == "" {
			t.Fatalf("%+v: pre-initialized %v (%q), want not, with a reason", spec, ok, why)
		}
		if a := m.Activation(); a == "" {
			t.Fatal("no activation text")
		}
		inst, err := m.Instantiate(context.Background(), "t", "id-1")
		if err != nil {
			t.Fatal(err)
		}
		if inst.code != m.code.Load() {
			t.Fatal("instance made from an image the module should not have")
		}
		if spec.entityID {
			if got, _ := inst.mem.ReadByte(0x300); got != 'i' {
				t.Fatalf("the initialisation's entity ID starts with %q, want 'i'", got)
			}
		}
		inst.Close(context.Background())
		m.Close(context.Background())
	}
}

// A module whose initialisation traps, grows memory past the cap or never returns is
// refused at deploy, as before images.
func TestPreInitializationRefusesFailingInitialisation(t *testing.T) {
	rt := preinitRuntime(t, func(c *RuntimeConfig) {
		c.MemoryLimit = 4 << 16
		c.ActivationDeadline = 200 * time.Millisecond
	})
	for name, spec := range map[string]initSpec{
		"trap":  {trap: true},
		"grow":  {memPages: 1, ops: []initOp{{kind: opGrow, n: 8}, {kind: opStore, addr: 9*wasmPageSize - 8}}},
		"loops": {loop: true},
	} {
		if _, err := rt.Compile(context.Background(), spec.module()); err == nil {
			t.Errorf("%s: compiled, want refused", name)
		}
	}
}

// FuzzPreInitializedImage builds modules by hand whose _initialize writes memory, sets
// globals of every type, grows memory (some grows failing at the cap) and reads WASI's
// random stream and clock, and checks that the instance made from the image is the one
// a fresh instantiation makes, before and after a message.
func FuzzPreInitializedImage(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 2, 2, 2, 0, 0xff, 0xff, 0x10, 1, 3, 3, 5, 5})
	f.Add([]byte{4, 3, 0x80, 0x40, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x7f})
	// Three globals (i32, i64, f64) that _initialize sets, and a random read.
	f.Add([]byte{0, 3, 0, 1, 2, 3, 4, 1, 5, 6, 7, 8, 3, 9, 10, 11, 12, 0,
		1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 1, 0, 0, 0, 7, 7, 7, 7, 7, 7, 1, 1, 0, 0, 0, 9, 9, 9, 9, 9, 9, 2,
		3, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 20})
	var rts [2]*wasmRuntime
	for k, mode := range imageModes {
		rts[k] = preinitRuntime(f, func(c *RuntimeConfig) {
			c.MemoryLimit = 6 << 16
			c.InstancePoolBytes = 64 << 20
		})
		setImageMode(rts[k], mode.mapped)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec := specFromBytes(data)
		for k, mode := range imageModes {
			m, err := rts[k].Compile(context.Background(), spec.module())
			if err != nil {
				t.Fatalf("%+v: %v", spec, err)
			}
			if ok, why := m.PreInitialized(); !ok {
				t.Fatalf("%+v: not pre-initialized: %s", spec, why)
			}
			fresh := freshInstance(t, m, "f", "1")
			image := imageInstance(t, m, "f", "1")
			if m.pre.image.Load().bytes() > 0 {
				checkImageMode(t, image, mode.mapped)
			}
			sameState(t, mode.name+": after instantiation", fresh, image)
			receiveBoth(t, fresh, image, "message")
			sameState(t, mode.name+": after a message", fresh, image)
			// The next instance takes the slot the image instance leaves, written
			// all over, re-imaged in place (residentslots.go).
			scribble(t, image, 0, uint64(len(data)))
			image.Close(context.Background())
			fresh, image = freshInstance(t, m, "f", "2"), imageInstance(t, m, "f", "2")
			sameState(t, mode.name+": from a kept slot", fresh, image)
			receiveBoth(t, fresh, image, "message")
			sameState(t, mode.name+": from a kept slot, after a message", fresh, image)
			fresh.Close(context.Background())
			image.Close(context.Background())
			m.Close(context.Background())
		}
	})
}

// initOp is one instruction group of a hand-made _initialize.
type initOp struct {
	kind  int
	addr  uint32
	value uint64
	n     uint32
	g     int
}

const (
	opStore      = iota // i32.store value at addr
	opGlobal            // global.set g value
	opGrow              // memory.grow n; drop
	opRandom            // WASI random_get(addr, n)
	opClock             // WASI clock_time_get(monotonic, 0, addr)
	opStoreGrown        // i32.store into the last page the memory has (memory.size)
	numInitOps
)

// initSpec describes a hand-made ABI v0 module.
type initSpec struct {
	memPages uint32
	globals  []byte // value types of its mutable globals
	inits    []uint64
	data     []initOp // data segments: bytes of value at addr, n bytes
	ops      []initOp
	entityID bool // _initialize calls entity_id(0x300, 16)
	write    bool // _initialize writes a line to stdout (WASI fd_write)
	trap     bool // _initialize traps (unreachable)
	loop     bool // _initialize never returns
}

// specFromBytes derives a module from fuzz input.
func specFromBytes(data []byte) initSpec {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	u32 := func() uint32 { return uint32(next()) | uint32(next())<<8 | uint32(next())<<16 }
	s := initSpec{memPages: 1 + uint32(next()%3)}
	types := []byte{piI32, piI64, piF32, piF64}
	for k := int(next() % 4); k > 0; k-- {
		t := types[next()%4]
		s.globals = append(s.globals, t)
		s.inits = append(s.inits, uint64(u32())<<8|uint64(next()))
	}
	limit := s.memPages*wasmPageSize - 16
	for k := int(next() % 3); k > 0; k-- {
		s.data = append(s.data, initOp{addr: u32() % limit, value: uint64(next()), n: 1 + uint32(next()%64)})
	}
	for len(data) > 0 && len(s.ops) < 32 {
		op := initOp{kind: int(next()) % numInitOps, addr: u32() % limit, value: uint64(u32())<<24 | uint64(u32())}
		switch op.kind {
		case opGlobal:
			if len(s.globals) == 0 {
				op.kind = opStore
			}
			op.g = int(next()) % max(len(s.globals), 1)
		case opGrow:
			op.n = uint32(next() % 3)
		case opRandom:
			op.n = 1 + uint32(next()%40)
			op.addr %= limit - 64
		}
		s.ops = append(s.ops, op)
	}
	return s
}

const (
	piI32 = 0x7f
	piI64 = 0x7e
	piF32 = 0x7d
	piF64 = 0x7c
)

func piLEB(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func piSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func piName(b []byte, s string) []byte { return append(piLEB(b, uint64(len(s))), s...) }

func piVec(entries ...[]byte) []byte {
	b := piLEB(nil, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return b
}

func piSection(id byte, contents []byte) []byte {
	return append(piLEB([]byte{id}, uint64(len(contents))), contents...)
}

// piConst is the constant instruction of type t for bits.
func piConst(t byte, bits uint64) []byte {
	switch t {
	case piI32:
		return piSLEB([]byte{0x41}, int64(int32(uint32(bits))))
	case piI64:
		return piSLEB([]byte{0x42}, int64(bits))
	case piF32:
		return binary.LittleEndian.AppendUint32([]byte{0x43}, uint32(bits))
	}
	return binary.LittleEndian.AppendUint64([]byte{0x44}, bits)
}

// module assembles the spec: imports WASI's random_get, clock_time_get and fd_write and
// the host's entity_id; exports the v0 marker, shardhost_alloc, shardhost_receive (which
// stores its arguments' sum and counts in its first i32 global, if any) and
// _initialize.
func (s initSpec) module() []byte {
	if s.memPages == 0 {
		s.memPages = 1
	}
	// Types: 0 ()->(), 1 (i32)->i32, 2 (i32,i32)->i32, 3 (i32,i64,i32)->i32,
	// 4 (i32,i32,i32,i32)->i32.
	types := piVec(
		[]byte{0x60, 0, 0},
		[]byte{0x60, 1, piI32, 1, piI32},
		[]byte{0x60, 2, piI32, piI32, 1, piI32},
		[]byte{0x60, 3, piI32, piI64, piI32, 1, piI32},
		[]byte{0x60, 4, piI32, piI32, piI32, piI32, 1, piI32},
	)
	imp := func(mod, name string, typ uint64) []byte {
		return piLEB(append(piName(piName(nil, mod), name), 0x00), typ)
	}
	imports := piVec(
		imp("wasi_snapshot_preview1", "random_get", 2),     // 0
		imp("wasi_snapshot_preview1", "clock_time_get", 3), // 1
		imp("wasi_snapshot_preview1", "fd_write", 4),       // 2
		imp(abi.ImportModule, abi.ImportEntityID, 2),       // 3
	)
	const marker, alloc, receive, initialize = 4, 5, 6, 7
	funcs := piVec([]byte{0}, []byte{1}, []byte{2}, []byte{0})
	memory := piVec(append([]byte{0x00}, piLEB(nil, uint64(s.memPages))...))
	var globals [][]byte
	firstI32 := -1
	for k, t := range s.globals {
		globals = append(globals, append(append([]byte{t, 1}, piConst(t, s.inits[k])...), 0x0b))
		if t == piI32 && firstI32 < 0 {
			firstI32 = k
		}
	}
	exp := func(name string, kind byte, idx uint64) []byte { return piLEB(append(piName(nil, name), kind), idx) }
	exports := piVec(
		exp(abi.VersionMarker(0), 0, marker),
		exp(abi.ExportAlloc, 0, alloc),
		exp(abi.ExportReceive, 0, receive),
		exp(abi.ExportInitialize, 0, initialize),
		exp("memory", 2, 0),
	)
	withBody := func(code []byte) []byte {
		b := append([]byte{0}, code...)
		b = append(b, 0x0b)
		return append(piLEB(nil, uint64(len(b))), b...)
	}
	store := func(addr uint32, v uint32) []byte {
		b := piSLEB([]byte{0x41}, int64(int32(addr)))
		b = piSLEB(append(b, 0x41), int64(int32(v)))
		return append(b, 0x36, 0x02, 0x00)
	}
	var init []byte
	for _, op := range s.ops {
		switch op.kind {
		case opStore:
			init = append(init, store(op.addr, uint32(op.value))...)
		case opGlobal:
			init = append(init, piConst(s.globals[op.g], op.value)...)
			init = piLEB(append(init, 0x24), uint64(op.g))
		case opGrow:
			init = piSLEB(append(init, 0x41), int64(op.n))
			init = append(init, 0x40, 0x00, 0x1a)
		case opRandom:
			init = piSLEB(append(init, 0x41), int64(op.addr))
			init = piSLEB(append(init, 0x41), int64(op.n))
			init = append(init, 0x10, 0, 0x1a)
		case opClock:
			init = append(init, 0x41, 1, 0x42, 0) // monotonic, precision 0
			init = piSLEB(append(init, 0x41), int64(op.addr&^7))
			init = append(init, 0x10, 1, 0x1a)
		case opStoreGrown:
			// i32.store at memory.size*64Ki - 8
			init = append(init, 0x3f, 0x00, 0x41, 16, 0x74) // memory.size; i32.const 16; i32.shl
			init = append(init, 0x41, 8, 0x6b)              // i32.const 8; i32.sub
			init = piSLEB(append(init, 0x41), int64(int32(uint32(op.value))))
			init = append(init, 0x36, 0x02, 0x00)
		}
	}
	if s.entityID {
		init = append(init, 0x41, 0x80, 0x06, 0x41, 16, 0x10, 3, 0x1a) // entity_id(0x300, 16)
	}
	if s.write {
		// An iovec at 0x400 -> (0x410, 3), the bytes "hi\n" at 0x410.
		init = append(init, store(0x400, 0x410)...)
		init = append(init, store(0x404, 3)...)
		init = append(init, store(0x410, 0x0a6968)...)
		init = append(init, 0x41, 1, 0x41, 0x80, 0x08, 0x41, 1, 0x41, 0x80, 0x09, 0x10, 2, 0x1a) // fd_write(1, 0x400, 1, 0x480)
	}
	if s.trap {
		init = append(init, 0x00)
	}
	if s.loop {
		init = append(init, 0x03, 0x40, 0x0c, 0x00, 0x0b)
	}
	recv := []byte{0x41, 0x80, 0x04, 0x20, 0, 0x20, 1, 0x6a, 0x36, 0x02, 0x00} // i32.store(0x200, a+b)
	if firstI32 >= 0 {
		g := uint64(firstI32)
		recv = piLEB(append(recv, 0x23), g)
		recv = append(recv, 0x41, 1, 0x6a)
		recv = piLEB(append(recv, 0x24), g)
	}
	recv = append(recv, 0x41, 0)
	code := piVec(withBody(nil), withBody([]byte{0x41, 0x80, 0x20}), withBody(recv), withBody(init))
	var segs [][]byte
	for _, d := range s.data {
		seg := piSLEB([]byte{0x00, 0x41}, int64(int32(d.addr)))
		seg = append(seg, 0x0b)
		seg = piLEB(seg, uint64(d.n))
		seg = append(seg, bytes.Repeat([]byte{byte(d.value) | 1}, int(d.n))...)
		segs = append(segs, seg)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, piSection(1, types)...)
	b = append(b, piSection(2, imports)...)
	b = append(b, piSection(3, funcs)...)
	b = append(b, piSection(5, memory)...)
	if len(globals) > 0 {
		b = append(b, piSection(6, piVec(globals...))...)
	}
	b = append(b, piSection(7, exports)...)
	b = append(b, piSection(10, code)...)
	if len(segs) > 0 {
		b = append(b, piSection(11, piVec(segs...))...)
	}
	return b
}
