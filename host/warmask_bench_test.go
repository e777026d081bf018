package host

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkWarmAsk is the per-message path into warm entities of one member, with the
// Rust counter (counter-rust) as the guest: what bench/peers's serial, concurrent and
// tells workloads put through a member, measured here with -benchmem so the path's
// allocations show (run with -cpuprofile/-memprofile to see where they go). Each also
// reports cpu-µs/op, the process's CPU time (user and system) per operation, which the
// load of a shared machine moves less than ns/op.
//
//   - serial: one "inc" ask at a time into one warm counter.
//   - concurrent: 64 goroutines asking "inc" of 1,000 warm counters, each taking them in
//     turn with a stride of 7 from its own offset (b.N asks in all).
//   - tell: "inc" tells round robin over the 1,000 (b.N in all, from 8 goroutines, a
//     refusal of a full mailbox retried), then one "get" ask of each counter, which
//     comes after its tells in its mailbox.
func BenchmarkWarmAsk(b *testing.B) {
	const entities, askers, tellers = 1000, 64, 8
	ctx := context.Background()
	n := startBenchNodes(b, 1, nil)[0]
	if err := n.Membership().WaitUp(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := n.Deploy(ctx, testwasm.RustBytes(b, "counter-rust"), sharding.TypeSettings{Name: "counter"}); err != nil {
		b.Fatal(err)
	}
	s := n.Sharding()
	ids := make([]string, entities)
	for i := range ids {
		ids[i] = "w" + strconv.Itoa(i)
		if _, err := s.Ask(ctx, "counter", ids[i], []byte("inc")); err != nil {
			b.Fatal(err)
		}
	}
	inc := []byte("inc")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := s.Ask(ctx, "counter", ids[0], inc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concurrent", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		stridedAsks(b, s, ids, askers)
		b.StopTimer()
	})
	b.Run("tell", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		parallelOps(b, tellers, func(_ int, i int64) error {
			for {
				err := s.Tell(ctx, "counter", ids[i%entities], inc)
				if err == nil || !errors.Is(err, sharding.ErrMailboxFull) && !errors.Is(err, sharding.ErrBufferFull) {
					return err
				}
			}
		})
		for _, id := range ids {
			if _, err := s.Ask(ctx, "counter", id, []byte("get")); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
	})
}

// parallelOps runs operations 0 to b.N-1 on workers goroutines, each taking the next
// from a shared count: op(w, i) does operation i on worker w. The first error fails
// the benchmark once every worker has stopped.
func parallelOps(b *testing.B, workers int, op func(w int, i int64) error) {
	var next atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := next.Add(1) - 1; err == nil && i < int64(b.N); i = next.Add(1) - 1 {
				err = op(w, i)
			}
			errs <- err
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		b.Fatal(first)
	}
}

// reportCPU starts measuring the process's CPU time; the function it returns reports
// it per operation as cpu-µs/op (nothing where testutil.ProcessCPU cannot tell).
func reportCPU(b *testing.B) func() {
	start, ok := testutil.ProcessCPU()
	return func() {
		end, _ := testutil.ProcessCPU()
		if ok && b.N > 0 {
			b.ReportMetric(float64((end-start).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		}
	}
}

// BenchmarkRemoteAskConcurrent is bench/peers's remote workload in the main module: two
// members on loopback (the TCP transport), 64 goroutines on the first asking "inc" of
// 1,000 warm Rust counters (counter-rust) on the second, each taking them in turn with
// a stride of 7 from its own offset. allocs/op and cpu-µs/op (the process's CPU time per
// ask) count both members, as the two share the machine's cores.
func BenchmarkRemoteAskConcurrent(b *testing.B) {
	const entities, askers = 1000, 64
	ctx := context.Background()
	nodes := startBenchNodes(b, 2, nil)
	for _, n := range nodes {
		if err := n.Membership().WaitUp(ctx); err != nil {
			b.Fatal(err)
		}
	}
	waitMembers(b, nodes)
	if _, err := nodes[0].Deploy(ctx, testwasm.RustBytes(b, "counter-rust"), sharding.TypeSettings{Name: "counter"}); err != nil {
		b.Fatal(err)
	}
	s, there := nodes[0].Sharding(), nodes[1].Self().Address
	ids := make([]string, 0, entities)
	for i := 0; len(ids) < entities; i++ {
		id := "r" + strconv.Itoa(i)
		r, err := s.Ask(ctx, "counter", id, []byte("inc"))
		if err != nil {
			b.Fatal(err)
		}
		if r.Node == there {
			ids = append(ids, id)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	defer reportSyscalls(b)()
	stridedAsks(b, s, ids, askers)
	b.StopTimer()
}

// stridedAsks makes b.N "inc" asks of the counters ids from askers goroutines, each
// taking them in turn with a stride of 7 from its own offset.
func stridedAsks(b *testing.B, s *sharding.Sharding, ids []string, askers int) {
	ctx, inc := context.Background(), []byte("inc")
	next := make([]int, askers) // each asker's next counter, from its own offset
	for a := range next {
		next[a] = a * len(ids) / askers
	}
	parallelOps(b, askers, func(a int, _ int64) error {
		k := next[a]
		next[a] += 7
		_, err := s.Ask(ctx, "counter", ids[k%len(ids)], inc)
		return err
	})
}

// reportSyscalls starts counting the process's read and write system calls (the
// syscr and syscw of /proc/self/io, Linux's); the function it returns reports them per
// operation as reads/op and writes/op (nothing where /proc/self/io cannot be read).
func reportSyscalls(b *testing.B) func() {
	r0, w0, ok := processIOCalls()
	return func() {
		r1, w1, ok1 := processIOCalls()
		if ok && ok1 && b.N > 0 {
			b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
			b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
		}
	}
}

// processIOCalls returns the read and write system calls the process has made, from
// /proc/self/io, and whether it could read them.
func processIOCalls() (reads, writes uint64, ok bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0, false
	}
	var got int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, err := strconv.ParseUint(v, 10, 64)
		switch {
		case err != nil:
		case k == "syscr":
			reads, got = n, got+1
		case k == "syscw":
			writes, got = n, got+1
		}
	}
	return reads, writes, got == 2
}
