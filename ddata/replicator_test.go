package ddata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
)

var quietLog = slog.New(slog.DiscardHandler)

// replNode is one member with a replicator.
type replNode struct {
	*clustertest.Member
	r     *Replicator
	store DurableStore
}

// replCluster is a test cluster whose members run replicators.
type replCluster struct {
	*clustertest.Cluster
	tb     testing.TB
	nodes  []*replNode
	mutate func(*ReplicatorConfig)
}

func newReplCluster(tb testing.TB, n int, mutate func(*ReplicatorConfig)) *replCluster {
	tb.Helper()
	return newReplClusterWith(tb, n, clustertest.Tolerant(), mutate)
}

// newReplClusterWith starts n members with the membership lifecycle lc, each with a
// replicator (mutate changes its configuration), and waits until they are all up.
func newReplClusterWith(tb testing.TB, n int, lc cluster.CoreConfig, mutate func(*ReplicatorConfig)) *replCluster {
	tb.Helper()
	rc := &replCluster{Cluster: clustertest.New(tb, 0, clustertest.WithCore(lc)), tb: tb, mutate: mutate}
	for i := 0; i < n; i++ {
		rc.add(nil)
	}
	rc.WaitUp()
	return rc
}

// add starts a member (joining the first live one) with a replicator and an optional
// durable store; the replicator closes when the member stops.
func (rc *replCluster) add(store DurableStore) *replNode {
	rc.tb.Helper()
	m := rc.Add()
	cfg := DefaultReplicatorConfig()
	cfg.Membership, cfg.Messenger, cfg.Logger = m.Membership, m.Messenger, quietLog
	cfg.GossipInterval = 100 * time.Millisecond
	cfg.DeltaPropagationInterval = 50 * time.Millisecond
	cfg.NotifySubscribersInterval = 50 * time.Millisecond
	if store != nil {
		cfg.Store, cfg.DurableKeys = store, []string{"durable-*"}
	}
	if rc.mutate != nil {
		rc.mutate(&cfg)
	}
	r, err := NewReplicator(cfg)
	if err != nil {
		rc.tb.Fatal(err)
	}
	m.OnStop(func() { r.Close() })
	node := &replNode{Member: m, r: r, store: store}
	rc.nodes = append(rc.nodes, node)
	return node
}

// live returns the nodes whose member runs.
func (rc *replCluster) live() []*replNode {
	var out []*replNode
	for _, n := range rc.nodes {
		if !n.Stopped() {
			out = append(out, n)
		}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func incr(node NodeID, n int64) func(ReplicatedData) (ReplicatedData, ReplicatedData, error) {
	return func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		c, ok := d.(PNCounter)
		if !ok {
			return nil, nil, fmt.Errorf("not a PNCounter: %T", d)
		}
		next, delta := c.Add(node, n)
		return next, delta, nil
	}
}

func countOf(t *testing.T, d ReplicatedData) int64 {
	t.Helper()
	c, ok := d.(PNCounter)
	if !ok {
		t.Fatalf("%T is not a PNCounter", d)
	}
	return c.Count().Int64()
}

func TestReplicatorWriteLocalSpreadsByDeltasAndGossip(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	a := rc.nodes[0]
	for i := 0; i < 10; i++ {
		if _, err := a.r.Update(ctxT(t), "counter-1", PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), 1)); err != nil {
			t.Fatal(err)
		}
	}
	// You read your own writes at once.
	if d, err := a.r.Get(ctxT(t), "counter-1", ReadLocal()); err != nil || countOf(t, d) != 10 {
		t.Fatalf("own read: %v %v", d, err)
	}
	for _, n := range rc.nodes[1:] {
		testutil.Eventually(t, 5*time.Second, "the counter everywhere", func() bool {
			d, err := n.r.Get(ctxT(t), "counter-1", ReadLocal())
			return err == nil && countOf(t, d) == 10
		})
	}
}

func TestReplicatorSpreadsByGossipAloneWithoutDeltas(t *testing.T) {
	rc := newReplCluster(t, 3, func(c *ReplicatorConfig) { c.DeltaEnabled = false })
	a := rc.nodes[0]
	a.r.Update(ctxT(t), "k", GSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		s, delta := d.(GSet).Add("x")
		return s, delta, nil
	})
	for _, n := range rc.nodes[1:] {
		testutil.Eventually(t, 5*time.Second, "the set by gossip", func() bool {
			d, err := n.r.Get(ctxT(t), "k", ReadLocal())
			return err == nil && d.(GSet).Contains("x")
		})
	}
}

func TestReplicatorMajorityWriteThenMajorityReadWithOneMemberDown(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	rc.nodes[2].Crash()
	a, b := rc.nodes[0], rc.nodes[1]
	for i := 1; i <= 20; i++ {
		writer, reader := a, b
		if i%2 == 0 {
			writer, reader = b, a
		}
		if _, err := writer.r.Update(ctxT(t), "c", PNCounter{}, WriteMajority(0), incr(writer.r.SelfNodeID(), 1)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		d, err := reader.r.Get(ctxT(t), "c", ReadMajority(0))
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if got := countOf(t, d); got != int64(i) {
			t.Fatalf("after %d acknowledged majority writes a majority read gives %d", i, got)
		}
	}
}

func TestReplicatorWriteAllWithAMemberDownTimesOutButStandsLocally(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	rc.nodes[2].Crash()
	a := rc.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := a.r.Update(ctx, "c", PNCounter{}, WriteAll(), incr(a.r.SelfNodeID(), 5))
	if !errors.Is(err, ErrUpdateTimeout) {
		t.Fatalf("write all with a member down: %v", err)
	}
	if d, err := a.r.Get(ctxT(t), "c", ReadLocal()); err != nil || countOf(t, d) != 5 {
		t.Fatalf("the update does not stand locally: %v %v", d, err)
	}
	// ReadAll fails the same way; ReadLocal never does.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := a.r.Get(ctx2, "c", ReadAll()); !errors.Is(err, ErrGetFailure) {
		t.Fatalf("read all with a member down: %v", err)
	}
	for i := 0; i < 50; i++ {
		if _, err := rc.nodes[1].r.Get(context.Background(), "c", ReadLocal()); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("read local failed: %v", err)
		}
	}
}

func TestReplicatorDeleteIsFinalEverywhere(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	a, b := rc.nodes[0], rc.nodes[1]
	sub := b.r.Subscribe("gone", 8)
	defer sub.Close()
	a.r.Update(ctxT(t), "gone", Flag{}, WriteAll(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		f, delta := d.(Flag).SwitchOn()
		return f, delta, nil
	})
	if err := a.r.Delete(ctxT(t), "gone", WriteMajority(0)); err != nil {
		t.Fatal(err)
	}
	for _, n := range rc.nodes {
		testutil.Eventually(t, 5*time.Second, "the tombstone", func() bool {
			_, err := n.r.Get(ctxT(t), "gone", ReadLocal())
			return errors.Is(err, ErrDataDeleted)
		})
		if _, err := n.r.Update(ctxT(t), "gone", Flag{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
			return d, nil, nil
		}); !errors.Is(err, ErrDataDeleted) {
			t.Fatalf("update after delete: %v", err)
		}
		if err := n.r.Delete(ctxT(t), "gone", WriteLocal()); !errors.Is(err, ErrDataDeleted) {
			t.Fatalf("delete after delete: %v", err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "a Deleted notification", func() bool {
		for {
			select {
			case c := <-sub.C:
				if c.Deleted {
					return true
				}
			default:
				return false
			}
		}
	})
}

func TestReplicatorSubscribeToPrefix(t *testing.T) {
	rc := newReplCluster(t, 2, nil)
	a, b := rc.nodes[0], rc.nodes[1]
	sub := b.r.Subscribe("counter-*", 64)
	defer sub.Close()
	for _, key := range []string{"counter-a", "counter-b", "other"} {
		a.r.Update(ctxT(t), key, PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), 3))
	}
	got := map[string]int64{}
	testutil.Eventually(t, 5*time.Second, "both counters notified", func() bool {
		for {
			select {
			case c := <-sub.C:
				if c.Data != nil {
					got[c.Key] = countOf(t, c.Data)
				}
			default:
				return got["counter-a"] == 3 && got["counter-b"] == 3
			}
		}
	})
	if _, ok := got["other"]; ok {
		t.Fatal("notified of a key outside the prefix")
	}
}

func TestReplicatorRefusesATypeChangeAndKeepsTheValue(t *testing.T) {
	rc := newReplCluster(t, 1, nil)
	a := rc.nodes[0]
	a.r.Update(ctxT(t), "k", PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), 7))
	_, err := a.r.Update(ctxT(t), "k", GSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		return GSet{}, nil, nil
	})
	if !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("type change: %v", err)
	}
	_, err = a.r.Update(ctxT(t), "k", PNCounter{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		return nil, nil, errors.New("no thanks")
	})
	if !errors.Is(err, ErrModifyFailure) {
		t.Fatalf("modify failure: %v", err)
	}
	if d, _ := a.r.Get(ctxT(t), "k", ReadLocal()); countOf(t, d) != 7 {
		t.Fatalf("value changed to %v", d.Value())
	}
	if _, err := a.r.Get(ctxT(t), "missing", ReadLocal()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
}

func TestReplicatorIgnoresMalformedInputFromPeers(t *testing.T) {
	rc := newReplCluster(t, 2, nil)
	a, b := rc.nodes[0], rc.nodes[1]
	a.r.Update(ctxT(t), "k", PNCounter{}, WriteAll(), incr(a.r.SelfNodeID(), 4))
	addr := a.Addr.Transport
	garbage := [][]byte{nil, []byte("garbage"), {0xa1, 0x01, 0x02}}
	for _, topic := range []string{topicStatus, topicGossip, topicDelta} {
		for _, g := range garbage {
			b.Messenger.Tell(addr, topic, g)
		}
	}
	for _, topic := range []string{topicWrite, topicRead} {
		for _, g := range garbage {
			if _, err := b.Messenger.Request(ctxT(t), addr, topic, g); err == nil {
				t.Errorf("%s accepted %q", topic, g)
			}
		}
	}
	// A write carrying another type for the key is refused and changes nothing.
	other, _ := GSet{}.Add("x")
	env, _ := envelope{data: other}.encode()
	wbody, _ := encMode.Marshal(writeMsg{Key: "k", Envelope: env})
	if _, err := b.Messenger.Request(ctxT(t), addr, topicWrite, wbody); err == nil {
		t.Error("a write of another type was acknowledged")
	}
	// A delta of another type is dropped.
	dd, _ := Encode(other)
	dbody, _ := encMode.Marshal(deltaMsg{From: "x", Entries: []deltaEntry{{Key: "k", FromSeq: 1, ToSeq: 1, Data: dd}}})
	b.Messenger.Tell(addr, topicDelta, dbody)
	// a's handlers take b's frames one at a time, in the order sent, and handle a delta
	// before they return: the answer to a read sent after it means the delta was handled.
	rbody, _ := encMode.Marshal(readMsg{Key: "k"})
	if _, err := b.Messenger.Request(ctxT(t), addr, topicRead, rbody); err != nil {
		t.Fatalf("a read after the deltas: %v", err)
	}
	if d, err := a.r.Get(ctxT(t), "k", ReadLocal()); err != nil || countOf(t, d) != 4 {
		t.Fatalf("value after malformed input: %v %v", d, err)
	}
}

func TestReplicatorJoiningMemberReceivesEverythingInChunks(t *testing.T) {
	rc := newReplCluster(t, 2, func(c *ReplicatorConfig) { c.MaxDeltaElements = 10 })
	a := rc.nodes[0]
	for i := 0; i < 95; i++ {
		key := "k" + strconv.Itoa(i)
		a.r.Update(ctxT(t), key, PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), int64(i)))
	}
	late := rc.add(nil)
	rc.WaitUp()
	testutil.Eventually(t, 15*time.Second, "all 95 keys on the joining member", func() bool {
		return len(late.r.Keys()) == 95
	})
	for i := 0; i < 95; i++ {
		d, err := late.r.Get(ctxT(t), "k"+strconv.Itoa(i), ReadLocal())
		if err != nil || countOf(t, d) != int64(i) {
			t.Fatalf("k%d on the joining member: %v %v", i, d, err)
		}
	}
}

func TestReplicatorPrunesARemovedMembersData(t *testing.T) {
	rc := newReplClusterWith(t, 3, cluster.DefaultLocalCoreConfig(), func(c *ReplicatorConfig) {
		c.PruningInterval = 100 * time.Millisecond
		c.MaxPruningDissemination = 500 * time.Millisecond
	})
	victim := rc.nodes[2]
	gone := victim.r.SelfNodeID()
	for _, n := range rc.nodes {
		n.r.Update(ctxT(t), "g", GCounter{}, WriteAll(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
			c, delta := d.(GCounter).Increment(n.r.SelfNodeID(), 10)
			return c, delta, nil
		})
	}
	victim.Crash()
	rc.WaitUp() // downed and removed
	for _, n := range rc.live() {
		testutil.Eventually(t, 15*time.Second, "the removed member's data pruned", func() bool {
			d, err := n.r.Get(ctxT(t), "g", ReadLocal())
			if err != nil {
				return false
			}
			c := d.(GCounter)
			for _, m := range c.ModifiedByNodes() {
				if m == gone {
					return false
				}
			}
			return c.Count().Cmp(big.NewInt(30)) == 0
		})
	}
}

// Pruning does not wait for gossip: with gossip rounds an hour apart, the markers of
// many keys in many chunks go from the leader to every member, the seen marks to the
// owner and the pruned values back to everyone in a few pruning intervals. Every
// replica then holds every key without the removed member's data and with its count
// unchanged (the removed member's part collapsed into the owner's).
func TestReplicatorPrunesEveryKeyWithoutGossip(t *testing.T) {
	const keys = 120
	rc := newReplClusterWith(t, 4, cluster.DefaultLocalCoreConfig(), func(c *ReplicatorConfig) {
		c.GossipInterval = time.Hour // after the first round, none
		c.MaxDeltaElements = 10      // 12 chunks, 12 gossip rounds a step by gossip
		c.PruningInterval = 100 * time.Millisecond
		c.MaxPruningDissemination = time.Minute
	})
	victim := rc.nodes[3]
	gone := victim.r.SelfNodeID()
	for i, n := range rc.nodes {
		for k := range keys {
			if _, err := n.r.Update(ctxT(t), "p"+strconv.Itoa(k), GCounter{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
				c, delta := d.(GCounter).Increment(n.r.SelfNodeID(), uint64(i+1))
				return c, delta, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 1+2+3+4 on every key, everywhere (by deltas), before the removal.
	for _, n := range rc.nodes {
		testutil.Eventually(t, 15*time.Second, "every count at 10", func() bool {
			for k := range keys {
				d, err := n.r.Get(ctxT(t), "p"+strconv.Itoa(k), ReadLocal())
				if err != nil || d.(GCounter).Count().Cmp(big.NewInt(10)) != 0 {
					return false
				}
			}
			return true
		})
	}
	victim.Crash()
	rc.WaitUp() // downed and removed
	for _, n := range rc.live() {
		testutil.Eventually(t, 30*time.Second, "every key pruned of the removed member", func() bool {
			for k := range keys {
				d, err := n.r.Get(ctxT(t), "p"+strconv.Itoa(k), ReadLocal())
				if err != nil || d.(GCounter).NeedPruningFrom(gone) {
					return false
				}
			}
			return true
		})
		for k := range keys {
			d, err := n.r.Get(ctxT(t), "p"+strconv.Itoa(k), ReadLocal())
			if err != nil {
				t.Fatal(err)
			}
			c := d.(GCounter)
			if c.Count().Cmp(big.NewInt(10)) != 0 || slices.Contains(c.ModifiedByNodes(), gone) {
				t.Fatalf("p%d on %s after pruning: count %v, nodes %v (want 10, without %s)", k, n.r.SelfNodeID(), c.Count(), c.ModifiedByNodes(), gone)
			}
		}
	}
}

func TestReplicatorExpiresInactiveKeys(t *testing.T) {
	rc := newReplCluster(t, 2, func(c *ReplicatorConfig) {
		c.Expiry = []ExpiryRule{{Pattern: "cache-*", After: 300 * time.Millisecond}}
	})
	a := rc.nodes[0]
	sub := a.r.Subscribe("cache-*", 8)
	defer sub.Close()
	a.r.Update(ctxT(t), "cache-1", PNCounter{}, WriteAll(), incr(a.r.SelfNodeID(), 1))
	a.r.Update(ctxT(t), "keep", PNCounter{}, WriteAll(), incr(a.r.SelfNodeID(), 1))
	for _, n := range rc.nodes {
		testutil.Eventually(t, 5*time.Second, "the key expired", func() bool {
			_, err := n.r.Get(ctxT(t), "cache-1", ReadLocal())
			if err == nil {
				n.r.mu.Lock() // reading refreshed it locally: undo for the test
				n.r.lastAccess["cache-1"] = time.Time{}
				n.r.mu.Unlock()
			}
			return errors.Is(err, ErrNotFound)
		})
	}
	if _, err := a.r.Get(ctxT(t), "keep", ReadLocal()); err != nil {
		t.Fatalf("a key without a rule expired: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "an Expired notification", func() bool {
		for {
			select {
			case c := <-sub.C:
				if c.Expired {
					return true
				}
			default:
				return false
			}
		}
	})
	// An expired key can be used again.
	if _, err := a.r.Update(ctxT(t), "cache-1", PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), 2)); err != nil {
		t.Fatalf("reuse after expiry: %v", err)
	}
}

func TestReplicatorConvergesUnderConcurrentUpdatesAndPartitions(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	var wg sync.WaitGroup
	for i, n := range rc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				n.r.Update(context.Background(), "s", ORSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
					s, delta := d.(ORSet).Add(n.r.SelfNodeID(), fmt.Sprintf("%d-%d", i, k))
					return s, delta, nil
				})
				if k == 20 && i == 0 {
					rc.Network.Frames.Disconnect(rc.nodes[0].Addr.Transport, rc.nodes[1].Addr.Transport)
				}
				if k == 40 && i == 0 {
					rc.Network.Frames.Heal()
				}
			}
		}()
	}
	wg.Wait()
	for _, n := range rc.nodes {
		testutil.Eventually(t, 10*time.Second, "150 elements everywhere", func() bool {
			d, err := n.r.Get(ctxT(t), "s", ReadLocal())
			return err == nil && d.(ORSet).Len() == 150
		})
	}
}

func TestParseConsistency(t *testing.T) {
	for in, want := range map[string]int{"local": 1, "majority": 3, "majority+1": 4, "all": 5, "2": 2, "majority/5": 5} {
		c, err := ParseReadConsistency(in)
		if err != nil || c.c.needed(5) != want {
			t.Errorf("%q needs %d of 5, want %d (%v)", in, c.c.needed(5), want, err)
		}
	}
	for _, bad := range []string{"", "most", "0", "majority+x", "all/3", "-1"} {
		if _, err := ParseWriteConsistency(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// minCap raises a small cluster's majority, up to all of it.
	if n := WriteMajority(5).c.needed(3); n != 3 {
		t.Errorf("majority min 5 of 3 = %d", n)
	}
	if n := WriteMajority(5).c.needed(12); n != 7 {
		t.Errorf("majority min 5 of 12 = %d", n)
	}
}

func TestReplicatorMajorityUpdateAfterAMajorityDeleteIsRefused(t *testing.T) {
	rc := newReplCluster(t, 3, nil)
	a, c := rc.nodes[0], rc.nodes[2]
	a.r.Update(ctxT(t), "k", PNCounter{}, WriteAll(), incr(a.r.SelfNodeID(), 1))
	// c misses the delete: it reaches a and b only.
	rc.Network.Frames.Disconnect(a.Addr.Transport, c.Addr.Transport)
	rc.Network.Frames.Disconnect(rc.nodes[1].Addr.Transport, c.Addr.Transport)
	if err := a.r.Delete(ctxT(t), "k", WriteMajority(0)); err != nil {
		t.Fatal(err)
	}
	rc.Network.Frames.Heal()
	// c's majority write overlaps a member that has the tombstone.
	_, err := c.r.Update(ctxT(t), "k", PNCounter{}, WriteMajority(0), incr(c.r.SelfNodeID(), 1))
	if !errors.Is(err, ErrDataDeleted) {
		t.Fatalf("majority update after a majority delete: %v", err)
	}
	if _, err := c.r.Get(ctxT(t), "k", ReadLocal()); !errors.Is(err, ErrDataDeleted) {
		t.Fatalf("the writer did not learn of the delete: %v", err)
	}
}

func TestReplicatorDurableKeysSurviveRestartingEveryMember(t *testing.T) {
	stores := []*MemoryStore{NewMemoryStore(), NewMemoryStore()}
	rc := newReplCluster(t, 0, nil)
	start := func() []*replNode {
		var out []*replNode
		for _, s := range stores {
			out = append(out, rc.add(s))
		}
		rc.WaitUp()
		return out
	}
	nodes := start()
	nodes[0].r.Update(ctxT(t), "durable-c", PNCounter{}, WriteAll(), incr(nodes[0].r.SelfNodeID(), 9))
	nodes[1].r.Update(ctxT(t), "volatile", PNCounter{}, WriteAll(), incr(nodes[1].r.SelfNodeID(), 1))
	for _, n := range nodes {
		n.Crash()
	}
	nodes = start()
	for _, n := range nodes {
		d, err := n.r.Get(ctxT(t), "durable-c", ReadLocal())
		if err != nil || countOf(t, d) != 9 {
			t.Fatalf("durable key after restart: %v %v", d, err)
		}
		if _, err := n.r.Get(ctxT(t), "volatile", ReadLocal()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a key that is not durable came back: %v", err)
		}
	}
	// A failing store fails the update with ErrStoreFailure; the value stands in memory.
	stores[0].FailNext(errors.New("disk full"))
	_, err := nodes[0].r.Update(ctxT(t), "durable-c", PNCounter{}, WriteLocal(), incr(nodes[0].r.SelfNodeID(), 1))
	if !errors.Is(err, ErrStoreFailure) {
		t.Fatalf("store failure: %v", err)
	}
}

func TestReplicatorRefusesBadKeys(t *testing.T) {
	rc := newReplCluster(t, 1, nil)
	r := rc.nodes[0].r
	for _, key := range []string{"", string(make([]byte, MaxKeyLength+1)), "bad\xff"} {
		if _, err := r.Get(ctxT(t), key, ReadLocal()); !errors.Is(err, ErrBadKey) {
			t.Errorf("get %q: %v", key, err)
		}
		if _, err := r.Update(ctxT(t), key, GSet{}, WriteLocal(), func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) { return d, nil, nil }); !errors.Is(err, ErrBadKey) {
			t.Errorf("update %q: %v", key, err)
		}
		if err := r.Delete(ctxT(t), key, WriteLocal()); !errors.Is(err, ErrBadKey) {
			t.Errorf("delete %q: %v", key, err)
		}
	}
}

// A replicator whose clock (ReplicatorConfig.Now) is set back an hour goes on
// propagating its deltas: a round is due once an interval has passed since the last
// one, or once the clock reads before it. (Gossip rounds, which would also carry the
// write, come once an hour here.)
func TestReplicatorRoundsGoOnWhenItsClockIsSetBack(t *testing.T) {
	clock := clustertest.NewClock()
	added := 0
	rc := newReplCluster(t, 3, func(c *ReplicatorConfig) {
		c.GossipInterval = time.Hour
		if added == 0 {
			c.Now = clock.Now
		}
		added++
	})
	a := rc.nodes[0]
	spread := func(want int64) {
		t.Helper()
		if _, err := a.r.Update(ctxT(t), "c", PNCounter{}, WriteLocal(), incr(a.r.SelfNodeID(), 1)); err != nil {
			t.Fatal(err)
		}
		for _, n := range rc.nodes[1:] {
			testutil.Eventually(t, 10*time.Second, "the counter everywhere", func() bool {
				d, err := n.r.Get(ctxT(t), "c", ReadLocal())
				return err == nil && countOf(t, d) == want
			})
		}
	}
	spread(1)
	clock.SetOffset(-time.Hour)
	spread(2)
}
