// Package e2e runs real shardhost processes and talks to them through the CLI and the
// management API, as a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

var binary string // the shardhost binary built for this run

// TestMain builds the binary, and checks, once every test has run, that none left a
// goroutine behind (a process's waiter, a test server).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardhost-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "shardhost")
	cmd := exec.Command("go", "build", "-o", binary, "./cmd/shardhost")
	cmd.Dir = testwasm.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building shardhost: %v\n%s", err, out)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeSharedImage()
		os.RemoveAll(dir)
		testwasm.Cleanup()
		os.Exit(code)
	}))
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 (and, for gossip, UDP).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			l.Close()
			continue
		}
		held = append(held, l, u)
		ports = append(ports, port)
	}
	return ports
}

// host is one shardhost process.
type host struct {
	bind, api string
	cmd       *exec.Cmd
	log       *lockedBuffer
	done      chan error
}

// lockedBuffer is the log of a running process: written by the process's output
// copier, read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startHost(t *testing.T, join string, extra ...string) *host {
	t.Helper()
	return startHostIn(t, t.TempDir(), join, extra...)
}

// startHostIn starts a host whose data directory is dir, and waits until its API
// answers or it exits. The ports are probed free, but another process may take one
// before the host binds it: a start that fails with "address already in use" is
// retried with other ports.
func startHostIn(t *testing.T, dir, join string, extra ...string) *host {
	t.Helper()
	return startChecked(t, healthy, func() *host { return launchHost(t, dir, join, extra...) })
}

// startChecked launches a host and waits until up says it answers, or it exits (the
// test looks at why it stopped), or a minute has passed; a start that failed on an
// address already in use is launched again, on other ports, up to 5 times.
func startChecked(t *testing.T, up func(*host) bool, launch func() *host) *host {
	t.Helper()
	for attempt := 0; ; attempt++ {
		h := launch()
		deadline := time.Now().Add(60 * time.Second)
		for {
			select {
			case err := <-h.done:
				h.done <- err
				if strings.Contains(h.log.String(), "address already in use") && attempt < 5 {
					goto retry
				}
				return h
			default:
			}
			if up(h) || time.Now().After(deadline) {
				return h
			}
			time.Sleep(20 * time.Millisecond) // the poll of the start's answer or exit, until its deadline
		}
	retry:
	}
}

func healthy(h *host) bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + h.api + "/v1/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// restartHostAt starts a host on a given gossip address (a restart of a member that
// stopped there), retrying while the address is still being released.
func restartHostAt(t *testing.T, dir, bind, join string, extra ...string) *host {
	t.Helper()
	for attempt := 0; ; attempt++ {
		h := launchHostWith(t, dir, bind, join, extra...)
		deadline := time.Now().Add(60 * time.Second)
		for {
			select {
			case err := <-h.done:
				h.done <- err
				if strings.Contains(h.log.String(), "address already in use") && attempt < 20 {
					time.Sleep(250 * time.Millisecond) // a retry's pace, while the address is released
					goto retry
				}
				return h
			default:
			}
			if healthy(h) || time.Now().After(deadline) {
				return h
			}
			time.Sleep(20 * time.Millisecond) // the poll of the start's answer or exit, until its deadline
		}
	retry:
	}
}

func launchHost(t *testing.T, dir, join string, extra ...string) *host {
	return launchHostWith(t, dir, "", join, extra...)
}

// launchHostWith starts a host process: on bind, or on a free port if bind is empty.
func launchHostWith(t *testing.T, dir, bind, join string, extra ...string) *host {
	t.Helper()
	p := freePorts(t, 3)
	if bind == "" {
		bind = fmt.Sprintf("127.0.0.1:%d", p[0])
	}
	h := &host{
		bind: bind,
		api:  fmt.Sprintf("127.0.0.1:%d", p[2]),
		log:  &lockedBuffer{},
		done: make(chan error, 1),
	}
	args := []string{"start", "--bind", h.bind, "--transport", fmt.Sprintf("127.0.0.1:%d", p[1]), "--api", h.api,
		"--data-dir", dir, "--gossip-profile", "local"}
	if join != "" {
		args = append(args, "--join", join)
	}
	h.cmd = exec.Command(binary, append(args, extra...)...)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.done <- h.cmd.Wait() }()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		err := <-h.done
		h.done <- err
		if t.Failed() {
			t.Logf("log of %s:\n%s", h.bind, h.log)
		}
	})
	return h
}

// stop sends SIGTERM and waits for a clean exit.
func (h *host) stop(t *testing.T) {
	t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("%s exited with %v\n%s", h.bind, err, h.log)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop on SIGTERM", h.bind)
	}
}

// cli runs the shardhost CLI against a host's API (none if h is nil) and returns
// stdout, stderr and whether it exited 0.
func cli(t *testing.T, h *host, stdin []byte, args ...string) (string, string, bool) {
	t.Helper()
	var env []string
	if h != nil {
		env = append(env, "SHARDHOST_API="+h.api)
	}
	return run(t, env, stdin, args...)
}

// run runs the shardhost CLI with env added and returns stdout, stderr and success.
func run(t *testing.T, env []string, stdin []byte, args ...string) (string, string, bool) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return out.String(), errb.String(), err == nil
}

// mustFail checks that a CLI call fails with one line on stderr containing want.
func mustFail(t *testing.T, h *host, stdin []byte, want string, args ...string) {
	t.Helper()
	out, errText, ok := cli(t, h, stdin, args...)
	lines := strings.Split(strings.TrimRight(errText, "\n"), "\n")
	if ok || len(lines) != 1 || !strings.HasPrefix(lines[0], "shardhost: ") || !strings.Contains(lines[0], want) {
		t.Errorf("shardhost %s: exit ok=%v, stdout %q, stderr %q; want failure with one line containing %q",
			strings.Join(args, " "), ok, out, errText, want)
	}
}

type member struct {
	Address string `json:"address"`
	UID     string `json:"uid"`
	Status  string `json:"status"`
}

func waitForCluster(t *testing.T, hosts []*host) {
	t.Helper()
	testutil.EventuallyNil(t, 30*time.Second, fmt.Sprintf("every member to see %d up members", len(hosts)), func() error {
		for _, h := range hosts {
			out, errText, ok := cli(t, h, nil, "members", "--json")
			var ms []member
			if !ok || json.Unmarshal([]byte(out), &ms) != nil {
				return fmt.Errorf("%s: members: %s%s", h.bind, out, errText)
			}
			up := 0
			for _, m := range ms {
				if m.Status == "up" && m.UID != "" {
					up++
				}
			}
			if up != len(hosts) || len(ms) != len(hosts) {
				return fmt.Errorf("%s sees %s", h.bind, out)
			}
		}
		return nil
	})
}

// api sends one tell or ask through a host's HTTP API.
func api(h *host, verb, typ, id, payload string) (int, string, string, error) {
	resp, err := http.Post("http://"+h.api+"/v1/"+verb+"?type="+url.QueryEscape(typ)+"&id="+url.QueryEscape(id),
		"application/octet-stream", strings.NewReader(payload))
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Shardhost-Node"), nil
}

func TestThreeProcessesServeHundredsOfCounters(t *testing.T) {
	h1 := startHost(t, "")
	h2 := startHost(t, h1.bind)
	h3 := startHost(t, h1.bind)
	hosts := []*host{h1, h2, h3}
	waitForCluster(t, hosts)

	out, errText, ok := cli(t, h2, nil, "deploy", "--type", "counter", testwasm.Path(t, "counter"))
	if !ok || strings.Count(out, " ready\n") != 3 {
		t.Fatalf("deploy: ok=%v\n%s%s", ok, out, errText)
	}

	// 300 counters; counter i gets i%5+1 increments, each through another host.
	const entities = 300
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, entities)
	sem := make(chan struct{}, 32)
	for i := 0; i < entities; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			id := fmt.Sprintf("user-%d/ü", i)
			for k := 0; k < i%5+1; k++ {
				if ctx.Err() != nil {
					return
				}
				status, body, _, err := api(hosts[(i+k)%3], "ask", "counter", id, "inc")
				if err != nil || status != 200 {
					errs <- fmt.Errorf("inc %s: %d %s %v", id, status, body, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every count is right, read through yet another host.
	nodes := map[string]int{}
	for i := 0; i < entities; i++ {
		id := fmt.Sprintf("user-%d/ü", i)
		status, body, node, err := api(hosts[(i+2)%3], "ask", "counter", id, "get")
		if err != nil || status != 200 || body != strconv.Itoa(i%5+1) {
			t.Fatalf("get %s: %d %q %v, want %d", id, status, body, err, i%5+1)
		}
		nodes[node]++
	}
	if len(nodes) < 2 {
		t.Fatalf("every entity on one host: %v", nodes)
	}
	t.Logf("entities per host: %v", nodes)

	// Tells through the CLI, then the CLI's ask sees them.
	for i := 0; i < 5; i++ {
		if _, errText, ok := cli(t, hosts[i%3], nil, "tell", "counter/cli-entity", "inc 2"); !ok {
			t.Fatalf("tell: %s", errText)
		}
	}
	testutil.EventuallyNil(t, 10*time.Second, "the 5 tells of inc 2 to count 10", func() error {
		if out, errText, ok := cli(t, h3, nil, "ask", "counter/cli-entity", "get"); !ok || out != "10\n" {
			return fmt.Errorf("ask: %q %q", out, errText)
		}
		return nil
	})

	// shards --json: the entities are spread over more than one host, and counted.
	out, errText, ok = cli(t, h1, nil, "shards", "--json")
	if !ok {
		t.Fatal(errText)
	}
	var rep struct {
		Regions []struct {
			Node   string `json:"node"`
			Shards []struct {
				Type     string `json:"type"`
				ID       int    `json:"id"`
				Entities int    `json:"entities"`
			} `json:"shards"`
		} `json:"regions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("shards --json: %v\n%s", err, out)
	}
	total, withEntities := 0, 0
	for _, r := range rep.Regions {
		n := 0
		for _, s := range r.Shards {
			n += s.Entities
		}
		if n > 0 {
			withEntities++
		}
		total += n
	}
	if len(rep.Regions) != 3 || withEntities < 2 || total != entities+1 {
		t.Fatalf("shards: %d regions, %d with entities, %d entities in all\n%s", len(rep.Regions), withEntities, total, out)
	}

	// A second version of counter (the same code under another digest): modules lists
	// both, the new one current, on every member.
	v2 := filepath.Join(t.TempDir(), "counter-v2.wasm")
	wasm := testwasm.Bytes(t, "counter")
	// A custom section named "v2" holding "build 2" (wazero refuses an empty one).
	custom := append([]byte{0, byte(1 + len("v2") + len("build 2")), byte(len("v2"))}, "v2build 2"...)
	if err := os.WriteFile(v2, append(append([]byte(nil), wasm...), custom...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errText, ok := cli(t, h3, nil, "deploy", "--type", "counter", v2); !ok {
		t.Fatalf("deploy v2: %s%s", out, errText)
	}
	out, errText, ok = cli(t, h1, nil, "modules")
	if !ok {
		t.Fatal(errText)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TYPE") || !strings.Contains(lines[1], "counter") ||
		!strings.Contains(lines[1], " 2 ") || !strings.Contains(lines[1], "*") || !strings.Contains(lines[2], " 1 ") {
		t.Fatalf("modules:\n%s", out)
	}
	t.Logf("shardhost modules:\n%s", out)
	// The counts survive: each entity moves to version 2 at its next activation.
	if out, _, ok := cli(t, h2, nil, "ask", "counter/cli-entity", "get"); !ok || out != "10\n" {
		t.Fatalf("get after the redeploy: %q", out)
	}

	for _, h := range hosts {
		h.stop(t)
	}
}

func TestBadInputsGiveClearErrorsAndHostsGoOn(t *testing.T) {
	h1 := startHost(t, "", "--message-deadline", "1s", "--max-message-size", "4096")
	h2 := startHost(t, h1.bind, "--message-deadline", "1s", "--max-message-size", "4096")
	waitForCluster(t, []*host{h1, h2})
	if out, errText, ok := cli(t, h1, nil, "deploy", "--type", "faulty", testwasm.Path(t, "faulty")); !ok {
		t.Fatalf("deploy faulty: %s%s", out, errText)
	}
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "notes.wasm")
	os.WriteFile(notWasm, []byte("these are my notes"), 0o644)
	noExports := filepath.Join(dir, "empty.wasm")
	os.WriteFile(noExports, []byte("\x00asm\x01\x00\x00\x00"), 0o644)

	mustFail(t, h1, nil, "not a WebAssembly binary", "deploy", "--type", "notes", notWasm)
	mustFail(t, h1, nil, "missing required exports", "deploy", "--type", "empty", noExports)
	mustFail(t, h1, nil, "no such file", "deploy", "--type", "x", filepath.Join(dir, "missing.wasm"))
	mustFail(t, h1, nil, "unknown entity type", "ask", "nosuchtype/a", "hi")
	mustFail(t, h1, nil, "empty entity ID", "ask", "faulty/", "hi")
	mustFail(t, h1, nil, "is not TYPE/ID", "tell", "faulty", "hi")
	mustFail(t, h1, bytes.Repeat([]byte("x"), 5000), "over the cap", "ask", "faulty/a", "-")
	mustFail(t, h2, nil, "panic: faulty: trap requested", "ask", "faulty/a", "trap")
	mustFail(t, h2, nil, "deadline", "ask", "faulty/b", "loop")
	mustFail(t, h1, nil, "failure requested", "ask", "faulty/c", "fail")
	mustFail(t, &host{api: "127.0.0.1:1"}, nil, "cannot reach the API", "members")

	// Both hosts still serve, including the entities that trapped and looped.
	for _, h := range []*host{h1, h2} {
		for _, id := range []string{"a", "b", "c"} {
			out, errText, ok := cli(t, h, nil, "ask", "faulty/"+id, "echo still here")
			if !ok || out != "still here\n" {
				t.Fatalf("after bad inputs, faulty/%s via %s: %q %q", id, h.api, out, errText)
			}
		}
	}
	h1.stop(t)
	h2.stop(t)
}
