package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// fast is the failure detection profile of these tests: heartbeats every 200 ms, an
// acceptable pause of 3 s and the resolver acting after 4 s of stability. The processes
// share two cores with race-built tests, and a starved process can go silent for
// seconds: a member is found unreachable after about 3.5 s of silence and downed 4 s
// later, so a healthy member that stalls for 2 s is neither, even right after another
// member's stall, when the observer that found it unreachable, or the leader, was the
// one stalled and a stale unreachability outlives the stall by a second or more (see
// TestFastProfileHoldsThroughTwoSecondStalls). A SIGKILL leads to removal in about 9 s.
var fast = []string{"--heartbeat-interval", "200ms", "--acceptable-heartbeat-pause", "3s", "--sbr-stable-after", "4s"}

type memberJSON struct {
	Address   string   `json:"address"`
	UID       string   `json:"uid"`
	Status    string   `json:"status"`
	Roles     []string `json:"roles"`
	Reachable bool     `json:"reachable"`
	Leader    bool     `json:"leader"`
	UpNumber  int      `json:"up_number"`
}

func members(t *testing.T, h *host) ([]memberJSON, bool) {
	t.Helper()
	out, _, ok := cli(t, h, nil, "members", "--json")
	var ms []memberJSON
	if !ok || json.Unmarshal([]byte(out), &ms) != nil {
		return nil, false
	}
	return ms, true
}

// waitView polls members --json on h until cond holds.
func waitView(t *testing.T, h *host, limit time.Duration, what string, cond func([]memberJSON) bool) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.EventuallyNil(t, limit, h.bind+" to see "+what, func() error {
		ms, ok := members(t, h)
		if ok && cond(ms) {
			return nil
		}
		return fmt.Errorf("it sees %+v", ms)
	})
	return time.Since(start)
}

func find(ms []memberJSON, addr string) (memberJSON, bool) {
	for _, m := range ms {
		if m.Address == addr {
			return m, true
		}
	}
	return memberJSON{}, false
}

func startCluster(t *testing.T, n int, extra ...string) []*host {
	t.Helper()
	hosts := []*host{startHost(t, "", extra...)}
	for i := 1; i < n; i++ {
		hosts = append(hosts, startHost(t, hosts[0].bind, extra...))
	}
	waitForCluster(t, hosts)
	return hosts
}

func TestMembersJSONHasTheLifecycleFields(t *testing.T) {
	hosts := startCluster(t, 2, fast...)
	ms, ok := members(t, hosts[1])
	if !ok || len(ms) != 2 {
		t.Fatalf("members: %+v", ms)
	}
	leaders := 0
	for _, m := range ms {
		if m.Address == "" || len(m.UID) != 16 || m.Status != "up" || !m.Reachable || m.Roles == nil {
			t.Fatalf("member %+v", m)
		}
		if m.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders in %+v", leaders, ms)
	}
	out, _, _ := cli(t, hosts[0], nil, "members")
	if !strings.Contains(out, "converged yes") || !strings.Contains(out, "leader ") {
		t.Fatalf("members table:\n%s", out)
	}
}

// measureKill SIGKILLs the last of three hosts and reports the time until the others
// see it unreachable and until they have removed it.
func measureKill(t *testing.T, extra ...string) (time.Duration, time.Duration) {
	hosts := startCluster(t, 3, extra...)
	victim := hosts[2]
	start := time.Now()
	victim.cmd.Process.Signal(syscall.SIGKILL)
	for _, h := range hosts[:2] {
		waitView(t, h, 30*time.Second, "the victim unreachable", func(ms []memberJSON) bool {
			m, ok := find(ms, victim.bind)
			return !ok || !m.Reachable
		})
	}
	unreachable := time.Since(start)
	for _, h := range hosts[:2] {
		waitView(t, h, 60*time.Second, "the victim removed", func(ms []memberJSON) bool {
			_, ok := find(ms, victim.bind)
			return !ok && len(ms) == 2
		})
	}
	return unreachable, time.Since(start)
}

func TestSIGKILLIsUnreachableThenDownedThenRemoved(t *testing.T) {
	unreachable, removed := measureKill(t, fast...)
	t.Logf("fast profile: SIGKILL → unreachable on all %v, → removed %v", unreachable.Round(10*time.Millisecond), removed.Round(10*time.Millisecond))
}

func TestSIGKILLWithDefaultSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("the default failure detector takes about 15 s")
	}
	unreachable, removed := measureKill(t)
	t.Logf("default settings: SIGKILL → unreachable on all %v, → removed %v", unreachable.Round(10*time.Millisecond), removed.Round(10*time.Millisecond))
}

func TestSIGSTOPShorterThanStableAfterDownsNobody(t *testing.T) {
	args := []string{"--heartbeat-interval", "200ms", "--acceptable-heartbeat-pause", "1s", "--sbr-stable-after", "6s"}
	hosts := startCluster(t, 3, args...)
	paused := hosts[2]
	paused.cmd.Process.Signal(syscall.SIGSTOP)
	waitView(t, hosts[0], 10*time.Second, "the paused member unreachable", func(ms []memberJSON) bool {
		m, ok := find(ms, paused.bind)
		return ok && !m.Reachable
	})
	paused.cmd.Process.Signal(syscall.SIGCONT)
	for _, h := range hosts {
		waitView(t, h, 15*time.Second, "all three up and reachable again", allUpView(3))
	}
}

// TestFastProfileHoldsThroughTwoSecondStalls: each member in turn is stopped for 2 s
// (SIGSTOP, then SIGCONT), as a starved process may be on a loaded machine. Nobody is
// downed: the same three members, with their UIDs, are up and reachable afterwards, and
// none of them exited.
func TestFastProfileHoldsThroughTwoSecondStalls(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	ms, _ := members(t, hosts[0])
	uids := map[string]string{}
	for _, m := range ms {
		uids[m.Address] = m.UID
	}
	const stall = 2 * time.Second
	for _, h := range hosts {
		h.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(stall) // the stall itself, not a wait for something
		h.cmd.Process.Signal(syscall.SIGCONT)
	}
	for _, h := range hosts {
		waitView(t, h, 30*time.Second, "the same three members up and reachable", func(ms []memberJSON) bool {
			for _, m := range ms {
				if m.UID != uids[m.Address] {
					return false
				}
			}
			return allUpView(3)(ms)
		})
	}
	for _, h := range hosts {
		select {
		case err := <-h.done:
			h.done <- err
			t.Fatalf("%s exited after a %v stall: %v\n%s", h.bind, stall, err, h.log)
		default:
		}
		if strings.Contains(h.log.String(), "out of the cluster") {
			t.Fatalf("%s was out of the cluster after a %v stall:\n%s", h.bind, stall, h.log)
		}
	}
}

func TestSIGSTOPLongerThanStableAfterRemovesItAndItExits(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	paused := hosts[2]
	paused.cmd.Process.Signal(syscall.SIGSTOP)
	for _, h := range hosts[:2] {
		waitView(t, h, 30*time.Second, "the paused member removed", func(ms []memberJSON) bool {
			_, ok := find(ms, paused.bind)
			return !ok && len(ms) == 2
		})
	}
	paused.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-paused.done:
		paused.done <- err
		if err == nil {
			t.Fatal("the removed member exited 0")
		}
		if !strings.Contains(paused.log.String(), "out of the cluster") {
			t.Fatalf("no clear message in its log:\n%s", paused.log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the removed member did not stop after SIGCONT")
	}
	waitView(t, hosts[0], 10*time.Second, "two up members", func(ms []memberJSON) bool { return len(ms) == 2 })
}

func TestRejoinAsANewMember(t *testing.T) {
	first := startHost(t, "", fast...)
	second := startHost(t, first.bind, fast...)
	rejoiner := startHost(t, first.bind, append([]string{"--rejoin"}, fast...)...)
	waitForCluster(t, []*host{first, second, rejoiner})
	ms, _ := members(t, first)
	old, _ := find(ms, rejoiner.bind)
	if _, errText, ok := cli(t, first, nil, "down", rejoiner.bind); !ok {
		t.Fatal(errText)
	}
	waitView(t, first, 20*time.Second, "the member back with a new UID", func(ms []memberJSON) bool {
		m, ok := find(ms, rejoiner.bind)
		return ok && m.UID != old.UID && m.Status == "up" && len(ms) == 3
	})
	if !strings.Contains(rejoiner.log.String(), "rejoining as a new member") {
		t.Fatalf("log of the rejoiner:\n%s", rejoiner.log)
	}
}

func TestGracefulLeaveThroughTheCLI(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	if _, errText, ok := cli(t, hosts[0], nil, "leave", hosts[1].bind); !ok {
		t.Fatal(errText)
	}
	select {
	case err := <-hosts[1].done:
		hosts[1].done <- err
		if err != nil {
			t.Fatalf("the leaving member exited with %v\n%s", err, hosts[1].log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the leaving member did not exit")
	}
	waitView(t, hosts[0], 10*time.Second, "two members", func(ms []memberJSON) bool { return len(ms) == 2 })
	mustFail(t, hosts[0], nil, "no such member", "down", "10.255.255.1:9")
}

func TestWrongGossipKeyCannotJoin(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	other := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))
	first := startHost(t, "", append([]string{"--gossip-key", key}, fast...)...)
	second := startHost(t, first.bind, append([]string{"--gossip-key", key}, fast...)...)
	waitForCluster(t, []*host{first, second})
	intruder := startHost(t, first.bind, "--gossip-key", other, "--join-timeout", "3s")
	select {
	case err := <-intruder.done:
		intruder.done <- err
		if err == nil || !strings.Contains(intruder.log.String(), "could not join") {
			t.Fatalf("intruder: %v\n%s", err, intruder.log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the member with the wrong key did not give up")
	}
	if ms, _ := members(t, first); len(ms) != 2 {
		t.Fatalf("the cluster has %d members", len(ms))
	}
	bad := startHost(t, "", "--gossip-key", "c2hvcnQ=")
	select {
	case err := <-bad.done:
		bad.done <- err
		if err == nil || !strings.Contains(bad.log.String(), "16, 24 or 32 bytes") {
			t.Fatalf("short key: %v %s", err, bad.log)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a short key was accepted")
	}
}

func TestFiveMembersConverge(t *testing.T) {
	start := time.Now()
	hosts := []*host{startHost(t, "", fast...)}
	for i := 1; i < 5; i++ {
		hosts = append(hosts, startHost(t, hosts[0].bind, fast...))
	}
	for _, h := range hosts {
		waitView(t, h, 60*time.Second, "5 up members", func(ms []memberJSON) bool {
			if len(ms) != 5 {
				return false
			}
			for _, m := range ms {
				if m.Status != "up" {
					return false
				}
			}
			return true
		})
	}
	t.Logf("5 processes started and all up in every view after %v", time.Since(start).Round(10*time.Millisecond))
}
