//go:build wasip1 && !shardhost_nohost

package shardhost

import "unsafe"

//go:wasmimport shardhost http_request
func hostHTTPRequest(methodPtr unsafe.Pointer, methodLen uint32, urlPtr unsafe.Pointer, urlLen uint32, headersPtr unsafe.Pointer, headersLen uint32, bodyPtr unsafe.Pointer, bodyLen uint32, timeoutMS int32) int32

var _ httpHost = (*wasmHost)(nil)

func (w *wasmHost) httpRequest(method, url string, headers, body []byte, timeoutMS int32) (Code, []byte) {
	code := hostHTTPRequest(strPtr(method), uint32(len(method)), strPtr(url), uint32(len(url)),
		bytesPtr(headers), uint32(len(headers)), bytesPtr(body), uint32(len(body)), timeoutMS)
	return w.result(code, true)
}
