package wasmbin

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestMain removes the modules testwasm built, and fails the run if a test left a
// goroutine behind (the rewrites start none; the wazero runtimes the tests make must
// be closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { testwasm.Cleanup() }))
}
