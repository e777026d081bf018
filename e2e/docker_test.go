package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// docker runs a docker command and returns its output.
func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// dockerCluster is shardhost members in containers built FROM scratch from the static
// binary, on a private network.
type dockerCluster struct {
	t          *testing.T
	image, net string
	subnet     int
	containers []string
}

func newDockerCluster(t *testing.T) *dockerCluster {
	t.Helper()
	// Without Docker the tests are skipped, except in CI (CI=true), where a missing
	// Docker must not pass unnoticed.
	skip := t.Skipf
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		skip = t.Fatalf
	}
	if _, err := exec.LookPath("docker"); err != nil {
		skip("docker is not installed (CI=%q)", os.Getenv("CI"))
	}
	if out, err := docker(t, "info", "--format", "{{.ServerVersion}}"); err != nil {
		skip("the docker engine is not reachable (CI=%q): %s", os.Getenv("CI"), out)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "shardhost"), "./cmd/host")
	build.Dir = testwasm.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the static binary: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY shardhost /shardhost\nENTRYPOINT [\"/shardhost\"]\n"), 0o644)
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), rand.Intn(1e6))
	dc := &dockerCluster{t: t, image: "shardhost-e2e:" + suffix, net: "shardhost-e2e-" + suffix}
	if out, err := docker(t, "build", "-q", "-t", dc.image, dir); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(dc.cleanup)
	for try := 0; ; try++ {
		dc.subnet = 100 + rand.Intn(150)
		out, err := docker(t, "network", "create", "--subnet", fmt.Sprintf("172.29.%d.0/24", dc.subnet), dc.net)
		if err == nil {
			break
		}
		if try == 5 {
			t.Fatalf("docker network create: %v\n%s", err, out)
		}
	}
	return dc
}

func (dc *dockerCluster) ip(i int) string { return fmt.Sprintf("172.29.%d.%d", dc.subnet, 11+i) }

// start runs member i (from 0), joining member 0 unless it is member 0.
func (dc *dockerCluster) start(i int, extra ...string) {
	dc.t.Helper()
	name := fmt.Sprintf("%s-%d", dc.net, i)
	args := []string{"run", "-d", "--name", name, "--network", dc.net, "--ip", dc.ip(i), dc.image,
		"start", "--bind", dc.ip(i) + ":7946", "--api", dc.ip(i) + ":8080", "--data-dir", "/data",
		"--api-insecure"} // a test network of its own, reached only by the test
	if i > 0 {
		args = append(args, "--join", dc.ip(0)+":7946")
	}
	if out, err := docker(dc.t, append(args, extra...)...); err != nil {
		dc.t.Fatalf("docker run: %v\n%s", err, out)
	}
	dc.containers = append(dc.containers, name)
}

func (dc *dockerCluster) members(i int) ([]memberJSON, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + dc.ip(i) + ":8080/v1/members")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ms []memberJSON
	return ms, json.NewDecoder(resp.Body).Decode(&ms)
}

func (dc *dockerCluster) waitView(i int, limit time.Duration, what string, cond func([]memberJSON) bool) {
	dc.t.Helper()
	var ms []memberJSON
	var err error
	defer func() {
		if dc.t.Failed() {
			logs, _ := docker(dc.t, "logs", dc.containers[i])
			dc.t.Logf("log of member %d:\n%s", i, logs)
		}
	}()
	testutil.EventuallyNil(dc.t, limit, fmt.Sprintf("member %d to see %s", i, what), func() error {
		if ms, err = dc.members(i); err == nil && cond(ms) {
			return nil
		}
		return fmt.Errorf("it sees %+v %v", ms, err)
	})
}

func (dc *dockerCluster) running(i int) bool {
	out, _ := docker(dc.t, "inspect", "-f", "{{.State.Running}}", dc.containers[i])
	return out == "true"
}

func (dc *dockerCluster) cleanup() {
	for _, c := range dc.containers {
		if dc.t.Failed() {
			logs, _ := docker(dc.t, "logs", c)
			dc.t.Logf("logs of %s:\n%s", c, logs)
		}
		docker(dc.t, "rm", "-f", c)
	}
	docker(dc.t, "network", "rm", dc.net)
	docker(dc.t, "rmi", "-f", dc.image)
}

func allUpView(n int) func([]memberJSON) bool {
	return func(ms []memberJSON) bool {
		if len(ms) != n {
			return false
		}
		for _, m := range ms {
			if m.Status != "up" || !m.Reachable {
				return false
			}
		}
		return true
	}
}

// TestDockerPartition cuts one of three containers off the network: the majority downs
// and removes it, and the cut-off member, alone on its side, downs itself and exits. At
// most one side keeps running.
func TestDockerPartition(t *testing.T) {
	dc := newDockerCluster(t)
	for i := 0; i < 3; i++ {
		dc.start(i, fast...)
	}
	for i := 0; i < 3; i++ {
		dc.waitView(i, 60*time.Second, "3 up members", allUpView(3))
	}
	start := time.Now()
	if out, err := docker(t, "network", "disconnect", dc.net, dc.containers[2]); err != nil {
		t.Fatalf("disconnect: %v %s", err, out)
	}
	for i := 0; i < 2; i++ {
		dc.waitView(i, 30*time.Second, "the cut-off member removed", allUpView(2))
	}
	t.Logf("partition → the cut-off member removed by the majority after %v", time.Since(start).Round(10*time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "the cut-off member to stop (else two sides are alive)", func() bool { return !dc.running(2) })
	logs, _ := docker(t, "logs", dc.containers[2])
	if !strings.Contains(logs, "out of the cluster") {
		t.Fatalf("the cut-off member stopped without saying why:\n%s", logs)
	}
	// Reconnected, it stays out; the majority goes on undisturbed.
	docker(t, "network", "connect", "--ip", dc.ip(2), dc.net, dc.containers[2])
	time.Sleep(2 * time.Second)
	dc.waitView(0, 10*time.Second, "2 up members", allUpView(2))
}

// TestDockerKill kills a container: it is downed and removed.
func TestDockerKill(t *testing.T) {
	dc := newDockerCluster(t)
	for i := 0; i < 3; i++ {
		dc.start(i, fast...)
	}
	for i := 0; i < 3; i++ {
		dc.waitView(i, 60*time.Second, "3 up members", allUpView(3))
	}
	if out, err := docker(t, "kill", dc.containers[1]); err != nil {
		t.Fatalf("kill: %v %s", err, out)
	}
	for _, i := range []int{0, 2} {
		dc.waitView(i, 30*time.Second, "the killed member removed", allUpView(2))
	}
}
