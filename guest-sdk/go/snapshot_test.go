package shardhost

import (
	"errors"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// tally is a Snapshotter: "add N" adds N, "sum" replies with the sum, "bye" passivates.
// Its state is the sum in decimal.
type tally struct {
	sum          int
	snapshotErr  error
	snapshotSize int // if positive, Snapshot returns this many bytes
}

var _ Snapshotter = (*tally)(nil)

var errBadState = errors.New("tally: bad state")

func (t *tally) Receive(ctx *Context, msg []byte) ([]byte, error) {
	f := strings.Fields(string(msg))
	switch {
	case len(f) == 2 && f[0] == "add":
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, err
		}
		t.sum += n
	case len(f) == 1 && f[0] == "sum":
	case len(f) == 1 && f[0] == "bye":
		ctx.Passivate()
		return []byte("bye"), nil
	default:
		return nil, errors.New("tally: unknown message")
	}
	return []byte(strconv.Itoa(t.sum)), nil
}

func (t *tally) Snapshot() ([]byte, error) {
	if t.snapshotErr != nil {
		return nil, t.snapshotErr
	}
	if t.snapshotSize > 0 {
		return make([]byte, t.snapshotSize), nil
	}
	return []byte(strconv.Itoa(t.sum)), nil
}

func (t *tally) Restore(state []byte) error {
	n, err := strconv.Atoi(string(state))
	if err != nil {
		return errBadState
	}
	t.sum = n
	return nil
}

func send(t *testing.T, h *Harness, msg, want string) {
	t.Helper()
	out, err := h.Send([]byte(msg))
	if err != nil || string(out) != want {
		t.Fatalf("%s: %q %v, want %q", msg, out, err, want)
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	h := NewHarness("tally", "t-1", func(string) Entity { return &tally{} })
	send(t, h, "add 3", "3")
	send(t, h, "add 4", "7")
	state, ok, err := h.Snapshot()
	if err != nil || !ok || string(state) != "7" {
		t.Fatalf("snapshot: %q %v %v", state, ok, err)
	}
	send(t, h, "sum", "7") // a snapshot does not disturb the entity

	created := 0
	next := NewHarness("tally", "t-1", func(id string) Entity {
		created++
		if id != "t-1" {
			t.Errorf("factory got id %q", id)
		}
		return &tally{}
	})
	if err := next.Restore(state); err != nil {
		t.Fatal(err)
	}
	state[0] = '9' // the entity got a copy
	send(t, next, "sum", "7")
	send(t, next, "add 1", "8")
	if created != 1 {
		t.Fatalf("factory called %d times", created)
	}
	if state, ok, err := next.Snapshot(); err != nil || !ok || string(state) != "8" {
		t.Fatalf("snapshot after restore: %q %v %v", state, ok, err)
	}
}

func TestNoSnapshot(t *testing.T) {
	h := NewHarness("tally", "t", func(string) Entity { return &tally{} })
	if state, ok, err := h.Snapshot(); ok || err != nil || state != nil {
		t.Fatalf("before the first message: %q %v %v", state, ok, err)
	}
	plain := NewHarness("echo", "e", func(string) Entity { return &echo{} })
	send(t, plain, "x", "1:x")
	if state, ok, err := plain.Snapshot(); ok || err != nil || state != nil {
		t.Fatalf("plain entity: %q %v %v", state, ok, err)
	}
}

func TestSnapshotErrors(t *testing.T) {
	ent := &tally{snapshotErr: errors.New("tally: cannot")}
	h := NewHarness("tally", "t", func(string) Entity { return ent })
	send(t, h, "add 1", "1")
	if _, ok, err := h.Snapshot(); !ok || err == nil || err.Error() != "tally: cannot" {
		t.Fatalf("entity error: %v %v", ok, err)
	}

	ent.snapshotErr = nil
	ent.snapshotSize = MaxSnapshotSize
	if state, ok, err := h.Snapshot(); !ok || err != nil || len(state) != MaxSnapshotSize {
		t.Fatalf("MaxSnapshotSize bytes: %d %v %v", len(state), ok, err)
	}
	ent.snapshotSize = MaxSnapshotSize + 1
	state, ok, err := h.Snapshot()
	if !ok || !errors.Is(err, ErrSnapshotTooLarge) || state != nil {
		t.Fatalf("oversize: %d %v %v", len(state), ok, err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(MaxSnapshotSize+1)) {
		t.Errorf("error %q does not name the size", err)
	}
	send(t, h, "sum", "1") // a failed snapshot leaves the entity running
}

func TestRestoreErrors(t *testing.T) {
	t.Run("not a Snapshotter", func(t *testing.T) {
		h := NewHarness("echo", "e", func(string) Entity { return &echo{} })
		err := h.Restore([]byte("1"))
		if !errors.Is(err, ErrNotSnapshotter) || err.Error() != "shardhost: entity does not implement Snapshotter" {
			t.Fatalf("err %v", err)
		}
		send(t, h, "x", "1:x") // the entity was dropped: a fresh one takes the message
	})
	t.Run("entity refuses, then a retry succeeds", func(t *testing.T) {
		created := 0
		h := NewHarness("tally", "t", func(string) Entity { created++; return &tally{} })
		if err := h.Restore([]byte("not a number")); !errors.Is(err, errBadState) {
			t.Fatalf("err %v", err)
		}
		if _, ok, _ := h.Snapshot(); ok {
			t.Fatal("an entity whose restore failed is still there")
		}
		if err := h.Restore([]byte("5")); err != nil {
			t.Fatal(err)
		}
		send(t, h, "sum", "5")
		if created != 2 {
			t.Fatalf("factory called %d times, want 2", created)
		}
	})
	t.Run("after a message", func(t *testing.T) {
		h := NewHarness("tally", "t", func(string) Entity { return &tally{} })
		send(t, h, "add 2", "2")
		if err := h.Restore([]byte("5")); !errors.Is(err, ErrRestoreAfterStart) {
			t.Fatalf("err %v", err)
		}
		send(t, h, "sum", "2")
	})
	t.Run("after a failed message", func(t *testing.T) {
		h := NewHarness("t", "i", func(string) Entity { return nil })
		if _, err := h.Send(nil); err == nil {
			t.Fatal("no error for a nil entity")
		}
		if err := h.Restore([]byte("5")); !errors.Is(err, ErrRestoreAfterStart) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("twice", func(t *testing.T) {
		h := NewHarness("tally", "t", func(string) Entity { return &tally{} })
		if err := h.Restore([]byte("5")); err != nil {
			t.Fatal(err)
		}
		if err := h.Restore([]byte("6")); !errors.Is(err, ErrRestoreAfterStart) {
			t.Fatalf("err %v", err)
		}
		send(t, h, "sum", "5")
	})
	t.Run("nil entity", func(t *testing.T) {
		h := NewHarness("t", "i", func(string) Entity { return nil })
		if err := h.Restore([]byte("5")); !errors.Is(err, errNilEntity) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("unregistered", func(t *testing.T) {
		d := dispatcher{h: NewHarness("t", "i", nil)}
		saved := registered
		registered = nil
		defer func() { registered = saved }()
		if err := d.restore([]byte("5")); !errors.Is(err, ErrNotRegistered) {
			t.Fatalf("err %v", err)
		}
	})
}

func TestPassivate(t *testing.T) {
	h := NewHarness("tally", "t", func(string) Entity { return &tally{} })
	send(t, h, "add 1", "1")
	if h.Passivated() {
		t.Fatal("passivated without asking")
	}
	send(t, h, "bye", "bye") // the reply is delivered as usual
	if !h.Passivated() {
		t.Fatal("Passivate not reported")
	}
	send(t, h, "sum", "1")
	if h.Passivated() {
		t.Fatal("Passivated not reset by Send")
	}
	send(t, h, "bye", "bye")
	if _, err := h.Send([]byte("nonsense")); err == nil {
		t.Fatal("no error")
	}
	if h.Passivated() {
		t.Fatal("Passivated not reset by a failed Send")
	}
}

// TestMaxSnapshotSizeMatchesABI checks the SDK's copy of abi.MaxSnapshotSize: the SDK is
// a module of its own without dependencies, so it cannot import the abi package.
func TestMaxSnapshotSizeMatchesABI(t *testing.T) {
	src, err := parser.ParseFile(token.NewFileSet(), "../../abi/abi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var expr ast.Expr
	ast.Inspect(src, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if name.Name == "MaxSnapshotSize" && i < len(vs.Values) {
					expr = vs.Values[i]
				}
			}
		}
		return expr == nil
	})
	if expr == nil {
		t.Fatal("abi.go declares no MaxSnapshotSize")
	}
	want, ok := constant.Int64Val(evalConst(t, expr))
	if !ok || want != MaxSnapshotSize {
		t.Fatalf("abi.MaxSnapshotSize is %v, the SDK has %d", want, MaxSnapshotSize)
	}
}

// evalConst evaluates a constant expression of integer literals.
func evalConst(t *testing.T, e ast.Expr) constant.Value {
	t.Helper()
	switch e := e.(type) {
	case *ast.BasicLit:
		return constant.MakeFromLiteral(e.Value, e.Kind, 0)
	case *ast.ParenExpr:
		return evalConst(t, e.X)
	case *ast.BinaryExpr:
		x, y := evalConst(t, e.X), evalConst(t, e.Y)
		if e.Op == token.SHL || e.Op == token.SHR {
			s, ok := constant.Uint64Val(y)
			if !ok {
				t.Fatalf("shift count %v", y)
			}
			return constant.Shift(x, e.Op, uint(s))
		}
		return constant.BinaryOp(x, e.Op, y)
	}
	t.Fatalf("cannot evaluate %T", e)
	return nil
}
