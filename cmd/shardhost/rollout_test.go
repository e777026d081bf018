package main

import (
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// deploy --canary, rollout status, rollback and promote, and their bad input.
func TestRolloutCommands(t *testing.T) {
	startCLIMember(t)
	v1 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v1")
	v2 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v2")
	if out, err := runCLI(t, "deploy", "--type", "acct", "--canary", "10%", v1); err == nil || !strings.Contains(err.Error(), "none deployed") {
		t.Fatalf("a canary of a new type: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "deploy", "--type", "acct", v1); err != nil {
		t.Fatalf("deploy v1: %v\n%s", err, out)
	}
	for _, id := range []string{"a", "b", "c"} {
		if out, err := runCLI(t, "ask", "acct/"+id, "inc"); err != nil || strings.TrimSpace(out) != "v1 1" {
			t.Fatalf("ask %s: %v %q", id, err, out)
		}
	}
	for _, bad := range [][]string{{"--canary", "150%"}, {"--canary", "ten"}, {"--canary", "10%", "--canary-ids", "a"}} {
		args := append(append([]string{"deploy", "--type", "acct"}, bad...), v2)
		if out, err := runCLI(t, args...); err == nil {
			t.Fatalf("deploy %v: no error\n%s", bad, out)
		}
	}
	if out, err := runCLI(t, "rollout", "promote", "--type", "acct"); err == nil || !strings.Contains(err.Error(), "no canary in flight") {
		t.Fatalf("promote with nothing in flight: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "rollout", "status", "--type", "acct"); err != nil || !strings.Contains(out, "no rollout; version 1") {
		t.Fatalf("status with no rollout (bad input changed the type?): %v\n%s", err, out)
	}
	out, err := runCLI(t, "deploy", "--type", "acct", "--canary-ids", "a,b", v2)
	if err != nil || !strings.Contains(out, "canary: 2 listed entities on version 2, the others stay on version 1") ||
		!strings.Contains(out, "2 of 2 active entities of the canary moved to it") {
		t.Fatalf("deploy --canary-ids: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "ask", "acct/a", "inc"); err != nil || strings.TrimSpace(out) != "v2 2" {
		t.Fatalf("canary entity: %v %q", err, out)
	}
	if out, err := runCLI(t, "ask", "acct/c", "get"); err != nil || strings.TrimSpace(out) != "v1 1" {
		t.Fatalf("stable entity: %v %q", err, out)
	}
	if out, err := runCLI(t, "types"); err != nil || !strings.Contains(out, "canary: 2 listed entities on version 2, the others on version 1") {
		t.Fatalf("types with a canary: %v\n%s", err, out)
	}
	out, err = runCLI(t, "rollout", "status", "--type", "acct")
	if err != nil || !strings.Contains(out, "canary in flight") || !strings.Contains(out, "2 active entities on the canary: a, b") ||
		!strings.Contains(out, "canary 1 ok, 0 failed") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err = runCLI(t, "rollout", "rollback", "--type", "acct")
	if err != nil || !strings.Contains(out, "rolled back acct: version 3 runs version 1's module again") ||
		!strings.Contains(out, "2 of 2 active entities of the canary went back with their state") {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "ask", "acct/a", "get"); err != nil || strings.TrimSpace(out) != "v1 2" {
		t.Fatalf("canary entity after the rollback: %v %q", err, out)
	}
	if out, err := runCLI(t, "rollout", "status", "--type", "acct"); err != nil || !strings.Contains(out, "rolled back at") {
		t.Fatalf("status after the rollback: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "deploy", "--type", "acct", "--canary", "50%", v2); err != nil {
		t.Fatalf("deploy --canary 50%%: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "rollout", "promote", "--type", "acct"); err != nil || !strings.Contains(out, "promoted: acct version 4") {
		t.Fatalf("promote: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "ask", "acct/new", "inc"); err != nil || strings.TrimSpace(out) != "v2 1" {
		t.Fatalf("a new entity after the promotion: %v %q", err, out)
	}
}
