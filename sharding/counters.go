package sharding

import (
	"sort"
	"sync/atomic"
	"time"
)

// A member's running counts of what its regions handled, which a caller samples to
// draw rates and latencies over time (the console's charts): unlike the metrics, they
// are kept whether or not a MeterProvider is configured, at the cost of a few atomic
// additions per message.

// LatencyBounds are the upper bounds of TypeCounters.Latency's buckets: the time from
// a message's arrival in its entity's mailbox to the end of its handling. A last
// bucket counts the longer ones.
var LatencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// TypeCounters is what this member's region of one entity type counted since it
// started (Handled, Failed, Latency: cumulative), and what it hosts now.
type TypeCounters struct {
	Type string
	// Handled and Failed count the messages, timers and changes its entities handled
	// successfully, and those that failed.
	Handled, Failed uint64
	// Latency counts them all by duration: Latency[i] those at most LatencyBounds[i]
	// (and over the bound before), the last one those longer than every bound.
	Latency [len(LatencyBounds) + 1]uint64
	// Active is its entities with an instance (or making one), Shards the shards it
	// hosts.
	Active, Shards int
}

// regionCounters is a region's part of TypeCounters.
type regionCounters struct {
	handled, failed atomic.Uint64
	latency         [len(LatencyBounds) + 1]atomic.Uint64
}

// count counts a message handled in d, failed if err is not nil.
func (c *regionCounters) count(d time.Duration, err error) {
	if err != nil {
		c.failed.Add(1)
	} else {
		c.handled.Add(1)
	}
	i := sort.Search(len(LatencyBounds), func(i int) bool { return d <= LatencyBounds[i] })
	c.latency[i].Add(1)
}

// Counters returns the counters of each of this member's regions, sorted by type.
func (s *Sharding) Counters() []TypeCounters {
	regions := s.allRegions()
	out := make([]TypeCounters, 0, len(regions))
	for _, r := range regions {
		tc := TypeCounters{Type: r.settings.Name, Handled: r.counters.handled.Load(), Failed: r.counters.failed.Load()}
		for i := range tc.Latency {
			tc.Latency[i] = r.counters.latency[i].Load()
		}
		r.mu.Lock()
		tc.Active = len(r.lives)
		r.eachHostedLocked(func(*shard) { tc.Shards++ })
		r.mu.Unlock()
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
