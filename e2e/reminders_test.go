package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestReminderFiresOnceOnAnotherMemberAfterASIGKILL: an entity sets a reminder for 5 s
// ahead and is passivated, then its member is SIGKILLed; the reminder, kept by the
// built-in store, fires once, on another member, and wakes the entity there.
func TestReminderFiresOnceOnAnotherMemberAfterASIGKILL(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "remind", testwasm.Path(t, "abitest")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	// An entity on the third member, asked through the first.
	id := ""
	for k := 0; k < 200 && id == ""; k++ {
		status, body, node, err := api(hosts[0], "ask", "remind", "e"+strconv.Itoa(k), "count")
		if err != nil || status != 200 {
			t.Fatalf("count: %d %s %v", status, body, err)
		}
		if node == hosts[2].bind {
			id = "e" + strconv.Itoa(k)
		}
	}
	if id == "" {
		t.Fatal("no entity on the third member")
	}
	if status, body, _, err := api(hosts[0], "ask", "remind", id, "remind wake 5000 0 hello"); err != nil || status != 200 || body != "ok" {
		t.Fatalf("remind: %d %q %v", status, body, err)
	}
	reminders := func(h *host) ([]json.RawMessage, error) {
		resp, err := http.Get("http://" + h.api + "/v1/entities/remind/" + id + "/reminders")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		var res struct{ Reminders []json.RawMessage }
		return res.Reminders, json.Unmarshal(b, &res)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the reminder stored", func() error {
		rs, err := reminders(hosts[0])
		if err == nil && len(rs) != 1 {
			return fmt.Errorf("%d reminders", len(rs))
		}
		return err
	})
	if out, errText, ok := cli(t, hosts[0], nil, "passivate", "remind/"+id); !ok {
		t.Fatalf("passivate: %s%s", out, errText)
	}
	hosts[2].cmd.Process.Signal(syscall.SIGKILL)
	// Fired and deleted (a one-shot) with no message asking for the entity.
	testutil.EventuallyNil(t, 120*time.Second, "the reminder fired after the kill", func() error {
		rs, err := reminders(hosts[1])
		if err == nil && len(rs) != 0 {
			return fmt.Errorf("%d reminders still", len(rs))
		}
		return err
	})
	status, events, node, err := api(hosts[0], "ask", "remind", id, "events")
	if err != nil || status != 200 || node == hosts[2].bind {
		t.Fatalf("events: %d %q from %s %v", status, events, node, err)
	}
	if strings.Count(events, "10 wake hello due=") != 1 || strings.Count(events, "\n") != 0 {
		t.Fatalf("events %q, want the reminder once", events)
	}
}
