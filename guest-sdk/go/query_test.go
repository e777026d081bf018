package shardhost

import (
	"errors"
	"strconv"
	"testing"
)

// queried counts in a field, keeps it as guest-level state when snap is set, and
// answers "get" through Query; Query also tries to change things.
type queried struct {
	n    int
	snap bool
}

func (q *queried) Receive(ctx *Context, msg []byte) ([]byte, error) {
	q.n++
	return []byte(strconv.Itoa(q.n)), nil
}

func (q *queried) Query(ctx *Context, payload []byte) ([]byte, error) {
	switch string(payload) {
	case "get":
		return []byte(strconv.Itoa(q.n)), nil
	case "bump":
		q.n += 100
		return []byte(strconv.Itoa(q.n)), nil
	case "tell":
		return nil, ctx.Tell("other", "x", []byte("hi"))
	case "timer":
		return nil, ctx.StartTimer("t", []byte("x"), 1)
	case "update":
		_, err := ctx.DDataUpdate("k", TypeGCounter, "incr", Local, 0)
		return nil, err
	}
	return nil, errors.New("unknown query " + strconv.Quote(string(payload)))
}

type snapQueried struct{ queried }

func (q *snapQueried) Snapshot() ([]byte, error) { return []byte(strconv.Itoa(q.n)), nil }
func (q *snapQueried) Restore(state []byte) error {
	n, err := strconv.Atoi(string(state))
	q.n = n
	return err
}

func TestHarnessQuery(t *testing.T) {
	h := NewHarness("c", "q1", func(string) Entity { return &snapQueried{} })
	if out, err := h.Query([]byte("get")); err != nil || string(out) != "0" {
		t.Fatalf("query of a new entity: %q, %v; want 0", out, err)
	}
	for i := 0; i < 3; i++ {
		if _, err := h.Send([]byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := h.Query([]byte("get")); err != nil || string(out) != "3" {
		t.Fatalf("query: %q, %v; want 3", out, err)
	}
	// A Snapshotter is queried on a copy: what Query changes is dropped.
	if out, err := h.Query([]byte("bump")); err != nil || string(out) != "103" {
		t.Fatalf("bump: %q, %v", out, err)
	}
	if out, err := h.Send([]byte("inc")); err != nil || string(out) != "4" {
		t.Fatalf("after a changing query the entity says %q, %v; want 4", out, err)
	}
	for _, q := range []string{"tell", "timer", "update"} {
		_, err := h.Query([]byte(q))
		var ee *EntityError
		if !errors.As(err, &ee) || !errors.Is(err, ErrReadOnly) || ee.Text != "shardhost: read-only: a query changes nothing" {
			t.Errorf("query %s: %v, want a read-only error", q, err)
		}
	}
	if len(h.Tells) != 0 || len(h.Timers()) != 0 {
		t.Errorf("a query left tells %v or timers %v", h.Tells, h.Timers())
	}
	if _, err := h.Query([]byte("nope")); err == nil || err.Error() != `unknown query "nope"` {
		t.Errorf("refused query: %v", err)
	}
}

func TestHarnessQueryNotQuerier(t *testing.T) {
	h := NewHarness("c", "q2", func(string) Entity { return &plain{} })
	if _, err := h.Query([]byte("get")); !errors.Is(err, ErrNoQuerier) {
		t.Fatalf("query of an entity without Query: %v, want ErrNoQuerier", err)
	}
}

func TestReadOnlyCodeMatchesSentinel(t *testing.T) {
	if err := codeError(CodeReadOnly, []byte("x")); !errors.Is(err, ErrReadOnly) || CodeReadOnly.String() != "read-only" {
		t.Fatalf("CodeReadOnly: %v %s", err, CodeReadOnly)
	}
}

type plain struct{}

func (*plain) Receive(*Context, []byte) ([]byte, error) { return nil, nil }
