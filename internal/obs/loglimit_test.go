package obs

import (
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	l := LogLimiter{Interval: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if n, ok := l.Allow("a", t0); !ok || n != 0 {
		t.Fatalf("first: %d %v", n, ok)
	}
	for i := 1; i <= 3; i++ {
		if _, ok := l.Allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("let through within the interval")
		}
	}
	if _, ok := l.Allow("b", t0.Add(time.Second)); !ok {
		t.Fatal("another key held back")
	}
	if n, ok := l.Allow("a", t0.Add(11*time.Second)); !ok || n != 3 {
		t.Fatalf("after the interval: %d suppressed, %v; want 3, true", n, ok)
	}
}
