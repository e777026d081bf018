package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// The tests share one in-process member with the counter example deployed as the type
// counter: node is it, api its API address (HOST:PORT), counterWasm the module.
var (
	node        *host.Node
	api         string
	counterWasm []byte
	cacheDir    string
)

// TestMain builds the counter example, starts one member and deploys counter through
// the client, and checks, once every test has run, that none left a goroutine behind.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "shardhost-client-test-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		cacheDir = filepath.Join(tmp, "cache")
		if counterWasm, err = buildExample(tmp, "counter"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if node, err = startNode(filepath.Join(tmp, "node"), nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer node.Close()
		api = node.APIAddr()
		c, err := client.New([]string{api})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// A deploy compiles the module before it serves: minutes on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		if _, err := c.Deploy(ctx, "counter", counterWasm, nil); err != nil {
			fmt.Fprintln(os.Stderr, "deploying counter:", err)
			return 1
		}
		return m.Run()
	}()
	os.RemoveAll(tmp)
	if code == 0 {
		// memberlist's Shutdown does not wait for a probe in flight: it ends by itself.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildExample builds examples/wasm/NAME into dir, as internal/testwasm does for tests
// that have a testing.TB: with TinyGo when it is here (a small module, quick to
// compile), else with Go's wasip1 port.
func buildExample(dir, name string) ([]byte, error) {
	out := filepath.Join(dir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod")
	if tinygo, ok := testwasm.TinyGo(); ok {
		cmd = exec.Command(tinygo, append(append([]string{"build"}, testwasm.TinyGoFlags...), "-o", out, "./"+name)...)
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	}
	cmd.Dir = filepath.Join(testwasm.RepoRoot(), "examples", "wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s.wasm: %v\n%s", name, err, b)
	}
	return os.ReadFile(out)
}

// startNode starts a member on 127.0.0.1 with OS-chosen ports, its data in dir.
func startNode(dir string, mutate func(*host.Config)) (*host.Node, error) {
	cfg := host.DefaultConfig()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TransportAddr = "127.0.0.1:0"
	cfg.APIAddr = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.GossipProfile = "local"
	cfg.Lifecycle = cluster.DefaultLocalCoreConfig()
	cfg.Runtime.CacheDir = cacheDir
	cfg.Runtime.CompileBeforeServing = true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	return host.Start(context.Background(), cfg)
}
