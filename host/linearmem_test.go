package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// arenaOrSkip returns a runtime's arena, skipping where the system has none.
func arenaOrSkip(t *testing.T, rt *wasmRuntime) *memArena {
	t.Helper()
	if _, err := reserveMemory(1 << 16); err != nil {
		t.Skipf("no linear-memory arena here: %v", err)
	}
	return rt.arena
}

func (a *memArena) counts() (live, free, chunks int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live, len(a.free), len(a.chunks)
}

// A slot handed out again reads as zero, whatever its last instance wrote; the arena
// unmaps its chunks once closed and the last slot is back.
func TestArenaSlotsComeBackZeroed(t *testing.T) {
	if _, err := reserveMemory(1 << 16); err != nil {
		t.Skipf("no linear-memory arena here: %v", err)
	}
	a := newMemArena(2<<16, 0)
	s := a.get()
	if len(s) != 2<<16 {
		t.Fatalf("slot of %d bytes, want %d", len(s), 2<<16)
	}
	for k := range s {
		s[k] = 0xa5
	}
	first := &s[0]
	a.put(s, len(s))
	s = a.get()
	if &s[0] != first {
		t.Fatal("the slot just put back is not the next one handed out")
	}
	for k, b := range s {
		if b != 0 {
			t.Fatalf("byte %d of a slot handed out again is %#x, want 0", k, b)
		}
	}
	other := a.get()
	a.close()
	if a.get() != nil {
		t.Fatal("a closed arena handed out a slot")
	}
	a.put(other, 0)
	if _, _, chunks := a.counts(); chunks != 1 {
		t.Fatalf("%d chunks mapped with a slot still out, want 1", chunks)
	}
	a.put(s, 1)
	if live, _, chunks := a.counts(); live != 0 || chunks != 0 {
		t.Fatalf("after the last slot: %d live, %d chunks, want none", live, chunks)
	}
}

// An instance's linear memory is a slot of its runtime's arena, held while the instance
// lives and given back when it is closed: a passivated entity holds no memory.
func TestInstanceMemoryIsAnArenaSlotUntilClosed(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	arena := arenaOrSkip(t, rt)
	m, err := rt.Compile(context.Background(), testwasm.RustBytes(t, "abitest-rust"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "abitest", "slot")
	if err != nil {
		t.Fatal(err)
	}
	if inst.lm == nil {
		t.Fatal("the instance's memory is not in the arena")
	}
	if out, err := inst.Receive(ctx, []byte("count")); err != nil {
		t.Fatalf("count: %q %v", out, err)
	}
	if live, _, _ := arena.counts(); live != 1 {
		t.Fatalf("%d slots live with one instance, want 1", live)
	}
	// A snapshot reads the slot, and restores into another.
	snap, err := inst.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	if live, _, _ := arena.counts(); live != 0 {
		t.Fatalf("%d slots live after Close, want 0", live)
	}
	again, err := m.Restore(ctx, "abitest", "slot", snap)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	if out, err := again.Receive(ctx, []byte("count")); err != nil || string(out) != "2" {
		t.Fatalf("count after restoring into a reused slot: %q %v, want 2", out, err)
	}
}

// wasmRuntime.Close from another goroutine during a call stops the guest and waits for the
// call to end before it releases the memory (and unmaps the arena): the process does not
// fault, wazero's close does not race with the call, and the stopped call fails with
// ErrRuntimeClosed, as do later calls of an instance that was idle.
func TestRuntimeCloseDuringACallReleasesMemoryAfterIt(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	arena := arenaOrSkip(t, rt)
	m, err := rt.Compile(context.Background(), testwasm.RustBytes(t, "abitest-rust"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "abitest", "loop")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := inst.Receive(ctx, []byte("loop"))
		done <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the call to start", func() bool { return rt.inflight.Load() > 0 })
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrRuntimeClosed) {
			t.Fatalf("loop after wasmRuntime.Close: %v, want ErrRuntimeClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the loop went on after wasmRuntime.Close")
	}
	if live, _, chunks := arena.counts(); live != 0 || chunks != 0 {
		t.Fatalf("after the call: %d slots live, %d chunks mapped, want none", live, chunks)
	}
	if _, err := inst.Receive(ctx, []byte("count")); !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("a message to the stopped instance: %v, want ErrInstanceClosed", err)
	}
	// An instance that was idle when its runtime closed fails its next call too.
	rt2, _ := newTestRuntime(t, nil)
	m2, err := rt2.Compile(ctx, testwasm.RustBytes(t, "abitest-rust"))
	if err != nil {
		t.Fatal(err)
	}
	idle, err := m2.Instantiate(ctx, "abitest", "idle")
	if err != nil {
		t.Fatal(err)
	}
	rt2.Close(ctx)
	if _, err := idle.Snapshot(); !errors.Is(err, ErrRuntimeClosed) {
		t.Fatalf("a snapshot of an idle instance of a closed runtime: %v, want ErrRuntimeClosed", err)
	}
	if _, err := idle.Receive(ctx, []byte("count")); !errors.Is(err, ErrRuntimeClosed) {
		t.Fatalf("a message to an idle instance of a closed runtime: %v, want ErrRuntimeClosed", err)
	}
}
