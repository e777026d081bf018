// Package apiload loads a member's management API with well-formed asks and slowloris
// connections at once, and measures the asks' latency and the member's resident
// memory: the hostile-input figures of bench/README.md, measured by
// bench/apiload and, smaller, by an end-to-end test.
package apiload

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what load to put on which API.
type Config struct {
	// API is the member's API, host:port; TLS (optional) makes it HTTPS.
	API string
	TLS *tls.Config
	// Token, if set, is sent as the bearer token of the asks.
	Token string
	// Type is the entity type asked (its entities must answer "inc"), Entities how many
	// entity IDs the asks spread over.
	Type     string
	Entities int
	// Asking is the number of connections sending well-formed asks, each waiting for
	// its reply and then up to Think before the next.
	Asking int
	Think  time.Duration
	// Slow is the number of slowloris connections: each sends a request line and then
	// one byte of a header every Drip, never ending its headers, and is opened again
	// when the member closes it.
	Slow int
	Drip time.Duration
	// Duration is how long the load lasts.
	Duration time.Duration
	// PID, if not 0, is the member's process, whose resident memory is sampled.
	PID int
}

// maxErrors is how many distinct errors a Result keeps.
const maxErrors = 8

// Result is what a run measured.
type Result struct {
	Asks     int         // asks answered 200
	Failed   int         // asks that failed (transport error or another status)
	ByStatus map[int]int // failed asks by HTTP status (0: no answer)
	// Errors holds the first few distinct errors of asks that got no answer (status 0),
	// with how many times each came.
	Errors             map[string]int
	P50, P90, P99, Max time.Duration
	// Throughput is asks answered per second.
	Throughput float64
	// SlowOpened counts slowloris connections opened; SlowClosed those the member
	// closed (its header timeout).
	SlowOpened, SlowClosed int64
	// BaselineRSS is the member's resident memory before the load, PeakRSS the largest
	// sample during it, in bytes (0 without a PID).
	BaselineRSS, PeakRSS uint64
}

func (r Result) String() string {
	return fmt.Sprintf("asks %d (%.0f/s), failed %d %v %v; latency p50 %v p90 %v p99 %v max %v; slowloris opened %d, closed by the member %d; RSS %.1f MiB before, peak %.1f MiB",
		r.Asks, r.Throughput, r.Failed, r.ByStatus, r.Errors, r.P50, r.P90, r.P99, r.Max, r.SlowOpened, r.SlowClosed,
		float64(r.BaselineRSS)/(1<<20), float64(r.PeakRSS)/(1<<20))
}

// Run puts the load on the API for cfg.Duration and returns what it measured. It fails
// only if the API cannot be reached at all. Its goroutines (the askers, the slowloris
// connections, the memory sampler) live no longer than the call: they stop with its
// context and Run waits for them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	res.ByStatus, res.Errors = map[int]int{}, map[string]int{}
	if cfg.PID != 0 {
		res.BaselineRSS = rss(cfg.PID)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	// The load's goroutines have no owner.Group: they live one Run, which ends them (ctx)
	// and waits for them (wg) before it returns.
	var wg sync.WaitGroup

	// The member's memory, sampled every 50 ms.
	var peak atomic.Uint64
	if cfg.PID != 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				if r := rss(cfg.PID); r > peak.Load() {
					peak.Store(r)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}

	// Slowloris: connections that never finish their headers.
	var opened, closed atomic.Int64
	for i := 0; i < cfg.Slow; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if slowloris(ctx, cfg, &opened) {
					closed.Add(1)
				}
			}
		}()
	}

	// Well-formed asks.
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	tr := &http.Transport{TLSClientConfig: cfg.TLS, MaxIdleConnsPerHost: cfg.Asking, MaxConnsPerHost: cfg.Asking}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	for w := 0; w < cfg.Asking; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for ctx.Err() == nil {
				url := fmt.Sprintf("%s://%s/v1/ask?type=%s&id=e-%d", scheme, cfg.API, cfg.Type, rnd.IntN(max(cfg.Entities, 1)))
				req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("inc"))
				if cfg.Token != "" {
					req.Header.Set("Authorization", "Bearer "+cfg.Token)
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				d := time.Since(t0)
				if ctx.Err() != nil {
					if err == nil {
						resp.Body.Close()
					}
					return
				}
				status := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				if status == http.StatusOK {
					res.Asks++
					lat = append(lat, d)
				} else {
					res.Failed++
					res.ByStatus[status]++
					if err != nil {
						if _, seen := res.Errors[err.Error()]; seen || len(res.Errors) < maxErrors {
							res.Errors[err.Error()]++
						}
					}
				}
				mu.Unlock()
				if cfg.Think > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(rnd.Int64N(int64(cfg.Think)))):
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.SlowOpened, res.SlowClosed = opened.Load(), closed.Load()
	res.PeakRSS = max(peak.Load(), res.BaselineRSS)
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		res.P50, res.P90, res.P99, res.Max = q(0.50), q(0.90), q(0.99), lat[len(lat)-1]
	}
	res.Throughput = float64(res.Asks) / elapsed.Seconds()
	if res.Asks == 0 && res.Failed > 0 && res.ByStatus[0] == res.Failed {
		return res, fmt.Errorf("apiload: no ask reached %s", cfg.API)
	}
	return res, nil
}

// slowloris opens one connection, sends a request line and then a byte of a header
// every Drip until the member closes the connection (true) or ctx ends (false).
func slowloris(ctx context.Context, cfg Config, opened *atomic.Int64) bool {
	d := net.Dialer{Timeout: 5 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", cfg.API)
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return false
	}
	opened.Add(1)
	var conn net.Conn = raw
	if cfg.TLS != nil {
		tc := tls.Client(raw, cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return ctx.Err() == nil
		}
		conn = tc
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	if _, err := fmt.Fprintf(conn, "POST /v1/ask?type=%s&id=slow HTTP/1.1\r\nHost: %s\r\nX-Slow: ", cfg.Type, cfg.API); err != nil {
		return ctx.Err() == nil
	}
	// The member answers a header timeout by closing (with or without a 408 first):
	// any read that ends means it is closed.
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, conn)
		close(gone)
	}()
	t := time.NewTicker(cfg.Drip)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			raw.Close()
			<-gone
			return false
		case <-gone:
			return true
		case <-t.C:
			if _, err := conn.Write([]byte("a")); err != nil {
				<-gone
				return ctx.Err() == nil
			}
		}
	}
}

// rss returns a process's resident memory in bytes (Linux /proc), 0 if unknown.
func rss(pid int) uint64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
