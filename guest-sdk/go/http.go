package shardhost

import (
	"encoding/binary"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Outbound HTTP (SPEC.md, "v1: outbound HTTP"): an entity calls a service outside the
// cluster through its host, under its type's egress settings (deploy --egress and the
// others): only the URLs its allowlist names are reached, within a timeout, a response
// size cap and a rate per entity. The host records the response, so that a message
// replayed after a failure gets the same answer without calling out again. A member that
// crashes in the middle of a message may still run the message, and so the request,
// again: send an idempotency key to services that take one (HTTPRequest.Header).
//
// A module that calls HTTPDo imports the host function http_request; a host without it
// refuses the module at deploy.

// Header is a set of HTTP headers, keyed by canonical name ("Content-Type"), as
// net/http's.
type Header map[string][]string

// Get returns the first value of the header name, "" if none.
func (h Header) Get(name string) string {
	if v := h[CanonicalHeaderKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of the header name with value.
func (h Header) Set(name, value string) { h[CanonicalHeaderKey(name)] = []string{value} }

// Add adds value to the header name.
func (h Header) Add(name, value string) {
	k := CanonicalHeaderKey(name)
	h[k] = append(h[k], value)
}

// CanonicalHeaderKey returns name with the first letter and every letter after a hyphen
// in upper case, the others in lower case ("content-type" gives "Content-Type").
func CanonicalHeaderKey(name string) string {
	b := []byte(name)
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

// HTTPRequest is an outbound request.
type HTTPRequest struct {
	// Method is the HTTP method; "" is GET.
	Method string
	// URL is an absolute http or https URL.
	URL string
	// Header holds the request's headers. The host sets Host, Content-Length,
	// Transfer-Encoding, Connection and the trace context (traceparent) itself and
	// refuses the first four here.
	Header Header
	// Body is the request's body (at most the host's message size cap, 1 MiB by default).
	Body []byte
	// Timeout bounds the request; 0 is the type's egress timeout (10 s by default). It
	// is never longer than the type's, nor than the current message's deadline.
	Timeout time.Duration
}

// HTTPResponse is the answer to an HTTPRequest. A status of 4xx or 5xx is an answer, not
// an error.
type HTTPResponse struct {
	StatusCode int
	Header     Header
	Body       []byte
}

// The sentinels of outbound HTTP's codes (HostError matches them with errors.Is).
const (
	// CodeEgressDenied: the URL, or a redirect, is off the type's egress allowlist, or
	// its host is at a non-public address the allowlist does not name.
	CodeEgressDenied Code = 11
	// CodeEgressTooLarge: the response body is over the type's cap.
	CodeEgressTooLarge Code = 12
	// CodeEgressFailed: the request failed (connection, DNS, TLS, too many redirects).
	CodeEgressFailed Code = 13
	// CodeEgressRateLimited: the entity made more requests than its type's rate allows.
	CodeEgressRateLimited Code = 14
)

// httpHost is the part of the host outbound HTTP needs; hosts without it answer
// CodeUnavailable.
type httpHost interface {
	httpRequest(method, url string, headers, body []byte, timeoutMS int32) (Code, []byte)
}

// HTTPDo sends req and returns the response. Errors are *HostError: ErrEgressDenied,
// ErrEgressTooLarge, ErrEgressFailed, ErrEgressRateLimited, ErrTimeout (the text starts
// with "egress-timeout"), ErrBadRequest (a bad URL or method, a CR, LF or NUL in a
// header: nothing is sent), ErrNotAllowed (outside Receive and OnActivate),
// ErrUnavailable (outside a node).
func (c *Context) HTTPDo(req *HTTPRequest) (*HTTPResponse, error) {
	hh, ok := c.h.(httpHost)
	if !ok {
		return nil, &HostError{Code: CodeUnavailable, Text: "this host has no outbound HTTP"}
	}
	headers, err := encodeHeaderLines(req.Header)
	if err != nil {
		return nil, err
	}
	code, res := hh.httpRequest(req.Method, req.URL, headers, req.Body, millis32(req.Timeout))
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	return decodeHTTPResponse(res)
}

// HTTPGet is HTTPDo of a GET of url.
func (c *Context) HTTPGet(url string) (*HTTPResponse, error) {
	return c.HTTPDo(&HTTPRequest{Method: "GET", URL: url})
}

// HTTPPost is HTTPDo of a POST of body to url, with the given Content-Type (none if
// empty).
func (c *Context) HTTPPost(url, contentType string, body []byte) (*HTTPResponse, error) {
	req := &HTTPRequest{Method: "POST", URL: url, Body: body, Header: Header{}}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return c.HTTPDo(req)
}

// encodeHeaderLines renders h as "Name: value\n" lines, names sorted; a name or value
// with a CR, LF or NUL (or a name with a colon or a space) is refused with
// ErrBadRequest.
func encodeHeaderLines(h Header) ([]byte, error) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b []byte
	for _, k := range names {
		if k == "" || strings.ContainsAny(k, "\r\n\x00: \t") {
			return nil, &HostError{Code: CodeBadRequest, Text: "header name " + strconv.Quote(k) + " is not an HTTP token"}
		}
		for _, v := range h[k] {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, &HostError{Code: CodeBadRequest, Text: "header " + k + " has a CR, LF or NUL in its value"}
			}
			b = append(append(append(append(b, k...), ": "...), v...), '\n')
		}
	}
	return b, nil
}

// decodeHeaderLines parses "Name: value\n" lines.
func decodeHeaderLines(b []byte) Header {
	h := Header{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok {
			h.Add(name, strings.TrimLeft(value, " \t"))
		}
	}
	return h
}

// decodeHTTPResponse parses http_request's result: status (u32 LE), the headers'
// length (u32 LE), the header lines, the body.
func decodeHTTPResponse(b []byte) (*HTTPResponse, error) {
	if len(b) < 8 {
		return nil, &HostError{Code: CodeError, Text: "a response of " + itoa(int64(len(b))) + " bytes"}
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if uint64(n) > uint64(len(b)-8) {
		return nil, &HostError{Code: CodeError, Text: "a response whose headers overrun it"}
	}
	return &HTTPResponse{StatusCode: int(binary.LittleEndian.Uint32(b)), Header: decodeHeaderLines(b[8 : 8+n]),
		Body: b[8+n:]}, nil
}

// encodeHTTPResponse is decodeHTTPResponse's inverse (the Harness answers with it).
func encodeHTTPResponse(r *HTTPResponse) []byte {
	hdr, _ := encodeHeaderLines(r.Header)
	out := make([]byte, 8, 8+len(hdr)+len(r.Body))
	binary.LittleEndian.PutUint32(out, uint32(r.StatusCode))
	binary.LittleEndian.PutUint32(out[4:], uint32(len(hdr)))
	return append(append(out, hdr...), r.Body...)
}
