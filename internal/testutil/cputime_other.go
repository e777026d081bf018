//go:build !unix

package testutil

import "time"

// ProcessCPU reports false: no getrusage here.
func ProcessCPU() (time.Duration, bool) { return 0, false }
