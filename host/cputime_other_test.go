//go:build !unix

package host

import "time"

// processCPU reports false: no getrusage here.
func processCPU() (time.Duration, bool) { return 0, false }
