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
// running member, and the entity answers. Then the user changes the reply's text and
// deploys again: after a passivation the existing entity answers with the new code and
// its count kept, the scaffold's explicit state (docs/state.md).
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

			// A fix: the reply says "msg" instead of "message".
			src, reply, fixed := filepath.Join(dir, "main.go"), `": message "`, `": msg "`
			if lang == "rust" {
				src, reply, fixed = filepath.Join(dir, "lib.rs"), `"{}: message {}: "`, `"{}: msg {}: "`
			}
			code, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(code), reply); n != 1 {
				t.Fatalf("%s has %d replies %s, want 1:\n%s", src, n, reply, code)
			}
			if err := os.WriteFile(src, []byte(strings.Replace(string(code), reply, fixed, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("make", "deploy")
			cmd.Dir, cmd.Env = dir, env
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "version 2") {
				t.Fatalf("make deploy of the fix in the %s project: %v\n%s", lang, err, out)
			}
			// alice is active on version 1 until its next activation.
			if out, errText, ok := cli(t, h, nil, "passivate", typ+"/alice"); !ok || !strings.Contains(out, "passivated") {
				t.Fatalf("passivate %s/alice: %q %s", typ, out, errText)
			}
			out, errText, ok = cli(t, h, nil, "ask", typ+"/alice", "again")
			if !ok || strings.TrimSpace(out) != "alice: msg 2: again" {
				t.Fatalf("ask %s/alice after the redeploy: %q %s, want the new code's reply with the count kept", typ, out, errText)
			}
		})
	}
}
