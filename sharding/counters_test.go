package sharding

import (
	"context"
	"fmt"
	"testing"
)

// TestCounters: a member's counters add up what its regions handled and failed, every
// message in one latency bucket, and count the active entities and hosted shards, on
// every member alike.
func TestCounters(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	for i := range 10 {
		mustAsk(t, tc.nodes[i%2], "counter", fmt.Sprintf("c%d", i), "inc")
	}
	if _, err := ask(t, tc.nodes[0], "counter", "c0", "fail"); err == nil {
		t.Fatal("fail did not fail")
	}
	var handled, failed, inBuckets uint64
	active, shards := 0, 0
	for _, n := range tc.nodes {
		for _, c := range n.sharding.Counters() {
			if c.Type != "counter" {
				continue
			}
			handled += c.Handled
			failed += c.Failed
			for _, b := range c.Latency {
				inBuckets += b
			}
			active += c.Active
			shards += c.Shards
		}
	}
	if handled != 10 || failed != 1 || inBuckets != 11 {
		t.Fatalf("handled %d, failed %d, in latency buckets %d; want 10, 1, 11", handled, failed, inBuckets)
	}
	states, err := tc.nodes[0].sharding.ClusterShardingState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantActive, wantShards := 0, 0
	for _, st := range states {
		for _, sh := range st.Shards {
			if sh.Type == "counter" {
				wantShards++
				wantActive += len(sh.Entities)
			}
		}
	}
	if active != wantActive || shards != wantShards || active == 0 {
		t.Fatalf("active %d, shards %d; the regions' states say %d and %d", active, shards, wantActive, wantShards)
	}
}
