package testwasm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Makefile and the tests build TinyGo modules with the same flags.
func TestTinyGoFlagsMatchMakefile(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TINYGO_FLAGS\s*:=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no TINYGO_FLAGS := line")
	}
	if got, want := strings.Fields(string(m[1])), TinyGoFlags; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Makefile's TINYGO_FLAGS = %q, testwasm.TinyGoFlags = %q", got, want)
	}
}

// A missing TinyGo skips, or fails with SHARDHOST_REQUIRE_TINYGO=1.
func TestRequireTinyGoWithoutTinyGo(t *testing.T) {
	t.Setenv("TINYGO", filepath.Join(t.TempDir(), "no-tinygo-here"))
	for _, require := range []string{"", "1"} {
		t.Setenv(RequireTinyGoEnv, require)
		r := &recorder{}
		func() {
			defer func() { recover() }() // FailNow and SkipNow stop the goroutine: here a panic
			RequireTinyGo(r)
		}()
		if wantFail := require == "1"; r.failed != wantFail || r.skipped == wantFail {
			t.Errorf("%s=%q: failed %v, skipped %v", RequireTinyGoEnv, require, r.failed, r.skipped)
		}
	}
}

// recorder is a testing.TB that records Fatalf and Skipf, which panic to stop the caller.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()                          {}
func (r *recorder) Fatalf(string, ...any)            { r.failed = true; panic("FailNow") }
func (r *recorder) Skipf(format string, args ...any) { r.skipped = true; panic("SkipNow") }
