package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// keyCluster is a memberCluster whose members have messengers on an in-memory network
// and key managers that record what they persist.
type keyCluster struct {
	*memberCluster
	net       *InmemNetwork
	managers  []*KeyManager
	mu        sync.Mutex
	persisted map[int][][]byte
}

func newKeyCluster(t *testing.T, n int, key []byte) *keyCluster {
	kc := &keyCluster{net: NewInmemNetwork(), persisted: map[int][][]byte{}}
	kc.memberCluster = newMemberCluster(t, 0, func(c *MembershipConfig) { c.GossipKey = key })
	for i := 0; i < n; i++ {
		kc.addWithKeys(key)
	}
	return kc
}

func (kc *keyCluster) addWithKeys(key []byte, more ...[]byte) *Membership {
	t := kc.t
	i := len(kc.members)
	kc.mutate = func(c *MembershipConfig) { c.GossipKey, c.GossipKeys = key, more }
	m := kc.add()
	msgr, err := NewMessenger(func(h FrameHandler) (Transport, error) {
		return kc.net.NewTransport(fmt.Sprintf("transport-%d", i), h)
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { msgr.Close() })
	km, err := NewKeyManager(KeyManagerConfig{Membership: m, Messenger: msgr, Logger: quiet, Persist: func(keys [][]byte) error {
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

func wantKeys(t *testing.T, step string, r KeyResponse, err error, members int, keys, primary map[string]int) {
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
	id1, id2 := KeyID(k1), KeyID(k2)
	kc := newKeyCluster(t, 3, k1)
	testutil.Eventually(t, 15*time.Second, "3 up members", func() bool { return allUp(kc.members) })
	ctx := context.Background()
	via := kc.managers[1]

	r, err := via.List(ctx)
	wantKeys(t, "list", r, err, 3, map[string]int{id1: 3}, map[string]int{id1: 3})
	r, err = via.Install(ctx, k2)
	wantKeys(t, "install", r, err, 3, map[string]int{id1: 3, id2: 3}, map[string]int{id1: 3})
	if !allUp(kc.members) {
		t.Fatal("a member is not up after install")
	}
	r, err = via.Use(ctx, id2)
	wantKeys(t, "use", r, err, 3, map[string]int{id1: 3, id2: 3}, map[string]int{id2: 3})
	r, err = via.Remove(ctx, id1)
	wantKeys(t, "remove", r, err, 3, map[string]int{id2: 3}, map[string]int{id2: 3})
	// The cluster still gossips: a change (a new member) converges everywhere.
	kc.addWithKeys(k2)
	testutil.Eventually(t, 15*time.Second, "4 up members on the new key", func() bool { return allUp(kc.members) })
	kc.mu.Lock()
	for i := 0; i < 3; i++ {
		if len(kc.persisted[i]) != 1 || string(kc.persisted[i][0]) != string(k2) {
			t.Errorf("member %d persisted %d keys", i, len(kc.persisted[i]))
		}
	}
	kc.mu.Unlock()

	// A member holding only the removed key cannot join.
	cfg := DefaultMembershipConfig()
	cfg.Transport, cfg.Profile, cfg.Logger = kc.network.NewTransport(), "local", quiet
	cfg.Lifecycle = DefaultLocalCoreConfig()
	cfg.GossipKey = k1
	cfg.Seeds = []string{kc.members[0].Self().Address}
	old, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Shutdown()
	jctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := old.Join(jctx); !errors.Is(err, ErrJoinFailed) {
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
	if _, err := via.Install(ctx, []byte("short")); !errors.Is(err, ErrBadGossipKey) {
		t.Errorf("installing a short key: %v", err)
	}
	if !allUp(kc.members) {
		t.Error("a member is not up after the refusals")
	}
}

func TestKeyManagerWithoutEncryption(t *testing.T) {
	kc := newKeyCluster(t, 1, nil)
	if _, err := kc.managers[0].List(context.Background()); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("list without a keyring: %v", err)
	}
}

func TestSealRoundTrip(t *testing.T) {
	key, secret := []byte("0123456789abcdef0123456789abcdef"), []byte("new key 16 bytes")
	sealed, nonce, err := seal(key, secret)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := open(key, nonce, sealed); err != nil || string(b) != string(secret) {
		t.Fatalf("open: %q %v", b, err)
	}
	sealed[0] ^= 1
	if _, err := open(key, nonce, sealed); err == nil {
		t.Fatal("a tampered sealed key opened")
	}
	if _, err := open([]byte("fedcba9876543210"), nonce, sealed); err == nil {
		t.Fatal("opened with another key")
	}
}
