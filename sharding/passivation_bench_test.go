package sharding

import (
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// zipfIDs returns n entity IDs drawn from a Zipf distribution (exponent s > 1) over
// ids IDs, the same for a seed.
func zipfIDs(seed int64, s float64, ids uint64, n int) []string {
	z := rand.NewZipf(rand.New(rand.NewSource(seed)), s, 1, ids-1)
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}

// simulate runs the workload through a policy alone and returns its activations: the
// messages to an entity that was not active.
func simulate(t testing.TB, strategy string, capacity int, workload []string) int {
	p, err := newPolicy(strategy, capacity, fnv64)
	if err != nil {
		t.Fatal(err)
	}
	active := map[string]bool{}
	misses := 0
	for _, id := range workload {
		if !active[id] {
			misses++
			active[id] = true
		}
		for _, v := range p.access(id) {
			delete(active, v)
		}
	}
	return misses
}

// A region activates exactly the entities its strategy's policy, run alone on the same
// sequence of messages, would: the policy is wired to activation, messages and
// passivation as the simulation assumes (and the benchmark's figures hold for regions).
func TestRegionActivationsFollowTheStrategy(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	workload := zipfIDs(7, 1.2, 5_000, 1_500)
	for _, strategy := range []string{PassivationLRU, PassivationLFU, PassivationWTinyLFU} {
		typ := "zipf-" + strategy
		for _, id := range workload {
			mustAsk(t, n, typ, id, "inc")
		}
		tc.acts.mu.Lock()
		got := 0
		for _, l := range tc.acts.log {
			if strings.Contains(l, " "+typ+"/") {
				got++
			}
		}
		tc.acts.mu.Unlock()
		if want := simulate(t, strategy, 50, workload); got != want {
			t.Errorf("%s: the region activated %d times, its policy alone %d", strategy, got, want)
		}
	}
}

// BenchmarkPassivationHitRate runs a Zipf workload (exponent 1.01) over 1,000,000
// entity IDs through each strategy with a cap of 10,000 active entities: hit% is the
// share of messages that found their entity active (the activations avoided), ns/op
// the policy's cost per message. zipf+scan interleaves a scan of one-off IDs with every
// other message.
func BenchmarkPassivationHitRate(b *testing.B) {
	const ids, capacity, messages = 1_000_000, 10_000, 2_000_000
	zipf := zipfIDs(1, 1.01, ids, messages)
	scan := make([]string, messages)
	for i := range scan {
		if i%2 == 0 {
			scan[i] = zipf[i]
		} else {
			scan[i] = "scan" + strconv.Itoa(i)
		}
	}
	for _, w := range []struct {
		name string
		ids  []string
	}{{"zipf", zipf}, {"zipf+scan", scan}} {
		for _, strategy := range []string{PassivationLRU, PassivationLFU, PassivationWTinyLFU} {
			b.Run(w.name+"/"+strategy, func(b *testing.B) {
				var misses int
				for b.Loop() {
					misses = simulate(b, strategy, capacity, w.ids)
				}
				b.ReportMetric(float64(len(w.ids)-misses)*100/float64(len(w.ids)), "hit%")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(w.ids)), "ns/msg")
			})
		}
	}
}
