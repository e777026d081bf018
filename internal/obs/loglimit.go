package obs

import (
	"sync"
	"time"
)

// LogLimiter lets one log line per key through every Interval, counting the others: a
// failure that repeats (dead letters of one type and reason, writes refused by a full
// disk) logs once per Interval with the count of the lines held back. It keeps at most
// 4,096 keys: past that it forgets them all. The zero value lets every line through.
// Safe for concurrent use.
type LogLimiter struct {
	// Interval is the least time between two lines of one key.
	Interval time.Duration

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

// Allow reports whether a line for key may be logged at now, and how many were
// suppressed since the last one that was.
func (l *LogLimiter) Allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.suppressed = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := l.last[key]; seen && now.Sub(t) < l.Interval {
		l.suppressed[key]++
		return 0, false
	}
	if len(l.last) > 4096 { // bound the keys (types × reasons): forget them all
		clear(l.last)
		clear(l.suppressed)
	}
	suppressed = l.suppressed[key]
	l.last[key], l.suppressed[key] = now, 0
	return suppressed, true
}
