package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestScheduledMessageSurvivesASIGKILLAndACancelledOneNeverComes: a message scheduled
// with tell --in 5s for an entity on the third member, which is then passivated and its
// member SIGKILLed, is delivered once, on another member; a message for the same entity,
// due just before it and cancelled, never is. The built-in store keeps both.
func TestScheduledMessageSurvivesASIGKILLAndACancelledOneNeverComes(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	id := ""
	for k := 0; k < 200 && id == ""; k++ {
		status, body, node, err := api(hosts[0], "ask", "counter", "s"+strconv.Itoa(k), "get")
		if err != nil || status != 200 {
			t.Fatalf("get: %d %s %v", status, body, err)
		}
		if node == hosts[2].bind {
			id = "s" + strconv.Itoa(k)
		}
	}
	if id == "" {
		t.Fatal("no entity on the third member")
	}
	target := "counter/" + id
	scheduled := func(args ...string) string {
		t.Helper()
		out, errText, ok := cli(t, hosts[0], nil, append([]string{"tell"}, args...)...)
		f := strings.Fields(out)
		if !ok || len(f) == 0 || !strings.HasPrefix(f[len(f)-1], "sm-") {
			t.Fatalf("tell %v: %s%s", args, out, errText)
		}
		return f[len(f)-1]
	}
	kept := scheduled("--in", "5s", target, "inc")
	list, errText, ok := cli(t, hosts[0], nil, "scheduled", "list", target, "-o", "json")
	if !ok || !strings.Contains(list, kept) {
		t.Fatalf("scheduled list: %s%s", list, errText)
	}
	// Due a millisecond before the kept one, so that it would come first; cancelled.
	var keptDue int64
	if i := strings.Index(list, `"deliver_at_unix_ms": `); i >= 0 {
		keptDue, _ = strconv.ParseInt(strings.TrimRight(strings.Fields(list[i+len(`"deliver_at_unix_ms": `):])[0], ","), 10, 64)
	}
	if keptDue == 0 {
		t.Fatalf("no due time in %s", list)
	}
	cancelled := scheduled("--at", strconv.FormatInt(keptDue-1, 10), target, "inc")
	if out, errText, ok := cli(t, hosts[1], nil, "scheduled", "cancel", cancelled); !ok || !strings.Contains(out, "cancelled "+cancelled) {
		t.Fatalf("cancel: %s%s", out, errText)
	}
	if out, errText, ok := cli(t, hosts[0], nil, "passivate", target); !ok {
		t.Fatalf("passivate: %s%s", out, errText)
	}
	hosts[2].cmd.Process.Signal(syscall.SIGKILL)
	// Delivered and deleted, with no message asking for the entity; the cancelled one
	// is gone too (it would stay listed until delivered had the cancel not held).
	testutil.EventuallyNil(t, 120*time.Second, "the scheduled message delivered after the kill", func() error {
		out, errText, ok := cli(t, hosts[1], nil, "scheduled", "list", target)
		if !ok || !strings.Contains(out, "no scheduled messages") {
			return fmt.Errorf("%s%s", out, errText)
		}
		return nil
	})
	status, count, node, err := api(hosts[0], "ask", "counter", id, "get")
	if err != nil || status != 200 || node == hosts[2].bind || count != "1" {
		t.Fatalf("get: %d %q from %s %v: want 1 (the kept message once, the cancelled one never), not from the killed %s",
			status, count, node, err, hosts[2].bind)
	}
	if out, errText, ok := cli(t, hosts[0], nil, "scheduled", "cancel", kept); ok || !strings.Contains(errText, "no such scheduled message") {
		t.Fatalf("cancel after delivery: %s%s, want no such scheduled message", out, errText)
	}
}
