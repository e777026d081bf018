package host

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkDeployGoCounterToThreeMembers deploys the Go wasip1 counter (2.7 MB) to a
// fresh cluster of three members in this process, each with an empty compilation
// cache, and reports medians over the iterations, every figure from the Deploy call:
// deploy-ms, until Deploy returns (every member has validated and stored the module,
// its region started); first-ask-ms, until an ask sent then into a new entity answers;
// compiled-ms, until every member runs the module's compiled code (Node.Modules).
// Run it with -benchtime=Nx: each iteration starts a cluster.
func BenchmarkDeployGoCounterToThreeMembers(b *testing.B) {
	wasm := testwasm.Bytes(b, "counter")
	ctx := context.Background()
	var deploy, firstAsk, compiled []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cache, member := b.TempDir(), 0
		nodes := startBenchNodes(b, 3, func(c *Config) {
			// A cache of each member's own, as on three machines (c.Join is not set yet).
			member++
			c.Runtime.CacheDir = fmt.Sprint(cache, "/", member)
			c.Runtime.CompileBeforeServing = false
		})
		waitMembers(b, nodes)
		b.StartTimer()
		start := time.Now()
		res, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: "counter"})
		if err != nil {
			b.Fatal(err)
		}
		deploy = append(deploy, time.Since(start))
		for _, m := range res.Members {
			if !m.Ready {
				b.Fatalf("%s not ready: %s", m.Node, m.Error)
			}
		}
		if _, err := nodes[0].Sharding().Ask(ctx, "counter", fmt.Sprint("first-", i), []byte("inc")); err != nil {
			b.Fatal(err)
		}
		firstAsk = append(firstAsk, time.Since(start))
		for !allCompiled(nodes, res.Type.Digest) {
			time.Sleep(5 * time.Millisecond) // the measured wait's poll: testutil's backoff would blur the figure
		}
		compiled = append(compiled, time.Since(start))
		b.StopTimer()
		for _, n := range nodes {
			n.Kill()
		}
	}
	ms := func(ds []time.Duration) float64 {
		sort.Slice(ds, func(a, c int) bool { return ds[a] < ds[c] })
		return float64(ds[len(ds)/2].Microseconds()) / 1e3
	}
	b.ReportMetric(ms(deploy), "deploy-ms")
	b.ReportMetric(ms(firstAsk), "first-ask-ms")
	b.ReportMetric(ms(compiled), "compiled-ms")
}

// allCompiled reports whether every node runs the module with the digest compiled.
func allCompiled(nodes []*Node, digest string) bool {
	for _, n := range nodes {
		found := false
		for _, m := range n.Modules() {
			if m.Digest == digest && m.Engine == "compiler" {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
