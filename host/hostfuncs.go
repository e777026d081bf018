package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
)

// The host functions of ABI v0 (abi/SPEC.md). A host function that panics traps the guest
// call; wazero turns the panic into the call's error, and the instance is discarded.

var errOutOfRange = errors.New("host: guest pointer range outside its memory")

// maxLogLine caps a guest log line, in bytes.
const maxLogLine = 4 << 10

var hostFunctionNames = func() map[string]struct{} {
	names := map[string]struct{}{}
	for _, n := range abi.V0Imports {
		names[n] = struct{}{}
	}
	for _, f := range v1Functions {
		names[f.name] = struct{}{}
	}
	return names
}()

// instantiateHostModule instantiates the shardhost host module in r, one of the
// runtime's two wazero runtimes.
func (rt *wasmRuntime) instantiateHostModule(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(abi.ImportModule)
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(readOnlyGuard(name, replayable(name, f, len(results)), results), params, results).Export(name)
	}
	fn(abi.ImportReply, hostReply, []api.ValueType{i32, i32}, nil)
	fn(abi.ImportEntityID, func(ctx context.Context, mod api.Module, stack []uint64) {
		writeString(ctx, mod, stack, func(i *wasmInstance) string { return i.entityID })
	}, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(abi.ImportEntityType, func(ctx context.Context, mod api.Module, stack []uint64) {
		writeString(ctx, mod, stack, func(i *wasmInstance) string { return i.entityType })
	}, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(abi.ImportLog, hostLog, []api.ValueType{i32, i32, i32}, nil)
	fn(abi.ImportPassivate, hostPassivate, nil, nil)
	for _, f := range v1Functions {
		fn(f.name, f.f, f.params, f.results)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("host: instantiating the %s host module: %w", abi.ImportModule, err)
	}
	return nil
}

func mustInstance(ctx context.Context) *wasmInstance {
	inst := instanceFrom(ctx)
	if inst == nil {
		panic("host: host function called outside a shardhost instance")
	}
	return inst
}

func read(mod api.Module, ptr, n uint32) []byte {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		panic(fmt.Errorf("%w: [%#x, +%d)", errOutOfRange, ptr, n))
	}
	return b
}

// hostReply is reply(ptr, len): copies the reply of the current message.
func hostReply(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if !inst.inCall {
		panic("host: reply called outside shardhost_receive, shardhost_snapshot, shardhost_restore and the hooks")
	}
	if max := inst.replyCap; int(n) > max {
		// Not a trap: the call fails with ErrReplyTooLarge when it returns, and the
		// instance keeps its state (a reply is the guest's output, not its fault).
		inst.replyOver = int(n)
		inst.reply = inst.reply[:0]
		return
	}
	inst.replyOver = 0
	inst.reply = append(inst.reply[:0], read(mod, ptr, n)...)
}

// writeString implements the (ptr, cap) -> len host functions.
func writeString(ctx context.Context, mod api.Module, stack []uint64, value func(*wasmInstance) string) {
	inst := mustInstance(ctx)
	inst.charge()
	ptr, capacity := uint32(stack[0]), uint32(stack[1])
	s := value(inst)
	if uint32(len(s)) <= capacity && len(s) > 0 {
		if !mod.Memory().WriteString(ptr, s) {
			panic(fmt.Errorf("%w: [%#x, +%d)", errOutOfRange, ptr, len(s)))
		}
	}
	stack[0] = uint64(uint32(len(s)))
}

// hostLog is log(level, ptr, len).
func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	level, ptr, n := int32(uint32(stack[0])), uint32(stack[1]), uint32(stack[2])
	if n > maxLogLine {
		n = maxLogLine
	}
	msg := string(read(mod, ptr, n))
	inst.m.rt.log.Log(ctx, slog.Level(level), msg, "entity", inst.name)
	inst.entityLog("log", slog.Level(level), msg)
}

// hostPassivate is passivate(): the entity asks to be passivated after this message.
func hostPassivate(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	if inst.phase != phaseReceive {
		panic("host: passivate called outside shardhost_receive")
	}
	inst.passivate = true
}
