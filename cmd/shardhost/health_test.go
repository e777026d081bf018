package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestHealthReadyState: health --ready --state C asks /ready?state=C and exits 0 only
// on 200; --state without --ready, or an unknown condition, is refused before any
// request.
func TestHealthReadyState(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("state") == "settled" {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"not-ready","reason":"the state store's ring is not settled (retained: m-4; joining: none; replaced: none)"}`))
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer srv.Close()
	api := strings.TrimPrefix(srv.URL, "http://")

	if out, err := runCLI(t, "health", "--api", api, "--ready", "--state", "admitted"); err != nil || strings.TrimSpace(out) != "ready" {
		t.Errorf("--state admitted: %v %q, want ready", err, out)
	}
	if out, err := runCLI(t, "health", "--api", api, "--ready", "--state", "settled"); err == nil || !strings.Contains(err.Error()+out, "not settled") {
		t.Errorf("--state settled against a 503: %v %q, want an error with the reason", err, out)
	}
	if out, err := runCLI(t, "health", "--api", api, "--ready"); err != nil || strings.TrimSpace(out) != "ready" {
		t.Errorf("--ready: %v %q", err, out)
	}
	mu.Lock()
	got := strings.Join(asked, " ")
	mu.Unlock()
	if want := "/ready?state=admitted /ready?state=settled /ready"; got != want {
		t.Errorf("asked %q, want %q", got, want)
	}
	for _, args := range [][]string{{"--state", "settled"}, {"--ready", "--state", "gone"}} {
		out, err := runCLI(t, append([]string{"health", "--api", api}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "--state") {
			t.Errorf("health %v: %v %q, want an error naming --state", args, err, out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 {
		t.Errorf("refused flags still asked: %v", asked)
	}
}
