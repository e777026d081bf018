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
