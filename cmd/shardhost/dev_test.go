package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// fakeAPI answers asks with the replies of answer, one per request in order (the last one
// repeated), and counts the requests.
func fakeAPI(t *testing.T, answer ...func(w http.ResponseWriter)) (addr string, requests *atomic.Int32) {
	t.Helper()
	requests = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(requests.Add(1)) - 1
		answer[min(i, len(answer)-1)](w)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), requests
}

func failWith(status int, code, msg string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
}

func reply(body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) { w.Write([]byte(body)) }
}

var quickRetry = retryPolicy{attempts: 4, backoff: time.Millisecond, maxWait: 2 * time.Millisecond}

// TestDemoAskRetriesTransientFailures: an ask that fails on a lapsed lease or a shard
// being resolved is sent again, with one line saying so per retry, until it succeeds.
func TestDemoAskRetriesTransientFailures(t *testing.T) {
	lapsed := failWith(http.StatusGatewayTimeout, sharding.CodeOutcomeUnknown, sharding.ErrNoMajority.Error())
	resolving := failWith(http.StatusServiceUnavailable, sharding.CodeNotDelivered, sharding.ErrShardUnavailable.Error()+":\nwaited 10s")
	api, requests := fakeAPI(t, lapsed, resolving, reply("3"))
	var out bytes.Buffer
	r, err := askRetrying(context.Background(), &out, quickRetry, api, "counter", "bob", "inc 2")
	if err != nil || string(r.body) != "3" {
		t.Fatalf("askRetrying: %q, %v; want 3", r.body, err)
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per retry, got:\n%s", out.String())
	}
	for i, want := range []string{"hosting lease lapsed", "shard home could not be resolved"} {
		if !strings.Contains(lines[i], `counter/bob: "inc 2" via `+api) || !strings.Contains(lines[i], want) ||
			!strings.Contains(lines[i], fmt.Sprintf("(try %d of 4)", i+2)) {
			t.Errorf("line %d %q: want the ask, the failure (%s) and the try", i, lines[i], want)
		}
	}
}

// TestDemoAskStopsOnOtherFailures: an entity's error or an unknown type is not sent
// again; a transient failure is sent again only as often as the policy says, and the
// last failure is returned.
func TestDemoAskStopsOnOtherFailures(t *testing.T) {
	for _, answer := range []func(http.ResponseWriter){
		failWith(http.StatusUnprocessableEntity, sharding.CodeEntityError, "counter: unknown message"),
		failWith(http.StatusNotFound, sharding.CodeUnknownType, `sharding: unknown entity type: "counter"`),
		failWith(http.StatusBadGateway, sharding.CodeReplyTooLarge, "host: reply too large"),
	} {
		api, requests := fakeAPI(t, answer)
		var out bytes.Buffer
		_, err := askRetrying(context.Background(), &out, quickRetry, api, "counter", "bob", "get")
		if err == nil || requests.Load() != 1 || out.Len() != 0 {
			t.Errorf("%v: %d requests, output %q; want the error after one request, nothing printed", err, requests.Load(), out.String())
		}
	}

	api, requests := fakeAPI(t, failWith(http.StatusServiceUnavailable, sharding.CodeOverloaded, "sharding: buffer full"))
	var out bytes.Buffer
	_, err := askRetrying(context.Background(), &out, quickRetry, api, "counter", "bob", "get")
	if err == nil || !strings.Contains(err.Error(), "buffer full") || requests.Load() != 4 || strings.Count(out.String(), "\n") != 3 {
		t.Errorf("always overloaded: %v after %d requests, output:\n%s\nwant the failure after 4 requests and 3 lines", err, requests.Load(), out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	api, requests = fakeAPI(t, failWith(http.StatusGatewayTimeout, sharding.CodeOutcomeUnknown, sharding.ErrAskTimeout.Error()))
	if _, err := askRetrying(ctx, &out, quickRetry, api, "counter", "bob", "get"); !errors.Is(err, context.Canceled) || requests.Load() != 1 {
		t.Errorf("interrupted: %v after %d requests, want context.Canceled after one", err, requests.Load())
	}
}

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&apiError{status: 503, code: sharding.CodeUnavailable}, true},
		{&apiError{status: 504, code: sharding.CodeUnavailable}, true},
		{&apiError{status: 503, code: sharding.CodeNotDelivered}, true},
		{&apiError{status: 504, code: sharding.CodeOutcomeUnknown}, true},
		{&apiError{status: 504, code: sharding.CodeGuestDeadline}, false},
		{&apiError{status: 503, code: sharding.CodeOverloaded}, true},
		{&apiError{status: 503, code: sharding.CodeStateNotSaved}, true},
		{&apiError{status: 503, code: sharding.CodeStateNotLoaded}, true},
		{&apiError{status: 503, code: sharding.CodeBackoff}, false},
		{&apiError{status: 422, code: sharding.CodeEntityError}, false},
		{&apiError{status: 500, code: sharding.CodeInternal}, false},
		{&apiError{status: 502}, false},
		{fmt.Errorf("cannot reach the API: %w", &net.DNSError{IsTimeout: true}), true},
		{fmt.Errorf("cannot reach the API: %w", errors.New("connection refused")), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%#v) = %v, want %v", c.err, got, c.want)
		}
	}
}
