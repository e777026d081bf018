package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The state store ring (sharding/replstore/ring.go) ranks a shard's replicas over the
// members with the priority strategy's order: a request's replica set is the first K
// (3) of the order over the admitted members and over the live ones (replicaSetIn
// computes both, with PriorityAllocationStrategy.Top; before, with Order's full sort).
// The harness calls those exported functions as the ring does, and counts, for
// snapshots spread evenly over the shards of one type, what a member replaced (its data
// directory new) must be repaired with: every shard whose first K members include it,
// and the snapshots of those shards. The store itself is not run: 1M snapshots on M
// members' disks is more than this machine holds at 300 members; the counts come from
// the ring's own order, the bytes from an assumed snapshot size (ringSnapshotBytes).
type ringRow struct {
	Members    int
	Shards     int
	Snapshots  int
	Lookup     time.Duration // one replica set: two Tops (admitted and live), the ring's cost per request
	LookupSort time.Duration // the same with Order's full sort, as the ring did before
	Shards2    int           // shards the replaced member is a replica of
	Repair     int           // snapshots to copy to it
	RepairMB   float64       // at ringSnapshotBytes a snapshot, counted once (one sender a shard)
}

// ringSnapshotBytes is the snapshot size the repair bytes assume: 1 KiB.
const ringSnapshotBytes = 1024

const ringReplicas = 3

func runRing(members, shards, snapshots int) ringRow {
	row := ringRow{Members: members, Shards: shards, Snapshots: snapshots}
	addrs := make([]string, members)
	for i := range addrs {
		addrs[i] = regionName(i)
	}
	strat := sharding.PriorityAllocationStrategy{Type: "scale"}
	top := func(shard int) []string { return strat.Top(shard, addrs, ringReplicas) }
	sorted := func(shard int) []string {
		order := strat.Order(shard, addrs)
		return order[:min(ringReplicas, len(order))]
	}
	// Lookup: the median over shards of computing both sets.
	n := min(shards, 200)
	ds, dsSort := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for s := range n {
		t := time.Now()
		a, _ := top(s), top(s)
		ds = append(ds, time.Since(t))
		t = time.Now()
		b, _ := sorted(s), sorted(s)
		dsSort = append(dsSort, time.Since(t))
		if !slices.Equal(a, b) {
			panic("Top is not the head of the order")
		}
	}
	row.Lookup, row.LookupSort = median(ds), median(dsSort)
	// Repair: the member replaced is the last one.
	replaced := addrs[members-1]
	per := snapshots / shards
	for s := range shards {
		if slices.Contains(top(s), replaced) {
			row.Shards2++
			row.Repair += per
		}
	}
	row.RepairMB = float64(row.Repair) * ringSnapshotBytes / 1e6
	return row
}

func writeRing(dir string, rows []ringRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{strconv.Itoa(r.Members), strconv.Itoa(r.Shards), strconv.Itoa(r.Snapshots),
			ff(r.Lookup.Seconds()), ff(r.LookupSort.Seconds()), strconv.Itoa(r.Shards2), strconv.Itoa(r.Repair), ff(r.RepairMB)})
	}
	return writeCSV(filepath.Join(dir, "ring.csv"), []string{"members", "shards", "snapshots", "lookup_s",
		"lookup_sorted_s", "replaced_member_shards", "repair_snapshots", "repair_mb_at_1kib"}, out)
}

func plotRing(dir string, rows []ringRow) error {
	if len(rows) == 0 {
		return nil
	}
	var xs, lookup, lookupSort, repair []float64
	for _, r := range rows {
		xs = append(xs, float64(r.Members))
		lookup = append(lookup, r.Lookup.Seconds()*1e6)
		lookupSort = append(lookupSort, r.LookupSort.Seconds()*1e6)
		repair = append(repair, float64(r.Repair)/1e3)
	}
	return logPlot(filepath.Join(dir, "ring.png"), "State store ring: per request and after a member is replaced", "members",
		"µs / thousand snapshots", []series{{"replica set lookup µs (Top)", xs, lookup},
			{"replica set lookup µs (before: Order's sort)", xs, lookupSort},
			{"snapshots to repair (thousands)", xs, repair}})
}

func summaryRing(w io.Writer, rows []ringRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| members | shards | snapshots | replica set lookup | before (Order's sort) | shards of the replaced member | snapshots to repair | at 1 KiB each |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
	var xs, ls, rs []float64
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %d | %d | %v | %v | %d | %d | %.0f MB |\n", r.Members, r.Shards, r.Snapshots, r.Lookup.Round(10*time.Nanosecond),
			r.LookupSort.Round(10*time.Nanosecond), r.Shards2, r.Repair, r.RepairMB)
		xs, ls, rs = append(xs, float64(r.Members)), append(ls, r.Lookup.Seconds()), append(rs, float64(r.Repair))
	}
	k1, n1 := growth(xs, ls)
	k2, n2 := growth(xs, rs)
	fmt.Fprintf(w, "\nring over members: lookup slope %.2f (%s); snapshots to repair slope %.2f (%s)\n", k1, n1, k2, n2)
}
