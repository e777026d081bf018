package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// TestScheduledCommands: tell --in schedules a message and prints its ID; scheduled list
// shows it (table and JSON, by entity, type or all); scheduled cancel deletes it, and a
// second cancel is an error naming it; tell --at in the past delivers at once and says
// so; bad flags are refused before anything is sent.
func TestScheduledCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a member and builds a module")
	}
	t.Cleanup(testwasm.Cleanup)
	cfg := host.DefaultConfig()
	cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.GossipProfile = "local"
	n, err := host.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	ctx := context.Background()
	if err := n.Membership().WaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Deploy(ctx, testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter", NumberOfShards: 4}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDHOST_API", n.APIAddr())

	out, err := runCLI(t, "tell", "--in", "1h", "counter/a", "inc")
	f := strings.Fields(out)
	if err != nil || len(f) == 0 || !strings.HasPrefix(f[len(f)-1], "sm-") || !strings.Contains(out, "scheduled counter/a for ") {
		t.Fatalf("tell --in: %v\n%s", err, out)
	}
	id := f[len(f)-1]
	for _, args := range [][]string{{"scheduled", "list"}, {"scheduled", "list", "--type", "counter"}, {"scheduled", "list", "counter/a"}} {
		out, err := runCLI(t, args...)
		if err != nil || !strings.Contains(out, "DELIVER AT") || !strings.Contains(out, id) || !strings.Contains(out, "3 bytes") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	js, err := runCLI(t, "scheduled", "list", "counter/a", "-o", "json")
	var l host.ScheduledList
	if err != nil || json.Unmarshal([]byte(js), &l) != nil || len(l.Scheduled) != 1 || l.Scheduled[0].ID != id || string(l.Scheduled[0].Payload) != "inc" {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if out, err := runCLI(t, "scheduled", "list", "counter/b"); err != nil || !strings.Contains(out, "no scheduled messages") {
		t.Fatalf("another entity: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "scheduled", "cancel", id); err != nil || !strings.Contains(out, "cancelled "+id+" (counter/a, due ") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "scheduled", "cancel", id); err == nil || !strings.Contains(err.Error(), "no such scheduled message") || !strings.Contains(err.Error(), id) {
		t.Fatalf("cancel again: %v", err)
	}

	past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	if out, err := runCLI(t, "tell", "--at", past, "counter/a", "inc"); err != nil || !strings.Contains(out, "delivered at once") {
		t.Fatalf("tell --at in the past: %v\n%s", err, out)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the overdue message", func() error {
		out, err := runCLI(t, "ask", "counter/a", "get")
		if err == nil && strings.TrimSpace(out) != "1" {
			return errorString(out)
		}
		return err
	})

	for _, c := range []struct {
		args []string
		text string
	}{
		{[]string{"tell", "--at", "tomorrow", "counter/a", "inc"}, "neither RFC 3339"},
		{[]string{"tell", "--at", "1", "--in", "1s", "counter/a", "inc"}, "together"},
		{[]string{"tell", "--in", "-1s", "counter/a", "inc"}, "0 or more"},
		{[]string{"tell", "--in", "1h", "counter/a", strings.Repeat("x", sharding.MaxScheduledPayload+1)}, "at most 65536"},
		{[]string{"scheduled", "cancel", "sm-nonsense"}, "malformed"},
		{[]string{"scheduled", "list", "--type", "other", "counter/a"}, "two types"},
	} {
		if _, err := runCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%.60v: %v, want an error naming %q", c.args, err, c.text)
		}
	}
	// The overdue one is deleted once delivered, and nothing bad was kept.
	testutil.EventuallyNil(t, 30*time.Second, "no scheduled messages", func() error {
		out, err := runCLI(t, "scheduled", "list")
		if err == nil && !strings.Contains(out, "no scheduled messages") {
			return errorString(out)
		}
		return err
	})
	if out, err := runCLI(t, "ask", "counter/a", "get"); err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("count after bad input: %v %q, want 1", err, out)
	}
}
