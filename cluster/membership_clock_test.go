package cluster_test

import (
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
)

// The membership core runs on MembershipConfig.Now: a member whose clock jumps an hour
// forward finds its peers' heartbeats an hour late (its failure detector marks them
// unreachable) and dates its majority contact on that clock; set back again, its clock
// does not go back (Membership.Now), and its heartbeats and contact go on.
func TestMembershipRunsTheCoreOnItsNowHook(t *testing.T) {
	clock := clustertest.NewClock()
	c := newCluster(t, 3, clustertest.WithConfig(func(i int, c *cluster.MembershipConfig) {
		if i == 0 {
			c.Now = clock.Now
		}
	}))
	ms := c.Members()
	m := ms[0].Membership
	sub := m.Subscribe(1024)
	defer sub.Close()

	clock.SetOffset(time.Hour)
	unreachable := map[cluster.UID]bool{}
	testutil.Eventually(t, 10*time.Second, "the peers found unreachable after the jump", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == cluster.UnreachableMember {
					unreachable[e.Member.UID] = true
				}
			default:
				return unreachable[ms[1].Membership.Self().UID] && unreachable[ms[2].Membership.Self().UID]
			}
		}
	})
	testutil.Eventually(t, 10*time.Second, "a majority contact dated on the member's clock", func() bool {
		return m.View().MajorityContact.After(time.Now().Add(30 * time.Minute))
	})
	if d := time.Until(m.Now()); d < 59*time.Minute {
		t.Fatalf("Membership.Now is %v ahead of time.Now, want an hour", d)
	}

	before := m.Now()
	clock.SetOffset(0)
	if now := m.Now(); now.Before(before) {
		t.Fatalf("Membership.Now went back from %v to %v", before, now)
	}
	contact := m.View().MajorityContact
	testutil.Eventually(t, 10*time.Second, "newer heartbeat round trips after the clock was set back", func() bool {
		return m.View().MajorityContact.After(contact)
	})
	testutil.Eventually(t, 15*time.Second, "3 up members again", func() bool { return allUp(ms) })
}

// Without a Now hook, the core runs on time.Now.
func TestMembershipNowDefaultsToTimeNow(t *testing.T) {
	c := newCluster(t, 1)
	before := time.Now()
	now := c.Members()[0].Membership.Now()
	if now.Before(before) || now.After(time.Now()) {
		t.Fatalf("Membership.Now = %v, not between two readings of time.Now", now)
	}
}
