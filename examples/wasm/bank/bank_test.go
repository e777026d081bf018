package main

import (
	"strings"
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestBank(t *testing.T) {
	h := shardhost.NewHarness("bank", "alice", func(string) shardhost.Entity { return &account{} })
	for _, step := range []struct{ msg, want string }{
		{"balance", "0"}, {"deposit 5", "5"}, {"deposit 7", "12"}, {"withdraw 2", "10"}, {"balance", "10"},
	} {
		out, err := h.Send([]byte(step.msg))
		if err != nil || string(out) != step.want {
			t.Fatalf("%s: %q %v, want %q", step.msg, out, err, step.want)
		}
	}
	if _, err := h.Send([]byte("withdraw 11")); err == nil || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("overdraft: %v", err)
	}
	for _, bad := range []string{"", "deposit", "deposit -3", "deposit x", "rob 5"} {
		if _, err := h.Send([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// bank-total took every deposit and withdrawal, and nothing of the refused ones.
	if total, err := h.Data(TotalKey); err != nil || string(total) != "10" {
		t.Fatalf("%s = %s %v, want 10", TotalKey, total, err)
	}
	if out, _ := h.Send([]byte("balance")); string(out) != "10" {
		t.Fatalf("balance: %s", out)
	}
}

// TestBankState: the account survives a passivation, as explicit state (the default
// build) or in the instance's memory (-tags transparent); explicit state refuses a state
// it cannot read.
func TestBankState(t *testing.T) {
	h := shardhost.NewHarness("bank", "alice", func(string) shardhost.Entity { return &account{} })
	for _, m := range []string{"deposit 50", "withdraw 8"} {
		if _, err := h.Send([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	state, ok, err := h.Snapshot()
	if err != nil || ok != !transparent {
		t.Fatalf("snapshot: %x %v %v; a guest-level one is wanted unless built transparent (%v)", state, ok, err, transparent)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("balance")); err != nil || string(out) != "42" {
		t.Fatalf("after a restart: %q %v", out, err)
	}
	if transparent {
		return
	}
	if want := []byte{1, 84, 4}; string(state) != string(want) {
		t.Fatalf("state %x, want %x (version 1, balance 42 and 2 ops as zig-zag varints)", state, want)
	}
	for _, bad := range [][]byte{nil, {2, 84, 4}, {1, 84}, {1, 84, 4, 0}} {
		next := shardhost.NewHarness("bank", "alice", func(string) shardhost.Entity { return &account{} })
		if err := next.Restore(bad); err == nil {
			t.Errorf("restore %x: no error", bad)
		}
	}
}
