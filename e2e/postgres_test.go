package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/pgtest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// pgStore starts a PostgreSQL server for the test (stopped at its end) and returns it
// with the --state-store flags of a fresh database on it. Skips without PostgreSQL
// (fails if SHARDHOST_REQUIRE_POSTGRES=1).
func pgStore(t *testing.T) (*pgtest.Server, []string) {
	t.Helper()
	srv := pgtest.Start(t, pgtest.Options{})
	return srv, []string{"--state-store", srv.NewDatabase(t)}
}

func TestShardingMovesStateThroughAJoinAndAGracefulStopOnPostgres(t *testing.T) {
	_, store := pgStore(t)
	testShardingMovesStateThroughAJoinAndAGracefulStop(t, store)
}

func TestEveryMessageCheckpointSurvivesSIGKILLOnPostgres(t *testing.T) {
	_, store := pgStore(t)
	testEveryMessageCheckpointSurvivesSIGKILL(t, store)
}

func TestFullRestartWithRememberEntitiesOnPostgres(t *testing.T) {
	_, store := pgStore(t)
	testFullRestartWithRememberEntities(t, store)
}

// TestPostgresKilledMidRun: counters that checkpoint every message, on three members
// whose state store is PostgreSQL, which is killed (immediate shutdown, as a crash).
// Every ask then fails with an error that says the state was not saved because the
// database is unreachable; after PostgreSQL restarts the same members serve again, and
// every counter holds at least its acknowledged increments (a failed ask's increment
// may have been kept in memory and saved later: at most one per failure).
func TestPostgresKilledMidRun(t *testing.T) {
	srv, store := pgStore(t)
	hosts := startCluster(t, 3, append(append([]string{}, fast...), store...)...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", "--checkpoint", "every-message",
		testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	const n = 30
	acked, failed := make([]int, n), make([]int, n)
	inc := func(i int) (int, string) {
		status, body, _, err := api(hosts[i%3], "ask", "counter", "k"+strconv.Itoa(i), "inc")
		if err != nil {
			return 0, err.Error()
		}
		if status == 200 {
			acked[i]++
		} else {
			failed[i]++
		}
		return status, body
	}
	for i := 0; i < n; i++ {
		if status, body := inc(i); status != 200 {
			t.Fatalf("inc k%d: %d %s", i, status, body)
		}
	}

	srv.Kill()
	for i := 0; i < n; i++ {
		status, body := inc(i)
		if status == 200 {
			t.Fatalf("inc k%d acknowledged with PostgreSQL down", i)
		}
		if !strings.Contains(body, "not saved") || !strings.Contains(body, "unreachable") {
			t.Fatalf("inc k%d with PostgreSQL down: %d %q: the error does not say why", i, status, body)
		}
		if i == 0 {
			t.Logf("an ask with PostgreSQL down: %d %s", status, body)
		}
	}

	srv.Restart()
	for i := 0; i < n; i++ {
		testutil.EventuallyNil(t, 60*time.Second, fmt.Sprintf("k%d serving again", i), func() error {
			if status, body := inc(i); status != 200 {
				return fmt.Errorf("%d %s", status, body)
			}
			return nil
		})
	}
	for i := 0; i < n; i++ {
		status, body, _, err := api(hosts[(i+1)%3], "ask", "counter", "k"+strconv.Itoa(i), "get")
		if err != nil || status != 200 {
			t.Fatalf("get k%d: %d %s %v", i, status, body, err)
		}
		got, _ := strconv.Atoi(body)
		if got < acked[i] || got > acked[i]+failed[i] {
			t.Fatalf("k%d = %d: %d acknowledged increments, %d failed", i, got, acked[i], failed[i])
		}
	}
}

// TestStateExportImportBetweenStores moves a stopped cluster's state from the built-in
// store to PostgreSQL and back with `shardhost state export|import`:
//  1. a built-in cluster with remembered counters (under the journal, the default: their
//     state is in their journals) stops; its three data directories
//     are exported and imported into PostgreSQL;
//  2. a new cluster (new data directories) on PostgreSQL restarts the remembered
//     counters with their values, and counts on;
//  3. another new cluster on the same database counts on too (its coordinator
//     allocates above the epochs the database holds);
//  4. PostgreSQL is exported and imported into the data directories of a built-in
//     cluster on new addresses, which serves the latest values (docs/state-stores.md: remembered
//     entities after an import into the built-in store).
func TestStateExportImportBetweenStores(t *testing.T) {
	// Default failure detection: members stopped one after another on a loaded machine
	// must not be downed meanwhile.
	args := lifecycleLogLevel
	const n = 20
	deploy := func(h *host) {
		t.Helper()
		if out, errText, ok := cli(t, h, nil, "deploy", "--type", "counter", "--remember-entities", testwasm.Path(t, "counter")); !ok {
			t.Fatalf("deploy: %s%s", out, errText)
		}
	}
	cluster := func(dirs []string, binds []string, extra ...string) []*host {
		t.Helper()
		a := append(append([]string{}, args...), extra...)
		var hosts []*host
		for i, d := range dirs {
			join := ""
			if i > 0 {
				join = hosts[0].bind
			}
			if binds != nil {
				hosts = append(hosts, restartHostAt(t, d, binds[i], join, a...))
			} else {
				hosts = append(hosts, startHostIn(t, d, join, a...))
			}
		}
		waitForCluster(t, hosts)
		return hosts
	}
	stopAll := func(hosts []*host) {
		for i := len(hosts) - 1; i >= 0; i-- {
			hosts[i].stop(t)
		}
	}
	check := func(hosts []*host, plus int) {
		t.Helper()
		for i := 0; i < n; i++ {
			testutil.EventuallyNil(t, 30*time.Second, fmt.Sprintf("m%d = %d", i, i+plus), func() error {
				status, body, _, err := api(hosts[i%len(hosts)], "ask", "counter", "m"+strconv.Itoa(i), "get")
				if err != nil || status != 200 || body != strconv.Itoa(i+plus) {
					return fmt.Errorf("%d %q %v", status, body, err)
				}
				return nil
			})
		}
	}
	incAll := func(hosts []*host) {
		t.Helper()
		for i := 0; i < n; i++ {
			if status, body, _, err := api(hosts[i%len(hosts)], "ask", "counter", "m"+strconv.Itoa(i), "inc"); err != nil || status != 200 {
				t.Fatalf("inc m%d: %d %s %v", i, status, body, err)
			}
		}
	}
	restarted := func(hosts []*host, want int) {
		t.Helper()
		testutil.EventuallyNil(t, 30*time.Second, "the remembered counters restarted by themselves", func() error {
			started := map[string]bool{}
			for _, e := range lifecycleEvents(t, hosts) {
				if e.start && e.restored {
					started[e.entity] = true
				}
			}
			if len(started) < want {
				return fmt.Errorf("%d restarted", len(started))
			}
			return nil
		})
	}
	state := func(want string, args ...string) string {
		t.Helper()
		out, errText, ok := cli(t, nil, nil, append([]string{"state"}, args...)...)
		if !ok || !strings.Contains(errText, want) {
			t.Fatalf("state %s: %s%s (want %q)", strings.Join(args, " "), out, errText, want)
		}
		t.Logf("state %s: %s", args[0], strings.TrimSpace(errText))
		return errText
	}
	tmp := t.TempDir()

	// 1. The built-in store, exported.
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	hosts := cluster(dirs, nil)
	deploy(hosts[0])
	for i := 0; i < n; i++ {
		if _, errText, ok := cli(t, hosts[i%3], nil, "ask", fmt.Sprintf("counter/m%d", i), "inc "+strconv.Itoa(i+1)); !ok {
			t.Fatal(errText)
		}
	}
	stopAll(hosts)
	fromBuiltin := filepath.Join(tmp, "builtin.export")
	exported := state(fmt.Sprintf("%d journal records", n), "export", "--state-store", "builtin",
		"--data-dir", dirs[0], "--data-dir", dirs[1], "--data-dir", dirs[2], "-o", fromBuiltin)
	if !strings.Contains(exported, fmt.Sprintf("%d remembered entities", n)) {
		t.Fatalf("the export lacks the remembered entities: %s", exported)
	}

	// 2. Into PostgreSQL; a new cluster on it.
	srv, store := pgStore(t)
	state("verified", "import", "--state-store", store[1], fromBuiltin)
	mustFail(t, nil, nil, "already holds", "state", "import", "--state-store", store[1], fromBuiltin)
	hosts = cluster([]string{t.TempDir(), t.TempDir(), t.TempDir()}, nil, store...)
	deploy(hosts[0])
	restarted(hosts, n)
	check(hosts, 1)
	incAll(hosts)
	stopAll(hosts)

	// 3. Another new cluster on the same database.
	hosts = cluster([]string{t.TempDir(), t.TempDir(), t.TempDir()}, nil, store...)
	deploy(hosts[0])
	check(hosts, 2)
	incAll(hosts)
	check(hosts, 3)
	stopAll(hosts)

	// 4. Back into the built-in store of a cluster on new addresses.
	fromPG := filepath.Join(tmp, "postgres.export")
	state(fmt.Sprintf("%d journal records", n), "export", "--state-store", store[1], "-o", fromPG)
	srv.Stop()
	p := freePorts(t, 3)
	binds := []string{fmt.Sprintf("127.0.0.1:%d", p[0]), fmt.Sprintf("127.0.0.1:%d", p[1]), fmt.Sprintf("127.0.0.1:%d", p[2])}
	newDirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var members []string
	for i := range binds {
		members = append(members, "--member", binds[i]+"="+newDirs[i])
	}
	state("verified", append(append([]string{"import", "--state-store", "builtin"}, members...), fromPG)...)
	hosts = cluster(newDirs, binds)
	deploy(hosts[0])
	// The new members' coordinator state (distributed data) is new and the built-in
	// store tells it nothing: the remembered counters restart as their shards are
	// allocated, here by the first message to each, from their imported state.
	check(hosts, 3)
}
