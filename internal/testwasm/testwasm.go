// Package testwasm builds the example entity modules for tests, from source, once per
// test process, with the toolchains the Makefile uses: Go's wasip1 port (Path), TinyGo
// (TinyGoPath) and Debian's rustc (RustPath).
package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
	return PathWith(tb, name)
}

// PathWith is Path with more go build flags (for example -tags=banklimit, a variant of
// an example).
func PathWith(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	return buildGo(tb, filepath.Join(RepoRoot(), "examples", "wasm"), name, flags)
}

// GuestPath builds the test guest internal/testwasm/guests/NAME as Path builds an
// example, with the go build flags given (for example -ldflags=-X main.version=v2),
// and returns the .wasm file's path.
func GuestPath(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	return buildGo(tb, filepath.Join(RepoRoot(), "internal", "testwasm", "guests"), name, flags)
}

// GuestBytes returns the bytes of the module GuestPath builds.
func GuestBytes(tb testing.TB, name string, flags ...string) []byte {
	tb.Helper()
	b, err := os.ReadFile(GuestPath(tb, name, flags...))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// buildGo builds the package NAME of the Go module in src for wasip1, once per flags.
func buildGo(tb testing.TB, src, name string, flags []string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := strings.Join(append([]string{src, name}, flags...), " ")
	if p, ok := built[key]; ok {
		return p
	}
	dir := tempDir(tb)
	if len(flags) > 0 {
		d, err := os.MkdirTemp(dir, "go-")
		if err != nil {
			tb.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, name+".wasm")
	args := append(append([]string{"build", "-buildmode=c-shared"}, flags...), "-o", out, "./"+name)
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = append(goGuestEnv(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s.wasm %s: %v\n%s", name, strings.Join(flags, " "), err, b)
	}
	built[key] = out
	return out
}

// Compiler builds Go-language examples one way, for tests that run a module built by
// each compiler.
type Compiler struct {
	// Name is "tinygo" or "go" (Go's wasip1 port).
	Name string
	// Path and Bytes build examples/wasm/NAME as Path and Bytes (or TinyGoPath and
	// TinyGoBytes) do.
	Path  func(tb testing.TB, name string) string
	Bytes func(tb testing.TB, name string) []byte
}

// GoCompilers are TinyGo and Go's wasip1 port. The TinyGo one skips the test when
// TinyGo is missing (fails it with SHARDHOST_REQUIRE_TINYGO=1).
var GoCompilers = []Compiler{
	{Name: "tinygo", Path: TinyGoPath, Bytes: TinyGoBytes},
	{Name: "go", Path: Path, Bytes: Bytes},
}

// tempDir returns the directory of this process's modules, made at the first call;
// mu is held.
func tempDir(tb testing.TB) string {
	tb.Helper()
	if dir == "" {
		d, err := os.MkdirTemp("", "shardhost-testwasm-")
		if err != nil {
			tb.Fatal(err)
		}
		dir = d
	}
	return dir
}

// goGuestEnv is the environment of a Go guest build: the process's, with the examples'
// replace directive allowed to update go.mod's requirements in memory.
func goGuestEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod")
}

// Bytes returns the bytes of the module Path builds.
func Bytes(tb testing.TB, name string) []byte {
	tb.Helper()
	return BytesWith(tb, name)
}

// BytesWith returns the bytes of the module PathWith builds.
func BytesWith(tb testing.TB, name string, flags ...string) []byte {
	tb.Helper()
	b, err := os.ReadFile(PathWith(tb, name, flags...))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TransparentTag is the go build flag of the Go examples (counter, bank) built with
// transparent state: their state in plain fields, which the host snapshots with the
// instance's memory, instead of the explicit state they keep by default (docs/state.md).
// RustTransparent is the Rust examples' (counter-rust, bank-rust) rustc flags for the same.
const TransparentTag = "-tags=transparent"

// RustTransparent: see TransparentTag.
var RustTransparent = []string{"--cfg", "transparent"}

// GoTransparentCompilers are GoCompilers building the examples with TransparentTag.
var GoTransparentCompilers = []Compiler{
	{Name: "tinygo", Path: func(tb testing.TB, name string) string {
		return TinyGoPathWith(tb, name, append(append([]string(nil), TinyGoFlags...), TransparentTag))
	}, Bytes: func(tb testing.TB, name string) []byte {
		return TinyGoBytesWith(tb, name, append(append([]string(nil), TinyGoFlags...), TransparentTag))
	}},
	{Name: "go", Path: func(tb testing.TB, name string) string {
		return PathWith(tb, name, TransparentTag)
	}, Bytes: func(tb testing.TB, name string) []byte {
		return BytesWith(tb, name, TransparentTag)
	}},
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
