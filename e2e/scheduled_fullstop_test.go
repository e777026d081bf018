package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// metricSum sums, over hosts, the samples of the Prometheus metric name (with its
// suffix: _total, _count) whose labels include every one of labels (`key="value"`).
// Its error names the samples of name it saw, when the sum is 0.
func metricSum(hosts []*host, name string, labels ...string) (float64, error) {
	var sum float64
	var seen []string
	for _, h := range hosts {
		resp, err := http.Get("http://" + h.api + "/metrics")
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s/metrics: %d %v", h.api, resp.StatusCode, err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines:
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			seen = append(seen, h.api+": "+line)
			for _, l := range labels {
				if !strings.Contains(line, l) {
					continue lines
				}
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %v", h.api, line, err)
			}
			sum += v
		}
	}
	if sum == 0 {
		return 0, fmt.Errorf("no sample of %s with %v among %q", name, labels, seen)
	}
	return sum, nil
}

// TestScheduledMessageDueDuringAFullStopIsDeliveredOnceLate: a message scheduled with
// tell --in falls due while the whole cluster is stopped; once the cluster is back it
// is delivered once, with no message asking for its entity first, and marked late:
// counted in shardhost_reminders_late_total and its lateness observed on the member
// that delivered it, and logged as late with its ID.
func TestScheduledMessageDueDuringAFullStopIsDeliveredOnceLate(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var hosts []*host
	for i, d := range dirs {
		join := ""
		if i > 0 {
			join = hosts[0].bind
		}
		hosts = append(hosts, startHostIn(t, d, join))
	}
	waitForCluster(t, hosts)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	target := "counter/late"
	// Due 30 s ahead: a loaded machine stores it and stops the cluster before then.
	out, errText, ok := cli(t, hosts[0], nil, "tell", "--in", "30s", target, "inc")
	f := strings.Fields(out)
	if !ok || len(f) == 0 || !strings.HasPrefix(f[len(f)-1], "sm-") {
		t.Fatalf("tell --in: %s%s", out, errText)
	}
	id := f[len(f)-1]
	list, errText, ok := cli(t, hosts[0], nil, "scheduled", "list", target, "-o", "json")
	var due int64
	if i := strings.Index(list, `"deliver_at_unix_ms": `); ok && i >= 0 {
		due, _ = strconv.ParseInt(strings.TrimRight(strings.Fields(list[i+len(`"deliver_at_unix_ms": `):])[0], ","), 10, 64)
	}
	if due == 0 || !strings.Contains(list, id) {
		t.Fatalf("scheduled list: %s%s", list, errText)
	}
	binds := []string{hosts[0].bind, hosts[1].bind, hosts[2].bind}
	for i := len(hosts) - 1; i >= 0; i-- {
		hosts[i].stop(t)
	}
	if stopped := time.Now().UnixMilli(); stopped >= due {
		// It may have been delivered before the stop: not the scenario.
		t.Fatalf("the cluster took until %d to stop, past the message's due time %d", stopped, due)
	}
	// The cluster is down when the message falls due, and for 6 s more: over the 5 s
	// past which a delivery counts as late (sharding.LateScheduledAfter).
	for time.Now().UnixMilli() <= due+6000 {
		time.Sleep(100 * time.Millisecond) // the wall clock passing the due time is the scenario
	}
	back := time.Now().UnixMilli()
	hosts = nil
	for i, d := range dirs {
		join := ""
		if i > 0 {
			join = hosts[0].bind
		}
		hosts = append(hosts, restartHostAt(t, d, binds[i], join))
	}
	waitForCluster(t, hosts)
	// Delivered, then deleted, with no message for the entity.
	testutil.EventuallyNil(t, 120*time.Second, "the late message delivered", func() error {
		out, errText, ok := cli(t, hosts[1], nil, "scheduled", "list", target)
		if !ok || !strings.Contains(out, "no scheduled messages") {
			return fmt.Errorf("%s%s", out, errText)
		}
		return nil
	})
	kind := `shardhost_reminder_kind="scheduled"`
	typ := `shardhost_entity_type="counter"`
	late, err := metricSum(hosts, "shardhost_reminders_late_total", kind, typ)
	if err != nil || late != 1 {
		t.Fatalf("shardhost_reminders_late_total{scheduled} over the members = %v %v, want 1", late, err)
	}
	observed, err := metricSum(hosts, "shardhost_reminders_lateness_seconds_count", kind, typ)
	if err != nil || observed != 1 {
		t.Fatalf("shardhost_reminders_lateness_seconds_count{scheduled} = %v %v, want 1", observed, err)
	}
	lateness, err := metricSum(hosts, "shardhost_reminders_lateness_seconds_sum", kind, typ)
	if err != nil || lateness < float64(back-due)/1000 {
		t.Fatalf("lateness %v s %v, want at least the %d ms between the due time and the restart", lateness, err, back-due)
	}
	logged := 0
	for _, h := range hosts {
		for _, line := range strings.Split(h.log.String(), "\n") {
			if strings.Contains(line, "scheduled message delivered late") && strings.Contains(line, id) {
				logged++
			}
		}
	}
	if logged != 1 {
		t.Fatalf("the late delivery of %s logged %d times, want 1", id, logged)
	}
	status, count, _, err := api(hosts[0], "ask", "counter", "late", "get")
	if err != nil || status != 200 || count != "1" {
		t.Fatalf("get: %d %q %v, want 1: the message once", status, count, err)
	}
}
