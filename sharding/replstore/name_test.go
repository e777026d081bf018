package replstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
)

// newNamedSSCluster starts n members named m-0, m-1, ... (cluster.Member.Name), each on
// a fresh directory, and waits until they are all up with their rings settled.
func newNamedSSCluster(tb testing.TB, n int, mutate func(*Config)) *ssCluster {
	tb.Helper()
	c := &ssCluster{tb: tb, network: clustertest.NewNetwork(), lc: clustertest.Tolerant(), mutate: mutate}
	tb.Cleanup(c.stopAll)
	for i := 0; i < n; i++ {
		c.startNamed(filepath.Join(tb.TempDir(), "state"), "", fmt.Sprintf("state-%d", i), fmt.Sprintf("m-%d", i))
	}
	c.waitUp()
	return c
}

// recreate starts a killed member again on its directory and with its name, at a new
// gossip and transport address: a StatefulSet's pod recreated at a new IP with its
// PersistentVolume.
func (c *ssCluster) recreate(n *ssNode) *ssNode {
	c.tb.Helper()
	if !n.down {
		c.tb.Fatalf("recreate of %s, which runs", n.key())
	}
	m := c.startNamed(n.dir, "", fmt.Sprintf("state-%d", len(c.nodes)), n.name)
	if m.addr() == n.addr() {
		c.tb.Fatalf("%s recreated at its old address %s", n.key(), n.addr())
	}
	return m
}

// noneRetained fails unless every live member's ring retains no member and holds no
// replaced one.
func (c *ssCluster) noneRetained() {
	c.tb.Helper()
	for _, n := range c.live() {
		if r := n.store.Ring(); len(r.Retained) > 0 || len(r.Replaced) > 0 || !r.Settled {
			c.tb.Fatalf("%s's ring: %+v", n.key(), r)
		}
	}
}

// TestMembersRecreatedAtNewAddressesKeepTheirReplicas: members with stable names that
// come back at new addresses with their data directories are, to the ring, the members
// they were: one recreated (a pod deleted), then two at once while the third runs (a
// node restarted: two of every shard's three replicas gone together, which no handover
// round can end), then all of them; each time the rings settle over the same names,
// nobody retained, and every acknowledged write is served by every member.
func TestMembersRecreatedAtNewAddressesKeepTheirReplicas(t *testing.T) {
	c := newNamedSSCluster(t, 3, func(cfg *Config) { cfg.RepairInterval = 200 * time.Millisecond })
	states := map[sharding.EntityKey][]byte{}
	for shard := 0; shard < 12; shard++ {
		key := sharding.EntityKey{Type: "counter", Shard: shard, ID: fmt.Sprint("r-", shard)}
		states[key] = []byte(fmt.Sprint("before ", shard))
		ssSave(t, c.nodes[shard%3], key, 1, states[key])
	}
	checkAll := func(what string) {
		t.Helper()
		c.waitUp()
		c.noneRetained()
		for key, state := range states {
			for _, n := range c.live() {
				eventuallyServes(t, n, key, state) // a loaded machine's request may time out
			}
		}
		t.Logf("%s: rings settled over %v", what, c.live()[0].store.Ring().Admitted)
	}

	// One member recreated, writes acknowledged while it is gone.
	gone := c.nodes[1]
	c.kill(gone)
	back := c.recreate(gone)
	for shard := 0; shard < 12; shard += 3 {
		key := sharding.EntityKey{Type: "counter", Shard: shard, ID: fmt.Sprint("r-", shard)}
		states[key] = []byte(fmt.Sprint("while m-1 came back ", shard))
		ssSave(t, c.nodes[0], key, 1, states[key])
	}
	checkAll("m-1 recreated at " + back.addr())

	// Two of the three recreated at once while the third runs (pods on a node that
	// restarted): two of every shard's three replicas gone together, which no handover
	// round can end (by address, the third would retain both old addresses for good).
	two := c.live()[1:]
	for _, n := range two {
		c.kill(n)
	}
	for _, n := range two {
		c.recreate(n)
	}
	checkAll("two recreated at once")

	// Every member recreated at once.
	live := c.live()
	for _, n := range live {
		c.kill(n)
	}
	for _, n := range live {
		c.recreate(n)
	}
	checkAll("all recreated")
}

// TestScaleDownByTwoAtOnceKeepsEveryAcknowledgedWrite: of 5 members, 2 leave at the
// same moment (a StatefulSet scaled from 5 to 3 deletes two pods at once, each running
// its preStop leave) while writes go on through the others. The handover round lets go
// of both while they still answer, so once they are gone no member retains them (two
// retained would stop every round), and every acknowledged write is served.
func TestScaleDownByTwoAtOnceKeepsEveryAcknowledgedWrite(t *testing.T) {
	c := newNamedSSCluster(t, 5, func(cfg *Config) { cfg.RepairInterval = 200 * time.Millisecond })
	var mu sync.Mutex
	acked := map[sharding.EntityKey][]byte{}
	// failed: the states of saves that failed since the key's last acknowledged one;
	// any of them may have reached a replica, and be read instead.
	failed := map[sharding.EntityKey][][]byte{}
	for shard := 0; shard < 30; shard++ {
		key := sharding.EntityKey{Type: "counter", Shard: shard, ID: fmt.Sprint("s-", shard)}
		acked[key] = []byte(fmt.Sprint("v0 ", shard))
		ssSave(t, c.nodes[shard%5], key, 1, acked[key])
	}
	leaving, staying := c.nodes[3:], c.nodes[:3]

	// Writes through the members that stay, until both have left.
	stop := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := sharding.EntityKey{Type: "counter", Shard: i % 30, ID: fmt.Sprint("s-", i%30)}
			state := []byte(fmt.Sprint("v", i, " ", i%30))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := staying[i%3].store.Save(ctx, key, 1, state)
			cancel()
			mu.Lock()
			if err == nil {
				acked[key], failed[key] = state, nil
			} else {
				failed[key] = append(failed[key], state)
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, sharding.ErrStoreUnavailable) {
				t.Errorf("save %v: %v", key, err)
				return
			}
		}
	}()

	var leaves sync.WaitGroup
	for _, n := range leaving {
		leaves.Add(1)
		go func() {
			defer leaves.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := n.ms.Leave(ctx); err != nil {
				t.Errorf("%s leaving: %v", n.key(), err)
			}
		}()
	}
	leaves.Wait()
	for _, n := range leaving {
		if !n.ms.View().Exited {
			t.Fatalf("%s did not exit", n.key())
		}
		c.kill(n)
	}
	for _, n := range leaving {
		c.waitGone(n.addr())
	}
	close(stop)
	writes.Wait()
	if t.Failed() {
		return
	}
	c.waitRing()
	c.noneRetained()
	mu.Lock()
	defer mu.Unlock()
	nFailed := 0
	for key, state := range acked {
		nFailed += len(failed[key])
		for _, n := range staying {
			var got []byte
			testutil.EventuallyNil(t, 60*time.Second, fmt.Sprint("load of ", key), func() error {
				var err error
				if got, err = n.store.Load(ssCtx(t), key); err != nil && !errors.Is(err, sharding.ErrStoreUnavailable) {
					t.Fatalf("load %v via %s: %v", key, n.key(), err)
				}
				return err // a loaded machine's request may time out
			})
			if !bytes.Equal(got, state) && !slices.ContainsFunc(failed[key], func(f []byte) bool { return bytes.Equal(got, f) }) {
				t.Fatalf("load %v via %s: %q, want the last acknowledged %q (or a failed save's: %q)", key, n.key(), got, state, failed[key])
			}
			acked[key] = got // what a read returned, every replica holds once repaired
		}
	}
	t.Logf("%d saves not acknowledged while two members left", nFailed)
	testutil.EventuallyNil(t, 60*time.Second, "replicas placed", func() error {
		for key, state := range acked {
			if got := c.holders(key, state); len(got) != 3 {
				return fmt.Errorf("%v held by %v", key, got)
			}
		}
		return nil
	})
}
