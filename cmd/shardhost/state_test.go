package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/testutil"
)

// TestStateForgetMember: three members form a cluster and stop; one restarts alone
// with its data directory, at its address. Its state store's ring, saved on disk,
// still names the two others (retained: it waits for them). state forget-member
// refuses without --accept-loss and for the member itself, and forgets the others one
// at a time: with one forgotten the member still waits for the other (its own replica
// counts only once a round admits it), and with both forgotten it takes the shards
// over.
func TestStateForgetMember(t *testing.T) {
	start := func(bind, transport, dir string, join []string) *host.Node {
		t.Helper()
		cfg := host.DefaultConfig()
		cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = bind, transport, "127.0.0.1:0"
		cfg.DataDir, cfg.Join, cfg.GossipProfile = dir, join, "local"
		n, err := host.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Kill() })
		if err := n.Membership().WaitUp(context.Background()); err != nil {
			t.Fatal(err)
		}
		return n
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := start("127.0.0.1:0", "127.0.0.1:0", dirs[0], nil)
	nodes := []*host.Node{a,
		start("127.0.0.1:0", "127.0.0.1:0", dirs[1], []string{a.Self().Address}),
		start("127.0.0.1:0", "127.0.0.1:0", dirs[2], []string{a.Self().Address})}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Self().Address)
	}
	slices.Sort(addrs)
	testutil.EventuallyNil(t, 30*time.Second, "every member's state store ranking over the three", func() error {
		for _, n := range nodes {
			if r, ok := n.StateRing(); !ok || !slices.Equal(r.Admitted, addrs) {
				return fmt.Errorf("%s: ring %+v (builtin %v)", n.Self().Address, r, ok)
			}
		}
		return nil
	})
	self, transport := a.Self().Address, a.Self().TransportAddr
	gone := []string{nodes[1].Self().Address, nodes[2].Self().Address}
	slices.Sort(gone)
	for _, n := range nodes {
		n.Kill()
	}

	a = start(self, transport, dirs[0], nil)
	if r, _ := a.StateRing(); !slices.Equal(r.Retained, gone) {
		t.Fatalf("restarted alone, the member retains %v, want %v (its saved ring: %+v)", r.Retained, gone, r)
	}
	t.Setenv("SHARDHOST_API", a.APIAddr())
	if out, err := runCLI(t, "state", "forget-member", gone[0]); err == nil || !strings.Contains(err.Error(), "--accept-loss") {
		t.Fatalf("forget-member without --accept-loss: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "state", "forget-member", self, "--accept-loss"); err == nil || !strings.Contains(err.Error(), "is this member") {
		t.Fatalf("forget-member of the member itself: %v\n%s", err, out)
	}
	if r, _ := a.StateRing(); !slices.Equal(r.Retained, gone) {
		t.Fatalf("after the refusals, the member retains %v, want %v", r.Retained, gone)
	}
	out, err := runCLI(t, "state", "forget-member", gone[0], "--accept-loss")
	if err != nil {
		t.Fatalf("forget-member %s: %v\n%s", gone[0], err, out)
	}
	if want := fmt.Sprintf("forgot %s, which 1 members retained (%s)", gone[0], self); !strings.Contains(out, want) {
		t.Fatalf("forget-member printed %q, want it to say %q", out, want)
	}
	// Restarted alone, the member counts its own replica only once a round admits it:
	// with one of the two others forgotten, the other still holds writes it may lack,
	// and it waits for it (forgetting one gone member does not drop another).
	if r, _ := a.StateRing(); !slices.Equal(r.Retained, gone[1:]) || r.Settled {
		t.Fatalf("after forgetting %s, ring %+v; want %s still retained", gone[0], r, gone[1])
	}
	out, err = runCLI(t, "state", "forget-member", gone[1], "--accept-loss")
	if err != nil || !strings.Contains(out, fmt.Sprintf("forgot %s, which 1 members retained", gone[1])) {
		t.Fatalf("forget-member %s: %v\n%s", gone[1], err, out)
	}
	// None retained: the member takes the shards over.
	testutil.EventuallyNil(t, 30*time.Second, "the ring handed over to the member up", func() error {
		if r, _ := a.StateRing(); len(r.Retained) > 0 || !slices.Equal(r.Admitted, []string{self}) {
			return fmt.Errorf("ring %+v", r)
		}
		return nil
	})
	out, err = runCLI(t, "state", "forget-member", gone[1], "--accept-loss")
	if err != nil || !strings.Contains(out, "no member up retained "+gone[1]) {
		t.Fatalf("forget-member of a member no longer retained: %v\n%s", err, out)
	}
}
