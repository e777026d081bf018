package main

import (
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// query answers from the counter's state and changes nothing; a module without a
// query handler and bad arguments get clear errors.
func TestQueryCommand(t *testing.T) {
	startCLIMember(t)
	if out, err := runCLI(t, "deploy", "--type", "counter", testwasm.Path(t, "counter")); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "ask", "counter/q", "inc 41"); err != nil || strings.TrimSpace(out) != "41" {
		t.Fatalf("ask: %v %q", err, out)
	}
	for i := 0; i < 2; i++ {
		if out, err := runCLI(t, "query", "counter/q", "get"); err != nil || out != "41\n" {
			t.Fatalf("query get: %v %q", err, out)
		}
	}
	if out, err := runCLI(t, "query", "counter/never", "get"); err != nil || out != "0\n" {
		t.Fatalf("query get of an ID never seen: %v %q", err, out)
	}
	if out, err := runCLI(t, "query", "counter/q", "inc"); err == nil || !strings.Contains(err.Error(), `unknown query "inc"`) {
		t.Fatalf("query inc: %v %q", err, out)
	}
	if out, err := runCLI(t, "ask", "counter/q", "get"); err != nil || strings.TrimSpace(out) != "41" {
		t.Fatalf("ask get after the queries: %v %q", err, out)
	}
	if out, err := runCLI(t, "query", "counter/q"); err == nil || !strings.Contains(err.Error(), "missing PAYLOAD") {
		t.Fatalf("query without a payload: %v %q", err, out)
	}
	if out, err := runCLI(t, "deploy", "--type", "plain", testwasm.GuestPath(t, "versioned")); err != nil {
		t.Fatalf("deploy versioned: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "query", "plain/a", "get"); err == nil || !strings.Contains(err.Error(), "answer no query") ||
		!strings.Contains(err.Error(), "Query(ctx") {
		t.Fatalf("query of a module without a query handler: %v %q", err, out)
	}
}

// pause holds an entity: asks are refused with entity-paused until resume; a second
// pause says so and changes nothing.
func TestPauseCommand(t *testing.T) {
	startCLIMember(t)
	if out, err := runCLI(t, "deploy", "--type", "counter", testwasm.Path(t, "counter")); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "ask", "counter/p", "inc 4"); err != nil || strings.TrimSpace(out) != "4" {
		t.Fatalf("ask: %v %q", err, out)
	}
	if out, err := runCLI(t, "pause", "counter/p"); err != nil || !strings.HasPrefix(out, "paused counter/p") {
		t.Fatalf("pause: %v %q", err, out)
	}
	if out, err := runCLI(t, "pause", "counter/p"); err != nil || !strings.Contains(out, "already paused") {
		t.Fatalf("pause again: %v %q", err, out)
	}
	if out, err := runCLI(t, "ask", "counter/p", "inc"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("ask of a paused entity: %v %q, want refused as paused", err, out)
	}
	if out, err := runCLI(t, "resume", "counter/p"); err != nil || out != "resumed counter/p\n" {
		t.Fatalf("resume: %v %q", err, out)
	}
	if out, err := runCLI(t, "ask", "counter/p", "inc"); err != nil || strings.TrimSpace(out) != "5" {
		t.Fatalf("ask after the resume: %v %q", err, out)
	}
	if out, err := runCLI(t, "pause", "counter"); err == nil {
		t.Fatalf("pause without an ID: %q, want an error", out)
	}
}
