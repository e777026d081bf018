package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
)

// ErrStreamEnded: the member closed a stream of server-sent events (Events) that the
// caller had not stopped: it left, or restarted. Follow again, from another member if
// need be.
var ErrStreamEnded = errors.New("client: the member closed the stream")

// maxEventLine is the longest line of a server-sent event stream Events reads: 1 MiB.
const maxEventLine = 1 << 20

// Events follows a stream of server-sent events (text/event-stream): a GET of path,
// such as /v1/entities/{type}/{id}/logs?follow=true or /v1/logs?type=T&follow=true
// (docs/cli.md, "Entity logs"), sent to the first member that takes it. It calls f with
// each event's name ("" for an unnamed one) and its data line, in order, until ctx is
// done (nil is returned), f returns an error (which is returned), or the member ends
// the stream (ErrStreamEnded). A member that cannot be reached is passed over for the
// next; once a member has answered, the stream is never sent elsewhere, since events
// would be missed or repeated: the caller decides. An error reply is an *APIError; no
// member reached, a *RequestError. A stream has no timeout but ctx's: the client's
// HTTP client's Timeout is not applied. Lines over 1 MiB end it with an error.
func (c *Client) Events(ctx context.Context, path string, f func(event, data string) error) error {
	hc := *c.http
	hc.Timeout = 0 // a stream lasts until it is stopped
	var last error
	for _, endpoint := range c.endpoints {
		resp, err := c.openStream(ctx, &hc, endpoint, path)
		if err != nil {
			var re *RequestError
			if errors.As(err, &re) && !re.Sent {
				last = err
				continue // nothing reached this member: the next may serve
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		return readEvents(ctx, resp, f)
	}
	return last
}

// openStream sends the stream's GET to one member and returns its response, which
// succeeded, with its body open.
func (c *Client) openStream(ctx context.Context, hc *http.Client, endpoint, path string) (*http.Response, error) {
	var sent atomic.Bool
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, endpoint+path, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	c.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &RequestError{Endpoint: endpoint, Sent: sent.Load(), Err: err}
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxEventLine))
		var e apiErrorBody
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e = apiErrorBody{}
		}
		return nil, decodeError(endpoint, resp.StatusCode, resp.Header, b, e.Code, e.Error)
	}
	return resp, nil
}

// readEvents reads the events of resp's body (the lines "event: NAME" and "data: ..."
// of the server-sent events format; an event ends at its data line, as the API sends
// one data line per event) and closes it.
func readEvents(ctx context.Context, resp *http.Response, f func(event, data string) error) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := f(event, strings.TrimPrefix(line, "data: ")); err != nil {
				return err
			}
			event = ""
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client: the stream stopped: %w", err)
	}
	return ErrStreamEnded
}
