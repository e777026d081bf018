package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestSubscriptionsBillEachPeriodOnceThroughSIGKILLs: the worked example of durable
// reminders and effectively-once messages (docs/delivery.md). Five subscriptions
// (examples/wasm/subscription, TinyGo) bill themselves every second, a shortened month,
// each firing telling one charge to a ledger (examples/wasm/ledger, Rust); each of the
// three members in turn is SIGKILLed, each subscription must go on billing with nothing
// but its reminder to wake it, and the member is started again on its address and data
// directory. Once the subscriptions are stopped, the ledger must hold every period each
// subscription billed, each once, and a total that is their sum.
func TestSubscriptionsBillEachPeriodOnceThroughSIGKILLs(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	hosts := []*host{startHostIn(t, dirs[0], "", fast...)}
	for i := 1; i < 3; i++ {
		hosts = append(hosts, startHostIn(t, dirs[i], hosts[0].bind, fast...))
	}
	waitForCluster(t, hosts)
	for _, d := range []struct{ typ, path string }{
		{"subscription", testwasm.Path(t, "subscription")},
		{"ledger", testwasm.RustPath(t, "ledger")},
	} {
		if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", d.typ, d.path); !ok {
			t.Fatalf("deploy %s: %s%s", d.typ, out, errText)
		}
	}

	const subs = 5
	amount := func(k int) int64 { return int64(k + 1) }
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	// ask asks typ/id through the members up (a failure, while shards move after a kill,
	// is retried through the next one) and returns the first 200 reply.
	ask := func(up []*host, typ, id, msg string) string {
		t.Helper()
		var reply string
		k := 0
		testutil.EventuallyNil(t, 120*time.Second, fmt.Sprintf("%s/%s to answer %q", typ, id, msg), func() error {
			h := up[k%len(up)]
			k++
			resp, err := c.Post("http://"+h.api+"/v1/ask?type="+url.QueryEscape(typ)+"&id="+url.QueryEscape(id),
				"application/octet-stream", strings.NewReader(msg))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %d %s", h.bind, resp.StatusCode, b)
			}
			reply = string(b)
			return nil
		})
		return reply
	}
	// charged reads the ledger's periods charged to subscription k: the count of each,
	// by period. A period counted twice fails the test at once.
	charged := func(up []*host, k int) map[int64]int64 {
		t.Helper()
		out := map[int64]int64{}
		reply := ask(up, "ledger", "main", "charges sub"+strconv.Itoa(k))
		for _, line := range strings.Split(reply, "\n") {
			if line == "" {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("charges sub%d: line %q", k, line)
			}
			period, err1 := strconv.ParseInt(f[0], 10, 64)
			count, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("charges sub%d: line %q", k, line)
			}
			if count != 1 {
				t.Fatalf("sub%d's period %d charged %d times:\n%s", k, period, count, reply)
			}
			out[period] = count
		}
		return out
	}
	// progress waits until every subscription's charges reach past the last period
	// charged in last, asking only the ledger: the subscriptions bill on their own.
	progress := func(up []*host, what string) []int64 {
		t.Helper()
		last := make([]int64, subs)
		testutil.EventuallyNil(t, 180*time.Second, what, func() error {
			behind := 0
			for k := 0; k < subs; k++ {
				for p := range charged(up, k) {
					if p > last[k] {
						last[k] = p
					}
				}
				if last[k] < 2 {
					behind++
				}
			}
			if behind > 0 {
				return fmt.Errorf("%d subscriptions have not billed 2 periods: %v", behind, last)
			}
			return nil
		})
		return last
	}
	progressPast := func(up []*host, before []int64, what string) {
		t.Helper()
		testutil.EventuallyNil(t, 180*time.Second, what, func() error {
			for k := 0; k < subs; k++ {
				highest := int64(0)
				for p := range charged(up, k) {
					highest = max(highest, p)
				}
				if highest < before[k]+2 {
					return fmt.Errorf("sub%d's last period charged is %d, want %d", k, highest, before[k]+2)
				}
			}
			return nil
		})
	}

	for k := 0; k < subs; k++ {
		if r := ask(hosts, "subscription", "sub"+strconv.Itoa(k), "start 1000 "+strconv.FormatInt(amount(k), 10)+" main"); r != "ok" {
			t.Fatalf("start sub%d: %q", k, r)
		}
	}
	last := progress(hosts, "every subscription to bill 2 periods")
	t.Logf("started: last periods charged %v", last)

	current := append([]*host(nil), hosts...)
	for i := range current {
		victim := current[i]
		others := []*host{current[(i+1)%3], current[(i+2)%3]}
		victim.cmd.Process.Signal(syscall.SIGKILL)
		err := <-victim.done
		victim.done <- err
		progressPast(others, last, fmt.Sprintf("every subscription to bill 2 more periods after member %d was killed", i+1))
		current[i] = restartHostAt(t, dirs[i], victim.bind, others[0].bind, fast...)
		waitForCluster(t, current)
		for k := range last {
			for p := range charged(current, k) {
				last[k] = max(last[k], p)
			}
		}
		t.Logf("member %d killed and started again: last periods charged %v", i+1, last)
		progressPast(current, last, fmt.Sprintf("every subscription to bill 2 more periods after member %d started again", i+1))
	}

	billed := make([]int64, subs)
	for k := range billed {
		r := ask(current, "subscription", "sub"+strconv.Itoa(k), "stop")
		n, err := strconv.ParseInt(r, 10, 64)
		if err != nil {
			t.Fatalf("stop sub%d: %q", k, r)
		}
		billed[k] = n
	}
	// A charge still in a subscription's outbox arrives after the stop: wait until the
	// ledger holds them all, then check that it holds nothing more.
	testutil.EventuallyNil(t, 120*time.Second, "the ledger to hold every period billed", func() error {
		for k := 0; k < subs; k++ {
			if got := int64(len(charged(current, k))); got < billed[k] {
				// Its next message (this status) sends its outbox again.
				ask(current, "subscription", "sub"+strconv.Itoa(k), "status")
				return fmt.Errorf("sub%d: %d periods charged of %d billed", k, got, billed[k])
			}
		}
		return nil
	})
	var want int64
	for k := 0; k < subs; k++ {
		if s := ask(current, "subscription", "sub"+strconv.Itoa(k), "status"); s != strconv.FormatInt(billed[k], 10) {
			t.Fatalf("sub%d's status after stop is %q, want %d", k, s, billed[k])
		}
		got := charged(current, k)
		for p := int64(1); p <= billed[k]; p++ {
			if got[p] != 1 {
				t.Fatalf("sub%d billed %d periods, but period %d is charged %d times: %v", k, billed[k], p, got[p], got)
			}
		}
		if int64(len(got)) != billed[k] {
			t.Fatalf("sub%d billed %d periods, the ledger holds %d: %v", k, billed[k], len(got), got)
		}
		want += billed[k] * amount(k)
	}
	if total := ask(current, "ledger", "main", "total"); total != strconv.FormatInt(want, 10) {
		t.Fatalf("the ledger's total is %s, want %d (billed %v)", total, want, billed)
	}
	t.Logf("periods billed per subscription: %v; total %d", billed, want)
}
