package host

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkDurableAsk puts the journal, the default durability, beside the passivation
// policy (no write per message) in one run: three members with the built-in store (3
// replicas per shard, a majority fsyncing each record), 1,000 warm Rust counters
// (counter-rust) of each policy. Each reports asks/s and p50-µs (the median ask's wall
// time), p99-µs, and cpu-µs/op (the process's CPU time per ask, the three members'
// together, which a machine shared with other jobs disturbs less than the rates)
// beside ns/op; the concurrent journal run also reports rec-overhead-B
// (reportRecordOverhead).
//
//   - serial: one "inc" ask at a time into one counter hosted by the asking member.
//   - concurrent: 64 goroutines asking "inc" of the 1,000 counters through the first
//     member (two thirds of them hosted elsewhere), each taking them in turn with a
//     stride of 7 from its own offset.
func BenchmarkDurableAsk(b *testing.B) { benchDurableAsk(b, "") }

// BenchmarkDurableAskPostgres is BenchmarkDurableAsk with the PostgreSQL store, on a
// server started for it (durable: a record's transaction committed, the server's
// default synchronous_commit, which fsyncs its write-ahead log).
func BenchmarkDurableAskPostgres(b *testing.B) {
	if pgtest.BinDir() == "" {
		b.Skip("PostgreSQL binaries not found")
	}
	benchDurableAsk(b, pgtest.Start(b, pgtest.Options{}).NewDatabase(b))
}

// benchDurableAsk runs BenchmarkDurableAsk on stateStore (Config.StateStore; "": the
// built-in store).
func benchDurableAsk(b *testing.B, stateStore string) {
	const entities, askers = 1000, 64
	ctx := context.Background()
	nodes := startBenchNodes(b, 3, func(c *Config) { c.StateStore = stateStore })
	waitBenchMembers(b, nodes)
	wasm := testwasm.RustBytes(b, "counter-rust")
	policies := []struct{ name, typ, checkpoint string }{
		{"passivation", "fast", sharding.CheckpointPassivation},
		{"journal", "durable", ""},
	}
	s := nodes[0].Sharding()
	ids := map[string][]string{}
	local := map[string]string{}
	for _, p := range policies {
		if _, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: p.typ, Checkpoint: p.checkpoint}); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < entities; i++ {
			id := "d" + strconv.Itoa(i)
			r, err := s.Ask(ctx, p.typ, id, []byte("inc"))
			if err != nil {
				b.Fatal(err)
			}
			ids[p.typ] = append(ids[p.typ], id)
			if local[p.typ] == "" && r.Node == nodes[0].Self().Address {
				local[p.typ] = id
			}
		}
	}
	inc := []byte("inc")
	for _, p := range policies {
		b.Run("serial/"+p.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			cpu := reportCPU(b)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if _, err := s.Ask(ctx, p.typ, local[p.typ], inc); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			cpu()
			reportRate(b)
			reportLatency(b, lat)
		})
		b.Run("concurrent/"+p.name, func(b *testing.B) {
			all := ids[p.typ]
			next := make([]int, askers)
			for a := range next {
				next[a] = a * len(all) / askers
			}
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			cpu := reportCPU(b)
			b.ResetTimer()
			parallelOps(b, askers, func(a int, _ int64) error {
				k := next[a]
				next[a] += 7
				start := time.Now()
				_, err := s.Ask(ctx, p.typ, all[k%len(all)], inc)
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				return err
			})
			b.StopTimer()
			cpu()
			reportRate(b)
			reportLatency(b, lat)
			if p.checkpoint == "" {
				reportRecordOverhead(b, nodes[0], p.typ, all[0])
			}
		})
	}
}

// reportRecordOverhead reports the bytes of the records of id's journal beyond their
// payloads and host-call answers (JournalEntry.Effects, the reply an idempotency key
// keeps), on average, as rec-overhead-B.
func reportRecordOverhead(b *testing.B, n *Node, typ, id string) {
	b.Helper()
	journal, ok := sharding.StateStoreAs[sharding.JournalStore](n.states)
	info, found := n.catalog.get(typ)
	if !ok || !found {
		b.Fatalf("no journal store, or no type %s", typ)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	recs, err := journal.ReadJournal(context.Background(), key, 1, 0)
	if err != nil || len(recs) == 0 {
		b.Fatalf("journal of %s/%s: %d records, %v", typ, id, len(recs), err)
	}
	over := 0
	for _, r := range recs {
		e, err := sharding.DecodeJournalEntry(key, r)
		if err != nil {
			b.Fatal(err)
		}
		over += len(r.Data) - len(e.Payload) - len(e.Effects) - len(e.Reply)
	}
	b.ReportMetric(float64(over)/float64(len(recs)), "rec-overhead-B")
}

// reportRate reports the operations per second over the benchmark's time, as asks/s.
func reportRate(b *testing.B) {
	if b.N > 0 && b.Elapsed() > 0 {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "asks/s")
	}
}

// waitBenchMembers waits until every node sees all of them up in a converged view.
func waitBenchMembers(b *testing.B, nodes []*Node) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range nodes {
		for len(n.Members()) != len(nodes) || !n.Membership().View().Converged {
			if time.Now().After(deadline) {
				b.Fatalf("%s: %d members, converged %v", n.Self().Address, len(n.Members()), n.Membership().View().Converged)
			}
			time.Sleep(10 * time.Millisecond) // a poll in a benchmark's set-up, not a wait in a test
		}
	}
}

// BenchmarkJournalActivation is an activation with a journal tail to replay beside one
// without: one member with the built-in store, Rust counters (counter-rust) passivated
// before each activation (a passivation under the journal saves no base, so the next
// activation reads and replays every record since the entity's first). Each reports
// p50-µs and p99-µs of the ask that activates the entity, which is journaled too: each
// iteration adds a record to both tails, so they differ by 100 records throughout.
//
//   - tail-0: a counter whose journal held one record before the first iteration.
//   - tail-100: a counter whose journal held 100.
func BenchmarkJournalActivation(b *testing.B) {
	ctx := context.Background()
	n := startBenchNodes(b, 1, nil)[0]
	waitBenchMembers(b, []*Node{n})
	if _, err := n.Deploy(ctx, testwasm.RustBytes(b, "counter-rust"), sharding.TypeSettings{Name: "counter"}); err != nil {
		b.Fatal(err)
	}
	s := n.Sharding()
	for _, tail := range []int{0, 100} {
		b.Run("tail-"+strconv.Itoa(tail), func(b *testing.B) {
			id := "act-" + strconv.Itoa(tail)
			for range max(tail, 1) {
				if _, err := s.Ask(ctx, "counter", id, []byte("inc")); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				if _, err := s.Passivate(ctx, "counter", id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if _, err := s.Ask(ctx, "counter", id, []byte("get")); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}
