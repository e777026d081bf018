//go:build wasip1 && !shardhost_nohost

package shardhost

import "unsafe"

// The exports and imports of ABI version 1 (abi/SPEC.md), a thin glue around dispatcher.
// This file is compiled for wasip1 only; the tag shardhost_nohost leaves it out so the
// SDK's own tests run under a plain WASI runner.

// v0

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

// v1

//go:wasmimport shardhost result
func hostResult(ptr unsafe.Pointer, capacity uint32) uint32

//go:wasmimport shardhost message_kind
func hostMessageKind() int32

//go:wasmimport shardhost sender
func hostSender(ptr unsafe.Pointer, capacity uint32) uint32

//go:wasmimport shardhost tell
func hostTell(typePtr unsafe.Pointer, typeLen uint32, idPtr unsafe.Pointer, idLen uint32, msgPtr unsafe.Pointer, msgLen uint32) int32

//go:wasmimport shardhost ask
func hostAsk(typePtr unsafe.Pointer, typeLen uint32, idPtr unsafe.Pointer, idLen uint32, msgPtr unsafe.Pointer, msgLen uint32, timeoutMS int32) int32

//go:wasmimport shardhost tell_key
func hostTellKey(typePtr unsafe.Pointer, typeLen uint32, idPtr unsafe.Pointer, idLen uint32, msgPtr unsafe.Pointer, msgLen uint32, keyPtr unsafe.Pointer, keyLen uint32) int32

//go:wasmimport shardhost ask_key
func hostAskKey(typePtr unsafe.Pointer, typeLen uint32, idPtr unsafe.Pointer, idLen uint32, msgPtr unsafe.Pointer, msgLen uint32, keyPtr unsafe.Pointer, keyLen uint32, timeoutMS int32) int32

//go:wasmimport shardhost forward
func hostForward(typePtr unsafe.Pointer, typeLen uint32, idPtr unsafe.Pointer, idLen uint32) int32

//go:wasmimport shardhost ddata_get
func hostDDataGet(keyPtr unsafe.Pointer, keyLen uint32, consPtr unsafe.Pointer, consLen uint32, timeoutMS int32) int32

//go:wasmimport shardhost ddata_update
func hostDDataUpdate(keyPtr unsafe.Pointer, keyLen uint32, typePtr unsafe.Pointer, typeLen uint32, opPtr unsafe.Pointer, opLen uint32, consPtr unsafe.Pointer, consLen uint32, timeoutMS int32) int32

//go:wasmimport shardhost ddata_delete
func hostDDataDelete(keyPtr unsafe.Pointer, keyLen uint32, consPtr unsafe.Pointer, consLen uint32, timeoutMS int32) int32

//go:wasmimport shardhost ddata_subscribe
func hostDDataSubscribe(keyPtr unsafe.Pointer, keyLen uint32) int32

//go:wasmimport shardhost ddata_unsubscribe
func hostDDataUnsubscribe(keyPtr unsafe.Pointer, keyLen uint32) int32

//go:wasmimport shardhost timer_start
func hostTimerStart(namePtr unsafe.Pointer, nameLen uint32, msgPtr unsafe.Pointer, msgLen uint32, delayMS int64, intervalMS int64) int32

//go:wasmimport shardhost timer_cancel
func hostTimerCancel(namePtr unsafe.Pointer, nameLen uint32) int32

//go:wasmimport shardhost reminder_set
func hostReminderSet(namePtr unsafe.Pointer, nameLen uint32, dueMS int64, intervalMS int64, payloadPtr unsafe.Pointer, payloadLen uint32) int32

//go:wasmimport shardhost reminder_cancel
func hostReminderCancel(namePtr unsafe.Pointer, nameLen uint32) int32

//go:wasmimport shardhost reminder_list
func hostReminderList() int32

//go:wasmimport shardhost reminder_due
func hostReminderDue() int64

//go:wasmimport shardhost now
func hostNow(clock int32) int64

//go:wasmimport shardhost random
func hostRandom(ptr unsafe.Pointer, size uint32)

//go:wasmimport shardhost trace_event
func hostTraceEvent(ptr unsafe.Pointer, size uint32)

type wasmHost struct {
	id, typ string // cached: they never change for an instance
	scratch []byte // the buffer results are read into first
}

var _ host = (*wasmHost)(nil)

var (
	instance = dispatcher{h: &wasmHost{}}
	inbox    []byte // the buffer shardhost_alloc hands out; nil after a restore
)

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

//go:wasmexport shardhost_migrate
func migrate(ptr unsafe.Pointer, size uint32) int32 {
	if !inInbox(ptr, size) || size < 8 {
		reply([]byte("shardhost: migration input not in the buffer shardhost_alloc returned"))
		return statusError
	}
	in := inbox[:size]
	inbox = nil // as restore: the entity may keep the state
	from := uint64(in[0]) | uint64(in[1])<<8 | uint64(in[2])<<16 | uint64(in[3])<<24 |
		uint64(in[4])<<32 | uint64(in[5])<<40 | uint64(in[6])<<48 | uint64(in[7])<<56
	if err := instance.migrate(from, in[8:]); err != nil {
		reply([]byte(err.Error()))
		return statusError
	}
	return statusOK
}

//go:wasmexport shardhost_on_activate
func onActivate() int32 {
	if err := instance.activate(); err != nil {
		reply([]byte(err.Error()))
		return statusError
	}
	return statusOK
}

//go:wasmexport shardhost_on_passivate
func onPassivate() int32 {
	if !instance.passivate() {
		return statusNoHook // nothing ran: the state is as it was
	}
	return statusOK
}

// inInbox reports whether the size bytes at ptr are the buffer shardhost_alloc returned.
func inInbox(ptr unsafe.Pointer, size uint32) bool {
	return size <= uint32(cap(inbox)) && (size == 0 || ptr == unsafe.Pointer(&inbox[0]))
}

func reply(b []byte) {
	hostReply(bytesPtr(b), uint32(len(b)))
}

// bytesPtr and strPtr return the address of the first byte, nil for an empty value.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func strPtr(s string) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.StringData(s))
}

func (w *wasmHost) entityID() string {
	if w.id == "" {
		w.id = readString(func(p unsafe.Pointer, n uint32) uint32 { return hostEntityID(p, n) })
	}
	return w.id
}

func (w *wasmHost) entityType() string {
	if w.typ == "" {
		w.typ = readString(func(p unsafe.Pointer, n uint32) uint32 { return hostEntityType(p, n) })
	}
	return w.typ
}

func (w *wasmHost) log(level LogLevel, msg string) {
	hostLog(int32(level), strPtr(msg), uint32(len(msg)))
}

func (w *wasmHost) passivate() { hostPassivate() }

func (w *wasmHost) messageKind() MessageKind { return MessageKind(hostMessageKind()) }

func (w *wasmHost) sender() string {
	return readString(func(p unsafe.Pointer, n uint32) uint32 { return hostSender(p, n) })
}

// result returns the code with the instance's result: always for an error; for CodeOK
// only if want (a success without bytes leaves an empty result, not worth a host call).
func (w *wasmHost) result(code int32, want bool) (Code, []byte) {
	if code == 0 && !want {
		return CodeOK, nil
	}
	if w.scratch == nil {
		w.scratch = make([]byte, 256)
	}
	n := hostResult(unsafe.Pointer(&w.scratch[0]), uint32(len(w.scratch)))
	if n > uint32(len(w.scratch)) {
		out := make([]byte, n)
		n = hostResult(unsafe.Pointer(&out[0]), n)
		return Code(code), out[:n]
	}
	return Code(code), append([]byte{}, w.scratch[:n]...)
}

func (w *wasmHost) tell(typ, id string, msg []byte) (Code, []byte) {
	code := hostTell(strPtr(typ), uint32(len(typ)), strPtr(id), uint32(len(id)), bytesPtr(msg), uint32(len(msg)))
	return w.result(code, false)
}

func (w *wasmHost) ask(typ, id string, msg []byte, timeoutMS int32) (Code, []byte) {
	code := hostAsk(strPtr(typ), uint32(len(typ)), strPtr(id), uint32(len(id)), bytesPtr(msg), uint32(len(msg)), timeoutMS)
	return w.result(code, true)
}

func (w *wasmHost) tellKey(typ, id string, msg []byte, key string) (Code, []byte) {
	code := hostTellKey(strPtr(typ), uint32(len(typ)), strPtr(id), uint32(len(id)), bytesPtr(msg), uint32(len(msg)),
		strPtr(key), uint32(len(key)))
	return w.result(code, false)
}

func (w *wasmHost) askKey(typ, id string, msg []byte, key string, timeoutMS int32) (Code, []byte) {
	code := hostAskKey(strPtr(typ), uint32(len(typ)), strPtr(id), uint32(len(id)), bytesPtr(msg), uint32(len(msg)),
		strPtr(key), uint32(len(key)), timeoutMS)
	return w.result(code, true)
}

func (w *wasmHost) forward(typ, id string) (Code, []byte) {
	code := hostForward(strPtr(typ), uint32(len(typ)), strPtr(id), uint32(len(id)))
	return w.result(code, false)
}

func (w *wasmHost) ddataGet(key, cons string, timeoutMS int32) (Code, []byte) {
	code := hostDDataGet(strPtr(key), uint32(len(key)), strPtr(cons), uint32(len(cons)), timeoutMS)
	return w.result(code, true)
}

func (w *wasmHost) ddataUpdate(key, typ, op, cons string, timeoutMS int32) (Code, []byte) {
	code := hostDDataUpdate(strPtr(key), uint32(len(key)), strPtr(typ), uint32(len(typ)),
		strPtr(op), uint32(len(op)), strPtr(cons), uint32(len(cons)), timeoutMS)
	return w.result(code, true)
}

func (w *wasmHost) ddataDelete(key, cons string, timeoutMS int32) (Code, []byte) {
	code := hostDDataDelete(strPtr(key), uint32(len(key)), strPtr(cons), uint32(len(cons)), timeoutMS)
	return w.result(code, false)
}

func (w *wasmHost) ddataSubscribe(key string) (Code, []byte) {
	return w.result(hostDDataSubscribe(strPtr(key), uint32(len(key))), false)
}

func (w *wasmHost) ddataUnsubscribe(key string) (Code, []byte) {
	return w.result(hostDDataUnsubscribe(strPtr(key), uint32(len(key))), false)
}

func (w *wasmHost) timerStart(name string, msg []byte, delayMS, intervalMS int64) (Code, []byte) {
	code := hostTimerStart(strPtr(name), uint32(len(name)), bytesPtr(msg), uint32(len(msg)), delayMS, intervalMS)
	return w.result(code, false)
}

func (w *wasmHost) timerCancel(name string) bool {
	return hostTimerCancel(strPtr(name), uint32(len(name))) == 1
}

func (w *wasmHost) reminderSet(name string, dueMS, intervalMS int64, payload []byte) (Code, []byte) {
	code := hostReminderSet(strPtr(name), uint32(len(name)), dueMS, intervalMS, bytesPtr(payload), uint32(len(payload)))
	return w.result(code, false)
}

func (w *wasmHost) reminderCancel(name string) (Code, []byte) {
	return w.result(hostReminderCancel(strPtr(name), uint32(len(name))), false)
}

func (w *wasmHost) reminderList() (Code, []byte) { return w.result(hostReminderList(), true) }

func (w *wasmHost) reminderDue() int64 { return hostReminderDue() }

func (w *wasmHost) now(clock int32) int64 { return hostNow(clock) }

func (w *wasmHost) random(b []byte) { hostRandom(bytesPtr(b), uint32(len(b))) }

func (w *wasmHost) traceEvent(name string) { hostTraceEvent(strPtr(name), uint32(len(name))) }

// readString calls a host function of the (ptr, cap) -> len shape until the value fits.
// Callers wrap the import in a closure: TinyGo refuses an imported or exported function
// used as a value.
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
