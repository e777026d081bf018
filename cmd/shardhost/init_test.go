package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// runInit runs shardhost init with args and returns its output and error.
func runInit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"init"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// A scaffolded TinyGo project builds with the flags the Makefile and the tests use.
func TestInitTinyGoFlagsMatchTheMakefile(t *testing.T) {
	if got, want := tinyGoFlags, strings.Join(testwasm.TinyGoFlags, " "); got != want {
		t.Fatalf("init's TinyGo flags %q, testwasm's (and the Makefile's) %q", got, want)
	}
}

func TestInitWritesEachLanguagesProject(t *testing.T) {
	root := testwasm.RepoRoot()
	for lang, files := range map[string][]string{
		"tinygo": {"Makefile", "README.md", "go.mod", "main.go", "main_test.go"},
		"go":     {"Makefile", "README.md", "go.mod", "main.go", "main_test.go"},
		"rust":   {"Makefile", "README.md", "lib.rs"},
	} {
		dir := filepath.Join(t.TempDir(), "my-"+lang+".v2")
		if out, err := runInit(t, "--lang", lang, "--sdk", root, dir); err != nil {
			t.Fatalf("%s: %v\n%s", lang, err, out)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, " ") != strings.Join(files, " ") {
			t.Errorf("%s: wrote %v, want %v", lang, got, files)
		}
		mk, _ := os.ReadFile(filepath.Join(dir, "Makefile"))
		switch lang {
		case "tinygo":
			if !strings.Contains(string(mk), "$(TINYGO) build "+tinyGoFlags+" -o $@ .") {
				t.Errorf("tinygo Makefile:\n%s", mk)
			}
		case "go":
			if !strings.Contains(string(mk), "GOOS=wasip1 GOARCH=wasm $(GO) build") {
				t.Errorf("go Makefile:\n%s", mk)
			}
		case "rust":
			if !strings.Contains(string(mk), "CRATE     := my_rust_v2") ||
				!strings.Contains(string(mk), filepath.Join(root, "guest-sdk", "rust", "src", "lib.rs")) {
				t.Errorf("rust Makefile:\n%s", mk)
			}
		}
		// The entity keeps explicit state, so that a redeploy reaches it (docs/state.md);
		// e2e/init_test.go runs it through a redeploy.
		src, explicit := "main.go", "shardhost.Stateful[seen, *seen]"
		if lang == "rust" {
			src, explicit = "lib.rs", "shardhost::explicit_state!(state);"
		}
		if b, _ := os.ReadFile(filepath.Join(dir, src)); !strings.Contains(string(b), explicit) {
			t.Errorf("%s %s keeps no explicit state (%q):\n%s", lang, src, explicit, b)
		}
		if lang != "rust" {
			mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
			if !strings.Contains(string(mod), "=> "+filepath.Join(root, "guest-sdk", "go")+"\n") {
				t.Errorf("%s go.mod does not replace the SDK with the tree's:\n%s", lang, mod)
			}
		}
	}
}

func TestInitRefusals(t *testing.T) {
	root := testwasm.RepoRoot()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sdk", root, full}, "not empty"},
		{[]string{"--sdk", root, "--lang", "cobol", filepath.Join(t.TempDir(), "x")}, "want tinygo, go or rust"},
		{[]string{"--sdk", root, filepath.Join(t.TempDir(), "bad name")}, "entity type name"},
		{[]string{"--sdk", t.TempDir(), filepath.Join(t.TempDir(), "x")}, "no guest-sdk"},
	} {
		if out, err := runInit(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("init %v: %v (%s), want an error containing %q", c.args, err, out, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("init touched a non-empty directory: %q %v", b, err)
	}
}
