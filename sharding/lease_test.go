package sharding

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// liveOn reports how many instances of the entity key live on the member at node.
func (a *activations) liveOn(node, key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lives[node+" "+key]
}

// A member cut off from the other two (the bridge and one-way partitions of faults/,
// seeds 1161 and 1449, reduced to their effect on it) stops its entities within its
// hosting lease, without waiting to learn that it was downed, and refuses their
// messages with ErrNoMajority; once healed, it serves them again from their saved
// state.
func TestHostingLeaseStopsTheEntitiesOfAMemberCutOffFromTheMajority(t *testing.T) {
	leaseCutOff(t, newTestCluster(t, 3, withSharedStateStore(), withConfig(func(c *Config) {
		c.DownRemovalMargin = 2 * time.Second // a lease of 1 s
	})))
}

// The lease is measured on membership's clock (Membership.Now), which dates the
// majority contact: with membership clocks an hour ahead of time.Now or behind it, a
// member hosts while it has the contact (measured on time.Now, an hour behind, it
// never would) and a member cut off stops its entities within the lease (an hour ahead,
// it never would).
func TestHostingLeaseIsMeasuredOnTheMembershipClock(t *testing.T) {
	clock := func(i int) func() time.Time {
		offset := time.Hour
		if i%2 == 1 {
			offset = -time.Hour
		}
		return func() time.Time { return time.Now().Add(offset) }
	}
	leaseCutOff(t, newTestCluster(t, 3, withSharedStateStore(), withMembershipClock(clock), withConfig(func(c *Config) {
		c.DownRemovalMargin = 2 * time.Second // a lease of 1 s
	})))
}

// leaseCutOff checks the hosting lease of the member of an entity: cut off from the
// others, it stops the entity and refuses its messages; healed, it serves it again.
func leaseCutOff(t *testing.T, tc *testCluster) {
	t.Helper()
	r, err := ask(t, tc.nodes[0], "durable", "x", "inc")
	if err != nil {
		t.Fatal(err)
	}
	var cut *testNode
	for _, n := range tc.nodes {
		if n.addr() == r.Node {
			cut = n
		}
	}
	if cut == nil {
		t.Fatalf("no member at %s", r.Node)
	}
	if got := tc.acts.liveOn(cut.addr(), "durable/x"); got != 1 {
		t.Fatalf("durable/x has %d lives on %s, want 1", got, cut.name)
	}
	isolate := func(on bool) {
		for _, o := range tc.nodes {
			if o != cut {
				tc.link(cut, o, !on)
			}
		}
	}
	isolate(true)
	testutil.Eventually(t, 20*time.Second, "the cut-off member stops its entity", func() bool {
		return tc.acts.liveOn(cut.addr(), "durable/x") == 0
	})
	if _, err := ask(t, cut, "durable", "x", "get"); !errors.Is(err, ErrNoMajority) {
		t.Fatalf("ask through the cut-off member: %v, want ErrNoMajority", err)
	}
	isolate(false)
	testutil.Eventually(t, 30*time.Second, "the healed member serves the entity's saved state", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := cut.sharding.Ask(ctx, "durable", "x", []byte("get"))
		return err == nil && string(r.Payload) == "1"
	})
}

// leaseLogCheck runs checkLease on a member alone (no region), whose logs go to rec,
// through views of the cluster it makes with up (the members up besides it) and
// contact (its majority contact, the zero time if none), at now.
type leaseLogCheck struct {
	t   *testing.T
	s   *Sharding
	rec *logRecorder
	now time.Time
}

func newLeaseLogCheck(t *testing.T) *leaseLogCheck {
	rec := &logRecorder{}
	s := &Sharding{log: slog.New(rec), self: "a:1", lease: time.Second, regions: map[string]*shardRegion{}}
	return &leaseLogCheck{t: t, s: s, rec: rec, now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
}

func (c *leaseLogCheck) view(self cluster.MemberStatus, contact time.Time, others ...string) cluster.View {
	v := cluster.View{Self: cluster.UniqueAddress{Address: "a:1"}, Converged: true, MajorityContact: contact,
		Members: []cluster.Member{{Address: "a:1", Status: self}}}
	for _, o := range others {
		v.Members = append(v.Members, cluster.Member{Address: o, Status: cluster.StatusUp})
	}
	return v
}

// check runs checkLease on v and checks that the lease is then held or not.
func (c *leaseLogCheck) check(v cluster.View, held bool) {
	c.t.Helper()
	c.s.checkLease(v, c.now)
	if got := c.s.leaseHeld.Load(); got != held {
		c.t.Fatalf("lease held: %v, want %v (view %+v)", got, held, v)
	}
}

// lines returns the records at level or above, and fails on a zero time in any record.
func (c *leaseLogCheck) lines(level slog.Level) []logRecord {
	c.t.Helper()
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	var out []logRecord
	for _, r := range c.rec.records {
		for k, v := range r.attrs {
			if strings.Contains(v, "0001-01-01") {
				c.t.Errorf("%q logs a zero time: %s=%s", r.msg, k, v)
			}
		}
		if r.level >= level {
			out = append(out, r)
		}
	}
	return out
}

// A cluster starting: this member alone takes the lease, then members join, and until
// its first heartbeat round trip with them it has no majority contact (the zero time):
// it stops hosting, as before, but that is expected and logged at info, without a
// zero time ("hosting lease lapsed … contact=0001-01-01" at warn, every start).
func TestHostingLeaseLogsAtStartAreInfo(t *testing.T) {
	c := newLeaseLogCheck(t)
	c.check(cluster.View{Self: cluster.UniqueAddress{Address: "a:1"}}, false) // not joined yet
	c.check(c.view(cluster.StatusJoining, c.now), false)
	c.check(c.view(cluster.StatusUp, c.now), true) // alone
	c.check(c.view(cluster.StatusUp, time.Time{}, "b:1", "c:1"), false)
	c.check(c.view(cluster.StatusUp, c.now, "b:1", "c:1"), true)
	if w := c.lines(slog.LevelWarn); len(w) != 0 {
		t.Errorf("a cluster starting logs warnings: %+v", w)
	}
	if got := c.rec.find("hosting lease waits for a heartbeat round trip with a majority of the members up (members joined)"); len(got) != 1 || got[0].level != slog.LevelInfo {
		t.Errorf("the wait for the members that joined: %+v, want one line at info", got)
	}
}

// A member that leaves cleanly ends its lease (out of the cluster, reason "left"):
// expected, at info, whether it marked itself leaving (its leave hook) or not.
func TestHostingLeaseLogsOfACleanLeaveAreInfo(t *testing.T) {
	for _, hook := range []bool{true, false} {
		c := newLeaseLogCheck(t)
		c.check(c.view(cluster.StatusUp, c.now, "b:1", "c:1"), true)
		c.s.leaving.Store(hook)
		c.check(c.view(cluster.StatusLeaving, c.now, "b:1", "c:1"), true)
		left := c.view(cluster.StatusExiting, c.now, "b:1", "c:1")
		left.Exited, left.ExitReason = true, cluster.ReasonLeft
		c.check(left, false)
		if w := c.lines(slog.LevelWarn); len(w) != 0 {
			t.Errorf("leave hook %v: a clean leave logs warnings: %+v", hook, w)
		}
		if got := c.rec.find("hosting lease ended: this member is leaving the cluster", "entities", "0"); len(got) != 1 || got[0].level != slog.LevelInfo {
			t.Errorf("leave hook %v: the end of the lease: %+v, want one line at info", hook, got)
		}
	}
}

// A real lapse stays a warning: the contact older than the lease (with its time, not
// a zero one), or this member downed.
func TestHostingLeaseLapsesAreWarnings(t *testing.T) {
	c := newLeaseLogCheck(t)
	c.check(c.view(cluster.StatusUp, c.now, "b:1", "c:1"), true)
	c.check(c.view(cluster.StatusUp, c.now.Add(-3*time.Second), "b:1", "c:1"), false)
	w := c.lines(slog.LevelWarn)
	if len(w) != 1 || !strings.HasPrefix(w[0].msg, "hosting lease lapsed: no heartbeat round trip with a majority") ||
		w[0].attrs["contact"] != c.now.Add(-3*time.Second).Format(time.RFC3339Nano) || w[0].attrs["ago"] != "3s" {
		t.Fatalf("a lapse: %+v, want one warning with the contact's time and age", w)
	}
	c.check(c.view(cluster.StatusUp, c.now, "b:1", "c:1"), true)
	downed := c.view(cluster.StatusDown, c.now, "b:1", "c:1")
	downed.Exited, downed.ExitReason = true, cluster.ReasonDowned
	c.check(downed, false)
	if w := c.lines(slog.LevelWarn); len(w) != 2 || w[1].attrs["reason"] != cluster.ReasonDowned {
		t.Fatalf("a downed member: %+v, want a second warning with the reason", w)
	}
}
