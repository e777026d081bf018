//go:build race

package faults

// raceEnabled: under the race detector a schedule runs several times slower, so
// TestFaultSchedules runs 4, 2 at once, by default (make test runs its 200 without it).
const raceEnabled = true
