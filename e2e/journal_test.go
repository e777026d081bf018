package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/history"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestDefaultSettingsKeepEveryAcknowledgedIncThroughSIGKILLs: three members with the
// default settings (the counter deployed with no flag: the journal), two senders asking
// 24 counters through every member, and each member in turn SIGKILLed and started again
// on its address and data directory. The history of every ask is checked as the fault
// tests check theirs (internal/history: each counter linearizable with porcupine, a
// failed ask ambiguous, no acknowledged inc missing from a later read), and a last read
// of every counter must count every inc acknowledged.
func TestDefaultSettingsKeepEveryAcknowledgedIncThroughSIGKILLs(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	hosts := []*host{startHostIn(t, dirs[0], "")}
	for i := 1; i < 3; i++ {
		hosts = append(hosts, startHostIn(t, dirs[i], hosts[0].bind))
	}
	waitForCluster(t, hosts)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	} else if !strings.Contains(out, "checkpoint") || !strings.Contains(out, "journal") {
		t.Fatalf("the deploy's settings do not say the journal:\n%s", out)
	}

	var mu sync.Mutex // guards current
	current := slices.Clone(hosts)
	ask := func(ctx context.Context, c *http.Client, i int, id, msg string) (string, error) {
		mu.Lock()
		h := current[i]
		mu.Unlock()
		return askCounter(ctx, c, h.api, id, msg)
	}
	ids := make([]string, 24)
	for k := range ids {
		ids[k] = "j" + strconv.Itoa(k)
	}
	load := &askLoad{t: t, ask: ask, h: history.New(time.Now()), ids: ids, targets: []int{0, 1, 2},
		lastAck: map[string]int64{}, http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	load.start(2)
	defer func() {
		if load.cancel != nil {
			load.stop()
		}
	}()
	load.waitAcked(100, 60*time.Second, "before the first kill")
	for i := range hosts {
		victim := current[i]
		others := []int{(i + 1) % 3, (i + 2) % 3}
		load.setTargets(others...)
		victim.cmd.Process.Signal(syscall.SIGKILL)
		err := <-victim.done
		victim.done <- err
		// Some asks are in flight to and through the killed member: the history counts
		// them ambiguous. Those to the others go on, and must find every counter again
		// once the dead member's shards have moved.
		load.waitServed(90*time.Second, fmt.Sprintf("by the two others after member %d was killed", i+1))
		restarted := restartHostAt(t, dirs[i], victim.bind, current[others[0]].bind)
		mu.Lock()
		current[i] = restarted
		hostsNow := slices.Clone(current)
		mu.Unlock()
		waitForCluster(t, hostsNow)
		load.setTargets(0, 1, 2)
		load.waitAcked(100, 60*time.Second, fmt.Sprintf("after member %d started again", i+1))
	}
	load.stop()
	load.cancel = nil
	load.finalReads(0, 1, 2)
	n := load.check()
	if n.Acked < 300 {
		t.Fatalf("only %d asks acknowledged: the load did not run", n.Acked)
	}
}

// TestIdempotentRetryAfterAKillReturnsTheFirstReply: a deposit with an idempotency key,
// acknowledged; the member hosting the account is SIGKILLed; the client, not sure of
// the deposit, sends it again with the same key through another member: it gets the
// first reply, and the account holds one deposit.
func TestIdempotentRetryAfterAKillReturnsTheFirstReply(t *testing.T) {
	hosts := startCluster(t, 3)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "bank", testwasm.Path(t, "bank")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	keyed := func(h *host, id, msg, key string) (int, string, string, error) {
		req, err := http.NewRequest("POST", "http://"+h.api+"/v1/ask?type=bank&timeout=5s&id="+url.QueryEscape(id), strings.NewReader(msg))
		if err != nil {
			return 0, "", "", err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Shardhost-Node"), nil
	}
	// An account hosted on the third member, asked through the first.
	id := ""
	for k := 0; k < 200 && id == ""; k++ {
		status, body, node, err := api(hosts[0], "ask", "bank", "acct"+strconv.Itoa(k), "deposit 100")
		if err != nil || status != 200 {
			t.Fatalf("deposit: %d %s %v", status, body, err)
		}
		if node == hosts[2].bind {
			id = "acct" + strconv.Itoa(k)
		}
	}
	if id == "" {
		t.Fatal("no account on the third member")
	}
	status, first, node, err := keyed(hosts[0], id, "deposit 5", "pay-42")
	if err != nil || status != 200 || node != hosts[2].bind || strings.TrimSpace(first) != "105" {
		t.Fatalf("the keyed deposit: %d %q via %s %v, want 105 from %s", status, first, node, err, hosts[2].bind)
	}
	hosts[2].cmd.Process.Signal(syscall.SIGKILL)
	// The retry, as a client that never saw the reply would send it, until it is
	// answered (the account's shard moves to a surviving member meanwhile).
	var retry string
	deadline := time.Now().Add(90 * time.Second)
	for {
		status, body, node, err := keyed(hosts[1], id, "deposit 5", "pay-42")
		if err == nil && status == 200 {
			if node == hosts[2].bind {
				t.Fatalf("answered by the killed member")
			}
			retry = body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer to the retry within 90 s: %d %s %v", status, body, err)
		}
		time.Sleep(200 * time.Millisecond) // a client's retry pace, not a wait for an event
	}
	if retry != first {
		t.Fatalf("the retry got %q, the first deposit %q", retry, first)
	}
	if status, body, _, err := api(hosts[0], "ask", "bank", id, "balance"); err != nil || status != 200 || strings.TrimSpace(body) != "105" {
		t.Fatalf("balance after the retry: %d %q %v, want 105 (one deposit of 5)", status, body, err)
	}
}

// TestBankHistoryRevertAndForkThroughTheCLI: the bank example, built by Go's port, by
// TinyGo and in Rust, with the default settings: its history lists its deposits; a
// revert of the last two takes its balance back, and is a record of its own; a fork at
// the revert's record starts a new account with that balance; what cannot be done (a
// record past the journal's end, a fork onto an account that exists) is refused, naming
// why; a revert behind the base the first one saved reaches back through the history.
func TestBankHistoryRevertAndForkThroughTheCLI(t *testing.T) {
	hosts := startCluster(t, 3)
	modules := []struct{ typ, path string }{
		{"bank-go", testwasm.Path(t, "bank")},
		{"bank-rust", testwasm.RustPath(t, "bank-rust")},
		{"bank-tinygo", testwasm.TinyGoPath(t, "bank")},
	}
	for _, m := range modules {
		t.Run(m.typ, func(t *testing.T) {
			if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", m.typ, m.path); !ok {
				t.Fatalf("deploy: %s%s", out, errText)
			}
			acct := m.typ + "/alice"
			for i, amount := range []string{"10", "20", "30"} {
				if out, errText, ok := cli(t, hosts[i], nil, "ask", acct, "deposit "+amount); !ok {
					t.Fatalf("deposit %s: %s", amount, errText)
				} else if want := []string{"10", "30", "60"}[i]; strings.TrimSpace(out) != want {
					t.Fatalf("deposit %s: %q, want %s", amount, out, want)
				}
			}
			out, errText, ok := cli(t, hosts[1], nil, "history", acct)
			if !ok || strings.Count(out, "deposit ") != 3 || !strings.Contains(out, `"deposit 30"`) {
				t.Fatalf("history: %s%s", out, errText)
			}
			out, errText, ok = cli(t, hosts[2], nil, "revert", acct, "--messages", "2")
			if !ok || !strings.Contains(out, "reverted "+acct+": record 4") {
				t.Fatalf("revert: %s%s", out, errText)
			}
			if out, _, _ := cli(t, hosts[0], nil, "ask", acct, "balance"); strings.TrimSpace(out) != "10" {
				t.Fatalf("balance after the revert: %q, want 10", out)
			}
			out, errText, ok = cli(t, hosts[0], nil, "fork", acct, "alice-copy", "--at", "4")
			if !ok || !strings.Contains(out, "forked "+m.typ+"/alice-copy") {
				t.Fatalf("fork: %s%s", out, errText)
			}
			if out, _, _ := cli(t, hosts[1], nil, "ask", m.typ+"/alice-copy", "deposit 5"); strings.TrimSpace(out) != "15" {
				t.Fatalf("the fork's deposit: %q, want 15", out)
			}
			out, errText, ok = cli(t, hosts[0], nil, "history", acct, "-o", "json")
			if !ok || !strings.Contains(out, `"kind": "revert"`) {
				t.Fatalf("history after the revert: %s%s", out, errText)
			}
			// Refusals: nothing changes.
			mustFail(t, hosts[0], nil, "past the journal's last", "revert", acct, "--to", "99")
			mustFail(t, hosts[0], nil, "entity exists", "fork", acct, "alice-copy")
			mustFail(t, hosts[0], nil, "one of them", "revert", acct)
			if out, _, _ := cli(t, hosts[2], nil, "ask", acct, "balance"); strings.TrimSpace(out) != "10" {
				t.Fatalf("balance after the refusals: %q, want 10", out)
			}
			// Behind the base the first revert saved, within the history: from the
			// journal's first record.
			if out, errText, ok = cli(t, hosts[1], nil, "revert", acct, "--to", "2"); !ok || !strings.Contains(out, "reverted "+acct) {
				t.Fatalf("revert to record 2: %s%s", out, errText)
			}
			if out, _, _ := cli(t, hosts[2], nil, "ask", acct, "balance"); strings.TrimSpace(out) != "30" {
				t.Fatalf("balance after a revert to record 2: %q, want 30", out)
			}
		})
	}
}
