package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
)

// GuestError is a message that failed inside the guest: a trap (including a Go panic
// or proc_exit), or the per-message deadline. The instance is gone afterwards. It
// matches ErrGuestTrap or ErrGuestDeadline with errors.Is.
type GuestError struct {
	// Entity is "type/id".
	Entity string
	// Cause is ErrGuestTrap or ErrGuestDeadline.
	Cause error
	// Detail is the runtime's one-line account (e.g. "wasm error: unreachable").
	Detail string
	// Stderr is the start (at most 4 KiB) of what the guest wrote to stderr during the
	// failed call: a Go panic's message and stack land here.
	Stderr string
}

func (e *GuestError) Error() string {
	s := fmt.Sprintf("%v: %s", e.Cause, e.Entity)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if line := firstNonEmptyLine(e.Stderr); line != "" {
		s += " (stderr: " + line + ")"
	}
	return s
}

func (e *GuestError) Unwrap() error { return e.Cause }

// EntityError is an error the entity itself returned for a message (status Error). The
// entity goes on; only that message failed.
type EntityError struct {
	// Message is the entity's error text.
	Message string
}

func (e *EntityError) Error() string { return e.Message }

// instanceKey is the context key under which an instance's calls carry the instance,
// for the host functions.
type instanceKey struct{}

func instanceFrom(ctx context.Context) *Instance {
	inst, _ := ctx.Value(instanceKey{}).(*Instance)
	return inst
}

// Instance is one entity's wasm instance. It is not safe for concurrent use: the caller
// delivers one message at a time, which is what the ABI promises the guest.
type Instance struct {
	m           *Module
	entityType  string
	entityID    string
	name        string // "type/id"
	mod         api.Module
	mem         api.Memory
	alloc       api.Function
	receive     api.Function
	ctx         context.Context // lives as long as the instance; carries it for host functions
	cancel      context.CancelFunc
	timer       *time.Timer
	deadlineHit atomic.Bool
	stderr      head
	stack       [2]uint64

	// State of the call in progress, touched by host functions on the calling goroutine.
	inCall bool
	reply  []byte
	closed bool
}

// Instantiate creates an instance of the module for the entity typ/id and runs the
// module's _initialize, within the message deadline. Errors wrap ErrGuestTrap or
// ErrGuestDeadline when the guest failed, ErrRuntimeClosed when the runtime is gone.
func (m *Module) Instantiate(ctx context.Context, entityType, entityID string) (*Instance, error) {
	rt := m.rt
	_, span := rt.tracer.Start(ctx, "activate", trace.WithAttributes(
		attribute.String("shardhost.entity_type", entityType),
		attribute.String("shardhost.entity_id", entityID),
		attribute.String("shardhost.module_digest", m.Digest)))
	defer span.End()
	inst := &Instance{m: m, entityType: entityType, entityID: entityID, name: entityType + "/" + entityID}
	base, cancel := context.WithCancel(context.Background())
	inst.ctx = context.WithValue(base, instanceKey{}, inst)
	inst.cancel = cancel
	inst.timer = time.AfterFunc(rt.cfg.ActivationDeadline, func() {
		inst.deadlineHit.Store(true)
		cancel()
	})
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(abi.ExportInitialize).
		WithStdout(&guestOutput{inst: inst, stream: "stdout"}).
		WithStderr(&guestOutput{inst: inst, stream: "stderr"})
	mod, err := rt.r.InstantiateModule(inst.ctx, m.compiled, cfg)
	fired := !inst.timer.Stop()
	if err != nil {
		cancel()
		err = inst.guestError(err, fired)
		span.RecordError(err)
		span.SetStatus(codes.Error, "instantiation failed")
		return nil, err
	}
	inst.mod = mod
	inst.mem = mod.Memory()
	inst.alloc = mod.ExportedFunction(abi.ExportAlloc)
	inst.receive = mod.ExportedFunction(abi.ExportReceive)
	if fired || inst.mem == nil || inst.alloc == nil || inst.receive == nil {
		inst.Close(context.Background())
		if fired {
			return nil, &GuestError{Entity: inst.name, Cause: ErrGuestDeadline, Detail: fmt.Sprintf("instantiation took over %v", rt.cfg.ActivationDeadline)}
		}
		return nil, fmt.Errorf("%w: exports missing after instantiation", ErrInvalidModule)
	}
	return inst, nil
}

// Receive delivers one message to the guest and returns its reply. An entity's own
// refusal is an *EntityError and the instance goes on; a trap or the deadline is a
// *GuestError and the instance is closed (Closed reports true). A message over the size
// cap fails with ErrMessageTooLarge before reaching the guest.
func (i *Instance) Receive(ctx context.Context, msg []byte) ([]byte, error) {
	if i.closed {
		return nil, ErrInstanceClosed
	}
	if len(msg) > i.m.rt.cfg.MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrMessageTooLarge, len(msg), i.m.rt.cfg.MaxMessageSize)
	}
	_, span := i.m.rt.tracer.Start(ctx, "guest call", trace.WithAttributes(
		attribute.String("shardhost.entity", i.name),
		attribute.Int("shardhost.message_bytes", len(msg))))
	defer span.End()
	reply, err := i.call(msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, firstLine(err.Error()))
	}
	return reply, err
}

func (i *Instance) call(msg []byte) ([]byte, error) {
	i.stderr.reset()
	i.timer.Reset(i.m.rt.cfg.MessageDeadline)
	i.stack[0] = uint64(len(msg))
	err := i.alloc.CallWithStack(i.ctx, i.stack[:])
	if err == nil {
		ptr := uint32(i.stack[0])
		switch {
		case ptr == 0 && len(msg) > 0:
			err = errors.New("shardhost_alloc returned 0 (out of memory)")
		case !i.mem.Write(ptr, msg):
			err = fmt.Errorf("shardhost_alloc returned %#x, outside the guest's memory", ptr)
		default:
			i.inCall = true
			i.reply = i.reply[:0]
			i.stack[0], i.stack[1] = uint64(ptr), uint64(len(msg))
			err = i.receive.CallWithStack(i.ctx, i.stack[:])
			i.inCall = false
		}
	}
	fired := !i.timer.Stop()
	if err != nil {
		err = i.guestError(err, fired)
		i.Close(context.Background())
		return nil, err
	}
	reply := append([]byte(nil), i.reply...)
	if fired {
		// The deadline passed just as the call returned: the context is cancelled, so
		// the instance cannot be called again. The reply stands.
		i.Close(context.Background())
	}
	switch status := abi.Status(int32(uint32(i.stack[0]))); status {
	case abi.StatusOK:
		return reply, nil
	case abi.StatusError:
		return nil, &EntityError{Message: string(reply)}
	default:
		return nil, &EntityError{Message: fmt.Sprintf("guest returned status %d", status)}
	}
}

// guestError turns a runtime error into a *GuestError; fired says whether the deadline
// timer went off during the call.
func (i *Instance) guestError(err error, fired bool) error {
	if errors.Is(err, context.Canceled) && !fired && !i.deadlineHit.Load() {
		return fmt.Errorf("%w: %v", ErrRuntimeClosed, err)
	}
	ge := &GuestError{Entity: i.name, Cause: ErrGuestTrap, Stderr: i.stderr.String()}
	var exit *sys.ExitError
	switch {
	case fired || i.deadlineHit.Load():
		ge.Cause = ErrGuestDeadline
		ge.Detail = fmt.Sprintf("stopped after %v", i.m.rt.cfg.MessageDeadline)
	case errors.As(err, &exit):
		ge.Detail = fmt.Sprintf("exited with code %d", exit.ExitCode())
	default:
		ge.Detail = strings.TrimSuffix(firstLine(err.Error()), " (recovered by wazero)")
	}
	return ge
}

// Closed reports whether the instance is closed (after Close, a trap or a deadline).
func (i *Instance) Closed() bool { return i.closed }

// MemorySize returns the size of the instance's linear memory in bytes.
func (i *Instance) MemorySize() uint32 {
	if i.closed {
		return 0
	}
	return i.mem.Size()
}

// Close releases the instance. It is idempotent.
func (i *Instance) Close(ctx context.Context) error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.timer.Stop()
	err := i.mod.Close(ctx)
	i.cancel()
	return err
}

// head keeps the first 4 KiB written to it since the last reset: where a Go panic or
// a runtime fatal error puts its message.
type head struct {
	buf []byte
}

const headSize = 4 << 10

func (h *head) Write(p []byte) {
	if room := headSize - len(h.buf); room > 0 {
		if len(p) > room {
			p = p[:room]
		}
		h.buf = append(h.buf, p...)
	}
}

func (h *head) reset()         { h.buf = h.buf[:0] }
func (h *head) String() string { return string(h.buf) }

// guestOutput receives a guest's stdout or stderr. Complete lines go to the host's log
// at debug level (a line is cut at 4 KiB); stderr is also kept for the error of a
// failing call.
type guestOutput struct {
	inst    *Instance
	stream  string
	partial []byte
}

func (g *guestOutput) Write(p []byte) (int, error) {
	if g.stream == "stderr" {
		g.inst.stderr.Write(p)
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxLogLine - len(g.partial); room > 0 {
				g.partial = append(g.partial, p[:min(room, len(p))]...)
			}
			break
		}
		line := p[:i]
		if len(g.partial) > 0 {
			line = append(g.partial, line[:min(max(maxLogLine-len(g.partial), 0), len(line))]...)
		}
		g.inst.m.rt.log.Debug("guest output", "entity", g.inst.name, "stream", g.stream, "text", string(line))
		g.partial = g.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func firstNonEmptyLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}
