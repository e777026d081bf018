package shardhost

import (
	"errors"
	"strings"
	"testing"
)

// shelf keeps items; it serves GET (the items, one a line) and POST /items (adds the
// body) over HTTP, and "count" as a message.
type shelf struct{ items []string }

func (s *shelf) Receive(ctx *Context, msg []byte) ([]byte, error) {
	return []byte(itoa(int64(len(s.items)))), nil
}

func (s *shelf) HandleHTTP(ctx *Context, req *IncomingRequest) (*HTTPResponse, error) {
	if ctx.Kind() != KindHTTP {
		return nil, errors.New("kind " + ctx.Kind().String())
	}
	switch {
	case req.Method == "GET" && (req.Rest == "" || req.Rest == "/"):
		return &HTTPResponse{Header: Header{"Content-Type": {"text/plain"}, "X-Path": {req.Path + "?" + req.Query}},
			Body: []byte(strings.Join(s.items, "\n"))}, nil
	case req.Method == "POST" && req.Rest == "/items":
		s.items = append(s.items, string(req.Body))
		return &HTTPResponse{StatusCode: 201}, nil
	case req.Method == "DELETE":
		return nil, nil
	case req.Method == "PUT":
		return &HTTPResponse{Header: Header{"X-Echo": {req.Header.Get("X-In")}}}, nil
	}
	return &HTTPResponse{StatusCode: 404, Body: []byte("no " + req.Method + " " + req.Rest)}, nil
}

func TestHandleHTTPThroughTheHarness(t *testing.T) {
	h := NewHarness("shelf", "s1", func(string) Entity { return &shelf{} })
	resp, err := h.HandleHTTP(&IncomingRequest{Method: "POST", Path: "/shop/s1/items", Rest: "/items", Body: []byte("pear")})
	if err != nil || resp.StatusCode != 201 || len(resp.Body) != 0 {
		t.Fatalf("POST: %+v %v", resp, err)
	}
	resp, err = h.HandleHTTP(&IncomingRequest{Method: "GET", Path: "/shop/s1/", Rest: "/", Query: "a=1"})
	if err != nil || resp.StatusCode != 200 || string(resp.Body) != "pear" || resp.Header.Get("content-type") != "text/plain" ||
		resp.Header.Get("X-Path") != "/shop/s1/?a=1" {
		t.Fatalf("GET: %+v %v", resp, err)
	}
	if resp, err = h.HandleHTTP(&IncomingRequest{Method: "DELETE"}); err != nil || resp.StatusCode != 204 {
		t.Fatalf("a nil response: %+v %v, want 204", resp, err)
	}
	if resp, err = h.HandleHTTP(&IncomingRequest{Method: "PATCH", Rest: "/x"}); err != nil || resp.StatusCode != 404 || string(resp.Body) != "no PATCH /x" {
		t.Fatalf("PATCH: %+v %v", resp, err)
	}
	if out, err := h.Send([]byte("count")); err != nil || string(out) != "1" {
		t.Fatalf("the message after the requests: %q %v", out, err)
	}
}

func TestHandleHTTPRefusesHeaderInjection(t *testing.T) {
	h := NewHarness("shelf", "s1", func(string) Entity { return &shelf{} })
	_, err := h.HandleHTTP(&IncomingRequest{Method: "PUT", Header: Header{"X-In": {"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	// The request's header has no CR or LF (the host refuses them); the entity copies
	// one into its response from elsewhere: the SDK refuses to encode it.
	s := &shelf{}
	h = NewHarness("shelf", "s1", func(string) Entity { return s })
	_, err = h.HandleHTTP(&IncomingRequest{Method: "PUT", Header: Header{"X-In": {"a\r\nSet-Cookie: x=1"}}})
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a CR LF in a request header: %v, want ErrBadRequest", err)
	}
	var ee *EntityError
	hh := NewHarness("inject", "i1", func(string) Entity { return injector{} })
	if _, err = hh.HandleHTTP(&IncomingRequest{Method: "GET"}); !errors.As(err, &ee) || !strings.Contains(ee.Text, "CR, LF or NUL") {
		t.Fatalf("a CR LF in a response header: %v, want the SDK's entity error", err)
	}
}

type injector struct{}

func (injector) Receive(*Context, []byte) ([]byte, error) { return nil, nil }
func (injector) HandleHTTP(*Context, *IncomingRequest) (*HTTPResponse, error) {
	return &HTTPResponse{Header: Header{"Location": {"/x\r\nSet-Cookie: admin=1"}}}, nil
}

func TestHandleHTTPWithoutHandler(t *testing.T) {
	h := NewHarness("plain", "p1", func(string) Entity { return &echoHandlerless{} })
	if _, err := h.HandleHTTP(&IncomingRequest{Method: "GET"}); !errors.Is(err, ErrNoHTTPHandler) {
		t.Fatalf("%v, want ErrNoHTTPHandler", err)
	}
}

type echoHandlerless struct{}

func (echoHandlerless) Receive(_ *Context, msg []byte) ([]byte, error) { return msg, nil }

func TestIncomingRequestEncoding(t *testing.T) {
	in := &IncomingRequest{Method: "POST", Path: "/a/b%20c/d", Rest: "/d", Query: "q=1&r", Header: Header{"A": {"1", "2"}, "B-C": {"x"}}, Body: []byte("body\x00")}
	b, err := encodeIncomingRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeIncomingRequest(b)
	if err != nil || out.Method != in.Method || out.Path != in.Path || out.Rest != in.Rest || out.Query != in.Query ||
		string(out.Body) != string(in.Body) || strings.Join(out.Header["A"], ",") != "1,2" || out.Header.Get("b-c") != "x" {
		t.Fatalf("%+v %v", out, err)
	}
	for k := 0; k < len(b)-len(in.Body); k++ {
		if _, err := decodeIncomingRequest(b[:k]); err == nil {
			t.Fatalf("a request cut at %d bytes decoded", k)
		}
	}
}
