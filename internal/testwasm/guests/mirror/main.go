// Command mirror is a test guest of HTTP routes (abi/SPEC.md, "HTTP routes") written
// against the ABI without the SDK, so that it can answer what the SDK would refuse:
// shardhost_http replies with the request's body, unchanged, as its response (the
// host's tests put a whole encoded response there, malformed on purpose), and
// shardhost_receive replies with the message.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mirror.wasm .
package main

import (
	"encoding/binary"
	"unsafe"
)

//go:wasmimport shardhost reply
func reply(ptr unsafe.Pointer, size uint32)

var inbox []byte

//go:wasmexport shardhost_abi_v1
func abiMarker() {}

//go:wasmexport shardhost_alloc
func alloc(size uint32) unsafe.Pointer {
	if size == 0 {
		size = 1
	}
	if uint32(cap(inbox)) < size {
		inbox = make([]byte, size)
	}
	inbox = inbox[:size]
	return unsafe.Pointer(&inbox[0])
}

//go:wasmexport shardhost_receive
func receive(ptr unsafe.Pointer, size uint32) int32 {
	if size > 0 {
		reply(ptr, size)
	}
	return 0
}

//go:wasmexport shardhost_http
func serveHTTP(ptr unsafe.Pointer, size uint32) int32 {
	b := unsafe.Slice((*byte)(ptr), size)
	// Skip method, path, rest, query and headers: the body follows them.
	for i := 0; i < 5; i++ {
		if len(b) < 4 {
			return 1
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return 1
		}
		b = b[4+n:]
	}
	if len(b) > 0 {
		reply(unsafe.Pointer(&b[0]), uint32(len(b)))
	}
	return 0
}

func main() {}
