package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TinyGoFlags are the flags a Go-language entity is built with by TinyGo: a WASI reactor
// without debug information and without a scheduler (the Makefile's TINYGO_FLAGS, which
// bench/README.md explains; a test checks that the two agree).
var TinyGoFlags = []string{"-target=wasip1", "-buildmode=c-shared", "-no-debug", "-scheduler=none"}

// RequireTinyGoEnv is the environment variable that makes a missing TinyGo fail the tests
// that need it instead of skipping them (.ci/run sets it to 1).
const RequireTinyGoEnv = "SHARDHOST_REQUIRE_TINYGO"

// TinyGoInstall says how to get TinyGo, for messages.
const TinyGoInstall = "install TinyGo >= 0.34 (https://tinygo.org/getting-started/install/) and put it on PATH, or set TINYGO"

// TinyGo returns the tinygo command the tests use: $TINYGO if set (a name on PATH or a
// path), else tinygo on PATH. ok is false when there is none.
func TinyGo() (path string, ok bool) {
	name := os.Getenv("TINYGO")
	if name == "" {
		name = "tinygo"
	}
	p, err := exec.LookPath(name)
	return p, err == nil
}

// HaveTinyGo reports whether TinyGo is here. When it is not and
// SHARDHOST_REQUIRE_TINYGO=1, it fails tb (and returns false).
func HaveTinyGo(tb testing.TB) bool {
	tb.Helper()
	if _, ok := TinyGo(); ok {
		return true
	}
	if os.Getenv(RequireTinyGoEnv) == "1" {
		tb.Errorf("testwasm: TinyGo not found and %s=1: %s", RequireTinyGoEnv, TinyGoInstall)
	}
	return false
}

// RequireTinyGo returns the tinygo command, or ends the test when there is none: it
// fails when SHARDHOST_REQUIRE_TINYGO=1 and skips otherwise.
func RequireTinyGo(tb testing.TB) string {
	tb.Helper()
	p, ok := TinyGo()
	switch {
	case ok:
		return p
	case os.Getenv(RequireTinyGoEnv) == "1":
		tb.Fatalf("testwasm: TinyGo not found and %s=1: %s", RequireTinyGoEnv, TinyGoInstall)
	default:
		tb.Skipf("testwasm: TinyGo not found (%s to run this test)", TinyGoInstall)
	}
	return ""
}

// TinyGoPath builds examples/wasm/NAME with TinyGo and TinyGoFlags, as the Makefile
// does, and returns the .wasm file's path; each module is built once per test process.
// Without TinyGo the test is skipped (failed with SHARDHOST_REQUIRE_TINYGO=1).
func TinyGoPath(tb testing.TB, name string) string {
	tb.Helper()
	return TinyGoPathWith(tb, name, TinyGoFlags)
}

// TinyGoPathWith is TinyGoPath with other flags instead of TinyGoFlags.
func TinyGoPathWith(tb testing.TB, name string, flags []string) string {
	tb.Helper()
	tinygo := RequireTinyGo(tb)
	mu.Lock()
	defer mu.Unlock()
	key := "tinygo/" + name + " " + strings.Join(flags, " ")
	if p, ok := built[key]; ok {
		return p
	}
	tdir, err := os.MkdirTemp(tempDir(tb), "tinygo-")
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(tdir, name+".wasm")
	args := append([]string{"build"}, flags...)
	cmd := exec.Command(tinygo, append(args, "-o", out, "./"+name)...)
	cmd.Dir = filepath.Join(RepoRoot(), "examples", "wasm")
	cmd.Env = goGuestEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building %s.wasm with %s %s: %v\n%s", name, tinygo, strings.Join(flags, " "), err, b)
	}
	built[key] = out
	return out
}

// TinyGoBytes returns the bytes of the module TinyGoPath builds.
func TinyGoBytes(tb testing.TB, name string) []byte {
	tb.Helper()
	return TinyGoBytesWith(tb, name, TinyGoFlags)
}

// TinyGoBytesWith returns the bytes of the module TinyGoPathWith builds.
func TinyGoBytesWith(tb testing.TB, name string, flags []string) []byte {
	tb.Helper()
	b, err := os.ReadFile(TinyGoPathWith(tb, name, flags))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
