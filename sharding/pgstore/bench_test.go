package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
	"github.com/shardhost/shardhost/sharding/statestoretest"
)

// BenchmarkSave measures save latency beside the built-in store: builtin is the
// replicated store on three members (in-memory networks, each replica a bbolt file
// fsynced before it acknowledges, a majority of 2 awaited); postgres is this package
// on a local PostgreSQL 15 (fsync on, synchronous_commit on: one WAL flush per commit).
// serial saves one snapshot at a time and reports p50 and p99 latency; parallel has 16
// writers at once (the saves of many entities checkpointing together) and reports
// their latency and throughput. Snapshots of 1 KiB and 64 KiB, over 100 shards.
func BenchmarkSave(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) []sharding.StateStore
	}{
		{"builtin", func(b *testing.B) []sharding.StateStore {
			return statestoretest.Replicated(b, 3, func(c *replstore.Config) { c.RequestTimeout = 10 * time.Second })
		}},
		{"postgres", func(b *testing.B) []sharding.StateStore {
			srv := pgtest.Start(b, pgtest.Options{})
			url := srv.NewDatabase(b)
			return []sharding.StateStore{open(b, url), open(b, url), open(b, url)}
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			h := st.open(b)
			for _, size := range []int{1 << 10, 64 << 10} {
				state := bytes.Repeat([]byte("s"), size)
				b.Run(fmt.Sprintf("serial/%dKiB", size>>10), func(b *testing.B) {
					b.SetBytes(int64(size))
					var lat []time.Duration
					for i := 0; b.Loop(); i++ {
						key := sharding.EntityKey{Type: "bench", Shard: i % 100, ID: fmt.Sprint("e-", i%1000)}
						t0 := time.Now()
						if err := h[0].Save(context.Background(), key, 1, state); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					report(b, lat)
				})
				b.Run(fmt.Sprintf("parallel16/%dKiB", size>>10), func(b *testing.B) {
					b.SetBytes(int64(size))
					var mu sync.Mutex
					var lat []time.Duration
					var wg sync.WaitGroup
					next := make(chan int)
					for w := 0; w < 16; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							var mine []time.Duration
							for i := range next {
								key := sharding.EntityKey{Type: "bench", Shard: i % 100, ID: fmt.Sprint("p-", i%1000)}
								t0 := time.Now()
								if err := h[w%len(h)].Save(context.Background(), key, 1, state); err != nil {
									b.Error(err)
								}
								mine = append(mine, time.Since(t0))
							}
							mu.Lock()
							lat = append(lat, mine...)
							mu.Unlock()
						}()
					}
					for i := 0; b.Loop(); i++ {
						next <- i
					}
					close(next)
					wg.Wait()
					report(b, lat)
					b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "saves/s")
				})
			}
		})
	}
}

func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkAppendJournal measures journal appends on a local PostgreSQL 15 (fsync on,
// synchronous_commit on: a commit waits for its WAL flush) as concurrency rises, with
// and without the group commit. Each of N writers appends one record of about 100 bytes
// at a time to its own entity (over 100 shards), as the output gate of one entity
// handling a message would. unbatched commits each append alone (JournalBatchSize 1),
// up to 16 transactions at once (as many as the pool's connections): what the appends
// would cost without the batcher (PostgreSQL still shares WAL flushes between commits
// that end together). batched is the default batcher (up to 256 appends a commit, 2
// commits at once, no window). It reports the wall time per append (µs/append, the
// cost the group commit lowers), append latency (p50, p99), appends per second and
// appends per commit.
func BenchmarkAppendJournal(b *testing.B) {
	srv := pgtest.Start(b, pgtest.Options{})
	for _, mode := range []struct {
		name string
		edit func(*Config)
	}{
		{"unbatched", func(c *Config) { c.JournalBatchSize, c.JournalCommits = 1, 16 }},
		{"batched", func(c *Config) {}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			s := openWith(b, srv.NewDatabase(b), mode.edit)
			for _, writers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("writers%d", writers), func(b *testing.B) {
					var mu sync.Mutex
					var lat []time.Duration
					var wg sync.WaitGroup
					next := make(chan struct{})
					commits := s.commits.Load()
					for w := 0; w < writers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							key := sharding.EntityKey{Type: "bench", Shard: w % 100, ID: fmt.Sprintf("%s-%d-%d", b.Name(), writers, w)}
							var mine []time.Duration
							seq := uint64(0)
							for range next {
								seq++
								e := sharding.JournalEntry{Seq: seq, Time: time.Now(), Kind: sharding.MessageKind(1), Sender: "api", Ask: true,
									Payload: bytes.Repeat([]byte("p"), 64), ReplyDigest: 7}
								t0 := time.Now()
								if err := s.AppendJournal(context.Background(), key, 1, []sharding.JournalRecord{{Seq: seq, Data: e.Encode(key)}}); err != nil {
									b.Error(err)
								}
								mine = append(mine, time.Since(t0))
							}
							mu.Lock()
							lat = append(lat, mine...)
							mu.Unlock()
						}()
					}
					for b.Loop() {
						next <- struct{}{}
					}
					close(next)
					wg.Wait()
					report(b, lat)
					n := float64(len(lat))
					b.ReportMetric(b.Elapsed().Seconds()*1e6/n, "µs/append")
					b.ReportMetric(n/b.Elapsed().Seconds(), "appends/s")
					if c := s.commits.Load() - commits; c > 0 {
						b.ReportMetric(n/float64(c), "appends/commit")
					}
				})
			}
		})
	}
}
