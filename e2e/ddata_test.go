package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// ddataCLI runs a ddata command and returns its trimmed output, failing the test on an
// error.
func ddataCLI(t *testing.T, h *host, args ...string) string {
	t.Helper()
	out, errText, ok := cli(t, h, nil, append([]string{"ddata"}, args...)...)
	if !ok {
		t.Fatalf("shardhost ddata %s: %s", strings.Join(args, " "), errText)
	}
	return strings.TrimSpace(out)
}

func TestDDataThroughTheCLIOnThreeProcesses(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	a, b, c := hosts[0], hosts[1], hosts[2]
	// A majority write on one member is seen by a majority read on another.
	for i := 0; i < 5; i++ {
		ddataCLI(t, hosts[i%3], "update", "visits", "--type", "pncounter", "--op", "incr 5", "--consistency", "majority")
	}
	// The CLI hints that a read meets a majority write only at majority.
	if _, errText, ok := cli(t, a, nil, "ddata", "update", "visits", "--type", "pncounter", "--op", "decr 3", "--consistency", "majority"); !ok ||
		!strings.Contains(errText, "get with --consistency majority") {
		t.Fatalf("majority update: ok=%v, stderr %q, want the read-back hint", ok, errText)
	}
	if got := ddataCLI(t, b, "get", "visits", "--consistency", "majority"); got != "22" {
		t.Fatalf("majority read: %s", got)
	}
	// A set as a sorted array, a map as an object, a register as its value, a flag as a boolean.
	ddataCLI(t, a, "update", "tags", "--type", "orset", "--op", "add zeta", "--consistency", "all")
	ddataCLI(t, b, "update", "tags", "--type", "orset", "--op", "add alpha", "--consistency", "all")
	if got := ddataCLI(t, c, "get", "tags", "--consistency", "all"); strings.Join(strings.Fields(got), "") != `["alpha","zeta"]` {
		t.Fatalf("orset: %s", got)
	}
	ddataCLI(t, a, "update", "colors", "--type", "lwwmap", "--op", "put sky blue", "--consistency", "majority")
	if got := ddataCLI(t, c, "get", "colors", "--consistency", "majority"); strings.Join(strings.Fields(got), "") != `{"sky":"blue"}` {
		t.Fatalf("lwwmap: %s", got)
	}
	ddataCLI(t, b, "update", "motd", "--type", "lwwregister", "--op", "set hello world", "--consistency", "majority")
	if got := ddataCLI(t, a, "get", "motd", "--consistency", "majority"); got != `"hello world"` {
		t.Fatalf("register: %s", got)
	}
	ddataCLI(t, c, "update", "ready", "--type", "flag", "--op", "enable")
	// WriteLocal spreads by gossip and deltas.
	testutil.Eventually(t, 10*time.Second, "the flag to spread", func() bool { return ddataGet(t, a, "ready") == "true" })
	// keys lists the local replica: a majority write may reach it by gossip later.
	testutil.EventuallyNil(t, 10*time.Second, "every key in the local replica", func() error {
		keys := ddataCLI(t, b, "keys")
		for _, want := range []string{"visits", "pncounter", "tags", "orset", "colors", "lwwmap", "motd", "ready", "flag"} {
			if !strings.Contains(keys, want) {
				return fmt.Errorf("keys lacks %s:\n%s", want, keys)
			}
		}
		return nil
	})
	// Bad input: a clear error, and the stored value untouched.
	mustFail(t, a, nil, "values of different types", "ddata", "update", "visits", "--type", "gset", "--op", "add x")
	mustFail(t, a, nil, "unknown data type", "ddata", "update", "x", "--type", "hyperloglog", "--op", "add x")
	mustFail(t, a, nil, "bad operation", "ddata", "update", "visits", "--type", "pncounter", "--op", "multiply 3")
	mustFail(t, a, nil, "not found", "ddata", "get", "nothing-here")
	mustFail(t, a, nil, "consistency", "ddata", "get", "visits", "--consistency", "most")
	if got := ddataCLI(t, c, "get", "visits", "--consistency", "majority"); got != "22" {
		t.Fatalf("after bad input: %s", got)
	}
	// Delete is final.
	ddataCLI(t, a, "delete", "motd", "--consistency", "majority")
	mustFail(t, b, nil, "data deleted", "ddata", "get", "motd", "--consistency", "majority")
	mustFail(t, c, nil, "data deleted", "ddata", "update", "motd", "--type", "lwwregister", "--op", "set again", "--consistency", "majority")
}

func ddataGet(t *testing.T, h *host, key string) string {
	out, _, _ := cli(t, h, nil, "ddata", "get", key)
	return strings.TrimSpace(out)
}

func TestDurableKeysSurviveAFullRestart(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := append([]string{"--durable-keys", "durable-*"}, fast...)
	start := func() []*host {
		hosts := []*host{startHostIn(t, dirs[0], "", args...)}
		for _, d := range dirs[1:] {
			hosts = append(hosts, startHostIn(t, d, hosts[0].bind, args...))
		}
		waitForCluster(t, hosts)
		return hosts
	}
	hosts := start()
	ddataCLI(t, hosts[0], "update", "durable-count", "--type", "gcounter", "--op", "incr 7", "--consistency", "all")
	ddataCLI(t, hosts[1], "update", "durable-set", "--type", "orset", "--op", "add kept", "--consistency", "all")
	ddataCLI(t, hosts[2], "update", "volatile", "--type", "gcounter", "--op", "incr 1", "--consistency", "all")
	for _, h := range hosts {
		h.stop(t)
	}
	hosts = start()
	for _, h := range hosts {
		if got := ddataGet(t, h, "durable-count"); got != "7" {
			t.Fatalf("durable-count after restart on %s: %q", h.bind, got)
		}
		if got := strings.Join(strings.Fields(ddataGet(t, h, "durable-set")), ""); got != `["kept"]` {
			t.Fatalf("durable-set after restart on %s: %q", h.bind, got)
		}
	}
	mustFail(t, hosts[0], nil, "not found", "ddata", "get", "volatile")
}
