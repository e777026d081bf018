//go:build banklimit

package main

import (
	"strings"
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// TestBankLimit: the changed bank (-tags banklimit) refuses a deposit over 1,000, and
// changes nothing for it.
func TestBankLimit(t *testing.T) {
	h := shardhost.NewHarness("bank", "alice", func(string) shardhost.Entity { return &account{} })
	if out, err := h.Send([]byte("deposit 1000")); err != nil || string(out) != "1000" {
		t.Fatalf("deposit 1000: %q %v", out, err)
	}
	if _, err := h.Send([]byte("deposit 1001")); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Fatalf("deposit 1001: %v, want a refusal", err)
	}
	if out, _ := h.Send([]byte("balance")); string(out) != "1000" {
		t.Fatalf("balance: %s", out)
	}
}
