package shardhost

import "encoding/binary"

// HTTP routes to entities (SPEC.md, "HTTP routes"): a type deployed with
// --http-route /shop/{id}/... has the cluster's API serve the requests under that path,
// each one to the entity whose ID is the segment in place of {id}. The request is the
// entity's message, of KindHTTP: it runs as Receive does (the same Context calls),
// one at a time with the entity's other messages, and is journaled and replayed like
// them.

// IncomingRequest is an HTTP request routed to the entity.
type IncomingRequest struct {
	// Method is the request's method, such as "GET".
	Method string
	// Path is the request's whole path, percent-encoded as sent ("/shop/alice/items").
	Path string
	// Rest is the part of Path after the entity's ID: "" or "/" and more ("/items").
	Rest string
	// Query is the query string without its '?', percent-encoded as sent.
	Query string
	// Header holds the request's headers by canonical name, less the hop-by-hop ones
	// and, on a route that is not public, Authorization (the API's credentials).
	Header Header
	// Body is the request's body, at most the type's http-max-body bytes.
	Body []byte
}

// HTTPHandler is implemented by an entity that serves the HTTP requests its type's
// routes send it. The returned response goes back to the caller: a StatusCode of 0 is
// 200, a nil response is 204 No Content. Its headers may not hold a CR, LF or NUL, nor
// be one the API sets itself (Content-Length, Transfer-Encoding, Connection and the
// other hop-by-hop headers, traceparent, Shardhost-Node): the SDK refuses a CR, LF or
// NUL (the request fails as an error of the entity's), the host the rest (502). An
// error is the entity's error (HTTP 422 with its text, as an ask's).
//
// A module whose entity does not implement HTTPHandler still exports shardhost_http: it
// answers that the entity has none, and the caller gets 501 Not Implemented.
type HTTPHandler interface {
	HandleHTTP(ctx *Context, req *IncomingRequest) (*HTTPResponse, error)
}

// KindHTTP is an HTTP request routed to the entity (HTTPHandler); Sender is empty.
const KindHTTP MessageKind = 11

// statusNoHTTP, from shardhost_http: the entity does not implement HTTPHandler.
const statusNoHTTP int32 = 2

// decodeIncomingRequest parses the HTTP request encoding: method, path, rest, query
// and headers, each as a u32 little-endian length and its bytes, then the body.
func decodeIncomingRequest(b []byte) (*IncomingRequest, error) {
	var fields [5][]byte
	for i := range fields {
		if len(b) < 4 {
			return nil, &HostError{Code: CodeError, Text: "shardhost: a truncated HTTP request"}
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, &HostError{Code: CodeError, Text: "shardhost: an HTTP request whose fields overrun it"}
		}
		fields[i], b = b[4:4+n], b[4+n:]
	}
	return &IncomingRequest{Method: string(fields[0]), Path: string(fields[1]), Rest: string(fields[2]),
		Query: string(fields[3]), Header: decodeHeaderLines(fields[4]), Body: b}, nil
}

// encodeIncomingRequest is decodeIncomingRequest's inverse (the Harness sends it).
func encodeIncomingRequest(r *IncomingRequest) ([]byte, error) {
	hdr, err := encodeHeaderLines(r.Header)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, f := range [][]byte{[]byte(r.Method), []byte(r.Path), []byte(r.Rest), []byte(r.Query), hdr} {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(f)))
		out = append(out, f...)
	}
	return append(out, r.Body...), nil
}

// http hands an encoded request to the entity's HTTPHandler (creating the entity first
// if no restore did) and returns the reply and the export's status.
func (d *dispatcher) http(payload []byte) (reply []byte, status int32) {
	d.err = nil
	if d.entity == nil {
		if err := d.create(); err != nil {
			d.err = err
			return []byte(err.Error()), statusError
		}
	}
	hh, ok := d.entity.(HTTPHandler)
	if !ok {
		return nil, statusNoHTTP
	}
	req, err := decodeIncomingRequest(payload)
	if err != nil {
		d.err = err
		return []byte(err.Error()), statusError
	}
	d.ctx.begin(phaseReceive)
	defer d.end()
	resp, err := hh.HandleHTTP(&d.ctx, req)
	if err == nil && resp == nil {
		resp = &HTTPResponse{StatusCode: 204}
	}
	if err == nil {
		var hdr []byte
		if hdr, err = encodeHeaderLines(resp.Header); err == nil {
			code := resp.StatusCode
			if code == 0 {
				code = 200
			}
			out := make([]byte, 8, 8+len(hdr)+len(resp.Body))
			binary.LittleEndian.PutUint32(out, uint32(code))
			binary.LittleEndian.PutUint32(out[4:], uint32(len(hdr)))
			return append(append(out, hdr...), resp.Body...), statusOK
		}
	}
	d.err = err
	return []byte(err.Error()), statusError
}

// ErrNoHTTPHandler is the Harness's error for an HTTP request to an entity that does
// not implement HTTPHandler (the host answers it with 501 Not Implemented).
var ErrNoHTTPHandler = errorString("shardhost: the entity does not implement HTTPHandler (HandleHTTP(ctx *Context, req *IncomingRequest) (*HTTPResponse, error))")

// HandleHTTP delivers req to the entity as the host delivers a request of one of its type's
// routes: a message of KindHTTP handled by HandleHTTP. It returns the response as the
// host would send it (StatusCode 0 made 200, a nil response 204). Errors:
// ErrNoHTTPHandler; an *EntityError with the entity's error, or with the SDK's when a
// response header holds a CR, LF or NUL; ErrBadRequest for such a header in req.
func (h *Harness) HandleHTTP(req *IncomingRequest) (*HTTPResponse, error) {
	defer h.useFactory()()
	payload, err := encodeIncomingRequest(req)
	if err != nil {
		return nil, err
	}
	h.sent = true
	h.passivated = false
	if err := h.activate(); err != nil {
		return nil, err
	}
	h.kind, h.from, h.forwardTo = KindHTTP, "", nil
	h.calls = 0
	out, status := h.d.http(payload)
	h.kind, h.from, h.forwardTo = KindMessage, "", nil
	switch status {
	case statusNoHTTP:
		return nil, ErrNoHTTPHandler
	case statusError:
		return nil, &EntityError{Text: string(out), Err: h.d.err}
	}
	return decodeHTTPResponse(out)
}
