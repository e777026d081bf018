package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// A canary whose version traps rolls back by itself, and its entities answer from
// version 1 with their counts, on a cluster of two.
func TestCanaryTrapsRollsBackByItself(t *testing.T) {
	a := startHost(t, "")
	b := startHost(t, a.bind)
	waitForCluster(t, []*host{a, b})
	v1 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v1")
	v2 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v2 -X main.receive=trap")
	if out, errText, ok := cli(t, a, nil, "deploy", "--type", "bank", v1); !ok {
		t.Fatalf("deploy v1: %s%s", out, errText)
	}
	const entities = 12
	for i := 0; i < entities; i++ {
		for range 2 {
			if code, body, err := askFresh(a, "bank", fmt.Sprint("acct-", i), "inc"); err != nil || code != 200 {
				t.Fatalf("inc acct-%d: %d %s %v", i, code, body, err)
			}
		}
	}
	canary := []string{"acct-0", "acct-3", "acct-5", "acct-8"}
	out, errText, ok := cli(t, b, nil, "deploy", "--type", "bank", "--canary-ids", strings.Join(canary, ","),
		"--canary-max-failure-rate", "0.5", "--canary-min-messages", "2", v2)
	if !ok || !strings.Contains(out, "canary: 4 listed entities on version 2") {
		t.Fatalf("deploy the canary: %s%s", out, errText)
	}
	// Each canary entity traps twice: every member that hosts one sees at least two
	// failures, all of its canary's messages.
	// A member may roll back after its first two: later incs answer from version 1.
	count := map[string]int{}
	for i := 0; i < entities; i++ {
		count[fmt.Sprint("acct-", i)] = 2
	}
	for _, id := range canary {
		for range 2 {
			code, body, err := askFresh(b, "bank", id, "inc")
			if err == nil && code == 200 {
				if body != fmt.Sprintf("v1 %d", count[id]+1) {
					t.Fatalf("the trapping canary answered %s: %s", id, body)
				}
				count[id]++
			}
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, errText, ok = cli(t, a, nil, "rollout", "status", "--type", "bank")
		if ok && strings.Contains(out, "rolled back at") && strings.Contains(out, "failure rate") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic rollback: %s%s", out, errText)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The canary's entities go back with their state as the rollback moves them; every
	// entity answers from version 1 with its count.
	for i := 0; i < entities; i++ {
		id := fmt.Sprint("acct-", i)
		for {
			code, body, err := askFresh(a, "bank", id, "get")
			if err == nil && code == 200 && body == fmt.Sprintf("v1 %d", count[id]) {
				break
			}
			if time.Now().After(deadline) || (err == nil && code == 200 && !strings.HasPrefix(body, "v2 ")) {
				t.Fatalf("%s after the rollback: %d %q %v", id, code, body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code, body, err := askFresh(b, "bank", id, "inc"); err != nil || code != 200 || body != fmt.Sprintf("v1 %d", count[id]+1) {
			t.Fatalf("inc %s after the rollback: %d %q %v", id, code, body, err)
		}
	}
}
