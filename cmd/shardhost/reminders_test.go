package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// TestRemindersCommand: shardhost reminders lists an entity's durable reminders from the
// store, as a table and as JSON; an entity without any says so; an unknown type is
// refused.
func TestRemindersCommand(t *testing.T) {
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
	if _, err := n.Deploy(ctx, testwasm.Bytes(t, "abitest"), sharding.TypeSettings{Name: "remind", NumberOfShards: 4}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDHOST_API", n.APIAddr())
	if r, err := n.Sharding().Ask(ctx, "remind", "r", []byte("remind daily 3600000 86400000 pay")); err != nil || string(r.Payload) != "ok" {
		t.Fatalf("remind: %q %v", r.Payload, err)
	}
	var out string
	testutil.EventuallyNil(t, 20*time.Second, "the reminder listed", func() error {
		out, err = runCLI(t, "reminders", "remind/r")
		if err == nil && !strings.Contains(out, "daily") {
			return errorString(out)
		}
		return err
	})
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "24h0m0s") || !strings.Contains(out, "3 bytes") {
		t.Fatalf("table:\n%s", out)
	}
	js, err := runCLI(t, "reminders", "remind/r", "-o", "json")
	var res host.EntityReminders
	if err != nil || json.Unmarshal([]byte(js), &res) != nil || res.Entity != "remind/r" || len(res.Reminders) != 1 ||
		res.Reminders[0].Interval != 86400000 || string(res.Reminders[0].Payload) != "pay" {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if out, err := runCLI(t, "reminders", "remind/none"); err != nil || !strings.Contains(out, "remind/none has no reminders") {
		t.Fatalf("none: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "reminders", "nosuch/a"); err == nil || !strings.Contains(err.Error(), `unknown entity type: "nosuch"`) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := runCLI(t, "reminders", "noslash"); err == nil || !strings.Contains(err.Error(), "want TYPE/ID") {
		t.Fatalf("bad argument: %v", err)
	}
}

type errorString string

func (e errorString) Error() string { return "listed: " + string(e) }
