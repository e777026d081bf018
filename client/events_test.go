package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardhost/shardhost/client"
)

// Events passes over a member it cannot reach, reads the events of the next in order
// (named and unnamed), and says when the member ends the stream; f's error stops it.
func TestEventsReadsAStreamAndItsEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "text/event-stream" || r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "want an event stream with the token", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n: a comment\nevent: error\ndata: {\"error\":\"x\"}\n\ndata: {\"n\":2}\n\n")
	}))
	defer srv.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there: the connection is refused, nothing was sent

	c := newClient(t, []string{deadAddr, srv.URL}, client.WithToken("t0k"))
	var got []string
	err = c.Events(testCtx(t), "/v1/logs?type=counter&follow=true", func(event, data string) error {
		got = append(got, event+"|"+data)
		return nil
	})
	want := []string{`|{"n":1}`, `error|{"error":"x"}`, `|{"n":2}`}
	if !errors.Is(err, client.ErrStreamEnded) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %q, %v; want %q and ErrStreamEnded", got, err, want)
	}
	stop := errors.New("enough")
	got = got[:0]
	err = c.Events(testCtx(t), "/v1/logs", func(event, data string) error {
		got = append(got, data)
		return stop
	})
	if err != stop || len(got) != 1 {
		t.Fatalf("f's error: %v after %d events, want it after 1", err, len(got))
	}
	// No member reachable: a *RequestError, which is ErrUnavailable.
	var re *client.RequestError
	if err := newClient(t, []string{deadAddr}).Events(testCtx(t), "/v1/logs", func(string, string) error { return nil }); !errors.As(err, &re) ||
		!errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("no member: %v, want a *RequestError", err)
	}
}

// A real member's log follow refused with a bad level: an *APIError with its code.
func TestEventsRefusedByAMember(t *testing.T) {
	var ae *client.APIError
	err := newClient(t, []string{api}).Events(testCtx(t), "/v1/logs?type=counter&level=loud&follow=true",
		func(string, string) error { return nil })
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a bad level: %v, want a bad-request *APIError", err)
	}
}

// A stream the caller's context ends, while the member still serves it, ends with nil.
func TestEventsEndsWithItsContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the member would go on: only the caller stops it
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	n := 0
	err := newClient(t, []string{srv.URL}).Events(ctx, "/v1/logs", func(event, data string) error {
		n++
		cancel() // after the first event
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("a follow ended by its context after %d events: %v, want nil after 1", n, err)
	}
}
