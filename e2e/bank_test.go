package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestBankKeepsAcknowledgedDeposits runs a bank as a new user would write one: the bank
// entity (examples/wasm/bank built by Go's port and by TinyGo, and bank-rust) on three
// members, with its cluster-wide PNCounter bank-total, under --checkpoint every:1000: a
// trap would lose every acknowledged message since the activation but for in-memory
// recovery.
// No acknowledged deposit is lost to a reply over the cap, a trap, a deadline, the host
// call budget or a redeploy with fewer flags (which keeps the settings it leaves out);
// passivate and undeploy go through the CLI; and at the end bank-total equals the sum of
// the balances.
func TestBankKeepsAcknowledgedDeposits(t *testing.T) {
	const capBytes = 16 << 10
	hosts := startCluster(t, 3, append([]string{"--message-deadline", "1s", "--max-message-size", strconv.Itoa(capBytes)}, fast...)...)
	modules := []struct{ typ, path string }{
		{"bank-go", testwasm.Path(t, "bank")},
		{"bank-rust", testwasm.RustPath(t, "bank-rust")},
	}
	if _, err := exec.LookPath("tinygo"); err == nil || os.Getenv("TINYGO") != "" || os.Getenv(testwasm.RequireTinyGoEnv) == "1" {
		modules = append(modules, struct{ typ, path string }{"bank-tinygo", testwasm.TinyGoPath(t, "bank")})
	}
	balances := map[string]int64{} // "type/id" → the balance every acknowledged message left
	via := func(i int) *host { return hosts[i%len(hosts)] }
	ask := func(i int, target, msg string) (string, bool) {
		out, errText, ok := cli(t, via(i), nil, "ask", target, msg)
		if !ok {
			return errText, false
		}
		return strings.TrimSpace(out), true
	}
	checkBalance := func(i int, target string) {
		t.Helper()
		if out, ok := ask(i, target, "balance"); !ok || out != strconv.FormatInt(balances[target], 10) {
			t.Fatalf("balance of %s via %s: %q, want %d", target, via(i).bind, out, balances[target])
		}
	}
	deposit := func(i int, target string, n int64) {
		t.Helper()
		out, ok := ask(i, target, "deposit "+strconv.FormatInt(n, 10))
		if !ok || out != strconv.FormatInt(balances[target]+n, 10) {
			t.Fatalf("deposit %d to %s: %q", n, target, out)
		}
		balances[target] += n // acknowledged
	}
	for _, m := range modules {
		t.Run(m.typ, func(t *testing.T) {
			out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", m.typ, "--checkpoint", "every:1000", "--passivate-after", "30s", m.path)
			if !ok {
				t.Fatalf("deploy: %s%s", out, errText)
			}
			alice, bob := m.typ+"/alice", m.typ+"/bob"
			for i := 0; i < 6; i++ {
				deposit(i, alice, int64(10+i))
				deposit(i+1, bob, 3)
			}
			// A reply over the cap: 502 reply-too-large, the account as it was.
			status, body, _, err := api(hosts[1], "ask", m.typ, "alice", strings.Repeat("x", capBytes))
			if err != nil || status != 502 || !strings.Contains(body, `"reply-too-large"`) {
				t.Fatalf("oversized reply: %d %s %v", status, body, err)
			}
			checkBalance(2, alice)
			// A trap, the deadline, the host call budget: each costs its own message.
			for _, c := range []struct{ msg, want string }{
				{"trap", "guest trapped"}, {"loop", "deadline"}, {"spin", "host call budget"},
			} {
				if out, ok := ask(0, alice, c.msg); ok || !strings.Contains(out, c.want) {
					t.Fatalf("%s: ok=%v %q, want a failure with %q", c.msg, ok, out, c.want)
				}
				checkBalance(1, alice)
				deposit(2, alice, 1)
			}
			if out, ok := ask(1, bob, "withdraw 1000"); ok || !strings.Contains(out, "insufficient funds") {
				t.Fatalf("overdraft: ok=%v %q", ok, out)
			}
			// A redeploy (of a new version: the same bytes would be unchanged) with
			// fewer flags keeps every:1000 and passivate-after 30s.
			wasm, err := os.ReadFile(m.path)
			if err != nil {
				t.Fatal(err)
			}
			v2 := filepath.Join(t.TempDir(), m.typ+"-v2.wasm")
			os.WriteFile(v2, withCustomSection(wasm, "shardhost.test.version", "2"), 0o644)
			out, errText, ok = cli(t, hosts[2], nil, "deploy", "--type", m.typ, v2)
			if !ok || !strings.Contains(out, "version 2") || !regexpLine(out, "checkpoint", "every:1000") ||
				!regexpLine(out, "passivate-after", "30s") || strings.Contains(out, "*") {
				t.Fatalf("redeploy with fewer flags:\n%s%s", out, errText)
			}
			// The same bytes again: unchanged, no new version.
			out, errText, ok = cli(t, hosts[0], nil, "deploy", "--type", m.typ, v2)
			if !ok || !strings.Contains(out, "unchanged: "+m.typ+" version 2") {
				t.Fatalf("the same module again:\n%s%s", out, errText)
			}
			checkBalance(0, alice)
			deposit(1, bob, 4)
			// Passivate through the CLI: the state comes back at the next message.
			if out, errText, ok := cli(t, hosts[1], nil, "passivate", alice); !ok || strings.TrimSpace(out) != alice+" passivated" {
				t.Fatalf("passivate: %s%s", out, errText)
			}
			checkBalance(2, alice)
			checkBalance(0, bob)
		})
	}
	// bank-total, read at majority, is the sum of every acknowledged deposit.
	var sum int64
	for _, b := range balances {
		sum += b
	}
	testutil.EventuallyNil(t, 10*time.Second, "bank-total = the sum of the balances", func() error {
		out, errText, ok := cli(t, hosts[1], nil, "ddata", "get", "bank-total", "--consistency", "majority")
		if !ok || strings.TrimSpace(out) != strconv.FormatInt(sum, 10) {
			return fmt.Errorf("bank-total %q %s, the balances sum to %d", out, errText, sum)
		}
		return nil
	})

	// Undeploy through the CLI: the type is refused everywhere, its state kept for a
	// later deploy of the name.
	typ := modules[0].typ
	if out, errText, ok := cli(t, hosts[2], nil, "undeploy", "--type", typ); !ok || !strings.Contains(out, "undeployed "+typ) {
		t.Fatalf("undeploy: %s%s", out, errText)
	}
	for i := range hosts {
		mustFail(t, via(i), nil, "unknown entity type", "ask", typ+"/alice", "balance")
	}
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", typ, modules[0].path); !ok {
		t.Fatalf("deploy after undeploy: %s%s", out, errText)
	}
	checkBalance(1, typ+"/alice")
	checkBalance(2, typ+"/bob")
	mustFail(t, hosts[0], nil, "unknown entity type", "undeploy", "--type", "no-such-bank")

	// Go without -buildmode=c-shared makes a WASI command: refused, with the advice.
	command := filepath.Join(t.TempDir(), "bank-command.wasm")
	build := exec.Command("go", "build", "-o", command, "./bank")
	build.Dir = filepath.Join(testwasm.RepoRoot(), "examples", "wasm")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the bank as a WASI command: %v\n%s", err, b)
	}
	mustFail(t, hosts[0], nil, "WASI command module", "deploy", "--type", "bank-command", command)
	mustFail(t, hosts[0], nil, "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared", "deploy", "--type", "bank-command", command)
	// An unknown type suggests the nearest deployed name; ask without PAYLOAD says so.
	mustFail(t, hosts[0], nil, `did you mean "bank-rust"?`, "ask", "bank-rst/alice", "balance")
	mustFail(t, hosts[0], nil, "missing PAYLOAD", "ask", "bank-rust/alice")
}

// regexpLine reports whether out has a line with the words name and value, in order,
// separated by spaces (a row of the deploy output's settings).
func regexpLine(out, name, value string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == name && f[1] == value {
			return true
		}
	}
	return false
}
