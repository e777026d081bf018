package statestoretest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks, once every test has run, that none left a goroutine behind.
func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight (probeNode waits for its
	// ack or the end of its probe interval, then returns), and memberlist gives no way
	// to wait for it: one can outlive the last test's members by up to a probe interval
	// (1 s in the local profile), longer than goleak's retries. It is memberlist's, not
	// ours, and ends by itself; every goroutine of shardhost is still checked.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
