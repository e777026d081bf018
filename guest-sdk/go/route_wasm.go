//go:build wasip1 && !shardhost_nohost

package shardhost

import "unsafe"

// shardhost_http (SPEC.md, "HTTP routes"): an HTTP request routed to the entity.

//go:wasmexport shardhost_http
func serveHTTP(ptr unsafe.Pointer, size uint32) int32 {
	if !inInbox(ptr, size) {
		reply([]byte("shardhost: HTTP request not in the buffer shardhost_alloc returned"))
		return statusError
	}
	out, status := instance.http(inbox[:size])
	reply(out)
	return status
}
