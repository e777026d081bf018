package sharding

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// abilityStore is a MemoryStateStore with the optional abilities: batch saves (counted),
// and what an external store tells a new coordinator.
type abilityStore struct {
	*MemoryStateStore
	batches, batched, singles atomic.Int64
}

func (a *abilityStore) Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error {
	a.singles.Add(1)
	return a.MemoryStateStore.Save(ctx, key, epoch, state)
}

func (a *abilityStore) SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []StateSave) error {
	a.batches.Add(1)
	a.batched.Add(int64(len(saves)))
	m := a.MemoryStateStore
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fence(shardKey{typ, shard}, epoch); err != nil {
		return err
	}
	for _, s := range saves {
		m.state[EntityKey{Type: typ, Shard: shard, ID: s.ID}] = append([]byte{}, s.State...)
	}
	return nil
}

func (a *abilityStore) RememberedShards(ctx context.Context) (map[string][]int, error) {
	m := a.MemoryStateStore
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]int{}
	for k, ids := range m.remembered {
		if len(ids) > 0 {
			out[k.typ] = append(out[k.typ], k.shard)
		}
	}
	return out, nil
}

func (a *abilityStore) MaxEpochs(ctx context.Context) (map[string]uint64, error) {
	m := a.MemoryStateStore
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]uint64{}
	for k, e := range m.epochs {
		out[k.typ] = max(out[k.typ], e)
	}
	return out, nil
}

// decorated is a decorator around a store (as metrics would be) that passes its
// abilities on through Unwrap.
type decorated struct{ StateStore }

func (d decorated) Unwrap() StateStore { return d.StateStore }

func TestStateStoreAsFindsAbilitiesThroughDecorators(t *testing.T) {
	inner := &abilityStore{MemoryStateStore: NewMemoryStateStore()}
	if _, ok := StateStoreAs[BatchStateStore](decorated{decorated{inner}}); !ok {
		t.Fatal("the batch store behind two decorators not found")
	}
	if _, ok := StateStoreAs[BatchStateStore](NewMemoryStateStore()); ok {
		t.Fatal("the memory store has no batch saves")
	}
	if _, ok := StateStoreAs[ExternalStateStore](nil); ok {
		t.Fatal("nil has no abilities")
	}
}

// A cluster whose coordinator state is new, on a store that holds epochs and
// remembered entities from an earlier cluster (a database that outlived it):
// allocations start above the stored epochs, so the new cluster's saves are not
// refused as stale, and the remembered entities restart by themselves.
func TestCoordinatorAllocatesAboveTheStoresEpochs(t *testing.T) {
	store := &abilityStore{MemoryStateStore: NewMemoryStateStore()}
	ctx := context.Background()
	for shard := 0; shard < 10; shard++ {
		if err := store.MemoryStateStore.Save(ctx, EntityKey{Type: "durable", Shard: shard, ID: "old"}, 40, []byte("7|")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"r1", "r2"} {
		if err := store.MemoryStateStore.Remember(ctx, EntityKey{Type: "remember", Shard: abiShard(id, 10), ID: id}, 40, true); err != nil {
			t.Fatal(err)
		}
	}
	tc := newTestCluster(t, 2, withConfig(func(c *Config) { c.States = decorated{store} }))
	// The shards with remembered entities are allocated without a message, once the
	// members know the type (as a deploy tells them).
	for _, n := range tc.nodes {
		if err := n.sharding.StartType(n.types.settings["remember"]); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the remembered entities restarted", func() bool {
		return activeOn(tc, "remember/r1") && activeOn(tc, "remember/r2")
	})
	for i := 0; i < 10; i++ {
		id := "n" + strconv.Itoa(i)
		// durable checkpoints every message: a stale allocation fails the ask.
		mustAsk(t, tc.nodes[i%2], "durable", id, "inc")
		if got := mustAsk(t, tc.nodes[(i+1)%2], "durable", id, "inc"); got != "2" {
			t.Fatalf("%s = %s", id, got)
		}
		st, err := store.Load(ctx, EntityKey{Type: "durable", Shard: abiShard(id, 10), ID: id})
		if err == nil {
			var b Base
			b, err = DecodeBase(st)
			st = b.State
		}
		if err != nil || string(st) != "2|" {
			t.Fatalf("saved state of %s: %q %v", id, st, err)
		}
	}
	if got := mustAsk(t, tc.nodes[0], "durable", "old", "get"); got != "7" {
		t.Fatalf("the earlier cluster's entity: %s", got)
	}
}

// A graceful leave hands each shard off with its entities' snapshots in batches when
// the store has them: no single save, every entity's state moves. (Under the journal,
// the default, a handoff saves no base: the records move the state.)
func TestHandOffSavesInBatches(t *testing.T) {
	store := &abilityStore{MemoryStateStore: NewMemoryStateStore()}
	tc := newTestCluster(t, 3, withConfig(func(c *Config) { c.States = decorated{store} }))
	want := map[string]int{}
	for i := 0; i < 60; i++ {
		id := "m" + strconv.Itoa(i)
		for k := 0; k <= i%3; k++ {
			mustAsk(t, tc.nodes[0], "passive", id, "inc")
		}
		want[id] = i%3 + 1
	}
	if n := store.singles.Load(); n != 0 {
		t.Fatalf("%d single saves before the leave", n)
	}
	tc.stop(tc.nodes[2], true)
	tc.waitMembers()
	if store.batches.Load() == 0 || store.singles.Load() != 0 {
		t.Fatalf("the handoff made %d batch saves (%d snapshots) and %d single saves", store.batches.Load(), store.batched.Load(), store.singles.Load())
	}
	t.Logf("%d snapshots in %d batches", store.batched.Load(), store.batches.Load())
	for id, n := range want {
		if got := mustAsk(t, tc.nodes[1], "passive", id, "get"); got != strconv.Itoa(n) {
			t.Fatalf("%s = %s after the leave, want %d", id, got, n)
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
}
