package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// Waits of a Cluster: generous, because they end as soon as what they wait for happens,
// and a loaded machine under the race detector is slow to form a cluster.
const (
	joinWithin = 30 * time.Second // Add and Restart: the member in the cluster
	upWithin   = 60 * time.Second // WaitUp
)

// Tolerant is the membership lifecycle of a Cluster's members unless an option says
// otherwise: the local profile (cluster.DefaultLocalCoreConfig: heartbeats and gossip
// every 200 ms, so that a cluster forms within a second or two) with a failure
// detector that accepts a heartbeat pause of 5 s and a split brain resolver that waits
// for 10 s of stability, so that a loaded machine under the race detector does not make
// a member look crashed. Tests of crashes and downing use FastFailureDetection.
func Tolerant() cluster.CoreConfig {
	lc := cluster.DefaultLocalCoreConfig()
	lc.FailureDetector.AcceptableHeartbeatPause = 5 * time.Second
	lc.SBRStableAfter = 10 * time.Second
	return lc
}

// Option configures a Cluster.
type Option func(*options)

type options struct {
	core      cluster.CoreConfig
	log       *slog.Logger
	config    []func(i int, c *cluster.MembershipConfig)
	clocks    bool
	transport func(i int) string
}

// WithCore gives every member the membership lifecycle lc (its failure detector, split
// brain resolver, minimum members...) instead of Tolerant.
func WithCore(lc cluster.CoreConfig) Option { return func(o *options) { o.core = lc } }

// FastFailureDetection gives every member the local profile as it is
// (cluster.DefaultLocalCoreConfig): a crashed member is found unreachable within about a
// second, and downed a second later. For tests of crashes, downing and removal.
func FastFailureDetection() Option { return WithCore(cluster.DefaultLocalCoreConfig()) }

// WithLogger gives every member's membership and messenger the logger l, instead of one
// that discards everything.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithConfig has f change the membership configuration of each member started, i being
// the member's Index (a restart's new one). f runs after the Cluster has filled the
// configuration (lifecycle, logger, seeds: the first live member; Now: the member's
// clock) and may change any of it but Transport and TransportAddr. Several WithConfig
// run in order.
func WithConfig(f func(i int, c *cluster.MembershipConfig)) Option {
	return func(o *options) { o.config = append(o.config, f) }
}

// WithTransportAddrs names the transport address of each member Add starts: f(Index),
// instead of "transport-<Index>". The addresses must differ.
func WithTransportAddrs(f func(i int) string) Option { return func(o *options) { o.transport = f } }

// WithClocks gives each member a Clock of its own (Member.Clock), which its membership
// core runs on (MembershipConfig.Now); a restarted member keeps the clock of the member
// it replaces, as a restarted process keeps its machine's clock.
func WithClocks() Option { return func(o *options) { o.clocks = true } }

// Cluster is a test's in-memory cluster: its members on one Network. Its methods are
// called from the test's goroutine (they fail the test with tb.Fatal); reading Members
// and Live is also safe from others.
type Cluster struct {
	// Network is the members' networks, for what the Cluster's methods do not cover
	// (one network alone, frame faults, gossip addresses taken in advance).
	Network *Network

	tb      testing.TB
	opts    options
	mu      sync.Mutex
	members []*Member
}

// New starts n members, each joined to the first (Add), waits until each sees all of
// them up (WaitUp), and returns the cluster. Every member still running when the test
// ends is crashed then (Close, by tb.Cleanup). With n = 0 it starts none and waits for
// nothing.
func New(tb testing.TB, n int, opts ...Option) *Cluster {
	tb.Helper()
	c := &Cluster{Network: NewNetwork(), tb: tb, opts: options{core: Tolerant(), log: slog.New(slog.DiscardHandler)}}
	for _, o := range opts {
		o(&c.opts)
	}
	tb.Cleanup(c.Close)
	for range n {
		c.Add()
	}
	if n > 0 {
		c.WaitUp()
	}
	return c
}

// Add starts a member at a fresh gossip address and the transport address
// "transport-<Index>" (WithTransportAddrs), with the first live member as its seed
// (none: it starts the cluster), and waits until it is in the cluster (Membership.Join:
// welcomed, not yet up).
func (c *Cluster) Add() *Member {
	c.tb.Helper()
	c.mu.Lock()
	i := len(c.members)
	c.mu.Unlock()
	var clock *Clock
	if c.opts.clocks {
		clock = NewClock()
	}
	transport := fmt.Sprintf("transport-%d", i)
	if c.opts.transport != nil {
		transport = c.opts.transport(i)
	}
	return c.start(Addr{Transport: transport}, clock)
}

// Restart starts a new incarnation (a new UID) of a stopped member at its addresses, as
// a process restarted with a fixed bind address; it keeps the old one's Clock. It joins
// the first live member and waits until it is in the cluster, as Add does.
func (c *Cluster) Restart(old *Member) *Member {
	c.tb.Helper()
	if !old.Stopped() {
		c.tb.Fatalf("clustertest: restart of %s, which runs", old.Addr.Gossip)
	}
	return c.start(old.Addr, old.Clock)
}

func (c *Cluster) start(addr Addr, clock *Clock) *Member {
	c.tb.Helper()
	c.mu.Lock()
	i := len(c.members)
	c.mu.Unlock()
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile = "local"
	cfg.Lifecycle = c.opts.core
	cfg.Logger = c.opts.log
	if live := c.Live(); len(live) > 0 {
		cfg.Seeds = []string{live[0].Addr.Gossip}
	}
	if clock != nil {
		cfg.Now = clock.Now
	}
	for _, f := range c.opts.config {
		f(i, &cfg)
	}
	m, err := c.Network.Start(addr, cfg)
	if err != nil {
		c.tb.Fatalf("clustertest: starting member %d: %v", i, err)
	}
	m.Clock, m.Index = clock, i
	c.mu.Lock()
	c.members = append(c.members, m)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), joinWithin)
	defer cancel()
	if err := m.Membership.Join(ctx); err != nil {
		c.tb.Fatalf("clustertest: member %d (%s) joining: %v", i, m.Addr.Gossip, err)
	}
	return m
}

// Members returns every member started, stopped ones included, by Index.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Live returns the members not stopped, by Index.
func (c *Cluster) Live() []*Member {
	var out []*Member
	for _, m := range c.Members() {
		if !m.Stopped() {
			out = append(out, m)
		}
	}
	return out
}

// WaitUp waits until every live member sees the live members, and no other, up and
// reachable in a converged view (AllUp); it fails the test after a minute.
func (c *Cluster) WaitUp() {
	c.tb.Helper()
	live := c.Live()
	ms := make([]*cluster.Membership, len(live))
	for i, m := range live {
		ms[i] = m.Membership
	}
	testutil.EventuallyNil(c.tb, upWithin, fmt.Sprintf("%d members up", len(ms)), func() error { return AllUp(ms...) })
}

// Disconnect cuts the links between a and b, gossip and frames, both ways, until
// Reconnect or Heal.
func (c *Cluster) Disconnect(a, b *Member) { c.Network.Disconnect(a.Addr, b.Addr) }

// Reconnect restores the links between a and b that Disconnect cut.
func (c *Cluster) Reconnect(a, b *Member) { c.Network.Reconnect(a.Addr, b.Addr) }

// Partition cuts every link between members of different groups, both ways; members in
// no group keep their links. Heal undoes it.
func (c *Cluster) Partition(groups ...[]*Member) {
	addrs := make([][]Addr, len(groups))
	for i, g := range groups {
		for _, m := range g {
			addrs[i] = append(addrs[i], m.Addr)
		}
	}
	c.Network.Partition(addrs...)
}

// Heal restores every link cut.
func (c *Cluster) Heal() { c.Network.Heal() }

// Close crashes every live member (Member.Crash), in reverse order of Index. New has the
// test's cleanup call it; calling it earlier is allowed.
func (c *Cluster) Close() {
	live := c.Live()
	for i := len(live) - 1; i >= 0; i-- {
		live[i].Crash()
	}
}

// AllUp returns nil if each of ms sees exactly the members ms (as many members as ms),
// all up and reachable, in a converged view; else an error saying what one of them sees.
func AllUp(ms ...*cluster.Membership) error {
	for _, m := range ms {
		v := m.View()
		if !v.Converged || len(v.Members) != len(ms) {
			return fmt.Errorf("%s: converged %v, %d members, want %d", v.Self.Address, v.Converged, len(v.Members), len(ms))
		}
		for _, mem := range v.Members {
			if mem.Status != cluster.StatusUp || !mem.Reachable {
				return fmt.Errorf("%s sees %s %v, reachable %v", v.Self.Address, mem.Address, mem.Status, mem.Reachable)
			}
		}
	}
	return nil
}

// WaitTick waits until ms's membership core has ticked after WaitTick was called, and
// fails tb if that takes longer than within. The core's leader actions and split brain
// resolver run on its ticks, so a test that wants something not to happen (a joining
// member not moved to up, a leaving one not to exiting) waits for a tick on a converged
// view and then looks, rather than sleeping. The tick shows in View.MajorityContact:
// the time of the latest tick for a member alone or with no member up, else the time a
// heartbeat round trip with a majority began, heartbeats being sent on ticks. So ms
// must be in contact with a majority of the members up (or none be up).
func WaitTick(tb testing.TB, ms *cluster.Membership, within time.Duration) {
	tb.Helper()
	since := ms.Now()
	testutil.Eventually(tb, within, "a tick of "+ms.Self().Address, func() bool {
		return ms.View().MajorityContact.After(since)
	})
}
