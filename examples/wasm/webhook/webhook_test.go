package main

import (
	"errors"
	"testing"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func TestWebhook(t *testing.T) {
	h := shardhost.NewHarness("webhook", "w1", func(string) shardhost.Entity { return &webhook{} })
	if _, err := h.Send([]byte("post https://hooks.example.com/x hello")); !errors.Is(err, shardhost.ErrEgressDenied) {
		t.Fatalf("without an allowlist: %v, want ErrEgressDenied", err)
	}
	h.HTTP = func(req *shardhost.HTTPRequest) (*shardhost.HTTPResponse, error) {
		if req.Method != "POST" || req.URL != "https://hooks.example.com/x" || string(req.Body) != "hello world" {
			t.Errorf("request %+v", req)
		}
		if k := req.Header.Get("Idempotency-Key"); k != "w1/1" {
			t.Errorf("idempotency key %q", k)
		}
		return &shardhost.HTTPResponse{StatusCode: 202}, nil
	}
	if out, err := h.Send([]byte("post https://hooks.example.com/x hello world")); err != nil || string(out) != "202" {
		t.Fatalf("post: %q %v", out, err)
	}
	if out, err := h.Send([]byte("sent")); err != nil || string(out) != "1" {
		t.Fatalf("sent: %q %v", out, err)
	}
	for _, bad := range []string{"", "post", "get x"} {
		if _, err := h.Send([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
