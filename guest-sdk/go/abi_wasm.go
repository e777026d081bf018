//go:build wasip1 && !shardhost_nohost

package shardhost

import "unsafe"

// The exports and imports of ABI version 0 (abi/SPEC.md), a thin glue around dispatcher.
// This file is compiled for wasip1 only; the tag shardhost_nohost leaves it out so the
// SDK's own tests run under a plain WASI runner.

//go:wasmimport shardhost reply
func hostReply(ptr unsafe.Pointer, size uint32)

//go:wasmimport shardhost entity_id
func hostEntityID(ptr unsafe.Pointer, capacity uint32) uint32

//go:wasmimport shardhost entity_type
func hostEntityType(ptr unsafe.Pointer, capacity uint32) uint32

//go:wasmimport shardhost log
func hostLog(level int32, ptr unsafe.Pointer, size uint32)

//go:wasmimport shardhost passivate
func hostPassivate()

type wasmHost struct {
	id, typ string // cached: they never change for an instance
}

var _ host = (*wasmHost)(nil)

var (
	instance = dispatcher{h: &wasmHost{}}
	inbox    []byte // the buffer shardhost_alloc hands out; nil after a restore
)

//go:wasmexport shardhost_abi_v0
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
	if !inInbox(ptr, size) {
		reply([]byte("shardhost: message not in the buffer shardhost_alloc returned"))
		return statusError
	}
	out, isErr := instance.receive(inbox[:size])
	reply(out)
	if isErr {
		return statusError
	}
	return statusOK
}

//go:wasmexport shardhost_snapshot
func snapshot() int32 {
	state, ok, err := instance.snapshot()
	switch {
	case err != nil:
		reply([]byte(err.Error()))
		return statusError
	case !ok:
		return statusNoSnapshot
	}
	reply(state)
	return statusOK
}

//go:wasmexport shardhost_restore
func restore(ptr unsafe.Pointer, size uint32) int32 {
	if !inInbox(ptr, size) {
		reply([]byte("shardhost: state not in the buffer shardhost_alloc returned"))
		return statusError
	}
	state := inbox[:size]
	// Drop the buffer: the entity may keep state (Snapshotter), so the next message gets
	// a buffer of its own, and a state the entity does not keep is collected.
	inbox = nil
	if err := instance.restore(state); err != nil {
		reply([]byte(err.Error()))
		return statusError
	}
	return statusOK
}

// inInbox reports whether the size bytes at ptr are the buffer shardhost_alloc returned.
func inInbox(ptr unsafe.Pointer, size uint32) bool {
	return size <= uint32(cap(inbox)) && (size == 0 || ptr == unsafe.Pointer(&inbox[0]))
}

func reply(b []byte) {
	if len(b) == 0 {
		hostReply(nil, 0)
		return
	}
	hostReply(unsafe.Pointer(&b[0]), uint32(len(b)))
}

func (w *wasmHost) entityID() string {
	if w.id == "" {
		w.id = readString(hostEntityID)
	}
	return w.id
}

func (w *wasmHost) entityType() string {
	if w.typ == "" {
		w.typ = readString(hostEntityType)
	}
	return w.typ
}

func (w *wasmHost) log(level LogLevel, msg string) {
	if msg == "" {
		hostLog(int32(level), nil, 0)
		return
	}
	b := []byte(msg)
	hostLog(int32(level), unsafe.Pointer(&b[0]), uint32(len(b)))
}

func (w *wasmHost) passivate() { hostPassivate() }

// readString calls a host function of the (ptr, cap) -> len shape until the value fits.
func readString(f func(unsafe.Pointer, uint32) uint32) string {
	buf := make([]byte, 64)
	for {
		n := f(unsafe.Pointer(&buf[0]), uint32(len(buf)))
		if n <= uint32(len(buf)) {
			return string(buf[:n])
		}
		buf = make([]byte, n)
	}
}
