package host

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// benchStore is a state store a benchmark runs on: builtin (srv nil), or a PostgreSQL
// server.
type benchStore struct {
	name string
	srv  *pgtest.Server
}

// benchStores returns builtin, and postgres on a server started for the benchmark when
// PostgreSQL's binaries are installed.
func benchStores(b *testing.B) []benchStore {
	out := []benchStore{{name: "builtin"}}
	if pgtest.BinDir() != "" {
		out = append(out, benchStore{name: "postgres", srv: pgtest.Start(b, pgtest.Options{})})
	} else {
		b.Log("PostgreSQL binaries not found: builtin only")
	}
	return out
}

// benchDatabase returns the Config.StateStore of a fresh database on srv, or "" (builtin).
func benchDatabase(b *testing.B, srv *pgtest.Server) string {
	if srv == nil {
		return ""
	}
	return srv.NewDatabase(b)
}

// BenchmarkFullRestartRestore100: three members, a type with remember entities and 10
// shards, 100 counters with state; every member stops gracefully, then all start again
// on the same addresses and data directories. restore-ms is from the first restarted
// member's start until all 100 counters answered from their saved state (members
// joining, the coordinator recovering, shards allocated, each entity restarted by
// remember entities, its snapshot loaded); remembered-ms is until the last counter had
// restarted by itself, before any message was sent. Run with -benchtime=1x: each
// iteration builds a cluster.
func BenchmarkFullRestartRestore100(b *testing.B) {
	for _, store := range benchStores(b) {
		b.Run(store.name, func(b *testing.B) {
			var restore, remembered time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				stateStore := benchDatabase(b, store.srv)
				dirs := []string{b.TempDir(), b.TempDir(), b.TempDir()}
				var cfgs []Config
				var nodes []*Node
				for k, dir := range dirs {
					cfg := DefaultConfig()
					cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", ""
					cfg.DataDir, cfg.StateStore = dir, stateStore
					cfg.GossipProfile, cfg.Lifecycle, cfg.Runtime.CacheDir, cfg.Logger = "local", tolerantLifecycle(), cacheDir, quietLogger()
					if k > 0 {
						cfg.Join = []string{nodes[0].Self().Address}
					}
					n, err := Start(context.Background(), cfg)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { n.Kill() })
					// The same addresses after the restart: the built-in store ranks its
					// replicas by member address.
					cfg.BindAddr, cfg.TransportAddr = n.Self().Address, n.Self().TransportAddr
					cfgs, nodes = append(cfgs, cfg), append(nodes, n)
				}
				waitMembers(b, nodes)
				ctx := context.Background()
				if _, err := nodes[0].Deploy(ctx, testwasm.Bytes(b, "counter"), sharding.TypeSettings{Name: "r", NumberOfShards: 10, RememberEntities: true}); err != nil {
					b.Fatal(err)
				}
				ids := make([]string, 100)
				for k := range ids {
					ids[k] = "e" + strconv.Itoa(k)
				}
				parallel(b, ids, func(id string) error {
					_, err := nodes[0].Sharding().Ask(ctx, "r", id, []byte("inc "+id[1:]))
					return err
				})
				for k := len(nodes) - 1; k >= 0; k-- {
					if err := nodes[k].Close(); err != nil {
						b.Fatal(err)
					}
				}
				logs := &syncBuffer{}
				b.StartTimer()
				start := time.Now()
				nodes = nodes[:0]
				for k, cfg := range cfgs {
					// Debug: sharding logs "entity activated" (activations) there.
					cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
					if k > 0 {
						cfg.Join = []string{cfgs[0].BindAddr}
					}
					var n *Node
					var err error
					for attempt := 0; ; attempt++ { // the addresses may still be held for a moment
						if n, err = Start(ctx, cfg); err == nil || attempt == 50 {
							break
						}
						time.Sleep(100 * time.Millisecond) // a retry's pace
					}
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { n.Kill() })
					nodes = append(nodes, n)
				}
				waitMembers(b, nodes)
				for activations(logs.String()) < len(ids) {
					if time.Since(start) > 2*time.Minute {
						b.Fatalf("%d of %d remembered entities restarted within 2 minutes", activations(logs.String()), len(ids))
					}
					time.Sleep(5 * time.Millisecond) // the measured wait's poll: testutil's backoff would blur the figure
				}
				remembered += time.Since(start)
				parallel(b, ids, func(id string) error {
					for {
						r, err := nodes[len(id)%3].Sharding().Ask(ctx, "r", id, []byte("get"))
						if err == nil {
							if string(r.Payload) != id[1:] {
								return fmt.Errorf("%s = %s after the restart, want %s", id, r.Payload, id[1:])
							}
							return nil
						}
						if time.Since(start) > 2*time.Minute {
							return err
						}
						time.Sleep(20 * time.Millisecond) // a retry's pace, within the measurement
					}
				})
				restore += time.Since(start)
				b.StopTimer()
				for _, n := range nodes {
					n.Kill()
				}
			}
			b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
			b.ReportMetric(float64(remembered.Milliseconds())/float64(b.N), "remembered-ms")
		})
	}
}

var activatedRE = regexp.MustCompile(`msg="entity activated" entity=r/`)

// activations counts the activations of type r's entities in a log.
func activations(log string) int { return len(activatedRE.FindAllStringIndex(log, -1)) }
