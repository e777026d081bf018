package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// residentPoolOf returns m's resident slots, failing the test when it has none.
func residentPoolOf(t *testing.T, m *wasmModule) *residentPool {
	t.Helper()
	p := m.resident.Load()
	if p == nil {
		t.Fatalf("no resident slots (activation: %s)", m.Activation())
	}
	return p
}

// slotsRuntime is preinitRuntime with an instance pool of 256 MiB that is trimmed
// only when a test says so.
func slotsRuntime(t *testing.T) (*wasmRuntime, *memArena) {
	rt := preinitRuntime(t, func(c *RuntimeConfig) { c.InstancePoolBytes = 256 << 20 })
	a := arenaOrSkip(t, rt)
	a.mu.Lock()
	a.resident.trimEvery = 24 * time.Hour
	a.mu.Unlock()
	return rt, a
}

// poolSlots returns how many slots p holds.
func (a *memArena) poolSlots(p *residentPool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(p.slots)
}

// scribble has the instance grow its memory by grow pages and fills all of it with
// garbage, as a guest gone wrong would leave it.
func scribble(t *testing.T, inst *wasmInstance, grow uint32, seed uint64) {
	t.Helper()
	if _, ok := inst.mem.Grow(grow); !ok {
		t.Fatalf("growing by %d pages failed", grow)
	}
	mem, ok := inst.mem.Read(0, inst.mem.Size())
	if !ok {
		t.Fatal("memory read failed")
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for k := range mem {
		mem[k] = byte(r.Uint32() | 1) // never zero: every page is written
	}
	for _, g := range inst.snapGlobals {
		g.Set(r.Uint64())
	}
}

// An instance from a resident slot, which the last instance of the module grew and
// scribbled over before it was closed, is the instance a fresh instantiation makes:
// memory, globals, clocks and random stream, and the replies to the same messages and
// the state they leave, for every Go and TinyGo example, with the image copied into
// the slots or mapped copy-on-write (cowimage.go).
func TestResidentSlotsMatchFreshInstances(t *testing.T) {
	rt, _ := slotsRuntime(t)
	for _, mode := range imageModes {
		for _, c := range testwasm.GoCompilers {
			for _, ex := range []string{"counter", "bank", "room", "subscription", "webhook", "abitest", "faulty"} {
				t.Run(mode.name+"/"+c.Name+"/"+ex, func(t *testing.T) {
					setImageMode(rt, mode.mapped)
					residentSlotsMatchFresh(t, rt, c.Bytes(t, ex), mode.mapped)
				})
			}
		}
	}
}

// residentSlotsMatchFresh is TestResidentSlotsMatchFreshInstances for one module.
func residentSlotsMatchFresh(t *testing.T, rt *wasmRuntime, wasm []byte, mapped bool) {
	t.Helper()
	ctx := context.Background()
	m, err := rt.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if ok, why := m.PreInitialized(); !ok {
		t.Fatalf("not pre-initialized: %s", why)
	}
	pool := residentPoolOf(t, m)
	for round := range 3 {
		// The tenant: from the image (or, the first round, the pool's
		// first slot), messages, then garbage everywhere.
		tenant := imageInstance(t, m, "ex", "tenant")
		checkImageMode(t, tenant, mapped)
		slot := tenant.lm.slot
		for _, msg := range exampleMessages[:4] {
			tenant.Receive(ctx, []byte(msg))
		}
		if !tenant.Closed() {
			scribble(t, tenant, uint32(1+round*7), uint64(round))
		}
		tenant.Close(ctx) // if a message did not close it (faulty's trap)
		if rt.arena.poolSlots(pool) == 0 {
			t.Fatalf("round %d: no resident slot after a close", round)
		}
		fresh := freshInstance(t, m, "ex", "e1")
		reused := imageInstance(t, m, "ex", "e1")
		if !reused.lm.imaged || addrOf(reused.lm.slot) != addrOf(slot) {
			t.Fatalf("round %d: the instance is not in the closed tenant's slot", round)
		}
		checkImageMode(t, reused, mapped)
		sameState(t, fmt.Sprintf("round %d, after instantiation", round), fresh, reused)
		if err, err2 := fresh.Activate(ctx), reused.Activate(ctx); fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("activation: fresh %v, reused %v", err, err2)
		}
		for _, msg := range exampleMessages {
			if !receiveBoth(t, fresh, reused, msg) {
				break
			}
		}
		if !fresh.Closed() && !reused.Closed() {
			sameState(t, fmt.Sprintf("round %d, after the messages", round), fresh, reused)
		}
		fresh.Close(ctx)
		reused.Close(ctx)
	}
}

// Closed instances keep slots only up to the pool's budget: the others' memory goes
// back to the operating system at once, and trimming gives back the rest when the
// pool sits idle.
func TestResidentSlotsStayWithinTheBudgetAndAreTrimmed(t *testing.T) {
	rt, a := slotsRuntime(t)
	ctx := context.Background()
	m, err := rt.Compile(ctx, testwasm.TinyGoBytes(t, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	pool := residentPoolOf(t, m)
	first := imageInstance(t, m, "counter", "c0")
	if _, err := first.Receive(ctx, []byte("inc")); err != nil {
		t.Fatal(err)
	}
	first.Close(ctx)
	_, one := a.residentCounts()
	if one <= 0 {
		t.Fatalf("a kept slot charges %d bytes", one)
	}
	a.mu.Lock()
	a.resident.budget = 2*one + one/2 // room for two
	a.mu.Unlock()

	type held struct {
		slot []byte
		used int
	}
	var insts []*wasmInstance
	for k := range 5 {
		inst := imageInstance(t, m, "counter", fmt.Sprint("c", k))
		if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	var slots []held
	for _, inst := range insts {
		slots = append(slots, held{inst.lm.slot, inst.lm.used})
		inst.Close(ctx)
	}
	n, charged := a.residentCounts()
	if n != 2 || charged > a.resident.budget {
		t.Fatalf("%d slots kept, %d bytes charged, want 2 within %d", n, charged, a.resident.budget)
	}
	backedBytes := func(h held) int {
		b := a.backedPages(h.slot[:h.used])
		if b == nil {
			t.Skip("the system does not say which pages are backed")
		}
		k := 0
		for _, x := range b {
			if x {
				k += pageSize
			}
		}
		return k
	}
	kept := map[uint64]bool{}
	a.mu.Lock()
	for _, s := range pool.slots {
		kept[addrOf(s.slot)] = true
	}
	a.mu.Unlock()
	for _, h := range slots {
		got := backedBytes(h)
		switch {
		case kept[addrOf(h.slot)] && got == 0:
			t.Fatal("a kept slot has no page backed")
		case !kept[addrOf(h.slot)] && got != 0:
			t.Fatalf("a slot beyond the budget keeps %d bytes backed", got)
		}
	}
	// The two sat in the pool through a whole period: the second trim gives them back.
	a.trimResident()
	a.trimResident()
	if n, charged := a.residentCounts(); n != 0 || charged != 0 {
		t.Fatalf("after trimming: %d slots, %d bytes charged; want none", n, charged)
	}
	for _, h := range slots {
		if got := backedBytes(h); got != 0 {
			t.Fatalf("a trimmed slot keeps %d bytes backed", got)
		}
	}
}

// A pool too small for one instance of a module says so in the module's activation,
// and keeps nothing; a budget under a page is refused.
func TestResidentPoolTooSmallForAnInstance(t *testing.T) {
	rt := preinitRuntime(t, func(c *RuntimeConfig) { c.InstancePoolBytes = 8 << 10 })
	arenaOrSkip(t, rt)
	ctx := context.Background()
	m, err := rt.Compile(ctx, testwasm.TinyGoBytes(t, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if m.resident.Load() != nil {
		t.Fatal("resident slots from a pool too small for one instance")
	}
	if got := m.Activation(); !strings.Contains(got, "pre-initialized image;") || !strings.Contains(got, "--instance-pool-bytes") || !strings.Contains(got, "8192") {
		t.Fatalf("activation %q, want the image and why no slot is kept", got)
	}
	cfg := defaultRuntimeConfig()
	cfg.InstancePoolBytes = 100
	if err := cfg.Validate(); err == nil {
		t.Fatal("a 100-byte instance pool was accepted")
	}
}
