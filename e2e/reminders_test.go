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

// TestReminderDueDuringAFullStopFiresOnceLate: the whole cluster stops before a
// reminder falls due and starts again after; the reminder fires once, with its due
// time, which the entity sees is before the cluster came back (late), and no message
// asks for the entity first.
func TestReminderDueDuringAFullStopFiresOnceLate(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var hosts []*host
	for i, d := range dirs {
		join := ""
		if i > 0 {
			join = hosts[0].bind
		}
		hosts = append(hosts, startHostIn(t, d, join))
	}
	waitForCluster(t, hosts)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "remind", testwasm.Path(t, "abitest")); !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	if status, body, _, err := api(hosts[0], "ask", "remind", "late", "remind wake 30000 0 hello"); err != nil || status != 200 || body != "ok" {
		t.Fatalf("remind: %d %q %v", status, body, err)
	}
	var due int64
	testutil.EventuallyNil(t, 30*time.Second, "the reminder stored", func() error {
		status, body, _, err := api(hosts[0], "ask", "remind", "late", "reminders")
		if err != nil || status != 200 {
			return fmt.Errorf("%d %q %v", status, body, err)
		}
		f := strings.Fields(body)
		if len(f) != 4 || f[0] != "wake" {
			return fmt.Errorf("reminders %q", body)
		}
		due, err = strconv.ParseInt(f[1], 10, 64)
		return err
	})
	binds := []string{hosts[0].bind, hosts[1].bind, hosts[2].bind}
	for i := len(hosts) - 1; i >= 0; i-- {
		hosts[i].stop(t)
	}
	if stopped := time.Now().UnixMilli(); stopped >= due {
		// It may have fired before the stop: not the scenario.
		t.Fatalf("the cluster took until %d to stop, past the reminder's due time %d", stopped, due)
	}
	// The cluster is down when the reminder falls due.
	for time.Now().UnixMilli() <= due+1000 {
		time.Sleep(100 * time.Millisecond) // the wall clock passing the due time is the scenario
	}
	back := time.Now().UnixMilli()
	hosts = nil
	for i, d := range dirs {
		join := ""
		if i > 0 {
			join = hosts[0].bind
		}
		hosts = append(hosts, restartHostAt(t, d, binds[i], join))
	}
	waitForCluster(t, hosts)
	testutil.EventuallyNil(t, 120*time.Second, "the late reminder fired", func() error {
		resp, err := http.Get("http://" + hosts[1].api + "/v1/entities/remind/late/reminders")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var res struct{ Reminders []json.RawMessage }
		if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("%d %s %v", resp.StatusCode, b, err)
		}
		if len(res.Reminders) != 0 {
			return fmt.Errorf("%d reminders still", len(res.Reminders))
		}
		return nil
	})
	status, events, _, err := api(hosts[0], "ask", "remind", "late", "events")
	want := "10 wake hello due=" + strconv.FormatInt(due, 10)
	if err != nil || status != 200 || events != want {
		t.Fatalf("events: %d %q %v, want %q", status, events, err, want)
	}
	if due >= back {
		t.Fatalf("due %d is not before the restart at %d", due, back)
	}
}
