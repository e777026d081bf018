package depcheck

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// clientPkg is the public Go client library: applications import it, so it stays
// light. It imports no other package of the module (not host or sharding, which would
// bring the wasm runtime and the stores into every application), and of the others
// only OpenTelemetry's API and the hash it uses.
const clientPkg = mod + "client"

func TestClientLibraryStaysLight(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, "./client")
	cmd.Dir = testwasm.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != clientPkg {
		t.Fatalf("go list -deps ./client: %v: the package was not listed", deps)
	}
	for _, d := range deps[:len(deps)-1] {
		switch {
		case strings.HasPrefix(d, mod):
			t.Errorf("client depends on %s: it must not import the module's other packages", d)
		case !strings.HasPrefix(d, "go.opentelemetry.io/otel") && d != "github.com/cespare/xxhash/v2":
			t.Errorf("client depends on %s: only OpenTelemetry's API (and the hash it uses) is allowed", d)
		}
	}
}
