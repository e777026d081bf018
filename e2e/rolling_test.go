package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// withCustomSection returns a copy of a wasm module with a custom section appended (id
// 0, name and payload): the same code, another digest: a new version of the module.
func withCustomSection(wasm []byte, name, payload string) []byte {
	body := append(uleb(uint64(len(name))), name...)
	body = append(body, payload...)
	out := append([]byte(nil), wasm...)
	out = append(out, 0)
	out = append(out, uleb(uint64(len(body)))...)
	return append(out, body...)
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

// freshConnections is an HTTP client that opens a connection for each request, as a
// load balancer's health-checked upstream pool would not hand it one the member is
// closing: with keep-alive, a member that closes an idle connection just as a client
// sends a request on it leaves the client with an EOF for a request that may or may
// not have been handled (net/http retries that only for idempotent requests).
var freshConnections = &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}

// askFresh is api's ask over a new connection.
func askFresh(h *host, typ, id, payload string) (int, string, error) {
	resp, err := freshConnections.Post("http://"+h.api+"/v1/ask?type="+url.QueryEscape(typ)+"&id="+url.QueryEscape(id),
		"application/octet-stream", strings.NewReader(payload))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestRollingRestartLosesNothing: three members under steady load (two senders asking
// 60 Rust entities with every-message checkpoints) are stopped gracefully and started
// again, one after another, on the same address and data directory; midway a new
// version of the module is deployed. The senders, like clients behind a load balancer,
// go to another member when one refuses connections (it is down), and never see an
// error; no acknowledged message is lost; the entities run the new version with their
// state.
func TestRollingRestartLosesNothing(t *testing.T) {
	args := []string{"--log-level", "info"}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	hosts := []*host{startHostIn(t, dirs[0], "", args...)}
	for i := 1; i < 3; i++ {
		hosts = append(hosts, startHostIn(t, dirs[i], hosts[0].bind, args...))
	}
	waitForCluster(t, hosts)
	echo := testwasm.RustPath(t, "echo-rust")
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "echo", "--checkpoint", "every-message", echo); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}

	const entities = 60
	var acked [entities]atomic.Int64
	var mu sync.Mutex // guards current, ready, failures, latencies
	current := slices.Clone(hosts)
	// Like a load balancer, the senders send to ready members only (GET /ready, polled
	// every 50 ms): a member that begins a graceful stop turns not ready at once, and
	// serves what still reaches it until it has left.
	ready := []bool{true, true, true}
	var failures []string
	var latencies []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	send := func(worker int) {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			i := (worker*31 + k*7) % entities
			start := time.Now()
			for attempt := 0; ; attempt++ {
				mu.Lock()
				j := (worker + k + attempt) % 3
				h, up := current[j], ready[j]
				mu.Unlock()
				if !up && attempt < 300 {
					time.Sleep(time.Millisecond) // a retry's pace: another member next
					continue
				}
				status, body, err := askFresh(h, "echo", "e"+strconv.Itoa(i), "echo x")
				if err != nil && errors.Is(err, syscall.ECONNREFUSED) && attempt < 100 {
					// The member is down (stopped, not yet started again): the request
					// never reached it. A load balancer would send it elsewhere.
					time.Sleep(10 * time.Millisecond) // a retry's pace
					continue
				}
				mu.Lock()
				if err == nil && status == 200 {
					acked[i].Add(1)
					latencies = append(latencies, time.Since(start))
				} else {
					failures = append(failures, fmt.Sprintf("e%d via %s: %d %s %v", i, h.bind, status, strings.TrimSpace(body), err))
				}
				mu.Unlock()
				break
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for j := range 3 {
				mu.Lock()
				h := current[j]
				mu.Unlock()
				resp, err := probe.Get("http://" + h.api + "/ready")
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				ready[j] = ok
				mu.Unlock()
			}
		}
	}()
	for w := range 2 {
		wg.Add(1)
		go send(w)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	acks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(latencies)
	}
	waitMore := func(what string) {
		n := acks()
		testutil.EventuallyNil(t, 60*time.Second, "50 more acknowledged asks "+what, func() error {
			if got := acks() - n; got < 50 {
				return fmt.Errorf("%d so far", got)
			}
			return nil
		})
	}
	waitMore("before the roll")
	for i := range hosts {
		hosts[i].stop(t)
		peer := hosts[(i+1)%3]
		hosts[i] = restartHostAt(t, dirs[i], hosts[i].bind, peer.bind, args...)
		mu.Lock()
		current[i] = hosts[i]
		mu.Unlock()
		waitForCluster(t, hosts)
		waitMore(fmt.Sprintf("after restarting member %d", i+1))
		if i == 0 {
			// Midway, a new version of the module: the same code, another digest.
			b, err := os.ReadFile(echo)
			if err != nil {
				t.Fatal(err)
			}
			v2 := filepath.Join(t.TempDir(), "echo-v2.wasm")
			os.WriteFile(v2, withCustomSection(b, "shardhost.test.version", "2"), 0o644)
			if out, errText, ok := cli(t, hosts[1], nil, "deploy", "--type", "echo", v2); !ok || !strings.Contains(out, "version 2") {
				t.Fatalf("deploy v2: %s%s", out, errText)
			}
			waitMore("after deploying version 2")
		}
	}
	close(stop)
	wg.Wait()

	lost := 0
	for i := range entities {
		status, body, _, err := api(hosts[i%3], "ask", "echo", "e"+strconv.Itoa(i), "count")
		if want := strconv.FormatInt(acked[i].Load()+1, 10); err != nil || status != 200 || body != want {
			lost++
			t.Errorf("e%d counted %q (%d %v), want %s", i, body, status, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("rolling restart of 3 members with a deploy midway: %d asks acknowledged, %d failed, %d entities lost acknowledged messages; latency p50 %v, p99 %v, max %v",
		len(latencies), len(failures), lost, p(0.5), p(0.99), latencies[len(latencies)-1])
	if len(failures) > 0 {
		t.Errorf("%d asks failed during the roll; the first: %v", len(failures), failures[:min(5, len(failures))])
	}
	out, _, _ := cli(t, hosts[0], nil, "modules")
	if !strings.Contains(out, "echo     2") && !strings.Contains(out, "echo  2") {
		lines := strings.Split(out, "\n")
		if len(lines) < 2 || !strings.Contains(lines[1], " 2 ") || !strings.Contains(lines[1], "*") {
			t.Errorf("version 2 is not the current module:\n%s", out)
		}
	}
}
