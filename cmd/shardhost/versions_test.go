package main

import (
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// deploy says how many entities stay on older versions and why, and types and
// modules show each version's entities.
func TestDeployAndTypesShowOlderVersions(t *testing.T) {
	startCLIMember(t)
	v1 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v1 -X main.state=transparent")
	v2 := testwasm.GuestPath(t, "versioned", "-ldflags=-X main.version=v2 -X main.state=transparent")
	if out, err := runCLI(t, "deploy", "--type", "tra", "--checkpoint", "passivation", v1); err != nil {
		t.Fatalf("deploy v1: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "deploy", "--type", "tra", "--checkpoint", "passivation", v1); err != nil || strings.Contains(out, "older versions") {
		t.Fatalf("deploy v1 again: %v\n%s", err, out)
	}
	for _, id := range []string{"a", "b", "c"} {
		if out, err := runCLI(t, "ask", "tra/"+id, "inc"); err != nil || strings.TrimSpace(out) != "v1 1" {
			t.Fatalf("ask %s: %v %q", id, err, out)
		}
	}
	if out, err := runCLI(t, "passivate", "tra/c"); err != nil {
		t.Fatalf("passivate: %v\n%s", err, out)
	}
	out, err := runCLI(t, "deploy", "--type", "tra", v2)
	if err != nil {
		t.Fatalf("deploy v2: %v\n%s", err, out)
	}
	for _, want := range []string{"3 entities stay on older versions:",
		"version 1: 2 active (2 with transparent state), 1 passivated with transparent state",
		"3 whose state is a transparent snapshot keep the module their state was made by"} {
		if !strings.Contains(out, want) {
			t.Fatalf("deploy v2 does not say %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "types")
	if err != nil || !strings.Contains(out, "PASSIVATED") || !strings.Contains(out, "version 1") || !strings.Contains(out, "2 (2 t)") ||
		!strings.Contains(out, "1 (1 t)") {
		t.Fatalf("types: %v\n%s", err, out)
	}
	out, err = runCLI(t, "modules")
	if err != nil || !strings.Contains(out, "ACTIVE") || !strings.Contains(out, "2 (2 t)") {
		t.Fatalf("modules: %v\n%s", err, out)
	}
	out, err = runCLI(t, "upgrade", "--type", "tra", "--dry-run")
	if err != nil || !strings.Contains(out, "dry run: 0 active entities") || !strings.Contains(out, "3 entities cannot upgrade:") ||
		!strings.Contains(out, "transparent snapshot") || !strings.Contains(out, "passivated") {
		t.Fatalf("upgrade --dry-run: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "upgrade", "--type", "tra", "--now", "--dry-run"); err == nil {
		t.Fatalf("--now with --dry-run: %s", out)
	}
	if out, err := runCLI(t, "upgrade", "--type", "nope"); err == nil || !strings.Contains(err.Error(), "unknown entity type") {
		t.Fatalf("upgrade of an unknown type: %v\n%s", err, out)
	}
}
