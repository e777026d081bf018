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
