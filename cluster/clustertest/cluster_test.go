package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// A crashed member's OnStop functions run last registered first, the others remove it,
// and its restart is a new incarnation at its addresses, with its clock.
func TestClusterCrashAndRestart(t *testing.T) {
	c := New(t, 3, FastFailureDetection(), WithClocks())
	victim := c.Members()[1]
	var order []string
	victim.OnStop(func() { order = append(order, "first") })
	victim.OnStop(func() { order = append(order, "second") })
	victim.Crash()
	victim.Crash() // idempotent
	if !slices.Equal(order, []string{"second", "first"}) {
		t.Fatalf("OnStop ran %v, want second then first", order)
	}
	if !victim.Stopped() || len(c.Live()) != 2 {
		t.Fatalf("stopped %v, %d live", victim.Stopped(), len(c.Live()))
	}
	ran := false
	victim.OnStop(func() { ran = true })
	if !ran {
		t.Fatal("OnStop on a stopped member did not run at once")
	}
	c.WaitUp() // the two see only each other: the victim was downed and removed

	again := c.Restart(victim)
	if again.Addr != victim.Addr || again.Clock != victim.Clock || again.Index != 3 {
		t.Fatalf("restart at %+v clock %p index %d, want %+v clock %p index 3", again.Addr, again.Clock, again.Index,
			victim.Addr, victim.Clock)
	}
	if again.Membership.Self().UID == victim.Membership.Self().UID {
		t.Fatal("the restart kept the UID")
	}
	c.WaitUp()
	if got := len(c.Members()); got != 4 {
		t.Fatalf("%d members started, want 4", got)
	}
}

// A member's membership core runs on its clock (WithClocks).
func TestClusterClocks(t *testing.T) {
	c := New(t, 1, WithClocks())
	m := c.Members()[0]
	m.Clock.SetOffset(time.Hour)
	if d := time.Until(m.Membership.Now()); d < 59*time.Minute {
		t.Fatalf("the membership's clock is %v ahead, want an hour", d)
	}
}

// A partition cuts gossip and frames between its sides; Heal restores both.
func TestClusterPartitionAndHeal(t *testing.T) {
	lc := cluster.DefaultLocalCoreConfig()
	lc.SBRStableAfter = time.Hour // nobody is downed: the partition heals
	c := New(t, 3, WithCore(lc))
	ms := c.Members()
	for _, m := range ms {
		m.Messenger.Handle("echo", func(r *cluster.Request) { r.Reply(r.Body, nil) })
	}
	ask := func(from, to *Member) error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := from.Messenger.Request(ctx, to.Addr.Transport, "echo", []byte("hi"))
		return err
	}
	c.Partition([]*Member{ms[0], ms[1]}, []*Member{ms[2]})
	testutil.Eventually(t, 30*time.Second, "the cut-off member unreachable", func() bool {
		mem, ok := ms[0].Membership.Member(ms[2].Addr.Gossip)
		return ok && !mem.Reachable
	})
	if err := ask(ms[0], ms[2]); !errors.Is(err, cluster.ErrRequestTimeout) {
		t.Fatalf("a request across the partition: %v, want a timeout", err)
	}
	if err := ask(ms[0], ms[1]); err != nil {
		t.Fatalf("a request within a side: %v", err)
	}
	c.Heal()
	c.WaitUp()
	if err := ask(ms[0], ms[2]); err != nil {
		t.Fatalf("a request after the heal: %v", err)
	}
}

// A member that leaves is removed by the others; its OnStop functions run after its
// leave, once it is out.
func TestClusterLeave(t *testing.T) {
	c := New(t, 3, WithTransportAddrs(func(i int) string { return fmt.Sprintf("state-%d", i) }))
	leaver := c.Members()[2]
	if leaver.Addr.Transport != "state-2" || leaver.Membership.Self().TransportAddr != "state-2" {
		t.Fatalf("transport address %q, published %q, want state-2", leaver.Addr.Transport, leaver.Membership.Self().TransportAddr)
	}
	var statusAtStop cluster.MemberStatus
	leaver.OnStop(func() { statusAtStop = leaver.Membership.Self().Status })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if !leaver.Membership.View().Exited || statusAtStop == cluster.StatusUp {
		t.Fatalf("stopped with the member %v, exited %v", statusAtStop, leaver.Membership.View().Exited)
	}
	c.WaitUp()
}

// Start refuses a member without a transport address, or at a taken one, and leaves
// nothing running (the package's TestMain checks the goroutines).
func TestNetworkStartRefusals(t *testing.T) {
	n := NewNetwork()
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile, cfg.Lifecycle = "local", Tolerant()
	if _, err := n.Start(Addr{}, cfg); err == nil {
		t.Fatal("a member without a transport address started")
	}
	m, err := n.Start(Addr{Transport: "a"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Crash()
	if _, err := n.Start(Addr{Transport: "a"}, cfg); !errors.Is(err, cluster.ErrInvalidTransportConfig) {
		t.Fatalf("a second member at a taken transport address: %v", err)
	}
	if _, err := n.Start(Addr{Gossip: m.Addr.Gossip, Transport: "b"}, cfg); err == nil {
		t.Fatal("a second member at a taken gossip address started")
	}
	cfg.Profile = "bogus"
	if _, err := n.Start(Addr{Transport: "c"}, cfg); err == nil {
		t.Fatal("a member with a bad configuration started")
	}
}
