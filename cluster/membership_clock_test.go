package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// offsetClock is time.Now moved by an offset that a test sets.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// forwardClock passes on its source's advances and none of its steps back.
func TestForwardClockPassesOnAdvancesOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reads := []time.Duration{0, time.Second, -time.Hour, -time.Hour + 2*time.Second, 5 * time.Second, 5 * time.Second}
	want := []time.Duration{0, time.Second, time.Second, 3 * time.Second, 3*time.Second + time.Hour + 3*time.Second,
		3*time.Second + time.Hour + 3*time.Second}
	i := 0
	c := &forwardClock{read: func() time.Time { return t0.Add(reads[i]) }}
	for ; i < len(reads); i++ {
		if got := c.now(); !got.Equal(t0.Add(want[i])) {
			t.Fatalf("reading %d (source at %v): %v, want %v", i, reads[i], got.Sub(t0), want[i])
		}
	}
}

// The membership core runs on MembershipConfig.Now: a member whose clock jumps an hour
// forward finds its peers' heartbeats an hour late (its failure detector marks them
// unreachable) and dates its majority contact on that clock; set back again, its clock
// does not go back (Membership.Now), and its heartbeats and contact go on.
func TestMembershipRunsTheCoreOnItsNowHook(t *testing.T) {
	clock := &offsetClock{}
	mc := newMemberCluster(t, 1, func(c *MembershipConfig) {
		if c.TransportAddr == "transport-0" {
			c.Now = clock.now
		}
	})
	mc.add()
	mc.add()
	testutil.Eventually(t, 15*time.Second, "3 up members", func() bool { return allUp(mc.members) })
	m := mc.members[0]
	sub := m.Subscribe(1024)
	defer sub.Close()

	clock.offset.Store(int64(time.Hour))
	unreachable := map[UID]bool{}
	testutil.Eventually(t, 10*time.Second, "the peers found unreachable after the jump", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Kind == UnreachableMember {
					unreachable[e.Member.UID] = true
				}
			default:
				return unreachable[mc.members[1].self.UID] && unreachable[mc.members[2].self.UID]
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
	clock.offset.Store(0)
	if now := m.Now(); now.Before(before) {
		t.Fatalf("Membership.Now went back from %v to %v", before, now)
	}
	contact := m.View().MajorityContact
	testutil.Eventually(t, 10*time.Second, "newer heartbeat round trips after the clock was set back", func() bool {
		return m.View().MajorityContact.After(contact)
	})
	testutil.Eventually(t, 15*time.Second, "3 up members again", func() bool { return allUp(mc.members) })
}

// Without a Now hook, the core runs on time.Now.
func TestMembershipNowDefaultsToTimeNow(t *testing.T) {
	mc := newMemberCluster(t, 1, nil)
	before := time.Now()
	now := mc.members[0].Now()
	if now.Before(before) || now.After(time.Now()) {
		t.Fatalf("Membership.Now = %v, not between two readings of time.Now", now)
	}
}
