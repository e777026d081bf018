//go:build tinygo && wasm

package shardhost

import (
	"os"
	"testing"
)

// canRecover: see recover_test.go.
const canRecover = false

// TestMain starts in the directory PWD names, as Go's wasip1 port does by itself, so that
// the tests find the files they compare against (../../abi). The runner mounts the
// repository at the same path.
func TestMain(m *testing.M) {
	if pwd := os.Getenv("PWD"); pwd != "" {
		if err := os.Chdir(pwd); err != nil {
			println("chdir", pwd+":", err.Error())
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}
