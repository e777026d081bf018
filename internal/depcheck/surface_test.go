package depcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// surfacePackages are the packages whose exported names are a promise to embedders:
// each exported top-level name of their non-test files must be named, as a whole word,
// in the package comment of their doc.go ("What an embedder uses"). A name nobody
// outside the package needs is unexported or moved under internal/ instead
// (ARCHITECTURE.md, "The floors").
var surfacePackages = []string{"host", "sharding", "cluster"}

func TestExportedNamesAreListedInDocGo(t *testing.T) {
	root := testwasm.RepoRoot()
	for _, pkg := range surfacePackages {
		dir := filepath.Join(root, pkg)
		names, doc, err := packageSurface(dir)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		if len(names) < 5 {
			t.Fatalf("%s: only %d exported names found: the parse went wrong", pkg, len(names))
		}
		for _, missing := range unlisted(names, doc) {
			t.Errorf("%s exports %s, which %s/doc.go does not name: list it under \"What an embedder uses\" if an embedder or another package needs it, or unexport it", pkg, missing, pkg)
		}
	}
}

// TestUnlistedFindsANameMissingFromTheDoc shows the check can fail.
func TestUnlistedFindsANameMissingFromTheDoc(t *testing.T) {
	doc := "Start returns a Node. NodeConfig is its configuration."
	got := unlisted([]string{"Start", "Node", "NodeConfig", "Runtime", "Sta"}, doc)
	if want := []string{"Runtime", "Sta"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("unlisted = %v, want %v", got, want)
	}
}

// packageSurface returns the exported top-level names (types, functions, variables
// and constants; not methods or fields) declared in dir's non-test Go files, sorted,
// and the package comment of dir/doc.go.
func packageSurface(dir string) ([]string, string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	seen := map[string]bool{}
	doc := ""
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, "", err
		}
		if name == "doc.go" && f.Doc != nil {
			doc = f.Doc.Text()
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					seen[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							seen[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								seen[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	if doc == "" {
		return nil, "", os.ErrNotExist
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, doc, nil
}

// unlisted returns the names that doc does not contain as whole words.
func unlisted(names []string, doc string) []string {
	var out []string
	for _, n := range names {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(n) + `\b`).MatchString(doc) {
			out = append(out, n)
		}
	}
	return out
}
