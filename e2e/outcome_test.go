package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// patient is the failure detection of TestAKilledMembersEntity...: heartbeats every
// 200 ms, but the resolver downs a silent member only after 20 s of stability, so that
// a member paused or killed stays the home of its shards (up, unreachable) for the
// whole of the test's asks, on however loaded a machine. A downed member's shards move
// 20 s later (the margin follows the stable-after).
var patient = []string{"--heartbeat-interval", "200ms", "--acceptable-heartbeat-pause", "3s", "--sbr-stable-after", "20s"}

// askExit runs shardhost ask against api and returns its standard output, error and
// exit code.
func askExit(t *testing.T, api string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"ask", "--api", api}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// stopped reports whether the process pid is stopped (SIGSTOP): its state in
// /proc/PID/stat is T.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses; the state follows
	// the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestAKilledMembersEntityIsNotDeliveredAndAnUnansweredAskIsUnknown: as a new user would
// see it, asking through one member of three. The member hosting a counter is paused
// (SIGSTOP): an ask of the counter goes to it and no reply comes within the ask's
// timeout, so its outcome is unknown (504 outcome-unknown, exit 124). The member is
// then killed (SIGKILL): asks of the counter cannot reach it and fail at once as not
// delivered (503 not-delivered with Retry-After, exit 75), as does an ask through the
// killed member's own API. Once the member is downed and the counter's shard has a
// new home, the counter answers with what was acknowledged: the paused ask never ran,
// and no ask that was not delivered counted.
func TestAKilledMembersEntityIsNotDeliveredAndAnUnansweredAskIsUnknown(t *testing.T) {
	h1 := startHost(t, "", patient...)
	h2 := startHost(t, h1.bind, patient...)
	h3 := startHost(t, h1.bind, patient...)
	waitForCluster(t, []*host{h1, h2, h3})
	if out, errText, ok := cli(t, h1, nil, "deploy", "--type", "counter", testwasm.Path(t, "counter")); !ok || strings.Count(out, " ready\n") != 3 {
		t.Fatalf("deploy: ok=%v\n%s%s", ok, out, errText)
	}
	var id string
	for i := 0; id == ""; i++ {
		if i == 300 {
			t.Fatal("no counter of 300 is hosted on the second member")
		}
		status, body, node, err := api(h1, "ask", "counter", "k"+strconv.Itoa(i), "get")
		if err != nil || status != 200 {
			t.Fatalf("get: %d %s %v", status, body, err)
		}
		if node == h2.bind {
			id = "k" + strconv.Itoa(i)
		}
	}
	if out, errText, code := askExit(t, h1.api, "counter/"+id, "inc"); code != 0 || out != "1\n" {
		t.Fatalf("inc: exit %d, %q %s", code, out, errText)
	}

	// Paused: the ask reaches its member, which never answers.
	if err := h2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the second member stopped", func() bool { return stopped(h2.cmd.Process.Pid) })
	if _, errText, code := askExit(t, h1.api, "--timeout", "1s", "counter/"+id, "inc"); code != 124 || !strings.Contains(errText, "outcome unknown") {
		t.Fatalf("an ask of the paused member's counter: exit %d, %q; want 124, outcome unknown", code, errText)
	}

	// Killed: the asks cannot be sent. The first after the kill may still have gone
	// into the connection before the first member saw it close (then it is unknown).
	if err := h2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-h2.done
	h2.done <- err
	notDelivered := 0
	for try := 1; notDelivered < 3; try++ {
		start := time.Now()
		_, errText, code := askExit(t, h1.api, "--timeout", "10s", "counter/"+id, "inc")
		switch {
		case code == 75 && strings.Contains(errText, "not delivered"):
			notDelivered++
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("not delivered after %v: it waited", d)
			}
		case code == 124 && try == 1:
			t.Logf("the first ask after the kill went into the closing connection: %s", errText)
		default:
			t.Fatalf("ask %d of the killed member's counter: exit %d, %q; want 75, not delivered", try, code, errText)
		}
	}
	status, body, _, err := api(h1, "ask", "counter", id, "inc")
	var apiErr struct{ Code string }
	if err != nil || status != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &apiErr) != nil || apiErr.Code != "not-delivered" {
		t.Fatalf("the API's answer: %d %s %v; want 503 not-delivered", status, body, err)
	}
	resp, err := http.Post("http://"+h1.api+"/v1/ask?type=counter&id="+id, "", strings.NewReader("inc"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("not delivered: %d with Retry-After %q, want 503 with one", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, errText, code := askExit(t, h2.api, "counter/"+id, "inc"); code != 75 || !strings.Contains(errText, "cannot reach the API") {
		t.Fatalf("an ask through the killed member's API: exit %d, %q; want 75", code, errText)
	}

	// Downed, the member's shards move; the counter kept the one acknowledged inc.
	if _, errText, ok := cli(t, h1, nil, "down", h2.bind); !ok {
		t.Fatalf("down: %s", errText)
	}
	testutil.EventuallyNil(t, 90*time.Second, "the counter served by another member", func() error {
		out, errText, code := askExit(t, h1.api, "--timeout", "5s", "counter/"+id, "get")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errText)
		}
		if out != "1\n" {
			t.Fatalf("the counter is %q, want 1: an ask not delivered, or the paused one, counted", out)
		}
		return nil
	})
}
