package main

import (
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestQueryGet(t *testing.T) {
	h := shardhost.NewHarness("counter", "c1", func(string) shardhost.Entity { return &counter{} })
	if out, err := h.Query([]byte("get")); err != nil || string(out) != "0" {
		t.Fatalf("query get of a new counter: %q, %v", out, err)
	}
	if _, err := h.Send([]byte("inc 41")); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Query([]byte("get")); err != nil || string(out) != "41" {
		t.Fatalf("query get: %q, %v; want 41", out, err)
	}
	if _, err := h.Query([]byte("inc")); err == nil || err.Error() != `counter: unknown query "inc" (want get)` {
		t.Fatalf("query inc: %v", err)
	}
	if out, err := h.Send([]byte("get")); err != nil || string(out) != "41" {
		t.Fatalf("after the queries: %q, %v", out, err)
	}
}
