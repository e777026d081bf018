package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// TestAskAndTellExitCodes: ask and tell exit 75 when the message was not delivered
// (the API's not-delivered, or an API that could not be reached) and 124 when its
// outcome is unknown (the API's outcome-unknown, or a connection that broke after the
// request went), and 1 for every other failure, as before; other commands exit 1
// whatever the failure.
func TestAskAndTellExitCodes(t *testing.T) {
	dead := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	// An API that reads the request, then closes the connection without answering (a
	// member killed while it handles it).
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer hangup.Close()
	api := func(answer func(http.ResponseWriter)) string {
		addr, _ := fakeAPI(t, answer)
		return addr
	}
	for _, c := range []struct {
		name string
		api  string
		want int // 0: success
	}{
		{"a reply", api(reply("1")), 0},
		{"not delivered", api(failWith(http.StatusServiceUnavailable, sharding.CodeNotDelivered, "sharding: message not delivered: x")), exitNotDelivered},
		{"outcome unknown", api(failWith(http.StatusGatewayTimeout, sharding.CodeOutcomeUnknown, "sharding: outcome unknown: x")), exitOutcomeUnknown},
		{"the API not reached", dead, exitNotDelivered},
		{"the connection broken", strings.TrimPrefix(hangup.URL, "http://"), exitOutcomeUnknown},
		{"overloaded", api(failWith(http.StatusServiceUnavailable, sharding.CodeOverloaded, "sharding: buffer full")), exitFailure},
		{"the entity's error", api(failWith(http.StatusUnprocessableEntity, sharding.CodeEntityError, "no")), exitFailure},
		{"the guest's deadline", api(failWith(http.StatusGatewayTimeout, sharding.CodeGuestDeadline, "deadline")), exitFailure},
		{"a reply that is not JSON", api(func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }), exitFailure},
	} {
		for _, verb := range []string{"ask", "tell"} {
			out, err := runCLI(t, verb, "--api", c.api, "counter/a", "inc")
			got := 0
			if err != nil {
				got = exitCode(err)
			}
			if got != c.want {
				t.Errorf("%s, %s: exit %d (%v), want %d\n%s", c.name, verb, got, err, c.want, out)
			}
		}
	}
	// Bad arguments, and another command's failure to reach the API, exit 1.
	if _, err := runCLI(t, "ask", "counter", "inc"); err == nil || exitCode(err) != exitFailure {
		t.Errorf("ask with bad arguments: %v, exit %d", err, exitCode(err))
	}
	if _, err := runCLI(t, "members", "--api", dead); err == nil || exitCode(err) != exitFailure {
		t.Errorf("members of an API not reached: %v, exit %d", err, exitCode(err))
	}
}
