package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

// scaffolds holds the project templates of shardhost init: scaffold/go for TinyGo and
// Go's port (one Makefile line differs), scaffold/rust. A file NAME.tmpl becomes NAME.
//
//go:embed scaffold
var scaffolds embed.FS

// tinyGoFlags are the TinyGo flags a scaffolded project builds with: the Makefile's
// TINYGO_FLAGS (a test checks that they agree).
const tinyGoFlags = "-target=wasip1 -buildmode=c-shared -no-debug -scheduler=none"

// scaffoldData is what the templates see.
type scaffoldData struct {
	Lang        string // tinygo, go or rust
	Name        string // the entity type, the Go module, the module file's name
	Crate       string // the Rust crate name
	SDKGo       string // absolute path of guest-sdk/go
	SDKRust     string // absolute path of guest-sdk/rust/src/lib.rs
	Shardhost   string // the shardhost command for make deploy
	TinyGoFlags string
}

func newInitCommand() *cobra.Command {
	var lang, typ, sdk string
	cmd := &cobra.Command{
		Use:   "init [--lang tinygo|go|rust] [--type NAME] [--sdk DIR] DIR",
		Short: "Write a new entity project: the entity, its unit test, a Makefile and a README",
		Long: `init writes a ready entity project into DIR (which must not exist or be empty): an
entity that counts the messages each entity ID gets, its unit test with the SDK's
Harness, a Makefile (make: test and build NAME.wasm; make deploy) and a README. The
count is explicit state (Go's shardhost.Stateful, Rust's shardhost::State): saved as
bytes the next incarnation loads, so a redeploy of changed code reaches every entity at
its next activation (docs/state.md).

--lang tinygo builds with TinyGo (small, fast modules), go with Go's wasip1 port, rust
with Debian's rustc. The project uses the guest SDK of a shardhost source tree, by its
path, so it builds offline: --sdk names the tree (the directory holding guest-sdk/); by
default it is found from this binary's location (bin/shardhost in the tree) or from the
current directory upwards.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if typ == "" {
				typ = filepath.Base(filepath.Clean(dir))
			}
			if err := host.ValidateTypeName(typ); err != nil {
				return fmt.Errorf("%v: name the type with --type", err)
			}
			var tmplDir string
			switch lang {
			case "tinygo", "go":
				tmplDir = "scaffold/go"
			case "rust":
				tmplDir = "scaffold/rust"
			default:
				return fmt.Errorf("--lang %q: want tinygo, go or rust", lang)
			}
			root, err := findSDK(sdk)
			if err != nil {
				return err
			}
			data := scaffoldData{
				Lang:        lang,
				Name:        typ,
				Crate:       crateName(typ),
				SDKGo:       filepath.Join(root, "guest-sdk", "go"),
				SDKRust:     filepath.Join(root, "guest-sdk", "rust", "src", "lib.rs"),
				Shardhost:   shardhostCommand(),
				TinyGoFlags: tinyGoFlags,
			}
			files, err := renderScaffold(tmplDir, data)
			if err != nil {
				return err
			}
			if err := writeScaffold(dir, files); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote a %s entity project for the type %s in %s:\n", lang, typ, dir)
			for _, f := range slices.Sorted(maps.Keys(files)) {
				fmt.Fprintf(out, "  %s\n", f)
			}
			fmt.Fprintf(out, "next: cd %s && make && make deploy (README.md says more)\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "tinygo", "the entity's language and compiler: tinygo, go (Go's wasip1 port) or rust")
	cmd.Flags().StringVar(&typ, "type", "", "the entity type's name (default: DIR's last element)")
	cmd.Flags().StringVar(&sdk, "sdk", "", "the shardhost source tree whose guest-sdk/ the project uses (default: found from this binary or the current directory)")
	return cmd
}

// renderScaffold executes every template under dir: file name (without .tmpl) → bytes.
func renderScaffold(dir string, data scaffoldData) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(scaffolds, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := scaffolds.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return err
		}
		files[strings.TrimSuffix(strings.TrimPrefix(p, dir+"/"), ".tmpl")] = b.Bytes()
		return nil
	})
	return files, err
}

// writeScaffold writes the files into dir, which must not exist or be empty: init never
// overwrites anything.
func writeScaffold(dir string, files map[string][]byte) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: init writes a new project only into an empty or new directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// findSDK returns the absolute path of the shardhost source tree whose guest SDKs a new
// project uses: flag if given, else the tree this binary was built in (bin/shardhost),
// else the first directory from the current one upwards that holds the SDKs.
func findSDK(flag string) (string, error) {
	isTree := func(dir string) bool {
		_, errGo := os.Stat(filepath.Join(dir, "guest-sdk", "go", "go.mod"))
		_, errRust := os.Stat(filepath.Join(dir, "guest-sdk", "rust", "src", "lib.rs"))
		return errGo == nil && errRust == nil
	}
	if flag != "" {
		abs, err := filepath.Abs(flag)
		if err != nil {
			return "", err
		}
		if !isTree(abs) {
			return "", fmt.Errorf("--sdk %s: no guest-sdk/go and guest-sdk/rust there (give the shardhost source tree)", flag)
		}
		return abs, nil
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			candidates = append(candidates, filepath.Dir(filepath.Dir(exe)))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, c := range candidates {
		if isTree(c) {
			return c, nil
		}
	}
	return "", errors.New("cannot find the shardhost source tree with the guest SDKs (guest-sdk/): pass it with --sdk DIR")
}

// shardhostCommand is the shardhost a scaffolded Makefile deploys with: this binary.
func shardhostCommand() string {
	if exe, err := os.Executable(); err == nil {
		if abs, err := filepath.EvalSymlinks(exe); err == nil {
			return abs
		}
	}
	return "shardhost"
}

// crateName turns a type name into a Rust crate name: letters, digits and underscores,
// not starting with a digit.
func crateName(typ string) string {
	b := []byte(typ)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "entity_" + string(b)
	}
	return string(b)
}
