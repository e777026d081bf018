package main

import (
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestQueryGet(t *testing.T) {
	h := shardhost.NewHarness("bank", "a1", func(string) shardhost.Entity { return &account{} })
	if _, err := h.Send([]byte("deposit 70")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Send([]byte("withdraw 20")); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"get": "50", "balance": "50", "ops": "2"} {
		if out, err := h.Query([]byte(q)); err != nil || string(out) != want {
			t.Errorf("query %s: %q, %v; want %s", q, out, err, want)
		}
	}
	if _, err := h.Query([]byte("deposit 5")); err == nil {
		t.Error("query deposit 5 answered")
	}
	if out, err := h.Send([]byte("balance")); err != nil || string(out) != "50" {
		t.Fatalf("after the queries: %q, %v", out, err)
	}
}
