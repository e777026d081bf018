package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err        error
		idempotent bool
		want       bool
	}{
		{&RequestError{Sent: false}, false, true},
		{&RequestError{Sent: true}, false, false},
		{&RequestError{Sent: true}, true, true},
		{&APIError{Status: 503, Code: CodeNotDelivered}, false, true},
		{&APIError{Status: 503, Code: CodeOverloaded}, false, true},
		{&APIError{Status: 503, Code: CodeUnavailable}, false, false},
		{&APIError{Status: 503, Code: CodeUnavailable}, true, true},
		{&APIError{Status: 503, Code: CodeStateNotSaved}, true, true},
		{&APIError{Status: 503}, true, true}, // a proxy's 503, without a code
		{&APIError{Status: 503, Code: CodeEntityPaused}, true, false},
		{&APIError{Status: 503, Code: CodeEntityBackoff}, true, false},
		{&APIError{Status: 504, Code: CodeOutcomeUnknown}, false, false},
		{&APIError{Status: 504, Code: CodeOutcomeUnknown}, true, true},
		{&APIError{Status: 504, Code: CodeGuestDeadline}, true, false},
		{&APIError{Status: 422, Code: CodeEntityError}, true, false},
		{&APIError{Status: 404, Code: CodeUnknownType}, true, false},
		{&APIError{Status: 500, Code: CodeGuestTrap}, true, false},
		{context.DeadlineExceeded, true, false},
	} {
		if got := retryable(c.err, c.idempotent); got != c.want {
			t.Errorf("retryable(%#v, idempotent %v) = %v, want %v", c.err, c.idempotent, got, c.want)
		}
	}
}

// The wait before a retry: the doubling of a long backoff does not overflow at any
// retry number; a Retry-After longer than the time left gives up at once; no backoff
// and no Retry-After wait nothing.
func TestWaitBeforeARetry(t *testing.T) {
	c := &Client{backoff: time.Hour, maxBackoff: 2 * time.Hour}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, try := range []int{1, 2, 40, 100} {
		if err := c.wait(done, try, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("retry %d with the context canceled: %v", try, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := &APIError{Status: 503, Header: http.Header{"Retry-After": {"3600"}}}
	if err := c.wait(ctx, 1, last); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Retry-After an hour away, a minute left: %v, want context.DeadlineExceeded at once", err)
	}
	c = &Client{}
	if err := c.wait(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
}
