package cluster

import (
	"testing"
	"time"
)

// forwardClock passes on its source's advances and none of its steps back.
func TestForwardClockPassesOnAdvancesOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reads := []time.Duration{0, time.Second, -time.Hour, -time.Hour + 2*time.Second, 5 * time.Second, 5 * time.Second}
	want := []time.Duration{0, time.Second, time.Second, 3 * time.Second, 3*time.Second + time.Hour + 3*time.Second,
		3*time.Second + time.Hour + 3*time.Second}
	i := 0
	c := &forwardClock{read: func() time.Time { return t0.Add(reads[i]) }}
	for ; i < len(reads); i++ {
		if got := c.now(); !got.Equal(t0.Add(want[i])) {
			t.Fatalf("reading %d (source at %v): %v, want %v", i, reads[i], got.Sub(t0), want[i])
		}
	}
}
