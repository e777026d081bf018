package e2e

import (
	"encoding/json"
	"errors"
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
	at       time.Time
	host     string
	entity   string
	start    bool
	restored bool // an activation from saved state
}

// lifecycleLogLevel is the members' log level where a test reads lifecycleEvents:
// sharding logs an entity's activation and stop at Debug.
var lifecycleLogLevel = []string{"--log-level", "debug"}

var eventRE = regexp.MustCompile(`time=(\S+) level=DEBUG msg="entity (activated|stopped)" entity=(\S+)(?: shard=\S+ restored=(true|false))?`)

func lifecycleEvents(t *testing.T, hosts []*host) []lifecycleEvent {
	t.Helper()
	return logEvents(t, hostLogs(hosts))
}

// hostLogs maps each host's address to its log.
func hostLogs(hosts []*host) map[string]string {
	logs := map[string]string{}
	for _, h := range hosts {
		logs[h.bind] = h.log.String()
	}
	return logs
}

// logEvents returns the activations and stops in the logs of members (member → log),
// in time order.
func logEvents(t *testing.T, logs map[string]string) []lifecycleEvent {
	t.Helper()
	var out []lifecycleEvent
	for name, log := range logs {
		for _, m := range eventRE.FindAllStringSubmatch(log, -1) {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				t.Fatalf("bad time %q", m[1])
			}
			out = append(out, lifecycleEvent{at: at, host: name, entity: m[3], start: m[2] == "activated", restored: m[4] == "true"})
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
	checkSingleActivationIn(t, hostLogs(hosts), killedAt)
}

// checkSingleActivationIn is checkSingleActivation on logs (member → log), killedAt by
// the same names.
func checkSingleActivationIn(t *testing.T, logs map[string]string, killedAt map[string]time.Time) {
	t.Helper()
	active := map[string]map[string]time.Time{} // entity → host → since
	checked := 0
	for _, e := range logEvents(t, logs) {
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
// counters on three members while eight senders keep asking; once every entity has
// had a message, a fourth member joins and shards rebalance to it, then one member
// stops gracefully and hands its shards off.
// Each phase (before the join, between the join and the stop, after the stop) needs
// acknowledged asks, failures stay a small share of them, entities moved with their
// state to the new member and away from the stopped one, every entity's count equals
// the acknowledged messages it got, and no entity was ever active on two members at
// once.
func TestShardingMovesStateThroughAJoinAndAGracefulStop(t *testing.T) {
	testShardingMovesStateThroughAJoinAndAGracefulStop(t, nil)
}

// testShardingMovesStateThroughAJoinAndAGracefulStop is TestShardingMovesStateThroughAJoinAndAGracefulStop on the state store named by
// store (--state-store flags; nil: the built-in store).
func testShardingMovesStateThroughAJoinAndAGracefulStop(t *testing.T, store []string) {
	args := append(append(append([]string(nil), lifecycleLogLevel...), fast...), store...)
	hosts := startCluster(t, 3, args...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "echo", testwasm.RustPath(t, "echo-rust")); !ok {
		t.Fatalf("deploy echo: %s%s", out, errText)
	}
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy counter: %s%s", out, errText)
	}
	const echoes, counters = 1000, 100
	// perPhase is the acknowledged asks each phase needs: a few seconds of eight senders
	// give thousands on an idle machine, hundreds on a loaded one.
	const perPhase = 100
	var acked [echoes]atomic.Int64
	var counted [counters]atomic.Int64
	senders := []*host{hosts[0], hosts[1]} // the first two members stay up
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var phase atomic.Int32 // 0 before the join, 1 until the stop, 2 after it
	var phaseAcks, phaseFailures [3]atomic.Int64
	var lastFailure atomic.Value
	send := func(worker int) {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			h := senders[(worker+k)%2]
			p := phase.Load()
			var status int
			var body string
			var err error
			if k%5 == 0 {
				i := (worker*7 + k) % counters
				status, body, _, err = api(h, "ask", "counter", "c"+strconv.Itoa(i), "inc")
				if err == nil && status == 200 {
					counted[i].Add(1)
				}
			} else {
				i := (worker*131 + k*17) % echoes
				status, body, _, err = api(h, "ask", "echo", "e"+strconv.Itoa(i), "echo x")
				if err == nil && status == 200 {
					acked[i].Add(1)
				}
			}
			if err == nil && status == 200 {
				phaseAcks[p].Add(1)
			} else {
				phaseFailures[p].Add(1)
				lastFailure.Store(fmt.Sprintf("%d %s %v", status, strings.TrimSpace(body), err))
			}
		}
	}
	for w := 0; w < 8; w++ {
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
	waitAcks := func(p int, what string) {
		testutil.EventuallyNil(t, 60*time.Second, fmt.Sprintf("%d acknowledged asks %s", perPhase, what), func() error {
			if n := phaseAcks[p].Load(); n < perPhase {
				return fmt.Errorf("%d so far, %d failed (last: %v)", n, phaseFailures[p].Load(), lastFailure.Load())
			}
			return nil
		})
	}
	// Every entity gets a message before the join, so every shard has a home: the new
	// member can then only get shards by handoffs (a rebalance), not by allocation.
	testutil.EventuallyNil(t, 2*time.Minute, "a message acknowledged by every entity before the join", func() error {
		missing := 0
		for i := range acked {
			if acked[i].Load() == 0 {
				missing++
			}
		}
		for i := range counted {
			if counted[i].Load() == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d entities still without one (%d failures, last: %v)", missing, echoes+counters,
				phaseFailures[0].Load(), lastFailure.Load())
		}
		return nil
	})
	waitAcks(0, "before the join")

	joined := startHost(t, hosts[0].bind, args...)
	phase.Store(1)
	hosts = append(hosts, joined)
	waitForCluster(t, hosts)
	// The coordinator rebalances every 10 s: wait until entities have moved to the new
	// member with their state.
	testutil.EventuallyNil(t, 60*time.Second, "entities moved to the new member", func() error {
		if moved := movedTo(lifecycleEvents(t, hosts), joined.bind); len(moved) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	waitAcks(1, "after the join")

	beforeStop := lifecycleEvents(t, hosts)
	stoppedAt := time.Now()
	hosts[2].stop(t)
	phase.Store(2)
	waitAcks(2, "after the graceful stop")
	close(stop)
	wg.Wait()

	live := []*host{hosts[0], hosts[1], hosts[3]}
	events := lifecycleEvents(t, append(live, hosts[2]))
	movedToJoined := movedTo(events, joined.bind)
	// The stopped member's entities: those active there when it stopped that took
	// messages later, which they got elsewhere, from their saved state.
	movedAway := 0
	for _, e := range events {
		if e.start && e.at.After(stoppedAt) && e.host != hosts[2].bind && e.restored && activeOn(beforeStop, e.entity) == hosts[2].bind {
			movedAway++
		}
	}
	if movedAway == 0 {
		t.Errorf("no entity of the stopped member was activated elsewhere with its state")
	}

	// Every entity's count is exactly its acknowledged messages (+1 for echo's "count"
	// itself; the Go counter's "get" does not count).
	lost, checked := 0, 0
	for i := 0; i < echoes; i++ {
		if acked[i].Load() == 0 {
			continue
		}
		checked++
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
		checked++
		status, body, _, err := api(live[i%3], "ask", "counter", "c"+strconv.Itoa(i), "get")
		if err != nil || status != 200 || body != strconv.FormatInt(counted[i].Load(), 10) {
			lost++
			if lost < 10 {
				t.Errorf("c%d = %s (%d %v), want %d", i, body, status, err, counted[i].Load())
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d entities lost acknowledged messages", lost, checked)
	}

	// Buffering during handoffs keeps asks from failing: allow a few (an ask that met a
	// member as it stopped), not a share that would hide lost messages.
	var acks, failures int64
	for p := range phaseAcks {
		acks += phaseAcks[p].Load()
		failures += phaseFailures[p].Load()
		t.Logf("phase %d: %d asks acknowledged, %d failed", p, phaseAcks[p].Load(), phaseFailures[p].Load())
	}
	if failures*50 > acks+failures {
		t.Errorf("%d of %d asks failed, more than 2%% (last: %v)", failures, acks+failures, lastFailure.Load())
	}
	t.Logf("%d entities checked; %d moved to the new member, %d away from the stopped one, with their state",
		checked, len(movedToJoined), movedAway)

	out, errText, ok := cli(t, live[0], nil, "shards", "--json")
	if !ok {
		t.Fatalf("shards: %s", errText)
	}
	var rep struct {
		Regions []struct {
			Node                  string `json:"node"`
			BufferedDuringHandoff uint64 `json:"buffered_during_handoff"`
			DeadLetters           uint64 `json:"dead_letters"`
			Shards                []struct {
				Type string `json:"type"`
			} `json:"shards"`
		} `json:"regions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("shards --json: %v: %s", err, out)
	}
	for _, r := range rep.Regions {
		t.Logf("%s: %d shards, %d messages buffered during handoffs, %d dead letters", r.Node, len(r.Shards), r.BufferedDuringHandoff, r.DeadLetters)
		if r.Node == joined.bind && len(r.Shards) == 0 {
			t.Errorf("the new member hosts no shard")
		}
		if r.Node == hosts[2].bind && len(r.Shards) > 0 {
			t.Errorf("the stopped member still hosts %d shards", len(r.Shards))
		}
	}
	checkSingleActivation(t, append(live, hosts[2]), nil)
}

// movedTo returns the entities activated on host with their saved state after having
// been active on another member: moved there by a handoff.
func movedTo(events []lifecycleEvent, host string) []string {
	seen := map[string]string{} // entity → the member of its last activation
	var moved []string
	for _, e := range events {
		if !e.start {
			continue
		}
		if prev, ok := seen[e.entity]; ok && prev != host && e.host == host && e.restored {
			moved = append(moved, e.entity)
		}
		seen[e.entity] = e.host
	}
	return moved
}

// activeOn returns the member of the entity's last activation among events, or "".
func activeOn(events []lifecycleEvent, entity string) string {
	host := ""
	for _, e := range events {
		if e.start && e.entity == entity {
			host = e.host
		}
	}
	return host
}

// TestEveryMessageCheckpointSurvivesSIGKILL: with --checkpoint every-message, SIGKILL a
// member: no acknowledged increment is lost.
func TestEveryMessageCheckpointSurvivesSIGKILL(t *testing.T) {
	testEveryMessageCheckpointSurvivesSIGKILL(t, nil)
}

// testEveryMessageCheckpointSurvivesSIGKILL is TestEveryMessageCheckpointSurvivesSIGKILL on the state store named by
// store (--state-store flags; nil: the built-in store).
func testEveryMessageCheckpointSurvivesSIGKILL(t *testing.T, store []string) {
	hosts := startCluster(t, 3, append(append([]string{}, fast...), store...)...)
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
	hosts := startCluster(t, 2, append(append([]string(nil), lifecycleLogLevel...), fast...)...)
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
func TestFullRestartWithRememberEntities(t *testing.T) { testFullRestartWithRememberEntities(t, nil) }

// testFullRestartWithRememberEntities is TestFullRestartWithRememberEntities on the state store named by
// store (--state-store flags; nil: the built-in store).
func testFullRestartWithRememberEntities(t *testing.T, store []string) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := append(append(append([]string(nil), lifecycleLogLevel...), fast...), store...)
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
