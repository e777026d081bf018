package cluster

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// traceCapture is a slog handler that keeps, for each record, the span context of the
// context it was logged with.
type traceCapture struct {
	mu   sync.Mutex
	seen map[string]trace.SpanContext
}

func (c *traceCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *traceCapture) Handle(ctx context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[r.Message] = trace.SpanContextFromContext(ctx)
	return nil
}
func (c *traceCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *traceCapture) WithGroup(string) slog.Handler      { return c }

func (c *traceCapture) get(msg string) (trace.SpanContext, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.seen[msg]
	return sc, ok
}

// TestMessengerLogsInTheRequestsTrace: what the messenger logs about a request it
// serves (here a handler that panicked) is logged with the request's context, so that a
// log handler sees the sender's trace (the trace_id of the logs).
func TestMessengerLogsInTheRequestsTrace(t *testing.T) {
	net := NewInmemNetwork()
	capture := &traceCapture{seen: map[string]trace.SpanContext{}}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	var ms []*Messenger
	for i, log := range []*slog.Logger{slog.New(slog.DiscardHandler), slog.New(capture)} {
		m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
			return net.NewTransport([]string{"a", "b"}[i], h)
		}, log, WithTracing(tp, propagation.TraceContext{}))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	ms[1].Handle("panic", func(*Request) { panic("handler bug") })
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), sc), 10*time.Second)
	defer cancel()
	if _, err := ms[0].Request(ctx, ms[1].LocalAddr(), "panic", nil); err == nil {
		t.Fatal("a panicking handler answered without an error")
	}
	got, ok := capture.get("topic handler panicked")
	if !ok || got.TraceID() != sc.TraceID() {
		t.Fatalf("the panic was logged with trace %v (logged: %v), want %v", got.TraceID(), ok, sc.TraceID())
	}
}
