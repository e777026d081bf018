package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestInitScaffoldsBuildAndDeploy: as a new user would, shardhost init writes a project
// in each language, its own `make` tests and builds it, `make deploy` deploys it to a
// running member, and the entity answers.
func TestInitScaffoldsBuildAndDeploy(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	h := startCluster(t, 1)[0]
	for _, lang := range []string{"tinygo", "go", "rust"} {
		t.Run(lang, func(t *testing.T) {
			env := append(os.Environ(), "SHARDHOST_API="+h.api)
			switch lang {
			case "tinygo":
				env = append(env, "TINYGO="+testwasm.RequireTinyGo(t))
			case "rust":
				if _, err := os.Stat(testwasm.Rustc); err != nil {
					t.Fatalf("%s not found: the Rust scaffold builds with Debian's rustc (make test installs it)", testwasm.Rustc)
				}
			}
			typ := "hello-" + lang
			dir := filepath.Join(t.TempDir(), typ)
			if out, errText, ok := cli(t, h, nil, "init", "--lang", lang, "--sdk", testwasm.RepoRoot(), dir); !ok {
				t.Fatalf("init: %s%s", out, errText)
			}
			for _, target := range []string{"all", "deploy"} {
				cmd := exec.Command("make", target)
				cmd.Dir, cmd.Env = dir, env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("make %s in the %s project: %v\n%s", target, lang, err, out)
				}
			}
			out, errText, ok := cli(t, h, nil, "ask", typ+"/alice", "hello")
			if !ok || strings.TrimSpace(out) != "alice: message 1: hello" {
				t.Fatalf("ask %s/alice: %q %s", typ, out, errText)
			}
		})
	}
}
