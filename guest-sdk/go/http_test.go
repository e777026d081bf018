package shardhost

import (
	"errors"
	"strings"
	"testing"
)

// httpProbe posts its message to a URL and replies with the status and the body.
type httpProbe struct{ header Header }

func (p *httpProbe) Receive(ctx *Context, msg []byte) ([]byte, error) {
	req := &HTTPRequest{Method: "POST", URL: "https://api.example.com/hook", Header: p.header, Body: msg}
	resp, err := ctx.HTTPDo(req)
	if err != nil {
		return nil, err
	}
	return []byte(itoa(int64(resp.StatusCode)) + " " + resp.Header.Get("x-answer") + " " + string(resp.Body)), nil
}

func TestHTTPDoThroughTheHarness(t *testing.T) {
	p := &httpProbe{header: Header{"Idempotency-Key": {"k1"}, "Content-Type": {"text/plain"}}}
	h := NewHarness("probe", "p1", func(string) Entity { return p })
	if _, err := h.Send([]byte("hi")); !errors.Is(err, ErrEgressDenied) {
		t.Fatalf("no HTTP answerer: %v, want ErrEgressDenied", err)
	}
	h.HTTP = func(req *HTTPRequest) (*HTTPResponse, error) {
		if req.Method != "POST" || req.URL != "https://api.example.com/hook" || string(req.Body) != "hi" ||
			req.Header.Get("idempotency-key") != "k1" || req.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("request %+v", req)
		}
		return &HTTPResponse{StatusCode: 201, Header: Header{"X-Answer": {"yes"}}, Body: []byte("made")}, nil
	}
	out, err := h.Send([]byte("hi"))
	if err != nil || string(out) != "201 yes made" {
		t.Fatalf("%q %v", out, err)
	}
	if len(h.HTTPRequests) != 1 {
		t.Fatalf("%d requests", len(h.HTTPRequests))
	}
	h.HTTP = func(*HTTPRequest) (*HTTPResponse, error) {
		return nil, &HostError{Code: CodeEgressTooLarge, Text: "egress-too-large: 2 MiB"}
	}
	if _, err := h.Send([]byte("hi")); !errors.Is(err, ErrEgressTooLarge) {
		t.Fatalf("%v, want ErrEgressTooLarge", err)
	}
}

func TestHTTPDoRefusesHeaderInjection(t *testing.T) {
	for _, hdr := range []Header{
		{"X-A": {"v\r\nHost: evil"}}, {"X-A": {"v\nX-B: w"}}, {"X-A\r\nHost": {"v"}}, {"X A": {"v"}}, {"X-A": {"v\x00"}},
	} {
		p := &httpProbe{header: hdr}
		h := NewHarness("probe", "p1", func(string) Entity { return p })
		h.HTTP = func(*HTTPRequest) (*HTTPResponse, error) { return &HTTPResponse{StatusCode: 200}, nil }
		if _, err := h.Send([]byte("hi")); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: %v, want ErrBadRequest", hdr, err)
		}
		if len(h.HTTPRequests) != 0 {
			t.Errorf("%q: sent", hdr)
		}
	}
}

func TestHTTPResponseRoundTrip(t *testing.T) {
	r := &HTTPResponse{StatusCode: 404, Header: Header{"A": {"1", "2"}, "B-C": {""}}, Body: []byte("x\ny")}
	got, err := decodeHTTPResponse(encodeHTTPResponse(r))
	if err != nil || got.StatusCode != 404 || strings.Join(got.Header["A"], ",") != "1,2" || len(got.Header["B-C"]) != 1 ||
		string(got.Body) != "x\ny" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 9, 0, 0, 0}} {
		if _, err := decodeHTTPResponse(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if CanonicalHeaderKey("content-TYPE") != "Content-Type" {
		t.Error(CanonicalHeaderKey("content-TYPE"))
	}
}
