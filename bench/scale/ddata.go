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
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/ddata"
)

// The distributed data experiment: real replicators (ddata.Replicator with its default
// intervals: deltas every 200 ms, gossip of digests every 2 s) on M real members
// (memberlist on clustertest's in-memory gossip network, messengers on its in-memory
// frames network), with K top-level keys, each a GCounter. The bytes are the
// replicator's own count of what it encoded to send, by message kind (the
// shardhost.ddata.sent metric, read through an OpenTelemetry manual reader).
//
//   - delta: member 1 increments every key (WriteLocal); the delta messages sent by all
//     members until every replica holds the K keys, per key;
//   - at rest: the status and gossip bytes per member per second over 10 s (2 s in the
//     smoke run) once they do;
//   - full state: a new member joins; the gossip bytes (full values, sent to it as the
//     digests differ) until it holds the K keys, and how long that took;
//   - majority write: one Update with WriteMajority of a key (median of 5);
//   - pruning: member 1 (which wrote every key) leaves; the time from its removal until
//     no replica's value of any key needs pruning from it (the replicators' pruning
//     interval is 1 s here, 30 s by default; the protocol's gossip rounds do not change).
type ddataRow struct {
	Keys, Members  int
	Spread         time.Duration // until every replica holds the keys written at one member
	DeltaPerKey    float64       // delta bytes sent (all members) per key written
	RestBytes      float64       // status + gossip bytes per member per second at rest
	FullStateBytes float64       // gossip bytes sent while a new member caught up
	FullStateTime  time.Duration // until the new member held every key
	MajorityWrite  time.Duration
	Prune          time.Duration // from the writer's removal until no replica needs pruning from it
	PruneBytes     float64       // bytes the live members sent meanwhile (every message kind), per key
	Err            string
}

type ddataMember struct {
	m      *clustertest.Member
	r      *ddata.Replicator
	reader *sdkmetric.ManualReader
}

// sent returns the bytes a replica has sent, by message kind.
func (d ddataMember) sent(ctx context.Context) map[string]int64 {
	var rm metricdata.ResourceMetrics
	out := map[string]int64{}
	if err := d.reader.Collect(ctx, &rm); err != nil {
		return out
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "shardhost.ddata.sent" {
				continue
			}
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value("shardhost.ddata.message")
					out[v.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

type ddataCluster struct {
	net     *clustertest.Network
	members []ddataMember
}

func (c *ddataCluster) add(ctx context.Context) error {
	i := len(c.members)
	log := slog.New(slog.DiscardHandler)
	cfg := cluster.DefaultMembershipConfig()
	cfg.Profile, cfg.Logger = "local", log
	cfg.Lifecycle = clustertest.Tolerant()
	cfg.Lifecycle.RandomSeed = int64(i + 1)
	if i > 0 {
		cfg.Seeds = []string{c.members[0].m.Addr.Gossip}
	}
	m, err := c.net.Start(clustertest.Addr{Transport: fmt.Sprintf("transport-%d", i)}, cfg)
	if err != nil {
		return err
	}
	reader := sdkmetric.NewManualReader()
	dc := ddata.DefaultReplicatorConfig()
	dc.Membership, dc.Messenger, dc.Logger = m.Membership, m.Messenger, log
	dc.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	dc.PruningInterval = time.Second
	r, err := ddata.NewReplicator(dc)
	if err != nil {
		m.Crash()
		return err
	}
	c.members = append(c.members, ddataMember{m, r, reader})
	return m.Membership.Join(ctx)
}

func (c *ddataCluster) close() {
	for i := len(c.members) - 1; i >= 0; i-- {
		c.members[i].r.Close()
		if !c.members[i].m.Stopped() {
			c.members[i].m.Crash()
		}
	}
}

// waitUp waits until the live members see each other up.
func (c *ddataCluster) waitUp(ctx context.Context) error {
	var ms []*cluster.Membership
	for _, d := range c.members {
		if !d.m.Stopped() {
			ms = append(ms, d.m.Membership)
		}
	}
	for clustertest.AllUp(ms...) != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d members not up: %w", len(ms), clustertest.AllUp(ms...))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitFor polls cond every 50 ms until it holds; false when ctx ends first.
func waitFor(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

func sumKind(ctx context.Context, ms []ddataMember, kinds ...string) int64 {
	var n int64
	for _, d := range ms {
		s := d.sent(ctx)
		for _, k := range kinds {
			n += s[k]
		}
	}
	return n
}

func ddataKey(i int) string { return "scale-" + strconv.Itoa(i) }

func runDData(ctx context.Context, keys, members int, rest time.Duration) (row ddataRow) {
	row = ddataRow{Keys: keys, Members: members}
	c := &ddataCluster{net: clustertest.NewNetwork()}
	defer c.close()
	for range members {
		if err := c.add(ctx); err != nil {
			row.Err = "start: " + err.Error()
			return row
		}
	}
	if err := c.waitUp(ctx); err != nil {
		row.Err = err.Error()
		return row
	}
	writer := c.members[1]
	allHold := func(ms []ddataMember) func() bool {
		return func() bool {
			for _, d := range ms {
				if len(d.r.Keys()) < keys {
					return false
				}
			}
			return true
		}
	}
	delta0 := sumKind(ctx, c.members, "delta")
	t := time.Now()
	node := writer.r.SelfNodeID()
	for i := range keys {
		if _, err := writer.r.Update(ctx, ddataKey(i), ddata.GCounter{}, ddata.WriteLocal(),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				g, delta := d.(ddata.GCounter).Increment(node, 1)
				return g, delta, nil
			}); err != nil {
			row.Err = "write: " + err.Error()
			return row
		}
	}
	if !waitFor(ctx, allHold(c.members)) {
		row.Err = "the keys did not spread"
		return row
	}
	row.Spread = time.Since(t)
	row.DeltaPerKey = float64(sumKind(ctx, c.members, "delta")-delta0) / float64(keys)

	// At rest.
	rest0 := sumKind(ctx, c.members, "status", "gossip")
	t = time.Now()
	select {
	case <-ctx.Done():
		row.Err = ctx.Err().Error()
		return row
	case <-time.After(rest):
	}
	row.RestBytes = float64(sumKind(ctx, c.members, "status", "gossip")-rest0) / time.Since(t).Seconds() / float64(members)

	// Majority writes.
	var ds []time.Duration
	for range 5 {
		t := time.Now()
		if _, err := c.members[0].r.Update(ctx, ddataKey(0), ddata.GCounter{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				g, delta := d.(ddata.GCounter).Increment(c.members[0].r.SelfNodeID(), 1)
				return g, delta, nil
			}); err != nil {
			row.Err = "majority write: " + err.Error()
			return row
		}
		ds = append(ds, time.Since(t))
	}
	row.MajorityWrite = median(ds)

	// A new member catches up by gossip of full values.
	gossip0 := sumKind(ctx, c.members, "gossip")
	t = time.Now()
	if err := c.add(ctx); err != nil {
		row.Err = "join: " + err.Error()
		return row
	}
	if !waitFor(ctx, allHold(c.members[len(c.members)-1:])) {
		row.Err = "the new member did not catch up"
		return row
	}
	row.FullStateTime = time.Since(t)
	row.FullStateBytes = float64(sumKind(ctx, c.members, "gossip") - gossip0)

	// Pruning after the writer leaves.
	if err := writer.m.Leave(ctx); err != nil {
		row.Err = "leave: " + err.Error()
		return row
	}
	live := slices.Delete(slices.Clone(c.members), 1, 2)
	gone := func() bool {
		for _, d := range live {
			for _, m := range d.m.Membership.Members() {
				if m.Address == writer.m.Membership.Self().Address {
					return false
				}
			}
		}
		return true
	}
	if !waitFor(ctx, gone) {
		row.Err = "the writer was not removed"
		return row
	}
	kinds := []string{"status", "gossip", "delta", "write", "read", "reply", "pruning"}
	bytes0 := sumKind(ctx, live, kinds...)
	t = time.Now()
	pruned := func() bool {
		for _, d := range live {
			for i := range keys {
				v, err := d.r.Get(ctx, ddataKey(i), ddata.ReadLocal())
				if err != nil {
					return false
				}
				if p, ok := v.(ddata.RemovedNodePruning); ok && p.NeedPruningFrom(node) {
					return false
				}
			}
		}
		return true
	}
	if !waitFor(ctx, pruned) {
		row.Err = "not pruned in time"
		return row
	}
	row.Prune = time.Since(t)
	row.PruneBytes = float64(sumKind(ctx, live, kinds...)-bytes0) / float64(keys)
	return row
}

func writeDData(dir string, rows []ddataRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{strconv.Itoa(r.Keys), strconv.Itoa(r.Members), ff(r.Spread.Seconds()), ff(r.DeltaPerKey),
			ff(r.RestBytes), ff(r.FullStateBytes), ff(r.FullStateTime.Seconds()), ff(r.MajorityWrite.Seconds()),
			ff(r.Prune.Seconds()), r.Err, ff(r.PruneBytes)})
	}
	return writeCSV(filepath.Join(dir, "ddata.csv"), []string{"keys", "members", "spread_s", "delta_bytes_per_key",
		"rest_bytes_per_member_s", "full_state_gossip_bytes", "full_state_s", "majority_write_s", "prune_s", "error", "prune_bytes_per_key"}, out)
}

func replotDData(dir string) ([]ddataRow, error) {
	recs, err := readCSV(dir, "ddata.csv")
	if err != nil {
		return nil, err
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	secs := func(s string) time.Duration { return time.Duration(num(s) * float64(time.Second)) }
	var out []ddataRow
	for _, r := range recs {
		if len(r) < 10 {
			continue
		}
		k, _ := strconv.Atoi(r[0])
		m, _ := strconv.Atoi(r[1])
		row := ddataRow{Keys: k, Members: m, Spread: secs(r[2]), DeltaPerKey: num(r[3]), RestBytes: num(r[4]),
			FullStateBytes: num(r[5]), FullStateTime: secs(r[6]), MajorityWrite: secs(r[7]), Prune: secs(r[8]), Err: r[9]}
		if len(r) > 10 { // rows written before the column have none
			row.PruneBytes = num(r[10])
		}
		out = append(out, row)
	}
	return out, nil
}

// ddataSeries returns, per member count, the curve of f over keys (a phase a row did not
// reach is 0, which the plots and fits leave out).
func ddataSeries(rows []ddataRow, name string, f func(ddataRow) float64) []series {
	return groupSeries(rows, name, ", %d members", func(r ddataRow) int { return r.Members },
		func(r ddataRow) float64 { return float64(r.Keys) }, f)
}

func plotDData(dir string, rows []ddataRow) error {
	if len(rows) == 0 {
		return nil
	}
	var bytes, times []series
	bytes = append(bytes, ddataSeries(rows, "delta B per key", func(r ddataRow) float64 { return r.DeltaPerKey })...)
	bytes = append(bytes, ddataSeries(rows, "at rest B/s/member", func(r ddataRow) float64 { return r.RestBytes })...)
	bytes = append(bytes, ddataSeries(rows, "full state to a new member, KB", func(r ddataRow) float64 { return r.FullStateBytes / 1e3 })...)
	bytes = append(bytes, ddataSeries(rows, "pruning B per key", func(r ddataRow) float64 { return r.PruneBytes })...)
	if err := logPlot(filepath.Join(dir, "ddata_bytes.png"), "Distributed data: bytes", "keys", "bytes", bytes); err != nil {
		return err
	}
	times = append(times, ddataSeries(rows, "spread from one member", func(r ddataRow) float64 { return r.Spread.Seconds() * 1e3 })...)
	times = append(times, ddataSeries(rows, "new member caught up", func(r ddataRow) float64 { return r.FullStateTime.Seconds() * 1e3 })...)
	times = append(times, ddataSeries(rows, "majority write", func(r ddataRow) float64 { return r.MajorityWrite.Seconds() * 1e3 })...)
	times = append(times, ddataSeries(rows, "pruned after a removal", func(r ddataRow) float64 { return r.Prune.Seconds() * 1e3 })...)
	return logPlot(filepath.Join(dir, "ddata_times.png"), "Distributed data: times", "keys", "milliseconds", times)
}

func summaryDData(w io.Writer, rows []ddataRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| keys | members | spread from one member | delta B/key | at rest B/s/member | full state to a new member | majority write | pruned after a removal | pruning B/key | error |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		prune := "—"
		if r.Prune > 0 {
			prune = r.Prune.Round(time.Millisecond).String()
		}
		pb := "—"
		if r.PruneBytes > 0 {
			pb = fmt.Sprintf("%.0f", r.PruneBytes)
		}
		fmt.Fprintf(w, "| %d | %d | %v | %.0f | %.0f | %.0f KB in %v | %v | %s | %s | %s |\n", r.Keys, r.Members, r.Spread.Round(time.Millisecond),
			r.DeltaPerKey, r.RestBytes, r.FullStateBytes/1e3, r.FullStateTime.Round(time.Millisecond),
			r.MajorityWrite.Round(time.Microsecond), prune, pb, r.Err)
	}
	fmt.Fprintln(w, "\n| distributed data curve (over keys) | members | log-log slope | growth |\n|---|---:|---:|---|")
	for _, c := range []struct {
		name string
		f    func(ddataRow) float64
	}{
		{"spread from one member", func(r ddataRow) float64 { return r.Spread.Seconds() }},
		{"delta bytes per key", func(r ddataRow) float64 { return r.DeltaPerKey }},
		{"at rest bytes/s per member", func(r ddataRow) float64 { return r.RestBytes }},
		{"full state to a new member (bytes)", func(r ddataRow) float64 { return r.FullStateBytes }},
		{"majority write", func(r ddataRow) float64 { return r.MajorityWrite.Seconds() }},
		{"pruned after a removal", func(r ddataRow) float64 { return r.Prune.Seconds() }},
		{"pruning bytes per key", func(r ddataRow) float64 { return r.PruneBytes }},
	} {
		for _, s := range ddataSeries(rows, c.name, c.f) {
			k, name := growth(s.xs, s.ys)
			fmt.Fprintf(w, "| %s | %.2f | %s |\n", s.name, k, name)
		}
	}
}
