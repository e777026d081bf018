package host

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// checkpointFixture is a one-member node with the counter deployed under typ, and an
// in-memory state store behind the node's delta store, driven as sharding's
// every-message checkpoint drives them (Snapshot, Save, StateSaved).
type checkpointFixture struct {
	t     testing.TB
	n     *Node
	typ   string
	mem   *sharding.MemoryStateStore
	store sharding.StateStore
}

func newCheckpointFixture(t testing.TB, wasm []byte) *checkpointFixture {
	t.Helper()
	n := startNode(t, nil, nil)
	if err := n.Membership().WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Deploy(context.Background(), wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
		t.Fatal(err)
	}
	mem := sharding.NewMemoryStateStore()
	return &checkpointFixture{t: t, n: n, typ: "counter", mem: mem, store: newDeltaStates(mem)}
}

func (f *checkpointFixture) key(id string) sharding.EntityKey {
	return sharding.EntityKey{Type: f.typ, Shard: 0, ID: id}
}

// activate makes the entity from what the store holds (nil: new).
func (f *checkpointFixture) activate(id string) *wasmEntity {
	f.t.Helper()
	state, err := f.store.Load(context.Background(), f.key(id))
	if errors.Is(err, sharding.ErrNoState) {
		state, err = nil, nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	e, err := f.n.newEntity(context.Background(), f.typ, id, state)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { e.Stop(context.Background()) })
	return e
}

// checkpoint saves the entity's state as an every-message checkpoint does; it returns
// the kind of state saved.
func (f *checkpointFixture) checkpoint(e *wasmEntity, id string) byte {
	f.t.Helper()
	state, err := e.Snapshot(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.Save(context.Background(), f.key(id), 1, state); err != nil {
		f.t.Fatal(err)
	}
	e.StateSaved()
	return stateKind(state)
}

func send(t testing.TB, e *wasmEntity, msg string) string {
	t.Helper()
	out, err := e.Receive(context.Background(), []byte(msg))
	if err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	return string(out)
}

var checkpointGuests = []struct {
	name string
	wasm func(testing.TB) []byte
}{
	{"go", func(tb testing.TB) []byte { return testwasm.BytesWith(tb, "counter", testwasm.TransparentTag) }},
	{"tinygo", func(tb testing.TB) []byte {
		return testwasm.TinyGoBytesWith(tb, "counter", append(append([]string(nil), testwasm.TinyGoFlags...), testwasm.TransparentTag))
	}},
}

// TestDeltaCheckpointsRestoreTheExactMemory: every-message checkpoints of a counter are
// a base and then deltas; after each, the base with the saved delta restores the
// instance's memory byte for byte, its globals and clocks, and the count; a base again
// once the chain is at deltaMaxChain.
func TestDeltaCheckpointsRestoreTheExactMemory(t *testing.T) {
	for _, g := range checkpointGuests {
		t.Run(g.name, func(t *testing.T) {
			f := newCheckpointFixture(t, g.wasm(t))
			e := f.activate("c")
			kinds := map[byte]int{}
			for k := 1; k <= 40; k++ {
				if got := send(t, e, "inc"); got != strconv.Itoa(k) {
					t.Fatalf("inc %d: %s", k, got)
				}
				if k == 31 {
					e.cp.seq = deltaMaxChain // the chain is long: this checkpoint is a base
				}
				kind := f.checkpoint(e, "c")
				kinds[kind]++
				if k == 1 && kind != stateBase || k == 31 && kind != stateBase {
					t.Fatalf("checkpoint %d is of kind %q, want a base", k, kind)
				}
				if k%10 != 0 && k != 31 {
					continue
				}
				state, err := f.store.Load(context.Background(), f.key("c"))
				if err != nil {
					t.Fatal(err)
				}
				kind, payload, _, err := decodeState(state)
				if err != nil {
					t.Fatal(err)
				}
				inst, chain, err := f.n.restoreState(context.Background(), e.mod, f.typ, "c", kind, payload)
				if err != nil {
					t.Fatalf("checkpoint %d: %v", k, err)
				}
				if chain == nil || (k != 31) != (chain.delta != nil) {
					t.Fatalf("checkpoint %d restored from %+v", k, chain)
				}
				want, got := memoryOf(t, e.inst), memoryOf(t, inst)
				if !bytes.Equal(want, got) {
					t.Fatalf("checkpoint %d: memories of %d and %d bytes differ", k, len(want), len(got))
				}
				ws, _ := e.inst.Snapshot()
				gs, _ := inst.Snapshot()
				if ws.Clock != gs.Clock || len(ws.Globals) != len(gs.Globals) {
					t.Fatalf("checkpoint %d: clocks %+v and %+v", k, ws.Clock, gs.Clock)
				}
				for j := range ws.Globals {
					if ws.Globals[j] != gs.Globals[j] {
						t.Fatalf("checkpoint %d: global %+v restored as %+v", k, ws.Globals[j], gs.Globals[j])
					}
				}
				inst.Close(context.Background())
			}
			if kinds[stateBase] != 2 || kinds[stateDelta] != 38 {
				t.Fatalf("checkpoints by kind: %v", kinds)
			}
			// A new incarnation goes on with deltas against the base it restored from.
			e.Stop(context.Background())
			e2 := f.activate("c")
			if got := send(t, e2, "inc"); got != "41" {
				t.Fatalf("after activation: %s", got)
			}
			if kind := f.checkpoint(e2, "c"); kind != stateDelta {
				t.Fatalf("first checkpoint after activation is of kind %q", kind)
			}
			e2.Stop(context.Background())
			e3 := f.activate("c")
			if got := send(t, e3, "get"); got != "41" {
				t.Fatalf("after a second activation: %s", got)
			}
		})
	}
}

// TestDeltaCheckpointAfterAFailedSaveIsABase: a base the store did not acknowledge
// is not chained to; the next checkpoint is a base again, and deltas follow it.
func TestDeltaCheckpointAfterAFailedSaveIsABase(t *testing.T) {
	f := newCheckpointFixture(t, testwasm.BytesWith(t, "counter", testwasm.TransparentTag))
	e := f.activate("c")
	send(t, e, "inc")
	if _, err := e.Snapshot(context.Background()); err != nil { // saved nowhere, not acknowledged
		t.Fatal(err)
	}
	send(t, e, "inc")
	if kind := f.checkpoint(e, "c"); kind != stateBase {
		t.Fatalf("after an unacknowledged base: kind %q", kind)
	}
	send(t, e, "inc")
	if _, err := e.Snapshot(context.Background()); err != nil { // a delta, not acknowledged
		t.Fatal(err)
	}
	send(t, e, "inc")
	if kind := f.checkpoint(e, "c"); kind != stateDelta {
		t.Fatalf("after an unacknowledged delta: kind %q", kind)
	}
	e.Stop(context.Background())
	if got := send(t, f.activate("c"), "get"); got != "4" {
		t.Fatalf("restored count %s, want 4", got)
	}
}

// TestDeltaOfAnotherBaseIsNeverApplied: the store's Load returns a base alone when the
// delta beside it is of an earlier base, fails (ErrBadSnapshot) when the delta names
// another base of its generation or a later one, and a corrupted delta or a chain whose
// delta is not of its base fails to restore with ErrBadSnapshot.
func TestDeltaOfAnotherBaseIsNeverApplied(t *testing.T) {
	f := newCheckpointFixture(t, testwasm.BytesWith(t, "counter", testwasm.TransparentTag))
	ctx := context.Background()
	e := f.activate("c")
	save := func() []byte {
		send(t, e, "inc")
		state, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.store.Save(ctx, f.key("c"), 1, state); err != nil {
			t.Fatal(err)
		}
		e.StateSaved()
		return state
	}
	base1 := save()
	delta1 := save()
	if stateKind(base1) != stateBase || stateKind(delta1) != stateDelta {
		t.Fatalf("kinds %q %q", stateKind(base1), stateKind(delta1))
	}
	e.cp.seq = deltaMaxChain
	base2 := save()
	delta2 := save()
	raw := func(id string, state []byte) {
		if err := f.mem.Save(ctx, f.key(id), 1, state); err != nil {
			t.Fatal(err)
		}
	}
	load := func() ([]byte, error) { return f.store.Load(ctx, f.key("c")) }

	// A delta of the earlier generation beside the new base: the base alone.
	raw(deltaIDPrefix+"c", delta1)
	if got, err := load(); err != nil || !bytes.Equal(got, base2) {
		t.Fatalf("base 2 beside delta 1: %q %v", stateKind(got), err)
	}
	// The new delta beside the old base: a later generation, never applied.
	raw("c", base1)
	raw(deltaIDPrefix+"c", delta2)
	if _, err := load(); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("base 1 beside delta 2: %v", err)
	}
	// Another base of the same generation (another writer's): never applied.
	other := newBaseName(0) // generation 1, another nonce
	_, b1, _, _ := decodeState(base1)
	_, snap1, err := splitBase(b1)
	if err != nil {
		t.Fatal(err)
	}
	raw("c", encodeBaseState(other, snap1, entityExtras{}))
	raw(deltaIDPrefix+"c", delta1)
	if _, err := load(); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a base of generation 1 beside a delta of another: %v", err)
	}
	// A chain whose delta is not of its base, as a state: refused on restore.
	if _, _, err := f.n.restoreState(ctx, e.mod, f.typ, "c", stateChain, encodeChain(base1, delta2)[len(stateMagic)+3:]); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restoring base 1 with delta 2: %v", err)
	}
	// A corrupted delta beside its base: the checksum fails the activation.
	raw("c", base2)
	bad := bytes.Clone(delta2)
	bad[len(bad)-10] ^= 0x40
	raw(deltaIDPrefix+"c", bad)
	state, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.n.newEntity(ctx, f.typ, "c", state); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("activation from a corrupted delta: %v", err)
	}
	// The intact pair restores.
	raw(deltaIDPrefix+"c", delta2)
	e.Stop(ctx)
	if got := send(t, f.activate("c"), "get"); got != "4" {
		t.Fatalf("restored count %s, want 4", got)
	}
	// No entity reads or writes another's delta record.
	if _, err := f.store.Load(ctx, f.key(deltaIDPrefix+"c")); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("load of a delta record as an entity: %v", err)
	}
	if err := f.store.Save(ctx, f.key(deltaIDPrefix+"c"), 1, base1); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("save of a delta record as an entity: %v", err)
	}
}

// FuzzUnmarshalDelta: malformed deltas are refused with ErrBadSnapshot, never a panic
// or a huge allocation; one that decodes encodes back to a delta that decodes alike,
// and applying it to a base either fails cleanly or gives a valid snapshot.
func FuzzUnmarshalDelta(f *testing.F) {
	digest := "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	blk := bytes.Repeat([]byte{7}, deltaBlockSize)
	d := &snapshotDelta{ModuleDigest: digest, Base: snapshotBase{Gen: 3, Nonce: [16]byte{1, 2}}, Seq: 2, MemoryPages: 2,
		Blocks:  []deltaBlock{{Index: 1, Data: blk}, {Index: 17, Data: make([]byte, deltaBlockSize)}},
		Globals: []snapshotGlobal{{Index: 0, Type: 0x7f, Bits: 5}}, Clock: snapshotClock{Monotonic: 9, Wall: 10}}
	good, err := d.marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(deltaMagic))
	base := &instanceSnapshot{Version: snapshotVersion, ModuleDigest: digest, MemoryPages: 1,
		Pages: []snapshotPage{{Index: 0, Data: bytes.Repeat([]byte{1}, wasmPageSize)}}, Globals: []snapshotGlobal{{Index: 0, Type: 0x7f}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := unmarshalDelta(b, 64)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error not ErrBadSnapshot: %v", err)
			}
			return
		}
		again, err := d.marshal()
		if err != nil {
			t.Fatal(err)
		}
		d2, err := unmarshalDelta(again, 64)
		if err != nil || d2.Base != d.Base || d2.Seq != d.Seq || len(d2.Blocks) != len(d.Blocks) {
			t.Fatalf("re-encoded delta: %v", err)
		}
		s, err := applyDelta(base, d)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("apply error not ErrBadSnapshot: %v", err)
			}
			return
		}
		if err := s.validate(64); err != nil {
			t.Fatalf("applied delta gives an invalid snapshot: %v", err)
		}
	})
}

// batchMemoryStore is the in-memory store with batch saves (each item a Save under
// one fencing check), as a database store has them.
type batchMemoryStore struct {
	*sharding.MemoryStateStore
	batches int
}

func (b *batchMemoryStore) SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []sharding.StateSave) error {
	b.batches++
	for _, sv := range saves {
		if err := b.Save(ctx, sharding.EntityKey{Type: typ, Shard: shard, ID: sv.ID}, epoch, sv.State); err != nil {
			return err
		}
	}
	return nil
}

// TestDeltaInABatchSaveGoesToTheDeltaRecord: a handoff's batch of saves puts a delta
// under the entity's delta record and a base under the entity's key, and the pair
// restores the entity.
func TestDeltaInABatchSaveGoesToTheDeltaRecord(t *testing.T) {
	f := newCheckpointFixture(t, testwasm.BytesWith(t, "counter", testwasm.TransparentTag))
	ctx := context.Background()
	inner := &batchMemoryStore{MemoryStateStore: sharding.NewMemoryStateStore()}
	f.mem, f.store = inner.MemoryStateStore, newDeltaStates(inner)
	batch, ok := sharding.StateStoreAs[sharding.BatchStateStore](f.store)
	if !ok {
		t.Fatal("the delta store hides the batch saves of the store it wraps")
	}
	e := f.activate("c")
	send(t, e, "inc")
	f.checkpoint(e, "c") // the base
	send(t, e, "inc")
	state, err := e.Snapshot(ctx)
	if err != nil || stateKind(state) != stateDelta {
		t.Fatalf("snapshot for the handoff: kind %q, %v", stateKind(state), err)
	}
	if err := batch.SaveBatch(ctx, f.typ, 0, 1, []sharding.StateSave{{ID: "c", State: state}}); err != nil {
		t.Fatal(err)
	}
	if inner.batches != 1 {
		t.Fatalf("%d batches reached the store", inner.batches)
	}
	if got, err := f.mem.Load(ctx, f.key(deltaIDPrefix+"c")); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("delta record: %v", err)
	}
	e.Stop(ctx)
	if got := send(t, f.activate("c"), "get"); got != "2" {
		t.Fatalf("restored count %s, want 2", got)
	}
}

// TestDeltaStoreFencesThroughTheStoreItWraps: a region fences a shard through the
// delta store (sharding.ShardFencer, found by StateStoreAs through its Unwrap), and the
// fence holds for the delta records as for the bases: both are saves of the shard.
func TestDeltaStoreFencesThroughTheStoreItWraps(t *testing.T) {
	ctx := context.Background()
	store := newDeltaStates(sharding.NewMemoryStateStore())
	f, ok := sharding.StateStoreAs[sharding.ShardFencer](store)
	if !ok {
		t.Fatal("the delta store hides the fence of the store it wraps")
	}
	if err := f.FenceShard(ctx, "counter", 2, 5); err != nil {
		t.Fatal(err)
	}
	key := sharding.EntityKey{Type: "counter", Shard: 2, ID: "c"}
	if err := store.Save(ctx, key, 4, []byte("base")); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a save at epoch 4 after a fence at 5: %v, want ErrStaleEpoch", err)
	}
	if err := store.Save(ctx, key, 5, []byte("base")); err != nil {
		t.Fatal(err)
	}
}
