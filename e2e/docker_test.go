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
	"sync"
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
// binary. Each member is on two private networks: the cluster network, where members
// gossip and send each other messages (--bind), and the client network, where the test
// reaches their APIs (--api on every interface). A partition disconnects members from
// the cluster network only, so that the test still sees what each side answers.
type dockerCluster struct {
	t                  *testing.T
	image, net, client string
	subnet, csubnet    int
	containers         []string
}

// requireDocker skips the test without a reachable Docker engine (and, with compose,
// the docker-compose tool), except in CI (CI=true), where a missing Docker must not pass
// unnoticed.
func requireDocker(t *testing.T, compose bool) {
	t.Helper()
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
	if _, err := exec.LookPath("docker-compose"); compose && err != nil {
		skip("docker-compose is not installed (apt-get install docker-compose; CI=%q)", os.Getenv("CI"))
	}
}

// buildImage builds shardhost's image from deploy/Dockerfile as make image does (the
// static binary, the example modules, an empty /data owned by the image's user), tagged
// with suffix, and removes it when the test ends.
func buildImage(t *testing.T, suffix string) string {
	t.Helper()
	image := "shardhost-e2e:" + suffix
	buildImageAs(t, image)
	t.Cleanup(func() { docker(t, "rmi", "-f", image) })
	return image
}

// The image the docker clusters of this test process share, built by the first one
// that needs it and removed by TestMain.
var (
	sharedImageOnce sync.Once
	sharedImageName string
)

func sharedImage(t *testing.T) string {
	t.Helper()
	sharedImageOnce.Do(func() {
		image := fmt.Sprintf("shardhost-e2e:shared-%d-%d", os.Getpid(), rand.Intn(1e6))
		buildImageAs(t, image) // a failure here fails this test and leaves the name empty
		sharedImageName = image
	})
	if sharedImageName == "" {
		t.Fatal("the shared image could not be built (see the test that built it first)")
	}
	return sharedImageName
}

// removeSharedImage removes the shared image, if a test built it.
func removeSharedImage() {
	if sharedImageName != "" {
		exec.Command("docker", "rmi", "-f", sharedImageName).Run()
	}
}

// buildImageAs builds the image and tags it image.
func buildImageAs(t *testing.T, image string) {
	t.Helper()
	dir := t.TempDir()
	root := testwasm.RepoRoot()
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=e2e", "-o", filepath.Join(dir, "shardhost"), "./cmd/shardhost")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the static binary: %v\n%s", err, out)
	}
	for _, d := range []string{"data", "examples"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The examples, as make examples builds them: the Go ones by TinyGo when there is one.
	examples := map[string][]byte{}
	for _, name := range []string{"counter", "room", "bank"} {
		if _, ok := testwasm.TinyGo(); ok {
			examples[name] = testwasm.TinyGoBytes(t, name)
		} else {
			examples[name] = testwasm.Bytes(t, name)
		}
	}
	for _, name := range []string{"cart", "echo-rust", "counter-rust", "bank-rust"} {
		examples[name] = testwasm.RustBytes(t, name)
	}
	for name, b := range examples {
		if err := os.WriteFile(filepath.Join(dir, "examples", name+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	df, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "Dockerfile"), df, 0o644)
	if out, err := docker(t, "build", "-q", "-t", image, dir); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}

func newDockerCluster(t *testing.T) *dockerCluster {
	t.Helper()
	requireDocker(t, false)
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), rand.Intn(1e6))
	dc := &dockerCluster{t: t, image: sharedImage(t), net: "shardhost-e2e-" + suffix, client: "shardhost-e2e-client-" + suffix}
	t.Cleanup(dc.cleanup)
	dc.subnet = createNetwork(t, dc.net, -1)
	dc.csubnet = createNetwork(t, dc.client, dc.subnet)
	return dc
}

// createNetwork creates a docker network on a free 172.29.N.0/24 other than not, and
// returns N.
func createNetwork(t *testing.T, name string, not int) int {
	t.Helper()
	for try := 0; ; try++ {
		n := 100 + rand.Intn(150)
		if n == not {
			continue
		}
		out, err := docker(t, "network", "create", "--subnet", fmt.Sprintf("172.29.%d.0/24", n), name)
		if err == nil {
			return n
		}
		if try == 5 {
			t.Fatalf("docker network create: %v\n%s", err, out)
		}
	}
}

// ip is member i's address on the cluster network, apiAddr its API on the client one.
func (dc *dockerCluster) ip(i int) string { return fmt.Sprintf("172.29.%d.%d", dc.subnet, 11+i) }
func (dc *dockerCluster) apiAddr(i int) string {
	return fmt.Sprintf("172.29.%d.%d:8080", dc.csubnet, 11+i)
}

// start runs member i (from 0), joining member 0 unless it is member 0; extra are
// shardhost flags.
func (dc *dockerCluster) start(i int, extra ...string) { dc.startWith(i, nil, extra...) }

// startWith runs member i with options of docker run (a --tmpfs, say) and shardhost
// flags.
func (dc *dockerCluster) startWith(i int, opts []string, extra ...string) {
	dc.t.Helper()
	name := fmt.Sprintf("%s-%d", dc.net, i)
	args := append([]string{"create", "--name", name, "--network", dc.net, "--ip", dc.ip(i)}, opts...)
	args = append(args, dc.image,
		"start", "--bind", dc.ip(i)+":7946", "--api", "0.0.0.0:8080", "--data-dir", "/data",
		"--api-insecure",       // test networks of their own, reached only by the test
		"--log-level", "debug") // the entity activations and stops (lifecycleEvents)
	if i > 0 {
		args = append(args, "--join", dc.ip(0)+":7946")
	}
	if out, err := docker(dc.t, append(args, extra...)...); err != nil {
		dc.t.Fatalf("docker create: %v\n%s", err, out)
	}
	for len(dc.containers) <= i {
		dc.containers = append(dc.containers, "")
	}
	dc.containers[i] = name
	if out, err := docker(dc.t, "network", "connect", "--ip", fmt.Sprintf("172.29.%d.%d", dc.csubnet, 11+i), dc.client, name); err != nil {
		dc.t.Fatalf("docker network connect: %v\n%s", err, out)
	}
	if out, err := docker(dc.t, "start", name); err != nil {
		dc.t.Fatalf("docker start: %v\n%s", err, out)
	}
}

// disconnect cuts member i off the cluster network; connect puts it back, at its
// address.
func (dc *dockerCluster) disconnect(i int) {
	dc.t.Helper()
	if out, err := docker(dc.t, "network", "disconnect", dc.net, dc.containers[i]); err != nil {
		dc.t.Fatalf("disconnect: %v %s", err, out)
	}
}

func (dc *dockerCluster) connect(i int) {
	dc.t.Helper()
	if out, err := docker(dc.t, "network", "connect", "--ip", dc.ip(i), dc.net, dc.containers[i]); err != nil {
		dc.t.Fatalf("connect: %v %s", err, out)
	}
}

func (dc *dockerCluster) members(i int) ([]memberJSON, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + dc.apiAddr(i) + "/v1/members")
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

// state returns member i's container's state and how often docker restarted it
// ("exited 0", "running 1"...).
func (dc *dockerCluster) state(i int) string {
	out, err := docker(dc.t, "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", dc.containers[i])
	if err != nil {
		return fmt.Sprintf("inspect: %v %s", err, out)
	}
	return out
}

func (dc *dockerCluster) cleanup() {
	for _, c := range dc.containers {
		if dc.t.Failed() {
			logs, _ := docker(dc.t, "logs", c)
			dc.t.Logf("logs of %s:\n%s", c, logs)
		}
		docker(dc.t, "rm", "-f", "-v", c)
	}
	docker(dc.t, "network", "rm", dc.net, dc.client)
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
	dc.disconnect(2)
	for i := 0; i < 2; i++ {
		dc.waitView(i, 30*time.Second, "the cut-off member removed", allUpView(2))
	}
	t.Logf("partition → the cut-off member removed by the majority after %v", time.Since(start).Round(10*time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "the cut-off member to stop (else two sides are alive)", func() bool { return !dc.running(2) })
	logs, _ := docker(t, "logs", dc.containers[2])
	if !strings.Contains(logs, "out of the cluster") {
		t.Fatalf("the cut-off member stopped without saying why:\n%s", logs)
	}
	// Reconnected, it stays out: it has exited, and nothing starts it again (no restart
	// policy); the majority goes on undisturbed.
	dc.connect(2)
	if st := dc.state(2); st != "exited 0" {
		t.Fatalf("the cut-off member, reconnected: %s, want exited 0 (not restarted)", st)
	}
	for i := 0; i < 2; i++ {
		dc.waitView(i, 10*time.Second, "2 up members", allUpView(2))
	}
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
