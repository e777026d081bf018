package main

import (
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// deploy --state-ttl D sets the type's state TTL, which the deploy's settings list
// shows and a redeploy without the flag keeps; 0 turns it off; a TTL that is too short,
// negative or not a duration is refused with a clear error, and nothing is deployed.
func TestDeployStateTTL(t *testing.T) {
	startCLIMember(t)
	wasm := testwasm.Path(t, "counter")
	setting := func(out string) string {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "*" { // changed by this deploy
				f = f[1:]
			}
			if len(f) >= 2 && f[0] == "state-ttl" {
				return f[1]
			}
		}
		return ""
	}
	out, err := runCLI(t, "deploy", "--type", "counter", wasm)
	if err != nil || setting(out) != "0s" {
		t.Fatalf("deploy: %v, state-ttl %q\n%s", err, setting(out), out)
	}
	if out, err = runCLI(t, "deploy", "--type", "counter", "--state-ttl", "720h", wasm); err != nil || setting(out) != "720h0m0s" {
		t.Fatalf("deploy --state-ttl 720h: %v, state-ttl %q\n%s", err, setting(out), out)
	}
	if out, err = runCLI(t, "deploy", "--type", "counter", "--max-active", "5", wasm); err != nil || setting(out) != "720h0m0s" {
		t.Fatalf("a redeploy without --state-ttl: %v, state-ttl %q\n%s", err, setting(out), out)
	}
	for _, bad := range []struct{ arg, want string }{
		{"30s", "at least 1m0s"},
		{"-1h", "at least 1m0s"},
		{"soon", "invalid argument"},
	} {
		if out, err := runCLI(t, "deploy", "--type", "counter", "--state-ttl", bad.arg, wasm); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--state-ttl %s: %v, want an error saying %q\n%s", bad.arg, err, bad.want, out)
		}
	}
	if out, err = runCLI(t, "deploy", "--type", "counter", "--state-ttl", "0", wasm); err != nil || setting(out) != "0s" {
		t.Fatalf("deploy --state-ttl 0: %v, state-ttl %q\n%s", err, setting(out), out)
	}
}
