//go:build race

package sharding

// raceEnabled: the race detector drops sync.Pool items at random, so tests of pooled
// buffers do not count allocations under it.
const raceEnabled = true
