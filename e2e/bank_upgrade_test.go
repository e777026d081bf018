package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// bankBuild is one language's bank: version 1 (examples/wasm/bank or bank-rust), the
// second version with a new state encoding and its migration (bank-v2, bank-rust-v2),
// and version 1 with every deposit trapping (-tags banktrap, --cfg bank_trap).
type bankBuild struct {
	typ, v1, v2, trap string
}

// bankBuilds returns the Go bank (by TinyGo when it is there, as make examples builds
// it, else by Go's port) and the Rust one.
func bankBuilds(t *testing.T) []bankBuild {
	goBank := bankBuild{typ: "bank-go", v1: testwasm.Path(t, "bank"), v2: testwasm.Path(t, "bank-v2"),
		trap: testwasm.PathWith(t, "bank", "-tags=banktrap")}
	if _, err := exec.LookPath("tinygo"); err == nil || os.Getenv("TINYGO") != "" || os.Getenv(testwasm.RequireTinyGoEnv) == "1" {
		goBank = bankBuild{typ: "bank-tinygo", v1: testwasm.TinyGoPath(t, "bank"), v2: testwasm.TinyGoPath(t, "bank-v2"),
			trap: testwasm.TinyGoPathWith(t, "bank", append(append([]string(nil), testwasm.TinyGoFlags...), "-tags=banktrap"))}
	}
	return []bankBuild{goBank, {typ: "bank-rust", v1: testwasm.RustPath(t, "bank-rust"), v2: testwasm.RustPath(t, "bank-rust-v2"),
		trap: testwasm.RustPathWith(t, "bank-rust", "--cfg", "bank_trap")}}
}

// bankLoad deposits into accounts from one goroutine per account, through the members in
// turn, until stop, and keeps what was acknowledged.
type bankLoad struct {
	mu       sync.Mutex
	acked    map[string]int64 // "type/id" → the sum of its acknowledged deposits
	okCount  map[string]int   // "type/id" → its acknowledged deposits
	failed   []string
	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startBankLoad(hosts []*host, accounts []string) *bankLoad {
	l := &bankLoad{acked: map[string]int64{}, okCount: map[string]int{}, stop: make(chan struct{})}
	for i, acct := range accounts {
		typ, id, _ := strings.Cut(acct, "/")
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-l.stop:
					return
				default:
				}
				n := int64(k%9 + 1)
				code, body, err := askFresh(hosts[(i+k)%len(hosts)], typ, id, "deposit "+strconv.FormatInt(n, 10))
				l.mu.Lock()
				if err != nil || code != 200 {
					l.failed = append(l.failed, fmt.Sprintf("deposit %d to %s: %d %s %v", n, acct, code, body, err))
				} else {
					l.acked[acct] += n
					l.okCount[acct]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// count returns the acknowledged deposits of acct so far.
func (l *bankLoad) count(acct string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.okCount[acct]
}

// end stops the load and waits for its goroutines.
func (l *bankLoad) end() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// TestBankUpgradeWithMigrationUnderLoad: the Go and the Rust bank under load (a
// deposit after another into each account, through both members) take their second
// version, whose state has a new encoding, by a deploy and shardhost upgrade --now:
// every account reaches version 2 through its migration with its balance, no deposit
// fails, none is lost (each balance is the sum of its acknowledged deposits, and
// bank-total the sum of the balances). Then version 1's module deployed again cannot
// read version 2's state: the upgrade says so for each account and leaves every one on
// version 2 with its balance.
func TestBankUpgradeWithMigrationUnderLoad(t *testing.T) {
	builds := bankBuilds(t)
	a := startHost(t, "")
	b := startHost(t, a.bind)
	hosts := []*host{a, b}
	waitForCluster(t, hosts)
	const perType = 8
	var accounts []string
	for _, m := range builds {
		if out, errText, ok := cli(t, a, nil, "deploy", "--type", m.typ, m.v1); !ok {
			t.Fatalf("deploy %s v1: %s%s", m.typ, out, errText)
		}
		for i := 0; i < perType; i++ {
			accounts = append(accounts, fmt.Sprintf("%s/acct-%d", m.typ, i))
		}
	}
	load := startBankLoad(hosts, accounts)
	defer load.end()
	// Every account runs version 1 with a deposit or more before the deploy.
	waitForDeposits := func(what string, after map[string]int) {
		t.Helper()
		testutil.EventuallyNil(t, 2*time.Minute, what, func() error {
			for _, acct := range accounts {
				if n := load.count(acct); n <= after[acct] {
					return fmt.Errorf("%s: %d acknowledged deposits", acct, n)
				}
			}
			return nil
		})
	}
	waitForDeposits("a deposit into each account on version 1", nil)
	for _, m := range builds {
		out, errText, ok := cli(t, b, nil, "deploy", "--type", m.typ, m.v2)
		if !ok || !strings.Contains(out, "version 2") {
			t.Fatalf("deploy %s v2: %s%s", m.typ, out, errText)
		}
		out, errText, ok = cli(t, a, nil, "upgrade", "--type", m.typ, "--now")
		if !ok || !strings.Contains(out, fmt.Sprintf("upgraded %d of %d", perType, perType)) {
			t.Fatalf("upgrade %s: %s%s", m.typ, out, errText)
		}
	}
	// Deposits go on on version 2, then the load stops.
	seen := map[string]int{}
	for _, acct := range accounts {
		seen[acct] = load.count(acct)
	}
	waitForDeposits("deposits into each account on version 2", seen)
	load.end()
	if len(load.failed) > 0 {
		t.Fatalf("%d deposits failed during the deploy and the upgrade, the first: %s", len(load.failed), load.failed[0])
	}
	var sum int64
	for k, acct := range accounts {
		typ, id, _ := strings.Cut(acct, "/")
		h := hosts[k%2]
		want := strconv.FormatInt(load.acked[acct], 10)
		if code, body, err := askFresh(h, typ, id, "balance"); err != nil || code != 200 || body != want {
			t.Fatalf("balance of %s after the upgrade: %d %q %v, want %s (its acknowledged deposits)", acct, code, body, err, want)
		}
		if code, body, err := askFresh(h, typ, id, "version"); err != nil || code != 200 || body != "bank 2" {
			t.Fatalf("version of %s after the upgrade: %d %q %v", acct, code, body, err)
		}
		sum += load.acked[acct]
	}
	testutil.EventuallyNil(t, 30*time.Second, "bank-total = the sum of the balances", func() error {
		out, errText, ok := cli(t, b, nil, "ddata", "get", "bank-total", "--consistency", "majority")
		if !ok || strings.TrimSpace(out) != strconv.FormatInt(sum, 10) {
			return fmt.Errorf("bank-total %q %s, the balances sum to %d", out, errText, sum)
		}
		return nil
	})
	// Nothing is left to move.
	for _, m := range builds {
		out, errText, ok := cli(t, b, nil, "upgrade", "--type", m.typ, "--dry-run")
		if !ok || !strings.Contains(out, "dry run: 0 active entities") || strings.Contains(out, "cannot upgrade") {
			t.Fatalf("dry run after the upgrade of %s: %s%s", m.typ, out, errText)
		}
	}

	// Version 1's module again (version 3): it refuses version 2's encoding, so each
	// account stays on version 2 with its balance, and the upgrade says why.
	for _, m := range builds {
		out, errText, ok := cli(t, a, nil, "deploy", "--type", m.typ, m.v1)
		if !ok || !strings.Contains(out, "version 3") {
			t.Fatalf("deploy %s v1 again: %s%s", m.typ, out, errText)
		}
		out, errText, ok = cli(t, b, nil, "upgrade", "--type", m.typ, "--now")
		if ok || strings.Count(out, "FAILED") != perType || !strings.Contains(out, "stays on version 2") ||
			!strings.Contains(out, "unknown state version 2") || !strings.Contains(errText, "did not upgrade") {
			t.Fatalf("upgrade %s to version 1's module: ok=%v\n%s%s", m.typ, ok, out, errText)
		}
	}
	for k, acct := range accounts {
		typ, id, _ := strings.Cut(acct, "/")
		h := hosts[k%2]
		if code, body, err := askFresh(h, typ, id, "balance"); err != nil || code != 200 || body != strconv.FormatInt(load.acked[acct], 10) {
			t.Fatalf("balance of %s after the refused downgrade: %d %q %v, want %d", acct, code, body, err, load.acked[acct])
		}
		if code, body, err := askFresh(h, typ, id, "version"); err != nil || code != 200 || body != "bank 2" {
			t.Fatalf("version of %s after the refused downgrade: %d %q %v", acct, code, body, err)
		}
	}
}

// TestBankCanaryThatTrapsRollsBack: a canary of the Go and the Rust bank whose deposits
// trap rolls back by itself once its failure rate passes the maximum, and every
// account, those of the canary too, answers from version 1 with its balance (the sum
// of its acknowledged deposits) and takes deposits again.
func TestBankCanaryThatTrapsRollsBack(t *testing.T) {
	builds := bankBuilds(t)
	a := startHost(t, "")
	b := startHost(t, a.bind)
	hosts := []*host{a, b}
	waitForCluster(t, hosts)
	const perType = 8
	canary := []string{"acct-1", "acct-4", "acct-6"}
	balances := map[string]int64{}
	deposit := func(h *host, typ, id string, n int64) bool {
		t.Helper()
		code, body, err := askFresh(h, typ, id, "deposit "+strconv.FormatInt(n, 10))
		if err == nil && code == 200 {
			want := strconv.FormatInt(balances[typ+"/"+id]+n, 10)
			if body != want {
				t.Fatalf("deposit %d to %s/%s: %q, want %s", n, typ, id, body, want)
			}
			balances[typ+"/"+id] += n
			return true
		}
		return false
	}
	for _, m := range builds {
		if out, errText, ok := cli(t, a, nil, "deploy", "--type", m.typ, m.v1); !ok {
			t.Fatalf("deploy %s v1: %s%s", m.typ, out, errText)
		}
		for i := 0; i < perType; i++ {
			for k := 1; k <= 3; k++ {
				if !deposit(hosts[(i+k)%2], m.typ, fmt.Sprint("acct-", i), int64(10*k+i)) {
					t.Fatalf("deposit into %s/acct-%d on version 1 failed", m.typ, i)
				}
			}
		}
		out, errText, ok := cli(t, b, nil, "deploy", "--type", m.typ, "--canary-ids", strings.Join(canary, ","),
			"--canary-max-failure-rate", "0.5", "--canary-min-messages", "2", m.trap)
		if !ok || !strings.Contains(out, fmt.Sprintf("canary: %d listed entities on version 2", len(canary))) {
			t.Fatalf("deploy the canary of %s: %s%s", m.typ, out, errText)
		}
		// Deposits into the canary's accounts trap until a member rolls back; a
		// deposit that succeeds answers from version 1.
		deadline := time.Now().Add(3 * time.Minute)
		for k := 0; ; k++ {
			out, errText, ok = cli(t, a, nil, "rollout", "status", "--type", m.typ)
			if ok && strings.Contains(out, "rolled back at") && strings.Contains(out, "failure rate") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no automatic rollback of %s: %s%s", m.typ, out, errText)
			}
			id := canary[k%len(canary)]
			deposit(hosts[k%2], m.typ, id, 5)
		}
	}
	// Every account answers from version 1 (which refuses "version") with its balance,
	// and takes a deposit.
	for _, m := range builds {
		for i := 0; i < perType; i++ {
			id := fmt.Sprint("acct-", i)
			testutil.EventuallyNil(t, time.Minute, m.typ+"/"+id+" back on version 1", func() error {
				code, body, err := askFresh(hosts[i%2], m.typ, id, "version")
				if err != nil || code == 200 || !strings.Contains(body, "unknown message") {
					return fmt.Errorf("version: %d %q %v (version 1 refuses it)", code, body, err)
				}
				return nil
			})
			want := strconv.FormatInt(balances[m.typ+"/"+id], 10)
			if code, body, err := askFresh(hosts[(i+1)%2], m.typ, id, "balance"); err != nil || code != 200 || body != want {
				t.Fatalf("balance of %s/%s after the rollback: %d %q %v, want %s", m.typ, id, code, body, err, want)
			}
			if !deposit(hosts[i%2], m.typ, id, 7) {
				t.Fatalf("deposit into %s/%s after the rollback failed", m.typ, id)
			}
		}
	}
}

// TestBankTransparentUpgradeByReplay: the Go and the Rust bank built with transparent
// state, deployed with --history all, take a version that refuses deposits over 1,000
// (-tags banklimit, --cfg bank_limit) by a replay of each account's journal: an account
// whose deposits were all within the limit replays the same and moves, with its
// balance; one that took a larger deposit replays differently, and the dry run and the
// upgrade say so, with the message where, and it stays on version 1 with its balance.
func TestBankTransparentUpgradeByReplay(t *testing.T) {
	goTransparent := testwasm.GoTransparentCompilers[1]
	if _, err := exec.LookPath("tinygo"); err == nil || os.Getenv("TINYGO") != "" || os.Getenv(testwasm.RequireTinyGoEnv) == "1" {
		goTransparent = testwasm.GoTransparentCompilers[0]
	}
	goV2 := testwasm.PathWith(t, "bank", testwasm.TransparentTag+",banklimit")
	if goTransparent.Name == "tinygo" {
		goV2 = testwasm.TinyGoPathWith(t, "bank", append(append([]string(nil), testwasm.TinyGoFlags...), testwasm.TransparentTag+",banklimit"))
	}
	builds := []bankBuild{
		{typ: "bank-go", v1: goTransparent.Path(t, "bank"), v2: goV2},
		{typ: "bank-rust", v1: testwasm.RustPathWith(t, "bank-rust", testwasm.RustTransparent...),
			v2: testwasm.RustPathWith(t, "bank-rust", append(append([]string(nil), testwasm.RustTransparent...), "--cfg", "bank_limit")...)},
	}
	a := startHost(t, "")
	b := startHost(t, a.bind)
	hosts := []*host{a, b}
	waitForCluster(t, hosts)
	ask := func(h *host, target, msg, want string) {
		t.Helper()
		out, errText, ok := cli(t, h, nil, "ask", target, msg)
		if !ok || strings.TrimSpace(out) != want {
			t.Fatalf("ask %s %q: %s%s, want %s", target, msg, out, errText, want)
		}
	}
	for _, m := range builds {
		if out, errText, ok := cli(t, a, nil, "deploy", "--type", m.typ, "--history", "all", m.v1); !ok || !regexpLine(out, "history", "all") {
			t.Fatalf("deploy %s with --history all: %s%s", m.typ, out, errText)
		}
		small, large := m.typ+"/small", m.typ+"/large"
		ask(a, small, "deposit 400", "400")
		ask(b, small, "withdraw 100", "300")
		ask(a, small, "deposit 1000", "1300")
		ask(b, large, "deposit 30", "30")
		ask(a, large, "deposit 5000", "5030")
		ask(b, large, "balance", "5030")
		if out, errText, ok := cli(t, b, nil, "deploy", "--type", m.typ, m.v2); !ok || !strings.Contains(out, "version 2") {
			t.Fatalf("deploy %s v2: %s%s", m.typ, out, errText)
		}
		out, errText, ok := cli(t, a, nil, "upgrade", "--type", m.typ, "--dry-run")
		if !ok || !strings.Contains(out, "dry run: 1 active entities") || !strings.Contains(out, "1 entities cannot upgrade") ||
			!regexpLine(out, "large", "1") ||
			!strings.Contains(out, `its journal does not replay on version 2's module: message 2 (journal record 2, "deposit 5000") differs: outcome entity-error, the record's ok`) {
			t.Fatalf("dry run of %s:\n%s%s", m.typ, out, errText)
		}
		out, errText, ok = cli(t, b, nil, "upgrade", "--type", m.typ, "--now")
		if ok || !strings.Contains(out, "upgraded 1 of 2") || !regexpLine(out, "FAILED", "large") ||
			!strings.Contains(out, `stays on version 1: message 2 (journal record 2, "deposit 5000") differs`) {
			t.Fatalf("upgrade of %s: ok=%v\n%s%s", m.typ, ok, out, errText)
		}
		// small runs version 2 (it refuses a deposit over 1,000) with its balance;
		// large runs version 1 with its own.
		ask(a, small, "balance", "1300")
		if out, errText, ok := cli(t, b, nil, "ask", small, "deposit 1001"); ok || !strings.Contains(errText, "at most 1000") {
			t.Fatalf("small on version 2 took a deposit over the limit: %s%s", out, errText)
		}
		ask(a, large, "deposit 2000", "7030")
		// A passivation saves small's state on version 2, and large's on version 1.
		for _, id := range []string{small, large} {
			if out, errText, ok := cli(t, a, nil, "passivate", id); !ok {
				t.Fatalf("passivate %s: %s%s", id, out, errText)
			}
		}
		ask(b, small, "deposit 1", "1301")
		ask(b, large, "balance", "7030")
		if out, errText, ok := cli(t, a, nil, "ask", small, "deposit 1001"); ok || !strings.Contains(errText, "at most 1000") {
			t.Fatalf("small after a passivation took a deposit over the limit: %s%s", out, errText)
		}
	}
}
