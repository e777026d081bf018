package main

import (
	"strings"
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func newHarness() *shardhost.Harness {
	return shardhost.NewHarness("bank", "alice", func(string) shardhost.Entity { return &account{} })
}

// TestMigrateFromV1: version 1's state (format 1: balance 42, 2 ops) migrates to
// version 2 with its balance and ops, which it then saves in format 2.
func TestMigrateFromV1(t *testing.T) {
	h := newHarness()
	if err := h.Migrate(1, []byte{1, 84, 4}); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("balance")); err != nil || string(out) != "42" {
		t.Fatalf("balance after the migration: %q %v", out, err)
	}
	if out, err := h.Send([]byte("deposit 8")); err != nil || string(out) != "50" {
		t.Fatalf("deposit 8: %q %v", out, err)
	}
	if out, err := h.Send([]byte("version")); err != nil || string(out) != "bank 2" {
		t.Fatalf("version: %q %v", out, err)
	}
	state, ok, err := h.Snapshot()
	if err != nil || !ok {
		t.Fatalf("snapshot: %v %v", ok, err)
	}
	// Format 2, then the map: 2 entries, "balance" 50 and "ops" 3, keys in byte order.
	want := []byte{2, 2, 7, 'b', 'a', 'l', 'a', 'n', 'c', 'e', 100, 3, 'o', 'p', 's', 6}
	if string(state) != string(want) {
		t.Fatalf("state %v, want %v", state, want)
	}
	// A restart restores format 2 (Restore, not Migrate).
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("balance")); err != nil || string(out) != "50" {
		t.Fatalf("balance after a restart: %q %v", out, err)
	}
	// A migration from a state of format 2 (a version 2 module redeployed) takes it.
	next := newHarness()
	if err := next.Migrate(3, want); err != nil {
		t.Fatal(err)
	}
	if out, _ := next.Send([]byte("balance")); string(out) != "50" {
		t.Fatalf("balance after a migration of format 2: %s", out)
	}
}

// TestRefusedStates: format 1 through Restore (only a migration converts it), an
// unknown format, bytes that do not decode, a negative balance: each refused.
func TestRefusedStates(t *testing.T) {
	if err := newHarness().Restore([]byte{1, 84, 4}); err == nil || !strings.Contains(err.Error(), "unknown state format 1") {
		t.Fatalf("restore format 1: %v", err)
	}
	for _, bad := range [][]byte{nil, {3, 0}, {1, 84}, {1, 84, 4, 0}, {2, 1}, {2, 0}, {2, 1, 7, 'b', 'a', 'l', 'a', 'n', 'c', 'e', 1}} {
		if err := newHarness().Migrate(1, bad); err == nil {
			t.Errorf("migrate %v: no error", bad)
		}
	}
}

func TestBankV2(t *testing.T) {
	h := newHarness()
	for _, step := range []struct{ msg, want string }{
		{"balance", "0"}, {"deposit 5", "5"}, {"withdraw 2", "3"},
	} {
		if out, err := h.Send([]byte(step.msg)); err != nil || string(out) != step.want {
			t.Fatalf("%s: %q %v, want %q", step.msg, out, err, step.want)
		}
	}
	if _, err := h.Send([]byte("withdraw 4")); err == nil || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("overdraft: %v", err)
	}
	if total, err := h.Data(TotalKey); err != nil || string(total) != "3" {
		t.Fatalf("%s = %s %v, want 3", TotalKey, total, err)
	}
}
