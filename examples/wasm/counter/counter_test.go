package main

import (
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestCounter(t *testing.T) {
	h := shardhost.NewHarness("counter", "c1", func(string) shardhost.Entity { return &counter{} })
	for _, step := range []struct{ msg, want string }{
		{"get", "0"}, {"inc", "1"}, {"inc 41", "42"}, {"inc -2", "40"}, {"get", "40"},
	} {
		out, err := h.Send([]byte(step.msg))
		if err != nil || string(out) != step.want {
			t.Fatalf("%s: %q %v, want %q", step.msg, out, err, step.want)
		}
	}
	for _, bad := range []string{"", "dec", "inc x", "inc 1 2"} {
		if _, err := h.Send([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCounterState: the count survives a passivation, as explicit state (the default
// build) or in the instance's memory (-tags transparent), whichever the build chose.
func TestCounterState(t *testing.T) {
	h := shardhost.NewHarness("counter", "c1", func(string) shardhost.Entity { return &counter{} })
	if _, err := h.Send([]byte("inc 41")); err != nil {
		t.Fatal(err)
	}
	state, ok, err := h.Snapshot()
	if err != nil || ok != !transparent {
		t.Fatalf("snapshot: %x %v %v; a guest-level one is wanted unless built transparent (%v)", state, ok, err, transparent)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("inc")); err != nil || string(out) != "42" {
		t.Fatalf("after a restart: %q %v", out, err)
	}
	if !transparent {
		next := shardhost.NewHarness("counter", "c1", func(string) shardhost.Entity { return &counter{} })
		if err := next.Restore(state); err != nil {
			t.Fatal(err)
		}
		if out, err := next.Send([]byte("get")); err != nil || string(out) != "41" {
			t.Fatalf("restored: %q %v", out, err)
		}
	}
}
