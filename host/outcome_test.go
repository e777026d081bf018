package host

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// TestAPIStatusOfEachOutcome: a message not delivered is 503 not-delivered with
// Retry-After (sending it again is safe); one of unknown outcome is 504
// outcome-unknown (it may have been handled), whether the failure came from this
// member or another; the other 503 and 504 answers keep their codes, without
// Retry-After.
func TestAPIStatusOfEachOutcome(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"not sent to the entity's member", &sharding.RemoteError{Code: sharding.CodeNotDelivered, Message: "x"}, 503, "not-delivered", "1"},
		{"no shard home", fmt.Errorf("%w: counter/3", sharding.ErrShardUnavailable), 503, "not-delivered", "1"},
		{"no reply from the entity's member", &sharding.RemoteError{Code: sharding.CodeOutcomeUnknown, Message: "x"}, 504, "outcome-unknown", ""},
		{"ask timed out", fmt.Errorf("%w: counter/a after 10s", sharding.ErrAskTimeout), 504, "outcome-unknown", ""},
		{"the guest's deadline", &GuestError{Cause: ErrGuestDeadline}, 504, "guest-deadline", ""},
		{"the member stopping", withCode(ErrInstanceClosed), 503, "unavailable", ""},
		{"buffer full", sharding.ErrBufferFull, 503, "overloaded", ""},
		{"state not saved", fmt.Errorf("%w: no majority", sharding.ErrStateNotSaved), 503, "state-not-saved", ""},
		{"state not loaded", fmt.Errorf("%w: no majority", sharding.ErrStateNotLoaded), 503, "state-not-loaded", ""},
	} {
		w := httptest.NewRecorder()
		writeError(w, httptest.NewRequest("POST", "/v1/ask?type=counter&id=a", nil), c.err, 0)
		var body apiError
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if w.Code != c.status || body.Code != c.code || w.Header().Get("Retry-After") != c.retryAfter {
			t.Errorf("%s: %d %q Retry-After %q, want %d %q Retry-After %q", c.name, w.Code, body.Code,
				w.Header().Get("Retry-After"), c.status, c.code, c.retryAfter)
		}
	}
}

// TestAPIAskOfAKilledMemberIsNotDeliveredAndOneUnansweredIsUnknown: through the API
// of one member, an ask whose entity is on a member killed a moment before fails at
// once with 503 not-delivered (its request could not be sent), until the shard has a
// new home; an ask whose entity takes longer than the ask's timeout fails with 504
// outcome-unknown (the entity got it: it may be handled yet).
func TestAPIAskOfAKilledMemberIsNotDeliveredAndOneUnansweredIsUnknown(t *testing.T) {
	nodes := startNodes(t, 3, func(c *Config) { c.Runtime.MessageDeadline = 5 * time.Second })
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy faulty: %d %s", r.status, r.body)
	}
	askWithin := func(id, msg, timeout string) apiResult {
		t.Helper()
		return c.do("POST", "/v1/ask?type=faulty&id="+url.QueryEscape(id)+"&timeout="+timeout, []byte(msg))
	}

	// The entity loops until its deadline (5 s); the asker gives up after 200 ms.
	slow := entityOn(t, nodes[0], nodes[1], "faulty", "echo warm")
	if r := askWithin(slow, "loop", "200ms"); r.status != http.StatusGatewayTimeout || r.err.Code != sharding.CodeOutcomeUnknown {
		t.Fatalf("an ask the entity outlasts: %d %+v, want 504 outcome-unknown", r.status, r.err)
	}

	gone := entityOn(t, nodes[0], nodes[2], "faulty", "echo warm")
	if err := nodes[2].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	// The first may have gone into the connection before its member noticed it closed
	// (then no answer comes: of unknown outcome). Once it noticed, the requests are
	// refused at the dial, or during its backoff, until the killed member is downed
	// (tolerantLifecycle: 10 s after it is unreachable).
	if r := askWithin(gone, "echo first", "300ms"); r.status != 503 && r.status != 504 {
		t.Fatalf("the first ask after the kill: %d %+v, want 503 or 504", r.status, r.err)
	}
	for range 3 {
		start := time.Now()
		r := askWithin(gone, "echo x", "1m")
		if r.status != http.StatusServiceUnavailable || r.err.Code != sharding.CodeNotDelivered || r.node != nodes[2].Self().Address {
			t.Fatalf("an ask of the killed member's entity: %d %+v (node %q), want 503 not-delivered from %s", r.status, r.err, r.node,
				nodes[2].Self().Address)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("not delivered after %v: it waited for a timeout", d)
		}
	}
	req, _ := http.NewRequest("POST", c.base+"/v1/ask?type=faulty&id="+url.QueryEscape(gone), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("not delivered: %d, Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
