package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// lifecycleEvent is an entity activation or stop found in a host's log.
type lifecycleEvent struct {
	at     time.Time
	host   string
	entity string
	start  bool
}

var eventRE = regexp.MustCompile(`time=(\S+) level=INFO msg="entity (activated|stopped)" entity=(\S+)`)

func lifecycleEvents(t *testing.T, hosts []*host) []lifecycleEvent {
	t.Helper()
	var out []lifecycleEvent
	for _, h := range hosts {
		for _, m := range eventRE.FindAllStringSubmatch(h.log.String(), -1) {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				t.Fatalf("bad time %q", m[1])
			}
			out = append(out, lifecycleEvent{at: at, host: h.bind, entity: m[3], start: m[2] == "activated"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// checkSingleActivation fails if an entity was active on two hosts at once, from the
// activations and stops the hosts logged. A host that was killed has no stop: its
// activations end when it died (killedAt).
func checkSingleActivation(t *testing.T, hosts []*host, killedAt map[string]time.Time) {
	t.Helper()
	active := map[string]map[string]time.Time{} // entity → host → since
	checked := 0
	for _, e := range lifecycleEvents(t, hosts) {
		hs := active[e.entity]
		if hs == nil {
			hs = map[string]time.Time{}
			active[e.entity] = hs
		}
		for h, since := range hs {
			if k, dead := killedAt[h]; dead && !e.at.Before(k) {
				delete(hs, h)
				continue
			}
			_ = since
		}
		if e.start {
			for h := range hs {
				if h != e.host {
					t.Fatalf("%s activated on %s at %s while active on %s", e.entity, e.host, e.at.Format(time.StampMicro), h)
				}
			}
			hs[e.host] = e.at
			checked++
		} else {
			delete(hs, e.host)
		}
	}
	if checked == 0 {
		t.Fatal("no activation found in the logs")
	}
	t.Logf("checked %d activations: never two at once", checked)
}

// TestShardingMovesStateThroughAJoinAndAGracefulStop: 1,000 Rust entities and 100 Go
// counters on three members while a sender keeps sending; a fourth member joins (shards
// rebalance to it), then one member stops gracefully. Every entity's count equals the
// acknowledged messages it got, and no entity was ever active on two members at once.
func TestShardingMovesStateThroughAJoinAndAGracefulStop(t *testing.T) {
	args := append([]string{"--log-level", "info"}, fast...)
	hosts := startCluster(t, 3, args...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "echo", testwasm.RustPath(t, "echo-rust")); !ok {
		t.Fatalf("deploy echo: %s%s", out, errText)
	}
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy counter: %s%s", out, errText)
	}
	const echoes, counters = 1000, 100
	var acked [echoes]atomic.Int64
	var counted [counters]atomic.Int64
	senders := []*host{hosts[0], hosts[1]} // the first two members stay up
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	send := func(worker int) {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			h := senders[(worker+k)%2]
			if k%5 == 0 {
				i := (worker*7 + k) % counters
				status, _, _, err := api(h, "ask", "counter", "c"+strconv.Itoa(i), "inc")
				if err == nil && status == 200 {
					counted[i].Add(1)
				} else {
					failures.Add(1)
				}
				continue
			}
			i := (worker*131 + k*17) % echoes
			status, _, _, err := api(h, "ask", "echo", "e"+strconv.Itoa(i), "echo x")
			if err == nil && status == 200 {
				acked[i].Add(1)
			} else {
				failures.Add(1)
			}
		}
	}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go send(w)
	}
	time.Sleep(3 * time.Second)
	joined := startHost(t, hosts[0].bind, args...)
	hosts = append(hosts, joined)
	waitForCluster(t, hosts)
	time.Sleep(4 * time.Second) // rebalance rounds every 10 s: at least one happens meanwhile
	hosts[2].stop(t)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	live := []*host{hosts[0], hosts[1], hosts[3]}
	// Every entity's count is exactly its acknowledged messages (+1 for echo's "count"
	// itself; the Go counter's "get" does not count).
	lost := 0
	for i := 0; i < echoes; i++ {
		if acked[i].Load() == 0 {
			continue
		}
		status, body, _, err := api(live[i%3], "ask", "echo", "e"+strconv.Itoa(i), "count")
		if err != nil || status != 200 {
			t.Fatalf("count of e%d: %d %s %v", i, status, body, err)
		}
		if want := strconv.FormatInt(acked[i].Load()+1, 10); body != want {
			lost++
			if lost < 5 {
				t.Errorf("e%d counted %s, want %s", i, body, want)
			}
		}
	}
	for i := 0; i < counters; i++ {
		if counted[i].Load() == 0 {
			continue
		}
		status, body, _, err := api(live[i%3], "ask", "counter", "c"+strconv.Itoa(i), "get")
		if err != nil || status != 200 || body != strconv.FormatInt(counted[i].Load(), 10) {
			lost++
			if lost < 10 {
				t.Errorf("c%d = %s (%d %v), want %d", i, body, status, err, counted[i].Load())
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d entities lost acknowledged messages", lost)
	}
	t.Logf("%d asks failed during the join and the stop (not acknowledged, so not counted)", failures.Load())
	out, errText, ok := cli(t, live[0], nil, "shards", "--json")
	if !ok {
		t.Fatalf("shards: %s", errText)
	}
	var rep struct {
		Regions []struct {
			Node                  string `json:"node"`
			Passivations          uint64 `json:"passivations"`
			BufferedDuringHandoff uint64 `json:"buffered_during_handoff"`
			DeadLetters           uint64 `json:"dead_letters"`
		} `json:"regions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("shards --json: %v: %s", err, out)
	}
	for _, r := range rep.Regions {
		t.Logf("%s: %d messages buffered during handoffs, %d dead letters", r.Node, r.BufferedDuringHandoff, r.DeadLetters)
	}
	checkSingleActivation(t, append(live, hosts[2]), nil)
}

// TestEveryMessageCheckpointSurvivesSIGKILL: with --checkpoint every-message, SIGKILL a
// member: no acknowledged increment is lost.
func TestEveryMessageCheckpointSurvivesSIGKILL(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", "--checkpoint", "every-message",
		testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	victim := hosts[2]
	acked := map[string]int{}
	onVictim := 0
	for i := 0; i < 60; i++ {
		id := "k" + strconv.Itoa(i)
		for k := 0; k <= i%3; k++ {
			status, body, node, err := api(hosts[i%2], "ask", "counter", id, "inc")
			if err != nil || status != 200 {
				t.Fatalf("inc %s: %d %s %v", id, status, body, err)
			}
			if node == victim.bind && k == 0 {
				onVictim++
			}
			acked[id]++
		}
	}
	if onVictim == 0 {
		t.Fatal("no counter on the member to kill")
	}
	victim.cmd.Process.Kill()
	waitView(t, hosts[0], 30*time.Second, "the victim removed", func(ms []memberJSON) bool { return len(ms) == 2 })
	for id, n := range acked {
		status, body, _, err := api(hosts[0], "ask", "counter", id, "get")
		if err != nil || status != 200 || body != strconv.Itoa(n) {
			t.Fatalf("%s after SIGKILL: %d %q %v, want %d", id, status, body, err, n)
		}
	}
	t.Logf("%d of 60 counters were on the killed member; none lost an acknowledged increment", onVictim)
}

// TestIdlePassivationKeepsState: entities passivated by idle timeout come back with
// their state.
func TestIdlePassivationKeepsState(t *testing.T) {
	hosts := startCluster(t, 2, append([]string{"--log-level", "info"}, fast...)...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", "--passivate-after", "1s",
		testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	for i := 0; i < 10; i++ {
		if _, errText, ok := cli(t, hosts[0], nil, "ask", fmt.Sprintf("counter/p%d", i), "inc "+strconv.Itoa(i+1)); !ok {
			t.Fatal(errText)
		}
	}
	testutil.EventuallyNil(t, 20*time.Second, "10 counters passivated", func() error {
		stops := 0
		for _, e := range lifecycleEvents(t, hosts) {
			if !e.start && strings.HasPrefix(e.entity, "counter/p") {
				stops++
			}
		}
		if stops < 10 {
			return fmt.Errorf("%d passivated", stops)
		}
		return nil
	})
	for i := 0; i < 10; i++ {
		out, errText, ok := cli(t, hosts[1], nil, "ask", fmt.Sprintf("counter/p%d", i), "get")
		if !ok || strings.TrimSpace(out) != strconv.Itoa(i+1) {
			t.Fatalf("p%d after passivation: %q %s", i, out, errText)
		}
	}
}

// TestFullRestartWithRememberEntities: stop every member; start them again on the same
// addresses and data directories: remembered entities restart by themselves, with
// their state.
func TestFullRestartWithRememberEntities(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := append([]string{"--log-level", "info"}, fast...)
	hosts := []*host{startHostIn(t, dirs[0], "", args...)}
	for _, d := range dirs[1:] {
		hosts = append(hosts, startHostIn(t, d, hosts[0].bind, args...))
	}
	waitForCluster(t, hosts)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", "--remember-entities",
		testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	for i := 0; i < 20; i++ {
		if _, errText, ok := cli(t, hosts[i%3], nil, "ask", fmt.Sprintf("counter/m%d", i), "inc "+strconv.Itoa(i+1)); !ok {
			t.Fatal(errText)
		}
	}
	binds := []string{hosts[0].bind, hosts[1].bind, hosts[2].bind}
	for i := len(hosts) - 1; i >= 0; i-- {
		hosts[i].stop(t)
	}
	// Start again on the same addresses (the state store ranks replicas by address).
	restarted := []*host{restartHostAt(t, dirs[0], binds[0], "", args...)}
	for i := 1; i < 3; i++ {
		restarted = append(restarted, restartHostAt(t, dirs[i], binds[i], binds[0], args...))
	}
	waitForCluster(t, restarted)
	testutil.EventuallyNil(t, 30*time.Second, "the 20 remembered entities to restart by themselves", func() error {
		started := map[string]bool{}
		for _, e := range lifecycleEvents(t, restarted) {
			if e.start {
				started[e.entity] = true
			}
		}
		if len(started) < 20 {
			return fmt.Errorf("%d restarted", len(started))
		}
		return nil
	})
	for i := 0; i < 20; i++ {
		out, errText, ok := cli(t, restarted[i%3], nil, "ask", fmt.Sprintf("counter/m%d", i), "get")
		if !ok || strings.TrimSpace(out) != strconv.Itoa(i+1) {
			t.Fatalf("m%d after the restart: %q %s", i, out, errText)
		}
	}
}
