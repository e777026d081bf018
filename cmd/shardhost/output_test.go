package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/host"
)

// TestReadCommandsOutput: every read command prints a table by default and JSON with
// -o json (or --json), against a running member; -o with another format is refused.
func TestReadCommandsOutput(t *testing.T) {
	n := startCLIMember(t)
	for _, args := range [][]string{{"members"}, {"types"}, {"modules"}, {"shards"}, {"ddata", "keys"}} {
		table, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, table)
		}
		for _, flag := range [][]string{{"-o", "json"}, {"--output", "json"}, {"--json"}} {
			out, err := runCLI(t, append(append([]string{}, args...), flag...)...)
			var v any
			if err != nil || json.Unmarshal([]byte(out), &v) != nil {
				t.Fatalf("%v %v: %v, not JSON:\n%s", args, flag, err, out)
			}
		}
		again, err := runCLI(t, append(append([]string{}, args...), "-o", "table")...)
		if err != nil || again != table {
			t.Errorf("%v -o table: %v\n%s\nwant what it prints by default:\n%s", args, err, again, table)
		}
		if _, err := runCLI(t, append(append([]string{}, args...), "-o", "yaml")...); err == nil || !strings.Contains(err.Error(), "want table or json") {
			t.Errorf("%v -o yaml: %v", args, err)
		}
	}
	if out, err := runCLI(t, "members"); err != nil || !strings.Contains(out, "ADDRESS") || !strings.Contains(out, n.Self().Address) {
		t.Errorf("members table: %v\n%s", err, out)
	}
	// The API says the type is unknown; the CLI, not the library, says how to deploy it.
	_, err := runCLI(t, "ask", "nosuch/a", "x")
	if err == nil || !strings.Contains(err.Error(), `unknown entity type: "nosuch"`) ||
		!strings.Contains(err.Error(), "deploy it with shardhost deploy --type nosuch FILE.wasm") {
		t.Errorf("ask of an unknown type: %v", err)
	}
}

// startCLIMember starts one member with an API on loopback, waits until it is up,
// points the CLI at it (SHARDHOST_API) and kills it when the test ends.
func startCLIMember(t *testing.T) *host.Node {
	t.Helper()
	cfg := host.DefaultConfig()
	cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir, cfg.GossipProfile = t.TempDir(), "local"
	n, err := host.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Kill() })
	if err := n.Membership().WaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARDHOST_API", n.APIAddr())
	return n
}
