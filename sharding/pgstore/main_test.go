package pgstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine of the store (its batcher, its pool's) outlives the
// tests. The replicated stores of the benchmarks' comparisons run on memberlist, whose
// Shutdown does not wait for a probe in flight: that one is ignored (see
// sharding/replstore's TestMain).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
