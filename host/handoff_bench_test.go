package host

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkShardHandoff100 hands off a shard of 100 entities with state: three members,
// a type with one shard, 100 entities with five messages each; the member that hosts
// the shard leaves gracefully. handoff-ms is the handoff itself (BeginHandOff to every
// region, the 100 entities stopped with their snapshots saved to the replicated state
// store, the coordinator told, HandOffComplete), as the region logs it; leave-ms is the
// whole graceful stop of the member (handoff, leaving the cluster, release); serve-ms
// is from the end of the stop until all 100 entities answered from the new member with
// their state (activation from the snapshot included). Run with -benchtime=1x: each
// iteration builds a cluster.
//
// Sub-benchmarks per state store: builtin (the replicated store, each snapshot saved
// on its own) and postgres (a PostgreSQL server this benchmark starts; the shard's
// snapshots saved in batches).
func BenchmarkShardHandoff100(b *testing.B) {
	for _, store := range benchStores(b) {
		b.Run(store.name, func(b *testing.B) { benchShardHandoff100(b, store.srv) })
	}
}

func benchShardHandoff100(b *testing.B, srv *pgtest.Server) {
	for _, g := range []struct {
		name, typ string
		wasm      func(testing.TB) []byte
		msg, get  string
		want      string
	}{
		{"go", "h-go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "counter") }, "inc", "get", "5"},
		{"rust", "h-rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, echoRust) }, "echo x", "count", "6"},
	} {
		b.Run(g.name, func(b *testing.B) {
			var handoff, leave, serve time.Duration
			var snapshotBytes int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				logs := &syncBuffer{}
				nodes := handoffCluster(b, logs, benchDatabase(b, srv))
				ctx := context.Background()
				if _, err := nodes[0].Deploy(ctx, g.wasm(b), sharding.TypeSettings{Name: g.typ, NumberOfShards: 1}); err != nil {
					b.Fatal(err)
				}
				ids := make([]string, 100)
				for k := range ids {
					ids[k] = "e" + strconv.Itoa(k)
				}
				parallel(b, ids, func(id string) error {
					for m := 0; m < 5; m++ {
						if _, err := nodes[0].Sharding().Ask(ctx, g.typ, id, []byte(g.msg)); err != nil {
							return err
						}
					}
					return nil
				})
				var owner *Node
				for _, n := range nodes {
					if len(n.Sharding().LocalState().Shards) == 1 {
						owner = n
					}
				}
				if owner == nil {
					b.Fatal("no member hosts the shard")
				}
				var rest *Node
				for _, n := range nodes {
					if n != owner {
						rest = n
					}
				}
				snapshotBytes = max(snapshotBytes, stateSize(b, owner, g.typ, g.msg))
				b.StartTimer()
				start := time.Now()
				if err := owner.Close(); err != nil {
					b.Fatal(err)
				}
				leave += time.Since(start)
				start = time.Now()
				parallel(b, ids, func(id string) error {
					r, err := rest.Sharding().Ask(ctx, g.typ, id, []byte(g.get))
					if err == nil && string(r.Payload) != g.want {
						b.Errorf("%s: %q after the handoff, want %s", id, r.Payload, g.want)
					}
					return err
				})
				serve += time.Since(start)
				b.StopTimer()
				handoff += loggedHandoff(b, logs.String())
				for _, n := range nodes {
					n.Kill()
				}
			}
			b.ReportMetric(float64(handoff.Milliseconds())/float64(b.N), "handoff-ms")
			b.ReportMetric(float64(leave.Milliseconds())/float64(b.N), "leave-ms")
			b.ReportMetric(float64(serve.Milliseconds())/float64(b.N), "serve-ms")
			b.ReportMetric(float64(snapshotBytes), "snapshot-B")
		})
	}
}

// handoffCluster starts three members logging into logs, on stateStore.
func handoffCluster(b *testing.B, logs *syncBuffer, stateStore string) []*Node {
	b.Helper()
	nodes := startBenchNodes(b, 3, func(cfg *Config) { cfg.Logger, cfg.StateStore = slogTo(logs), stateStore })
	waitMembers(b, nodes)
	return nodes
}

// parallel runs f for every id, eight at a time.
func parallel(b *testing.B, ids []string, f func(string) error) {
	b.Helper()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(id); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// stateSize returns the size of the saved state of an entity of typ after five msg.
func stateSize(b *testing.B, n *Node, typ, msg string) int {
	b.Helper()
	id := "size"
	info, _ := n.catalog.get(typ)
	mod, err := n.modules.get(context.Background(), info.Digest, nil)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := mod.Instantiate(context.Background(), typ, id)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(context.Background())
	for m := 0; m < 5; m++ {
		if _, err := inst.Receive(context.Background(), []byte(msg)); err != nil {
			b.Fatal(err)
		}
	}
	st, err := (&wasmEntity{mod: mod, typ: typ, id: id, inst: inst}).Snapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return len(st)
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

var handedOffRE = regexp.MustCompile(`msg="shard handed off" .*entities=(\d+) .*took=(\S+)`)

// loggedHandoff returns the duration of the handoffs of non-empty shards in a log.
func loggedHandoff(b *testing.B, log string) time.Duration {
	b.Helper()
	var total time.Duration
	found := false
	for _, m := range handedOffRE.FindAllStringSubmatch(log, -1) {
		if m[1] == "0" {
			continue
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			b.Fatalf("bad duration in %q", m[0])
		}
		total += d
		found = true
	}
	if !found {
		b.Fatal("no handoff of a non-empty shard in the log")
	}
	return total
}
