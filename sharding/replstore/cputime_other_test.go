//go:build !unix

package replstore

import "time"

// processCPU reports false: no getrusage here.
func processCPU() (time.Duration, bool) { return 0, false }
