// Package testwasm builds the example entity modules for tests, from source, once per
// test process.
package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Path builds examples/wasm/NAME with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared (Go's
// build cache makes repeated builds quick) and returns the .wasm file's path.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "shardhost-testwasm-")
		if err != nil {
			tb.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./"+name)
	cmd.Dir = filepath.Join(RepoRoot(), "examples", "wasm")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s.wasm: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

// Bytes returns the bytes of the module Path builds.
func Bytes(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Path(tb, name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Cleanup removes the modules built by this process; call it at the end of TestMain.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]string{}
	}
}
