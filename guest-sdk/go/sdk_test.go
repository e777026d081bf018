package shardhost

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

type echo struct{ seen int }

func (e *echo) Receive(ctx *Context, msg []byte) ([]byte, error) {
	e.seen++
	switch string(msg) {
	case "fail":
		return nil, errors.New("asked to fail")
	case "who":
		ctx.Logf(LevelInfo, "who asked, message %d", e.seen)
		return []byte(ctx.EntityType() + "/" + ctx.EntityID()), nil
	}
	return append([]byte(strconv.Itoa(e.seen)+":"), msg...), nil
}

func TestHarnessDeliversInOrderAndKeepsState(t *testing.T) {
	created := 0
	h := NewHarness("echo", "e-1", func(id string) Entity {
		created++
		if id != "e-1" {
			t.Errorf("factory got id %q", id)
		}
		return &echo{}
	})
	for i := 1; i <= 3; i++ {
		out, err := h.Send([]byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(i) + ":x"; string(out) != want {
			t.Fatalf("reply %q, want %q", out, want)
		}
	}
	if created != 1 {
		t.Fatalf("factory called %d times", created)
	}
	out, err := h.Send([]byte("who"))
	if err != nil || string(out) != "echo/e-1" {
		t.Fatalf("who: %q %v", out, err)
	}
	if len(h.Logs) != 1 || h.Logs[0] != "INFO who asked, message 4" {
		t.Fatalf("logs %q", h.Logs)
	}
}

func TestHarnessErrorIsDeliveredAndEntityGoesOn(t *testing.T) {
	h := NewHarness("echo", "e", func(string) Entity { return &echo{} })
	if _, err := h.Send([]byte("fail")); err == nil || err.Error() != "asked to fail" {
		t.Fatalf("err %v", err)
	}
	out, err := h.Send([]byte("y"))
	if err != nil || string(out) != "2:y" {
		t.Fatalf("after error: %q %v", out, err)
	}
}

func TestNilFactoryResult(t *testing.T) {
	h := NewHarness("t", "i", func(string) Entity { return nil })
	if _, err := h.Send(nil); err == nil {
		t.Fatal("no error for a nil entity")
	}
}

func TestUnregistered(t *testing.T) {
	d := dispatcher{h: NewHarness("t", "i", nil)}
	saved := registered
	registered = nil
	defer func() { registered = saved }()
	out, isErr := d.receive([]byte("x"))
	if !isErr || string(out) != ErrNotRegistered.Error() {
		t.Fatalf("%q %v", out, isErr)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	if !canRecover {
		t.Log("not run: recover does not stop a panic here")
		return
	}
	saved := registered
	defer func() { registered = saved; recover() }()
	registered = nil
	Register(func(string) Entity { return &echo{} })
	Register(func(string) Entity { return &echo{} })
	t.Fatal("second Register did not panic")
}

// TestShardIDVectors checks the SDK against the vectors every host and SDK shares.
func TestShardIDVectors(t *testing.T) {
	f, err := os.Open("../../abi/testdata/shard_ids.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		shards, _ := strconv.Atoi(fields[0])
		var id string
		if err := json.Unmarshal([]byte(fields[1]), &id); err != nil {
			t.Fatal(err)
		}
		want, _ := strconv.Atoi(fields[3])
		if got := ShardID(id, shards); got != want {
			t.Errorf("ShardID(%q, %d) = %d, want %d", id, shards, got, want)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("only %d vectors", n)
	}
}

var errInsufficient = errors.New("insufficient funds")

type overdraft struct{ need int }

func (o *overdraft) Error() string { return "overdraft of " + strconv.Itoa(o.need) }

type strictBank struct{}

func (strictBank) Receive(ctx *Context, msg []byte) ([]byte, error) {
	switch string(msg) {
	case "withdraw":
		return nil, errInsufficient
	case "overdraw":
		return nil, &overdraft{need: 7}
	case "ask":
		_, err := ctx.Ask("nobody", "x", []byte("hi"), 0)
		return nil, err // the HostError of the ask, passed on
	}
	return []byte("ok"), nil
}

// Harness.Send returns the entity's error wrapped, so that errors.Is and errors.As
// match what the entity returned, with the text the host would reply.
func TestHarnessSendWrapsTheEntitysError(t *testing.T) {
	h := NewHarness("bank", "b", func(string) Entity { return strictBank{} })
	_, err := h.Send([]byte("withdraw"))
	if !errors.Is(err, errInsufficient) || err.Error() != "insufficient funds" {
		t.Fatalf("withdraw: %v, want errInsufficient", err)
	}
	var ee *EntityError
	if !errors.As(err, &ee) || ee.Text != "insufficient funds" {
		t.Fatalf("withdraw: %#v is not an *EntityError", err)
	}
	_, err = h.Send([]byte("overdraw"))
	var od *overdraft
	if !errors.As(err, &od) || od.need != 7 {
		t.Fatalf("overdraw: %v, want the *overdraft", err)
	}
	_, err = h.Send([]byte("ask"))
	var he *HostError
	if !errors.As(err, &he) || he.Code == CodeOK || !errors.Is(err, sentinel(he.Code)) {
		t.Fatalf("ask: %v, want the HostError, matching its code's sentinel", err)
	}
	if out, err := h.Send([]byte("deposit")); err != nil || string(out) != "ok" {
		t.Fatalf("deposit: %q %v", out, err)
	}
}
