package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
)

// keyCluster is a test cluster whose members have key managers that record what they
// persist.
type keyCluster struct {
	*clustertest.Cluster
	managers  []*cluster.KeyManager
	mu        sync.Mutex
	persisted map[int][][]byte
	keys      [][]byte // the gossip keys of the next member: primary first
}

func newKeyCluster(t *testing.T, n int, key []byte) *keyCluster {
	kc := &keyCluster{persisted: map[int][][]byte{}, keys: [][]byte{key}}
	kc.Cluster = newCluster(t, 0, clustertest.WithConfig(func(_ int, c *cluster.MembershipConfig) {
		c.GossipKey, c.GossipKeys = kc.keys[0], kc.keys[1:]
	}))
	for i := 0; i < n; i++ {
		kc.addWithKeys(t, key)
	}
	return kc
}

func (kc *keyCluster) addWithKeys(t *testing.T, key []byte, more ...[]byte) *clustertest.Member {
	kc.keys = append([][]byte{key}, more...)
	m := kc.Add()
	i := m.Index
	km, err := cluster.NewKeyManager(cluster.KeyManagerConfig{Membership: m.Membership, Messenger: m.Messenger, Logger: quiet,
		Persist: func(keys [][]byte) error {
			kc.mu.Lock()
			defer kc.mu.Unlock()
			kc.persisted[i] = keys
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	kc.managers = append(kc.managers, km)
	return m
}

func wantKeys(t *testing.T, step string, r cluster.KeyResponse, err error, members int, keys, primary map[string]int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	if r.Members != members || r.Responses != members || len(r.Failures) != 0 {
		t.Fatalf("%s: %d members, %d responses, failures %v", step, r.Members, r.Responses, r.Failures)
	}
	if fmt.Sprint(r.Keys) != fmt.Sprint(keys) || fmt.Sprint(r.PrimaryKeys) != fmt.Sprint(primary) {
		t.Fatalf("%s: keys %v primary %v, want %v and %v", step, r.Keys, r.PrimaryKeys, keys, primary)
	}
}

// TestKeyRotationAcrossTheCluster: install a new gossip key, use it, remove the old one,
// each step on every member through one of them; the members stay up throughout; a
// member with the new key alone can join afterwards and one with the old key alone
// cannot; each member persisted its keyring; bad steps fail with reasons.
func TestKeyRotationAcrossTheCluster(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	id1, id2 := cluster.KeyID(k1), cluster.KeyID(k2)
	kc := newKeyCluster(t, 3, k1)
	testutil.Eventually(t, 15*time.Second, "3 up members", func() bool { return allUp(kc.Members()) })
	ctx := context.Background()
	via := kc.managers[1]

	r, err := via.List(ctx)
	wantKeys(t, "list", r, err, 3, map[string]int{id1: 3}, map[string]int{id1: 3})
	r, err = via.Install(ctx, k2)
	wantKeys(t, "install", r, err, 3, map[string]int{id1: 3, id2: 3}, map[string]int{id1: 3})
	if !allUp(kc.Members()) {
		t.Fatal("a member is not up after install")
	}
	r, err = via.Use(ctx, id2)
	wantKeys(t, "use", r, err, 3, map[string]int{id1: 3, id2: 3}, map[string]int{id2: 3})
	r, err = via.Remove(ctx, id1)
	wantKeys(t, "remove", r, err, 3, map[string]int{id2: 3}, map[string]int{id2: 3})
	// The cluster still gossips: a change (a new member) converges everywhere.
	kc.addWithKeys(t, k2)
	testutil.Eventually(t, 15*time.Second, "4 up members on the new key", func() bool { return allUp(kc.Members()) })
	kc.mu.Lock()
	for i := 0; i < 3; i++ {
		if len(kc.persisted[i]) != 1 || string(kc.persisted[i][0]) != string(k2) {
			t.Errorf("member %d persisted %d keys", i, len(kc.persisted[i]))
		}
	}
	kc.mu.Unlock()

	// A member holding only the removed key cannot join.
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile, cfg.Logger = "local", quiet
	cfg.Lifecycle = cluster.DefaultLocalCoreConfig()
	cfg.GossipKey = k1
	cfg.Seeds = []string{kc.Members()[0].Addr.Gossip}
	old, err := kc.Network.Start(clustertest.Addr{Transport: "old-key"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Crash()
	jctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := old.Membership.Join(jctx); !errors.Is(err, cluster.ErrJoinFailed) {
		t.Fatalf("a member with the removed key joined: %v", err)
	}

	// Refusals: the primary key, an unknown key, a bad key; each member says why.
	r, err = via.Remove(ctx, id2)
	if err != nil || len(r.Failures) != 4 {
		t.Errorf("removing the primary key: %+v %v", r, err)
	}
	r, err = via.Use(ctx, "0000000000000000")
	if err != nil || len(r.Failures) != 4 {
		t.Errorf("using an unknown key: %+v %v", r, err)
	}
	if _, err := via.Install(ctx, []byte("short")); !errors.Is(err, cluster.ErrBadGossipKey) {
		t.Errorf("installing a short key: %v", err)
	}
	if !allUp(kc.Members()) {
		t.Error("a member is not up after the refusals")
	}
}

func TestKeyManagerWithoutEncryption(t *testing.T) {
	kc := newKeyCluster(t, 1, nil)
	if _, err := kc.managers[0].List(context.Background()); !errors.Is(err, cluster.ErrNoKeyring) {
		t.Fatalf("list without a keyring: %v", err)
	}
}
