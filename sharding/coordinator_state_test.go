package sharding

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/ddata"
)

// stateReplicators starts n members with a replicator each.
func stateReplicators(t *testing.T, n int) []*ddata.Replicator {
	t.Helper()
	c := clustertest.New(t, n)
	var out []*ddata.Replicator
	for _, m := range c.Members() {
		dc := ddata.DefaultReplicatorConfig()
		dc.Membership, dc.Messenger, dc.Logger = m.Membership, m.Messenger, quiet
		r, err := ddata.NewReplicator(dc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		out = append(out, r)
	}
	return out
}

// stateCoordinator is a coordinator with only what persist and readState use.
func stateCoordinator(r *ddata.Replicator) *coordinator {
	return newCoordinator(&Sharding{cfg: Config{DData: r, RequestTimeout: 20 * time.Second, Now: time.Now}})
}

// TestCoordinatorStateInBuckets records allocations of shards in several buckets on one
// member, with a state of the former layout (one map of every shard) beside them, and
// reads them back with ReadMajority on another, as a coordinator after a failover: every
// allocation comes back, the former layout's merged by epoch, and the buckets hold their
// shards only.
func TestCoordinatorStateInBuckets(t *testing.T) {
	rs := stateReplicators(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writer := stateCoordinator(rs[0])
	want := map[int]allocation{}
	for _, shard := range []int{0, 1, 999, 1000, 2500, 99_999} {
		a := allocation{"10.0.0." + strconv.Itoa(shard%7) + ":7946", uint64(shard+1) << epochTagBits}
		if err := writer.persist(ctx, "counter", shard, a); err != nil {
			t.Fatalf("persist %d: %v", shard, err)
		}
		want[shard] = a
	}
	// Shard 1000 handed off (no region, same epoch).
	if err := writer.persist(ctx, "counter", 1000, allocation{"", want[1000].epoch}); err != nil {
		t.Fatal(err)
	}
	want[1000] = allocation{"", want[1000].epoch}
	// The former layout: one map for every shard of the type. Shard 7 only there; shard
	// 1 there at an older epoch (the bucket's stands), shard 2500 at a newer one (it
	// stands); shard 999 handed off there at the bucket's epoch (no region stands).
	legacy := map[int]allocation{
		7:    {"10.0.0.9:7946", 3},
		1:    {"10.0.0.9:7946", 1},
		2500: {"10.0.0.9:7946", want[2500].epoch + 1},
		999:  {"", want[999].epoch},
	}
	node := rs[0].SelfNodeID()
	if _, err := rs[0].Update(ctx, coordinatorKey("counter"), ddata.LWWMap{}, ddata.WriteMajority(0),
		func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
			m, all := d.(ddata.LWWMap), ddata.LWWMap{}
			for shard, a := range legacy {
				var delta ddata.LWWMap
				m, delta = m.Put(node, strconv.Itoa(shard), []byte(a.region+"|"+strconv.FormatUint(a.epoch, 10)), ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() }))
				merged, err := all.Merge(delta)
				if err != nil {
					return nil, nil, err
				}
				all = merged.(ddata.LWWMap)
			}
			return m, all, nil
		}); err != nil {
		t.Fatal(err)
	}
	want[7] = legacy[7]
	want[2500] = legacy[2500]
	want[999] = legacy[999]

	reader := stateCoordinator(rs[2])
	alloc, maxEpoch, err := reader.readState()
	if err != nil {
		t.Fatal(err)
	}
	got := alloc["counter"]
	if len(got) != len(want) {
		t.Fatalf("read %d allocations, want %d: %v", len(got), len(want), got)
	}
	for shard, a := range want {
		if got[shard] != a {
			t.Errorf("shard %d: read %+v, want %+v", shard, got[shard], a)
		}
	}
	if maxEpoch["counter"] != want[99_999].epoch {
		t.Errorf("max epoch %d, want %d", maxEpoch["counter"], want[99_999].epoch)
	}
	// Each bucket holds its own shards.
	for bucket, shards := range map[int][]int{0: {0, 1, 999}, 1: {1000}, 2: {2500}, 99: {99_999}} {
		d, err := rs[1].Get(ctx, coordinatorBucketKey("counter", bucket), ddata.ReadMajority(0))
		if err != nil {
			t.Fatalf("bucket %d: %v", bucket, err)
		}
		if keys := d.(ddata.LWWMap).Keys(); len(keys) != len(shards) {
			t.Errorf("bucket %d holds %v, want %v", bucket, keys, shards)
		}
	}
	// A recovered coordinator knows the buckets and the type: it writes no GSet again.
	if !reader.typesSaved["counter"] || !reader.bucketsSaved["counter"][99] {
		t.Errorf("after reading: types saved %v, buckets saved %v", reader.typesSaved, reader.bucketsSaved)
	}
}

// TestMergeAllocation: the higher epoch stands, at one epoch the handoff (no region), in
// either order.
func TestMergeAllocation(t *testing.T) {
	for _, tc := range []struct{ a, b, want allocation }{
		{allocation{"x", 1}, allocation{"y", 2}, allocation{"y", 2}},
		{allocation{"x", 5}, allocation{"", 5}, allocation{"", 5}},
		{allocation{"", 4}, allocation{"x", 5}, allocation{"x", 5}},
		{allocation{"x", 5}, allocation{"y", 5}, allocation{"x", 5}},
	} {
		if got := mergeAllocation(tc.a, tc.b); got != tc.want {
			t.Errorf("merge(%+v, %+v) = %+v, want %+v", tc.a, tc.b, got, tc.want)
		}
		if got := mergeAllocation(tc.b, tc.a); got != tc.want {
			t.Errorf("merge(%+v, %+v) = %+v, want %+v", tc.b, tc.a, got, tc.want)
		}
	}
}
