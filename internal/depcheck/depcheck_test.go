// Package depcheck checks the dependency direction of ARCHITECTURE.md: cmd/shardhost → host →
// sharding → ddata → cluster → abi, imports pointing down only, and abi on the standard
// library alone. The PostgreSQL driver stays in sharding/pgstore: only it imports pgx,
// and sharding itself never imports pgstore (host chooses the store). Nor does sharding,
// or a subpackage of it other than the stores and their contract (statestoretest),
// import the built-in replicated store, sharding/replstore. The fault harness (faults/)
// is imported by nothing.
package depcheck

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

const mod = "github.com/shardhost/shardhost/"

// pgxOnly is the one package that may import the PostgreSQL driver.
const pgxOnly = mod + "sharding/pgstore"

// replstorePkg is the built-in replicated state store: like pgstore, host chooses it,
// and sharding knows it only as a StateStore.
const replstorePkg = mod + "sharding/replstore"

// storePackage reports whether pkg is a state store of sharding or their shared
// contract, which may import the stores.
func storePackage(pkg string) bool {
	for _, p := range []string{replstorePkg, pgxOnly, mod + "sharding/statestoretest"} {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// faultsOnly is the fault-schedule harness: it imports cluster, ddata and sharding, and
// nothing imports it.
const faultsOnly = mod + "faults"

// layers from top to bottom; a package may import only layers below its own.
var layers = []string{"cmd/shardhost", "host", "sharding", "ddata", "cluster", "abi"}

func layerOf(pkg string) int {
	rel := strings.TrimPrefix(pkg, mod)
	for i, l := range layers {
		if rel == l || strings.HasPrefix(rel, l+"/") {
			return i
		}
	}
	return -1
}

func TestDependencyDirection(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = testwasm.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		from := layerOf(pkg)
		if from < 0 {
			continue
		}
		checked++
		for _, imp := range imports {
			if layers[from] == "abi" && strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
				t.Errorf("abi imports %s: it must use the standard library only", imp)
			}
			if strings.HasPrefix(imp, "github.com/jackc/") && strings.HasPrefix(pkg, mod) && pkg != pgxOnly && !strings.HasPrefix(pkg, pgxOnly+"/") {
				t.Errorf("%s imports %s: only %s may use the PostgreSQL driver", pkg, imp, pgxOnly)
			}
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			if imp == faultsOnly && !strings.HasPrefix(pkg, faultsOnly) {
				t.Errorf("%s imports %s: the fault harness is for its own tests only", pkg, imp)
			}
			if imp == pgxOnly && (layers[from] != "host" && layers[from] != "cmd/shardhost") && !strings.HasSuffix(pkg, ".test") {
				t.Errorf("%s imports %s: the store is chosen by host and cmd/shardhost", pkg, imp)
			}
			if (imp == replstorePkg || strings.HasPrefix(imp, replstorePkg+"/")) && layers[from] == "sharding" && !storePackage(pkg) {
				t.Errorf("%s imports %s: sharding knows the built-in store only as a StateStore; host chooses it", pkg, imp)
			}
			if to := layerOf(imp); to >= 0 && to <= from && layers[to] != layers[from] {
				t.Errorf("%s imports %s: imports must point down %v", pkg, imp, layers)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages", checked)
	}
}
