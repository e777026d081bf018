package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// waitWarm waits until the arena holds at least n warm slots of h.
func waitWarm(t *testing.T, a *memArena, h *moduleHotPages, n int) {
	t.Helper()
	testutil.EventuallyNil(t, 30*time.Second, fmt.Sprintf("%d warm slots", n), func() error {
		a.mu.Lock()
		p := a.pools[h]
		have := 0
		if p != nil {
			have = len(p.slots)
		}
		a.mu.Unlock()
		if have < n {
			return fmt.Errorf("%d warm slots", have)
		}
		return nil
	})
}

// warmTestModule is a runtime with an arena and the Rust counter compiled in it.
func warmTestModule(t *testing.T) (*wasmRuntime, *memArena, *wasmModule) {
	t.Helper()
	rt, _ := newTestRuntime(t, nil)
	arena := arenaOrSkip(t, rt)
	m, err := rt.Compile(context.Background(), testwasm.RustBytes(t, "counter-rust"))
	if err != nil {
		t.Fatal(err)
	}
	return rt, arena, m
}

// A module learns from its first instance the pages of its slot that the instance's
// first message had touched, and later instances get slots with those pages backed
// (and zero): they start as new, and freeing them releases those pages. Closing the
// module, and then the runtime, gives every warm slot back.
func TestWarmSlotsHaveTheFirstActivationsPagesBacked(t *testing.T) {
	_, arena, m := warmTestModule(t)
	ctx := context.Background()
	first, err := m.Instantiate(ctx, "counter", "first")
	if err != nil {
		t.Fatal(err)
	}
	if slot, _ := arena.getWarm(&m.hot); slot != nil {
		t.Fatal("a warm slot before the module learned its pages")
	}
	if out, err := first.Receive(ctx, []byte("inc")); err != nil || string(out) != "1" {
		t.Fatalf("inc: %q %v", out, err)
	}
	runs := m.hot.runs.Load()
	if runs == nil || len(*runs) == 0 {
		t.Skipf("no pages learned (the system does not say which are backed): %v", runs)
	}
	learned := 0
	for _, r := range *runs {
		learned += r.n
	}
	if resident := residentRuns(first.lm.slot[:first.lm.used], maxHotPages); len(resident) != len(*runs) {
		t.Fatalf("learned %v, the first instance's slot has %v backed", *runs, resident)
	}
	// The next instance finds the pool empty and starts filling it.
	second, err := m.Instantiate(ctx, "counter", "second")
	if err != nil {
		t.Fatal(err)
	}
	waitWarm(t, arena, &m.hot, warmSlotsPerModule/2)
	slot, extent := arena.getWarm(&m.hot)
	if slot == nil {
		t.Fatal("no warm slot from a filled pool")
	}
	backed := 0
	for _, r := range residentRuns(slot, maxHotPages) {
		backed += r.n
	}
	if backed != learned {
		t.Fatalf("a warm slot has %d pages backed, want the %d learned", backed, learned)
	}
	for k, b := range slot[:extent] {
		if b != 0 {
			t.Fatalf("byte %d of a warm slot is %#x, want 0", k, b)
		}
	}
	arena.put(slot, extent)
	waitWarm(t, arena, &m.hot, 1)
	third, err := m.Instantiate(ctx, "counter", "third")
	if err != nil {
		t.Fatal(err)
	}
	if third.lm == nil || third.lm.used < extent {
		t.Fatalf("an instance in a warm slot releases %d bytes when freed, want at least %d", third.lm.used, extent)
	}
	if out, err := third.Receive(ctx, []byte("inc")); err != nil || string(out) != "1" {
		t.Fatalf("inc in a warm slot: %q %v, want 1", out, err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	arena.fillers.Wait()
	if live, _, _ := arena.counts(); live != 3 {
		t.Fatalf("%d slots live with 3 instances and the module closed, want 3", live)
	}
	for _, inst := range []*wasmInstance{first, second, third} {
		inst.Close(ctx)
	}
	if live, _, _ := arena.counts(); live != 0 {
		t.Fatalf("%d slots live after every instance closed, want 0", live)
	}
}

// Closing the runtime while a module holds warm slots unmaps the arena once its
// instances are gone: the warm slots do not keep it.
func TestRuntimeCloseForgetsWarmSlots(t *testing.T) {
	rt, arena, m := warmTestModule(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		inst, err := m.Instantiate(ctx, "counter", id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
			t.Fatal(err)
		}
		inst.Close(ctx)
	}
	if runs := m.hot.runs.Load(); runs == nil || len(*runs) == 0 {
		t.Skip("no pages learned here")
	}
	waitWarm(t, arena, &m.hot, 1)
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if live, _, chunks := arena.counts(); live != 0 || chunks != 0 {
		t.Fatalf("after the runtime closed: %d slots live, %d chunks mapped, want none", live, chunks)
	}
}

// A freed instance's slot goes back to its module's warm slots when they have room: the
// learned pages zeroed in place and still backed, the rest of what the instance used
// given back, and the next activation gets it.
func TestAFreedInstancesSlotGoesBackToTheWarmSlotsZeroed(t *testing.T) {
	_, arena, m := warmTestModule(t)
	ctx := context.Background()
	first := mustInstantiate(t, m, "counter", "first")
	if _, err := first.Receive(ctx, []byte("inc")); err != nil {
		t.Fatal(err)
	}
	runs := m.hot.runs.Load()
	if runs == nil || len(*runs) == 0 {
		t.Skip("no pages learned here")
	}
	mustInstantiate(t, m, "counter", "second") // starts the fill
	waitWarm(t, arena, &m.hot, warmSlotsPerModule)
	arena.fillers.Wait()
	// Room for one: a slot taken out leaves 7, no refill.
	taken, extent := arena.getWarm(&m.hot)
	defer arena.put(taken, extent)

	inst, err := m.Instantiate(ctx, "counter", "recycled")
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3; k++ {
		if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	slot, used := inst.lm.slot, inst.lm.used
	inst.Close(ctx)

	got, gotExtent := arena.getWarm(&m.hot)
	if got == nil || &got[0] != &slot[0] {
		t.Fatal("the freed instance's slot is not the next warm slot")
	}
	defer arena.put(got, gotExtent)
	// Which pages are backed first: reading one that is not maps the zero page.
	backed := residentRuns(got[:max(used, gotExtent)], maxHotPages)
	if len(backed) != len(*runs) {
		t.Fatalf("recycled slot has %v backed, want the learned %v", backed, *runs)
	}
	for k := range backed {
		if backed[k] != (*runs)[k] {
			t.Fatalf("recycled slot has %v backed, want the learned %v", backed, *runs)
		}
	}
	for k, b := range got[:max(used, gotExtent)] {
		if b != 0 {
			t.Fatalf("byte %d of the recycled slot is %#x, want 0", k, b)
		}
	}
	// An instance in it starts as new.
	again := mustInstantiate(t, m, "counter", "again")
	if out, err := again.Receive(ctx, []byte("inc")); err != nil || string(out) != "1" {
		t.Fatalf("inc in a recycled slot: %q %v, want 1", out, err)
	}
}
