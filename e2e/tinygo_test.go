package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestTinyGoCounterKeepsEveryAcknowledgedIncrement: the counter built by TinyGo with
// transparent state (a snapshot of its memory and globals: a base and deltas), with every-message
// checkpoints, on three members while senders keep incrementing 60 counters. A fourth
// member joins (shards rebalance to it), a member leaves gracefully, then the member that
// joined is SIGKILLed. Every counter then holds every increment that was acknowledged,
// and no more than were sent (an increment whose member died after its checkpoint and
// before its reply counts without an acknowledgement). No counter was ever active on two
// members at once.
func TestTinyGoCounterKeepsEveryAcknowledgedIncrement(t *testing.T) {
	wasm := testwasm.TinyGoPathWith(t, "counter", append(append([]string(nil), testwasm.TinyGoFlags...), testwasm.TransparentTag))
	args := append(append([]string(nil), lifecycleLogLevel...), fast...)
	hosts := startCluster(t, 3, args...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", "--checkpoint", "every-message", wasm); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	const counters = 60
	var acked, sent [counters]atomic.Int64
	var total atomic.Int64
	var mu sync.Mutex
	servedBy := map[string]int{}           // member → acknowledged increments it served
	senders := []*host{hosts[0], hosts[1]} // these two stay up
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (w*11 + k*7) % counters
				sent[i].Add(1)
				status, _, node, err := api(senders[(w+k)%2], "ask", "counter", "t"+strconv.Itoa(i), "inc")
				if err == nil && status == 200 {
					acked[i].Add(1)
					total.Add(1)
					mu.Lock()
					servedBy[node]++
					mu.Unlock()
				}
			}
		}(w)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	// progress waits until n more increments are acknowledged after the call.
	progress := func(what string, n int64, ok func() bool) {
		t.Helper()
		target := total.Load() + n
		testutil.EventuallyNil(t, 60*time.Second, what, func() error {
			if got := total.Load(); got < target || (ok != nil && !ok()) {
				return fmt.Errorf("%d increments acknowledged, want %d", got, target)
			}
			return nil
		})
	}
	served := func(h *host) int {
		mu.Lock()
		defer mu.Unlock()
		return servedBy[h.bind]
	}
	progress("before the join", 200, nil)

	joined := startHost(t, hosts[0].bind, args...)
	hosts = append(hosts, joined)
	waitForCluster(t, hosts)
	// Rebalance rounds run every 10 s: wait until the new member serves counters.
	progress("after the join", 100, func() bool { return served(joined) > 20 })

	leaving := hosts[2]
	leaving.stop(t)
	progress("after the graceful leave", 200, nil)

	onVictim := served(joined)
	joined.cmd.Process.Kill()
	killedAt := time.Now()
	waitView(t, hosts[0], 30*time.Second, "the killed member removed", func(ms []memberJSON) bool { return len(ms) == 2 })
	progress("after the SIGKILL", 200, nil)
	close(stop)
	wg.Wait()

	for i := 0; i < counters; i++ {
		id := "t" + strconv.Itoa(i)
		status, body, _, err := api(hosts[i%2], "ask", "counter", id, "get")
		if err != nil || status != 200 {
			t.Fatalf("get %s: %d %q %v", id, status, body, err)
		}
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil || n < acked[i].Load() || n > sent[i].Load() {
			t.Errorf("counter/%s = %q: want at least the %d acknowledged increments and at most the %d sent",
				id, body, acked[i].Load(), sent[i].Load())
		}
	}
	t.Logf("%d increments acknowledged; the killed member had served %d of them", total.Load(), onVictim)
	checkSingleActivation(t, hosts, map[string]time.Time{joined.bind: killedAt})
}
