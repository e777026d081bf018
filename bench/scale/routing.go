package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/sharding"
)

// The routing experiment: the CPU of one message through sharding (sharding.Sharding's
// Tell, its region's routing, the in-memory transport, the hosting region, the
// entity's mailbox) with S shards over M members, when the sending region must first
// ask the coordinator for the shard's home (cold) and when it has the home in its cache
// (warm).
//
// Every one of the M members runs the real sharding.Sharding with a real
// cluster.Messenger on one cluster.InmemNetwork; the shard coordinator runs as the
// cluster singleton on the oldest member, without distributed data (its writes are
// the coordinator state experiment's; here it decides and sends HostShard). What is not
// run is the membership protocol: each member reads one fixed view, M members up,
// reachable and converged (routeMembership), with no hosting lease (sharding's
// Config.HostingLease < 0). Routing reads the view (the member of a shard's home, the
// coordinator's host, the coordinator's candidates) and never changes it; the
// membership protocol's own cost at these sizes is the membership experiment's, and
// 300 real members are more than this machine runs.
//
// The last member sends, one message at a time with at most routeWindow unhandled:
//   - cold: one message to an entity of each of the S shards, none of whose homes the
//     sender knows: each asks the coordinator (GetShardHome), which allocates the shard
//     (least-shard strategy) and has its region host it (HostShard) before it answers,
//     and the entity is activated where it lands;
//   - warm, routed: messages to the entities (already active) of the shards hosted on
//     other members, whose homes the sender has cached: each is encoded, sent over the
//     in-memory transport, decoded, and queued to its entity's mailbox;
//   - warm, local: messages to the entities of the shards hosted on the sender itself,
//     delivered in place: what routing adds is the routed figure minus this one.
//
// A figure is the process's CPU time (user and system, every member's share) over the
// phase, less the members' CPU at rest over as long (measured for 3 s before the phase,
// once the members have settled after their start), divided by the messages.
type routeRow struct {
	Shards, Members  int
	Cold             time.Duration // CPU per message whose shard's home the sender had to ask for
	Warm             time.Duration // CPU per message routed to another member, home cached
	Local            time.Duration // CPU per message to a shard hosted by the sender
	ColdWall         time.Duration // wall time of the cold phase, per message
	ColdRaw, WarmRaw time.Duration // the same CPU per message, the members' rest included
	WarmN, LocalN    int           // messages of the warm phases
	Rest             float64       // the members' CPU at rest, seconds per second
	Err              string
}

// routeWindow is how many messages the sender lets go unhandled at once.
const routeWindow = 256

// routeMembership is a fixed, converged view of M members: what a member's
// cluster.Membership would show once they are all up, with View.Member's lookup.
// Subscriptions come from a real membership of its own (one member alone), whose only
// events are its own start.
type routeMembership struct {
	self   cluster.Member
	view   *cluster.View
	events *cluster.Membership
}

var _ sharding.Membership = (*routeMembership)(nil)

func (m *routeMembership) View() cluster.View {
	v := *m.view
	v.Self, v.MajorityContact = m.self.Node(), time.Now()
	return v
}
func (m *routeMembership) Self() cluster.Member { return m.self }
func (m *routeMembership) Subscribe(buffer int) *cluster.Subscription {
	return m.events.Subscribe(buffer)
}
func (m *routeMembership) RegisterLeaveHook(cluster.LeaveHook) {}
func (m *routeMembership) Members() []cluster.Member {
	return append([]cluster.Member(nil), m.view.Members...)
}
func (m *routeMembership) Member(address string) (cluster.Member, bool) {
	return m.view.Member(address)
}
func (m *routeMembership) Now() time.Time { return time.Now() }

// routeTypes knows the experiment's entity types: "route-S" has S shards.
type routeTypes struct{}

func (routeTypes) EntityType(_ context.Context, name string) (sharding.TypeSettings, error) {
	count, ok := strings.CutPrefix(name, "route-")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 {
		return sharding.TypeSettings{}, fmt.Errorf("%w: %s", sharding.ErrUnknownEntityType, name)
	}
	return sharding.TypeSettings{Name: name, NumberOfShards: n}, nil
}

// routeFactory makes entities that count what they handle, and records on which
// member each entity lives.
type routeFactory struct {
	member  int
	handled *atomic.Int64
	where   *sync.Map // entity ID → member
}

func (f routeFactory) NewEntity(_ context.Context, _, id string, _ []byte) (sharding.Entity, error) {
	f.where.Store(id, f.member)
	return routeEntity{f.handled}, nil
}

type routeEntity struct{ handled *atomic.Int64 }

func (e routeEntity) Receive(context.Context, []byte) ([]byte, error) {
	e.handled.Add(1)
	return nil, nil
}
func (routeEntity) Snapshot(context.Context) ([]byte, error) { return nil, nil }
func (routeEntity) Stop(context.Context)                     {}

type routeCluster struct {
	events  *clustertest.Member
	msgrs   []*cluster.Messenger
	shs     []*sharding.Sharding
	handled atomic.Int64
	where   sync.Map
}

func routeAddr(i int) string { return fmt.Sprintf("10.1.%d.%d:7946", i/256, i%256) }

func startRouteCluster(ctx context.Context, members int) (*routeCluster, error) {
	log := slog.New(slog.DiscardHandler)
	net := clustertest.NewNetwork()
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile, cfg.Logger = "local", log
	cfg.Lifecycle = clustertest.Tolerant()
	ev, err := net.Start(clustertest.Addr{Transport: "route-events"}, cfg)
	if err != nil {
		return nil, err
	}
	c := &routeCluster{events: ev}
	if err := ev.Membership.Join(ctx); err != nil {
		c.close()
		return nil, err
	}
	// Member i is the i-th up (the oldest first: member 0 runs the coordinator); the
	// view lists them sorted by address, as a view does (View.Member searches them).
	byAge := make([]cluster.Member, members)
	for i := range byAge {
		byAge[i] = cluster.Member{Address: routeAddr(i), UID: cluster.UID(1000 + i), TransportAddr: "route-" + strconv.Itoa(i),
			Status: cluster.StatusUp, UpNumber: i + 1, Reachable: true}
	}
	view := &cluster.View{Joined: true, HasLeader: true, Converged: true, Leader: byAge[0].Node(),
		Members: slices.SortedFunc(slices.Values(byAge), func(a, b cluster.Member) int { return strings.Compare(a.Address, b.Address) })}
	for i := range members {
		self := byAge[i]
		msgr, err := cluster.NewMessenger(func(h cluster.FrameHandler) (cluster.Transport, error) {
			return net.Frames.NewTransport(self.TransportAddr, h)
		}, log)
		if err != nil {
			c.close()
			return nil, err
		}
		c.msgrs = append(c.msgrs, msgr)
		sc := sharding.DefaultConfig()
		sc.Membership = &routeMembership{self: self, view: view, events: ev.Membership}
		sc.Messenger, sc.Types, sc.Logger = msgr, routeTypes{}, log
		sc.Factory = routeFactory{member: i, handled: &c.handled, where: &c.where}
		sc.HostingLease = -1
		// The members' reconciliation (membership read again, idle entities passivated,
		// every second by default) is not on the routing path; an hour keeps its
		// per-second work, O(shards) at the coordinator, out of the figures.
		sc.ReconcileInterval = time.Hour
		// Nor is rebalancing: the cold phase allocates evenly, and a round that moved a
		// shard would hand it off in the middle of a phase.
		sc.RebalanceInterval = time.Hour
		// A loaded machine: requests get time, messages wait for their homes long.
		sc.RequestTimeout, sc.ResolveTimeout = 20*time.Second, 2*time.Minute
		sh, err := sharding.New(sc)
		if err != nil {
			c.close()
			return nil, err
		}
		c.shs = append(c.shs, sh)
	}
	return c, nil
}

func (c *routeCluster) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sh := range c.shs {
		sh.Abort(ctx)
	}
	for _, m := range c.msgrs {
		m.Close()
	}
	if c.events != nil {
		c.events.Crash()
	}
}

// restCPU returns the process's CPU per second over d, nothing being sent.
func restCPU(d time.Duration) float64 {
	cpu0, t := processCPU(), time.Now()
	time.Sleep(d)
	return (processCPU() - cpu0).Seconds() / time.Since(t).Seconds()
}

// send tells each of ids in turn from sh, at most routeWindow unhandled, and waits
// until all are handled; it returns the CPU per message less rest, and the wall time
// per message.
func (c *routeCluster) send(ctx context.Context, sh *sharding.Sharding, typ string, ids []string, n int, rest float64) (cpu, raw, wall time.Duration, err error) {
	base := c.handled.Load()
	cpu0, t := processCPU(), time.Now()
	// wait waits until upto messages are handled; a minute without one handled is a
	// failure (a message that failed after Tell returned is never handled).
	progress, last := c.handled.Load(), time.Now()
	wait := func(upto int64) error {
		for {
			h := c.handled.Load()
			if h-base >= upto {
				return nil
			}
			if h != progress {
				progress, last = h, time.Now()
			}
			if ctx.Err() != nil || time.Since(last) > time.Minute {
				return fmt.Errorf("%d of %d messages handled, none for %v: %v", h-base, upto, time.Since(last).Round(time.Second), ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range n {
		if err := wait(int64(i - routeWindow)); err != nil {
			return 0, 0, 0, err
		}
		if err := sh.Tell(ctx, typ, ids[i%len(ids)], nil); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := wait(int64(n)); err != nil {
		return 0, 0, 0, err
	}
	el := time.Since(t)
	total := (processCPU() - cpu0).Seconds()
	used := total - rest*el.Seconds()
	return time.Duration(math.Max(used, 0) / float64(n) * 1e9), time.Duration(total / float64(n) * 1e9), el / time.Duration(n), nil
}

// runRouting measures the shard counts on one cluster of members, a type per count.
func runRouting(ctx context.Context, members int, shards []int, warm int, logf func(string, ...any)) []routeRow {
	var rows []routeRow
	c, err := startRouteCluster(ctx, members)
	if err != nil {
		for _, s := range shards {
			rows = append(rows, routeRow{Shards: s, Members: members, Err: "start: " + err.Error()})
		}
		return rows
	}
	defer c.close()
	sender := members - 1
	// Settle: the coordinator started and answered once (a type of one shard), and the
	// work of the members' start (the singleton's start, the coordinator's recovery
	// from every region) is done before the members' CPU at rest is measured.
	if _, _, _, err := c.send(ctx, c.shs[sender], "route-1", []string{"settle"}, 1, 0); err != nil {
		for _, s := range shards {
			rows = append(rows, routeRow{Shards: s, Members: members, Err: "settle: " + err.Error()})
		}
		return rows
	}
	time.Sleep(3 * time.Second)
	for _, s := range shards {
		row := routeRow{Shards: s, Members: members}
		typ := "route-" + strconv.Itoa(s)
		// An entity of each shard.
		ids := make([]string, s)
		for n, filled := 0, 0; filled < s; n++ {
			id := "e" + strconv.Itoa(n)
			if sh := abi.ShardID(id, s); ids[sh] == "" {
				ids[sh] = id
				filled++
			}
		}
		row.Rest = restCPU(3 * time.Second)
		cold, coldRaw, wall, err := c.send(ctx, c.shs[sender], typ, ids, s, row.Rest)
		if err != nil {
			row.Err = "cold: " + err.Error()
			rows = append(rows, row)
			logf("routing %d shards on %d members: %s", s, members, row.Err)
			break
		}
		row.Cold, row.ColdRaw, row.ColdWall = cold, coldRaw, wall
		var local, remote []string
		for _, id := range ids {
			if m, ok := c.where.Load(id); ok && m.(int) == sender {
				local = append(local, id)
			} else {
				remote = append(remote, id)
			}
		}
		row.WarmN, row.LocalN = max(warm, len(remote)), max(warm/4, len(local))
		row.Rest = restCPU(3 * time.Second)
		if row.Warm, row.WarmRaw, _, err = c.send(ctx, c.shs[sender], typ, remote, row.WarmN, row.Rest); err != nil {
			row.Err = "warm: " + err.Error()
		} else if len(local) > 0 {
			if row.Local, _, _, err = c.send(ctx, c.shs[sender], typ, local, row.LocalN, row.Rest); err != nil {
				row.Err = "local: " + err.Error()
			}
		} else {
			row.LocalN = 0
		}
		logf("routing %d shards on %d members: cold %v a message (%v wall), warm %v routed, %v local; at rest %.2f CPU %s",
			s, members, row.Cold, row.ColdWall, row.Warm, row.Local, row.Rest, row.Err)
		rows = append(rows, row)
		if row.Err != "" {
			break
		}
	}
	return rows
}

func writeRouting(dir string, rows []routeRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{strconv.Itoa(r.Shards), strconv.Itoa(r.Members), ff(r.Cold.Seconds()), ff(r.Warm.Seconds()),
			ff(r.Local.Seconds()), ff(r.ColdWall.Seconds()), strconv.Itoa(r.WarmN), strconv.Itoa(r.LocalN), ff(r.Rest), r.Err,
			ff(r.ColdRaw.Seconds()), ff(r.WarmRaw.Seconds())})
	}
	return writeCSV(filepath.Join(dir, "routing.csv"), []string{"shards", "members", "cold_cpu_s", "warm_cpu_s",
		"local_cpu_s", "cold_wall_s", "warm_messages", "local_messages", "rest_cpu_per_s", "error", "cold_raw_cpu_s", "warm_raw_cpu_s"}, out)
}

func replotRouting(dir string) ([]routeRow, error) {
	recs, err := readCSV(dir, "routing.csv")
	if err != nil {
		return nil, err
	}
	secs := func(s string) time.Duration {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0
		}
		return time.Duration(v * float64(time.Second))
	}
	var out []routeRow
	for _, r := range recs {
		if len(r) < 10 {
			continue
		}
		s, _ := strconv.Atoi(r[0])
		m, _ := strconv.Atoi(r[1])
		wn, _ := strconv.Atoi(r[6])
		ln, _ := strconv.Atoi(r[7])
		rest, _ := strconv.ParseFloat(r[8], 64)
		row := routeRow{Shards: s, Members: m, Cold: secs(r[2]), Warm: secs(r[3]), Local: secs(r[4]),
			ColdWall: secs(r[5]), WarmN: wn, LocalN: ln, Rest: rest, Err: r[9]}
		if len(r) > 11 {
			row.ColdRaw, row.WarmRaw = secs(r[10]), secs(r[11])
		}
		out = append(out, row)
	}
	return out, nil
}

// routeSeries returns, per member count, f over shards (0, a phase not reached, is left
// out of plots and fits).
func routeSeries(rows []routeRow, name string, f func(routeRow) float64) []series {
	return groupSeries(rows, name, ", %d members", func(r routeRow) int { return r.Members },
		func(r routeRow) float64 { return float64(r.Shards) }, f)
}

// routeSeriesByMembers returns, per shard count, f over members.
func routeSeriesByMembers(rows []routeRow, name string, f func(routeRow) float64) []series {
	return groupSeries(rows, name, ", %d shards", func(r routeRow) int { return r.Shards },
		func(r routeRow) float64 { return float64(r.Members) }, f)
}

// groupSeries returns one series per value of group over rows, in the order they first
// come, named name and suffix formatted with that value, each the points (x, y) of its
// rows.
func groupSeries[R any](rows []R, name, suffix string, group func(R) int, x, y func(R) float64) []series {
	var out []series
	idx := map[int]int{}
	for _, r := range rows {
		g := group(r)
		i, ok := idx[g]
		if !ok {
			i = len(out)
			idx[g] = i
			out = append(out, series{name: name + fmt.Sprintf(suffix, g)})
		}
		out[i].xs = append(out[i].xs, x(r))
		out[i].ys = append(out[i].ys, y(r))
	}
	return out
}

func micros(d time.Duration) float64 { return d.Seconds() * 1e6 }

func plotRouting(dir string, rows []routeRow) error {
	if len(rows) == 0 {
		return nil
	}
	var ss []series
	ss = append(ss, routeSeriesByMembers(rows, "cold", func(r routeRow) float64 { return micros(r.Cold) })...)
	ss = append(ss, routeSeriesByMembers(rows, "warm, routed", func(r routeRow) float64 { return micros(r.Warm) })...)
	ss = append(ss, routeSeriesByMembers(rows, "warm, local", func(r routeRow) float64 { return micros(r.Local) })...)
	return logPlot(filepath.Join(dir, "routing.png"), "Routing: CPU per message, cold and warm home cache", "members",
		"µs of CPU per message", ss)
}

func summaryRouting(w io.Writer, rows []routeRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| shards | members | cold: CPU/message (with rest) | wall/message | warm, routed: CPU/message (with rest) | warm, local: CPU/message | members at rest, CPU/s | error |\n|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %d | %.1fµs (%.1fµs) | %.1fµs | %.1fµs (%.1fµs) | %.1fµs | %.2f | %s |\n", r.Shards, r.Members, micros(r.Cold),
			micros(r.ColdRaw), micros(r.ColdWall), micros(r.Warm), micros(r.WarmRaw), micros(r.Local), r.Rest, r.Err)
	}
	fmt.Fprintln(w, "\n| routing curve | over | at | log-log slope | growth |\n|---|---|---|---:|---|")
	for _, c := range []struct {
		name string
		f    func(routeRow) float64
	}{
		{"cold", func(r routeRow) float64 { return micros(r.Cold) }},
		{"warm, routed", func(r routeRow) float64 { return micros(r.Warm) }},
		{"warm, local", func(r routeRow) float64 { return micros(r.Local) }},
	} {
		for _, s := range routeSeriesByMembers(rows, c.name, c.f) {
			k, name := growth(s.xs, s.ys)
			fmt.Fprintf(w, "| %s | members | %s | %.2f | %s |\n", c.name, s.name[len(c.name)+2:], k, name)
		}
		for _, s := range routeSeries(rows, c.name, c.f) {
			k, name := growth(s.xs, s.ys)
			fmt.Fprintf(w, "| %s | shards | %s | %.2f | %s |\n", c.name, s.name[len(c.name)+2:], k, name)
		}
	}
}
