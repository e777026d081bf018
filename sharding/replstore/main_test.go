package replstore

import (
	"io"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight (probeNode waits for its
	// ack or its probe interval, then returns): on a loaded machine one can outlive the
	// last test by more than goleak's retries. It is memberlist's, not ours, and ends
	// by itself; every goroutine of shardhost is still checked.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// quiet is the tests' logger: discarded, or debug lines on stderr with SS_DEBUG set.
var quiet = func() *slog.Logger {
	if os.Getenv("SS_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()
