// TinyGo cannot stop a test on Skip (it needs runtime.Goexit), so the file is left out
// of wasm builds rather than skipped there: the test runs go build and go test.
//go:build !wasip1

package shardhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's example (its go.mod, main.go and wallet_test.go blocks) is a module
// outside this repository that builds and passes its tests: the README cannot drift from
// the SDK.
func TestREADMEExampleBuildsAndPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test in a new module")
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for i, part := range strings.Split(string(b), "```") {
		if i%2 == 1 {
			blocks = append(blocks, part)
		}
	}
	dir := t.TempDir()
	sdk, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, blk := range blocks {
		switch {
		case strings.HasPrefix(blk, "\nmodule "):
			found["go.mod"] = true
			mod := strings.Replace(blk, "/path/to/shardhost/guest-sdk/go", sdk, 1)
			os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644)
		case strings.HasPrefix(blk, "go\n") && strings.Contains(blk, "func TestWallet"):
			found["test"] = true
			os.WriteFile(filepath.Join(dir, "wallet_test.go"), []byte(strings.TrimPrefix(blk, "go\n")), 0o644)
		case strings.HasPrefix(blk, "go\n") && strings.Contains(blk, "package main"):
			found["main"] = true
			os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.TrimPrefix(blk, "go\n")), 0o644)
		}
	}
	if len(found) != 3 {
		t.Fatalf("README blocks found: %v, want go.mod, main and test", found)
	}
	cmd := exec.Command("go", "test", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test in the README's module: %v\n%s", err, out)
	}
}
