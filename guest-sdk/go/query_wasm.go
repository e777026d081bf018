//go:build wasip1 && !shardhost_nohost

package shardhost

import "unsafe"

// shardhost_query (abi/SPEC.md, "Queries"): the host calls it on a throwaway instance.

//go:wasmexport shardhost_query
func query(ptr unsafe.Pointer, size uint32) int32 {
	if !inInbox(ptr, size) {
		reply([]byte("shardhost: query not in the buffer shardhost_alloc returned"))
		return statusError
	}
	out, status := instance.query(inbox[:size])
	reply(out)
	return status
}
