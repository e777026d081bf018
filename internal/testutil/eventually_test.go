package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalTB records Fatalf and stops the caller as t.Fatalf does (here by a panic that
// run recovers).
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func run(fn func(tb testing.TB)) (msg string) {
	f := &fatalTB{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	msg := run(func(tb testing.TB) {
		Eventually(tb, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	})
	if msg != "" || calls != 3 {
		t.Fatalf("failed with %q after %d calls, want success at the third", msg, calls)
	}
}

func TestEventuallyFailsAtTheDeadlineWithTheMessage(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(func(tb testing.TB) {
		Eventually(tb, 50*time.Millisecond, "the impossible", func() bool { calls++; return false })
	})
	if msg != "timed out after 50ms waiting for the impossible" {
		t.Fatalf("message %q", msg)
	}
	if time.Since(start) < 50*time.Millisecond || calls < 2 {
		t.Fatalf("gave up after %v and %d calls, before its deadline", time.Since(start), calls)
	}
}

func TestEventuallyNilReportsTheLastError(t *testing.T) {
	n := 0
	msg := run(func(tb testing.TB) {
		EventuallyNil(tb, 30*time.Millisecond, "three replicas", func() error {
			n++
			return fmt.Errorf("%d of 3", min(n, 2))
		})
	})
	if !strings.HasPrefix(msg, "timed out after 30ms waiting for three replicas: ") || !strings.HasSuffix(msg, "2 of 3") {
		t.Fatalf("message %q", msg)
	}
	if msg := run(func(tb testing.TB) {
		EventuallyNil(tb, time.Second, "nothing", func() error { return nil })
	}); msg != "" {
		t.Fatal(msg)
	}
}
