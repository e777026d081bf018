package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// askTimeout bounds every ask of the run, on both sides.
const askTimeout = 10 * time.Second

var (
	msgInc = []byte("inc")
	msgGet = []byte("get")
)

// counters is one system's way into its counter entities (or actors), by ID.
type counters interface {
	// Ask sends msg to the counter id and returns its reply.
	Ask(ctx context.Context, id string, msg []byte) ([]byte, error)
	// Tell sends msg without waiting; a refusal for which Busy is true is retried.
	Tell(id string, msg []byte) error
	Busy(err error) bool
}

// latencies are samples of one workload.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// serialAsks asks the warm counter id "inc", one ask at a time, for d or max asks.
func serialAsks(ctx context.Context, c counters, id string, d time.Duration, max int) (latencies, error) {
	for i := 0; i < 200; i++ { // warm the path
		if _, err := c.Ask(ctx, id, msgInc); err != nil {
			return nil, err
		}
	}
	samples := make(latencies, 0, max)
	end := time.Now().Add(d)
	for len(samples) < max {
		start := time.Now()
		if _, err := c.Ask(ctx, id, msgInc); err != nil {
			return nil, err
		}
		now := time.Now()
		samples = append(samples, now.Sub(start))
		if now.After(end) {
			break
		}
	}
	return samples, nil
}

// concurrentAsks runs askers goroutines, each asking "inc" of counters picked in turn
// from ids (each asker starting at its own offset), for d. It returns the asks answered
// and the time they took.
func concurrentAsks(ctx context.Context, c counters, ids []string, askers int, d time.Duration) (int64, time.Duration, error) {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for a := 0; a < askers; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			k := a * len(ids) / askers
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Ask(ctx, ids[k%len(ids)], msgInc); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
				k += 7 // a stride prime to 1,000: askers rarely queue on one counter
			}
		}(a)
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return done.Load(), elapsed, nil
}

// activate asks "inc" of each ID once, with askers goroutines.
func activate(ctx context.Context, c counters, ids []string, askers int) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for a := 0; a < askers; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				if _, err := c.Ask(ctx, ids[i], msgInc); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// tellLoad sends total "inc" tells, round robin over ids, from senders goroutines, and
// returns the time from the first send until every counter shows its tells (read by
// asking "get" of each, one after another, after the last send), and the time from the
// first send to the last.
func tellLoad(ctx context.Context, c counters, ids []string, senders, total int) (applied, sent time.Duration, err error) {
	base := make([]int64, len(ids))
	for i, id := range ids {
		n, err := askCount(ctx, c, id)
		if err != nil {
			return 0, 0, err
		}
		base[i] = n
	}
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := s; i < total; i += senders {
				for {
					err := c.Tell(ids[i%len(ids)], msgInc)
					if err == nil {
						break
					}
					if !c.Busy(err) {
						once.Do(func() { firstErr = err })
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
		}(s)
	}
	wg.Wait()
	sent = time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, id := range ids {
		want := base[i] + int64(total/len(ids))
		if i < total%len(ids) {
			want++
		}
		for {
			n, err := askCount(ctx, c, id)
			if err != nil {
				return 0, 0, err
			}
			if n >= want {
				break
			}
			if time.Now().After(deadline) {
				return 0, 0, fmt.Errorf("counter %s shows %d of %d after 60 s (tells lost)", id, n, want)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	return time.Since(start), sent, nil
}

func askCount(ctx context.Context, c counters, id string) (int64, error) {
	r, err := c.Ask(ctx, id, msgGet)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(r), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %s replied %q", id, r)
	}
	return n, nil
}

// serialActivations asks "inc" of new counters (prefix + a number), one at a time, for
// d or max of them: the latency of a first message.
func serialActivations(ctx context.Context, c counters, prefix string, d time.Duration, max int) (latencies, error) {
	samples := make(latencies, 0, max)
	end := time.Now().Add(d)
	for i := 0; i < max; i++ {
		start := time.Now()
		if _, err := c.Ask(ctx, prefix+strconv.Itoa(i), msgInc); err != nil {
			return nil, err
		}
		now := time.Now()
		samples = append(samples, now.Sub(start))
		if now.After(end) {
			break
		}
	}
	return samples, nil
}

// activationRate has askers goroutines ask "inc" of new counters for d or until max
// have been activated, and returns the activations and the time they took.
func activationRate(ctx context.Context, c counters, prefix string, askers int, d time.Duration, max int) (int64, time.Duration, error) {
	var next, done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for a := 0; a < askers; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				i := int(next.Add(1)) - 1
				if i >= max {
					return
				}
				if _, err := c.Ask(ctx, prefix+strconv.Itoa(i), msgInc); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return done.Load(), time.Since(start), nil
}

// profiled runs f under a CPU profile and between two allocation profiles written to
// dir as NAME.cpu.pprof, NAME.allocs-before.pprof and NAME.allocs.pprof (compare them
// with go tool pprof -sample_index=alloc_space -base). Without dir it just runs f.
func profiled(dir, name string, f func() error) error {
	if dir == "" {
		return f()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	writeAllocs := func(file string) error {
		runtime.GC() // the profile shows allocations as of the last collection
		out, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		defer out.Close()
		return pprof.Lookup("allocs").WriteTo(out, 0)
	}
	if err := writeAllocs(name + ".allocs-before.pprof"); err != nil {
		return err
	}
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return err
	}
	defer cpu.Close()
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return err
	}
	ferr := f()
	pprof.StopCPUProfile()
	if err := writeAllocs(name + ".allocs.pprof"); err != nil {
		return err
	}
	return ferr
}
