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
