package main

import (
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestFaulty(t *testing.T) {
	h := shardhost.NewHarness("faulty", "f1", func(string) shardhost.Entity { return &faulty{} })
	if out, err := h.Send([]byte("echo hi there")); err != nil || string(out) != "hi there" {
		t.Fatalf("echo: %q %v", out, err)
	}
	for _, msg := range []string{"fail", "nonsense"} {
		if _, err := h.Send([]byte(msg)); err == nil {
			t.Errorf("%s: no error", msg)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("trap did not panic")
			}
		}()
		h.Send([]byte("trap"))
	}()
	// loop and grow never return; the host's tests run them against its limits.
}

// TestFaultyStateIsEmpty: faulty's explicit state is empty, and it refuses any other.
func TestFaultyStateIsEmpty(t *testing.T) {
	h := shardhost.NewHarness("faulty", "f1", func(string) shardhost.Entity { return &faulty{} })
	h.Send([]byte("echo x"))
	if state, ok, err := h.Snapshot(); err != nil || !ok || len(state) != 0 {
		t.Fatalf("snapshot: %x %v %v, want an empty guest-level state", state, ok, err)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	next := shardhost.NewHarness("faulty", "f1", func(string) shardhost.Entity { return &faulty{} })
	if err := next.Restore([]byte{1}); err == nil {
		t.Fatal("a non-empty state restored")
	}
}
