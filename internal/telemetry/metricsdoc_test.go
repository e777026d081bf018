package telemetry

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

var update = flag.Bool("update", false, "rewrite the metrics table of docs/observability.md from the code")

// instrument is one metric instrument as the code creates it.
type instrument struct {
	name, kind, unit, desc, file string
}

// instrumentKinds maps the metric.Meter methods to the kind shown in the table.
var instrumentKinds = map[string]string{
	"Int64Counter": "counter", "Float64Counter": "counter",
	"Int64UpDownCounter": "up-down counter", "Float64UpDownCounter": "up-down counter",
	"Int64Histogram": "histogram", "Float64Histogram": "histogram",
	"Int64ObservableCounter": "counter", "Float64ObservableCounter": "counter",
	"Int64ObservableGauge": "gauge", "Float64ObservableGauge": "gauge",
	"Int64ObservableUpDownCounter": "up-down counter",
}

// instruments finds every instrument the packages create: calls of a metric.Meter
// method with a string literal name, and their WithUnit and WithDescription options.
func instruments(t *testing.T) []instrument {
	root := testwasm.RepoRoot()
	var out []instrument
	for _, dir := range []string{"cluster", "ddata", "sharding", "host"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || instrumentKinds[sel.Sel.Name] == "" {
					return true
				}
				name, ok := stringLit(call.Args[0])
				if !ok {
					return true
				}
				in := instrument{name: name, kind: instrumentKinds[sel.Sel.Name], file: filepath.Join(dir, filepath.Base(path))}
				for _, arg := range call.Args[1:] {
					opt, ok := arg.(*ast.CallExpr)
					if !ok || len(opt.Args) != 1 {
						continue
					}
					osel, ok := opt.Fun.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					v, _ := stringLit(opt.Args[0])
					switch osel.Sel.Name {
					case "WithUnit":
						in.unit = v
					case "WithDescription":
						in.desc = v
					}
				}
				out = append(out, in)
				return true
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// promName is the name the OpenTelemetry Prometheus exporter gives an instrument.
func promName(in instrument) string {
	name := strings.NewReplacer(".", "_", "-", "_").Replace(in.name)
	switch in.unit {
	case "s":
		name += "_seconds"
	case "ms":
		name += "_milliseconds"
	case "By":
		name += "_bytes"
	}
	if in.kind == "counter" {
		name += "_total"
	}
	return name
}

// metricsTable renders the table of metrics of docs/observability.md.
func metricsTable(ins []instrument) string {
	var b strings.Builder
	b.WriteString("| metric (Prometheus name) | kind | unit | attributes | meaning |\n|---|---|---|---|---|\n")
	for _, in := range ins {
		desc, attrs := in.desc, ""
		if i := strings.LastIndex(desc, " ["); i >= 0 && strings.HasSuffix(desc, "]") {
			desc, attrs = desc[:i], desc[i+2:len(desc)-1]
		}
		var keys []string
		for _, a := range strings.Split(attrs, ", ") {
			if a != "" {
				keys = append(keys, "`"+a+"`")
			}
		}
		fmt.Fprintf(&b, "| `%s` (`%s`) | %s | `%s` | %s | %s |\n", in.name, promName(in), in.kind, in.unit,
			strings.Join(keys, ", "), strings.ReplaceAll(desc, "|", "\\|"))
	}
	return b.String()
}

const (
	tableStart = "<!-- metrics table: generated from the code by `go test ./internal/telemetry -run TestMetricsTable -update` -->\n"
	tableEnd   = "<!-- end of the metrics table -->"
)

// TestMetricsTable fails when the table of metrics in docs/observability.md differs from the
// instruments the code creates (names, kinds, units, attributes, descriptions); with
// -update it rewrites the table.
func TestMetricsTable(t *testing.T) {
	ins := instruments(t)
	if len(ins) < 30 {
		t.Fatalf("found only %d instruments", len(ins))
	}
	seen := map[string]string{}
	for _, in := range ins {
		if in.unit == "" || in.desc == "" || !strings.HasSuffix(in.desc, "]") {
			t.Errorf("%s (%s): every instrument needs a unit and a description ending in its attribute keys [a, b]", in.name, in.file)
		}
		if prev, dup := seen[in.name]; dup {
			t.Errorf("%s is created in %s and %s", in.name, prev, in.file)
		}
		seen[in.name] = in.file
	}
	path := filepath.Join(testwasm.RepoRoot(), "docs", "observability.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start, end := strings.Index(text, tableStart), strings.Index(text, tableEnd)
	if start < 0 || end < start {
		t.Fatalf("docs/observability.md lacks the markers of the metrics table:\n%s...\n%s", tableStart, tableEnd)
	}
	want := metricsTable(ins)
	got := text[start+len(tableStart) : end]
	if got == want {
		return
	}
	if *update {
		text = text[:start+len(tableStart)] + want + text[end:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the metrics table of docs/observability.md differs from the code; run go test ./internal/telemetry -run TestMetricsTable -update\nwant:\n%s", want)
}
