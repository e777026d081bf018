package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/owner"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestStartLeaveLogsAtInfo: start, stopped as SIGTERM stops it (its context ends), leaves
// the cluster gracefully; that leave is what the member asked for, so the records of it
// are at info, and none says WARN "out of the cluster". No record prints a zero time.
func TestStartLeaveLogsAtInfo(t *testing.T) {
	api := freeAddr(t)
	logs := newWatchedOutput()
	root := newRootCommand()
	root.SetOut(logs)
	root.SetErr(logs)
	root.SetArgs([]string{"start", "--bind", "127.0.0.1:0", "--transport", "127.0.0.1:0", "--api", api,
		"--data-dir", t.TempDir(), "--log-format", "json"})
	g := owner.New()
	defer func() { g.Close(); g.Wait() }() // closed too: Wait alone leaves the group's idle goroutine
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // before g.Close: it stops the member
	done := make(chan error, 1)
	g.Go(func() { done <- root.ExecuteContext(ctx) })

	ready := func() bool {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + api + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !ready() {
		select {
		case err := <-done:
			t.Fatalf("start returned before the member was ready: %v\n%s", err, logs)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member was not ready within 2 minutes\n%s", logs)
		}
	}

	cancel() // SIGTERM's way: start's signal context ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("start, stopped: %v\n%s", err, logs)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("start did not stop within 2 minutes\n%s", logs)
	}

	left := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if strings.Contains(rec.Msg, "out of the cluster") && rec.Level != "INFO" {
			t.Errorf("a leave the member asked for logged at %s: %s", rec.Level, line)
		}
		if rec.Msg == "this member left the cluster" {
			left = rec.Level == "INFO"
		}
		if strings.Contains(line, "0001-01-01") {
			t.Errorf("a zero time: %s", line)
		}
	}
	if !left {
		t.Errorf("no INFO record that the member left the cluster:\n%s", logs)
	}
}
