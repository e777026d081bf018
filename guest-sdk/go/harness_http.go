package shardhost

import (
	"errors"
	"time"
)

var _ httpHost = (*Harness)(nil)

// httpRequest plays the host's http_request: it decodes the request as the host does,
// hands it to h.HTTP and encodes the answer as the host's result.
func (h *Harness) httpRequest(method, url string, headers, body []byte, timeoutMS int32) (Code, []byte) {
	h.call()
	if h.d.ctx.phase != phaseReceive && h.d.ctx.phase != phaseActivate {
		return CodeNotAllowed, []byte("http_request outside a message or on_activate")
	}
	if method == "" {
		method = "GET"
	}
	req := HTTPRequest{Method: method, URL: url, Header: decodeHeaderLines(headers), Body: append([]byte(nil), body...),
		Timeout: time.Duration(timeoutMS) * time.Millisecond}
	if len(headers) == 0 {
		req.Header = Header{}
	}
	if h.HTTP == nil {
		return CodeEgressDenied, []byte("egress-denied: " + url + " is not on the entity type's egress allowlist (Harness.HTTP is nil)")
	}
	h.HTTPRequests = append(h.HTTPRequests, req)
	resp, err := h.HTTP(&req)
	if err != nil {
		var he *HostError
		if errors.As(err, &he) {
			return he.Code, []byte(he.Text)
		}
		return CodeEgressFailed, []byte(err.Error())
	}
	if resp == nil {
		resp = &HTTPResponse{StatusCode: 200}
	}
	return CodeOK, encodeHTTPResponse(resp)
}
