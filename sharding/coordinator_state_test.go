package sharding

import (
	"context"
	"maps"
	"math/rand"
	"strconv"
	"sync"
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

// writeLegacyMap writes allocations as the earlier layouts did: an LWWMap shard →
// "region|epoch" at key, with WriteMajority.
func writeLegacyMap(t *testing.T, ctx context.Context, r *ddata.Replicator, key string, allocs map[int]allocation) {
	t.Helper()
	node := r.SelfNodeID()
	clock := ddata.DefaultClock(func() int64 { return time.Now().UnixMilli() })
	if _, err := r.Update(ctx, key, ddata.LWWMap{}, ddata.WriteMajority(0),
		func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
			m, all := d.(ddata.LWWMap), ddata.LWWMap{}
			for shard, a := range allocs {
				var delta ddata.LWWMap
				m, delta = m.Put(node, strconv.Itoa(shard), []byte(a.region+"|"+strconv.FormatUint(a.epoch, 10)), clock)
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
}

// addToGSet adds element to the GSet at key with WriteMajority.
func addToGSet(t *testing.T, ctx context.Context, r *ddata.Replicator, key, element string) {
	t.Helper()
	if _, err := r.Update(ctx, key, ddata.GSet{}, ddata.WriteMajority(0),
		func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
			s, delta := d.(ddata.GSet).Add(element)
			return s, delta, nil
		}); err != nil {
		t.Fatal(err)
	}
}

// TestCoordinatorStateLayouts records allocations of shards in several buckets on one
// member, with state of both earlier layouts beside them (one LWWMap of every shard of
// the type; an LWWMap per bucket listed in a GSet), and reads them back with
// ReadMajority on another, as a coordinator after a failover: every allocation comes
// back, the three layouts merged by epoch, and each EpochMap holds its bucket's shards
// only.
func TestCoordinatorStateLayouts(t *testing.T) {
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
	persisted := maps.Clone(want)
	// The first layout: one map for every shard of the type. Shard 7 only there; shard
	// 1 there at an older epoch (the bucket's stands), shard 2500 at a newer one (it
	// stands); shard 999 handed off there at the bucket's epoch (no region stands).
	first := map[int]allocation{
		7:    {"10.0.0.9:7946", 3},
		1:    {"10.0.0.9:7946", 1},
		2500: {"10.0.0.9:7946", want[2500].epoch + 1},
		999:  {"", want[999].epoch},
	}
	writeLegacyMap(t, ctx, rs[0], legacyMapKey("counter"), first)
	// The second layout: buckets 0 and 5 listed, an LWWMap each. Shard 0 there at a
	// newer epoch (it stands), shard 7 at a newer epoch than the first layout's (it
	// stands), shard 5001 only there.
	second := map[int]map[int]allocation{
		0: {0: {"10.0.0.8:7946", want[0].epoch + 1}, 7: {"10.0.0.8:7946", 4}},
		5: {5001: {"10.0.0.8:7946", 2}},
	}
	for b, allocs := range second {
		addToGSet(t, ctx, rs[1], legacyBucketsKey("counter"), strconv.Itoa(b))
		writeLegacyMap(t, ctx, rs[1], legacyBucketKey("counter", b), allocs)
	}
	want[999] = first[999]
	want[2500] = first[2500]
	want[0] = second[0][0]
	want[7] = second[0][7]
	want[5001] = second[5][5001]

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
	// Each bucket holds its own shards, in an EpochMap of about 10 bytes a shard.
	for bucket, shards := range map[int][]int{0: {0, 1, 999}, 1: {1000}, 2: {2500}, 99: {99_999}} {
		d, err := rs[1].Get(ctx, coordinatorBucketKey("counter", bucket), ddata.ReadMajority(0))
		if err != nil {
			t.Fatalf("bucket %d: %v", bucket, err)
		}
		m := d.(ddata.EpochMap)
		if m.Len() != len(shards) {
			t.Errorf("bucket %d holds %v, want %v", bucket, m, shards)
		}
		for _, shard := range shards {
			if e, ok := m.Get(uint64(shard)); !ok || e.Value != persisted[shard].region || e.Epoch != persisted[shard].epoch {
				t.Errorf("bucket %d: shard %d = %+v, want %+v", bucket, shard, e, persisted[shard])
			}
		}
	}
	// A recovered coordinator knows the type and this layout's buckets: it writes no GSet
	// again for those. Bucket 5, only in the second layout, is not recorded in this
	// layout's set yet.
	if !reader.typesSaved["counter"] || !reader.bucketsSaved["counter"][99] || reader.bucketsSaved["counter"][5] {
		t.Errorf("after reading: types saved %v, buckets saved %v", reader.typesSaved, reader.bucketsSaved)
	}
	// A write to bucket 5 after the read back lists it, and a next coordinator reads
	// the newer allocation back from the EpochMap.
	a := allocation{"10.0.0.2:7946", 3}
	if err := reader.persist(ctx, "counter", 5001, a); err != nil {
		t.Fatal(err)
	}
	again, _, err := stateCoordinator(rs[0]).readState()
	if err != nil {
		t.Fatal(err)
	}
	if again["counter"][5001] != a || len(again["counter"]) != len(want) {
		t.Errorf("after a write to bucket 5: shard 5001 %+v, %d shards", again["counter"][5001], len(again["counter"]))
	}
	// The earlier layouts deleted (once every member is upgraded): a coordinator reads
	// this layout alone, without an error.
	for _, key := range []string{legacyMapKey("counter"), legacyBucketsKey("counter")} {
		if err := rs[1].Delete(ctx, key, ddata.WriteMajority(0)); err != nil {
			t.Fatal(err)
		}
	}
	alone, _, err := stateCoordinator(rs[2]).readState()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := alone["counter"][7]; ok || alone["counter"][5001] != a || alone["counter"][99_999] != want[99_999] {
		t.Errorf("without the earlier layouts: shard 7 %+v, 5001 %+v, 99999 %+v", alone["counter"][7], alone["counter"][5001], alone["counter"][99_999])
	}
}

// TestCoordinatorStateConcurrentCoordinators: two coordinators active at once on two
// members (one about to be downed, and its successor) record shards of one bucket with
// WriteMajority at the same time; a third member reads both coordinators' shards back,
// and on the shard both recorded, the higher epoch.
func TestCoordinatorStateConcurrentCoordinators(t *testing.T) {
	rs := stateReplicators(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, successor := stateCoordinator(rs[0]), stateCoordinator(rs[1])
	want := map[int]allocation{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i, c := range []*coordinator{old, successor} {
		tag := uint64(i + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for shard := int(tag); shard < 40; shard += 2 { // odd shards old's, even the successor's
				if err := c.persist(ctx, "counter", shard, allocation{"10.0.0." + strconv.Itoa(int(tag)) + ":7946", 5<<epochTagBits | tag}); err != nil {
					errs <- err
				}
			}
			// Both record shard 100.
			if err := c.persist(ctx, "counter", 100, allocation{"10.0.0." + strconv.Itoa(int(tag)) + ":7946", (5+tag)<<epochTagBits | tag}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for shard := 1; shard < 40; shard++ {
		tag := uint64(2 - shard%2)
		want[shard] = allocation{"10.0.0." + strconv.Itoa(int(tag)) + ":7946", 5<<epochTagBits | tag}
	}
	want[100] = allocation{"10.0.0.2:7946", 7<<epochTagBits | 2}
	alloc, _, err := stateCoordinator(rs[2]).readState()
	if err != nil {
		t.Fatal(err)
	}
	if len(alloc["counter"]) != len(want) {
		t.Errorf("read %d allocations, want %d", len(alloc["counter"]), len(want))
	}
	for shard, a := range want {
		if alloc["counter"][shard] != a {
			t.Errorf("shard %d: read %+v, want %+v", shard, alloc["counter"][shard], a)
		}
	}
}

// TestMergeAllocationIsEpochMapMerge: the merge of the earlier layouts' records
// (mergeAllocation) and the EpochMap's per-shard merge choose the same record, so that
// the layouts read back together and one bucket's concurrent writes agree.
func TestMergeAllocationIsEpochMapMerge(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	regions := []string{"", "10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.10:7946"}
	for range 2000 {
		a := allocation{regions[r.Intn(len(regions))], uint64(r.Intn(3))}
		b := allocation{regions[r.Intn(len(regions))], uint64(r.Intn(3))}
		ma, _ := ddata.EpochMap{}.Put(9, a.epoch, a.region)
		mb, _ := ddata.EpochMap{}.Put(9, b.epoch, b.region)
		m, err := ma.Merge(mb)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := m.(ddata.EpochMap).Get(9)
		if got, want := (allocation{e.Value, e.Epoch}), mergeAllocation(a, b); got != want {
			t.Fatalf("merge of %+v and %+v: EpochMap %+v, mergeAllocation %+v", a, b, got, want)
		}
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
