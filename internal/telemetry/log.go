package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler returns the slog handler of a shardhost process: text (logfmt) or JSON
// lines to w, at level and above, each record made in a traced context (the *Context
// logging calls) carrying the trace_id and span_id of its span, so that logs and
// traces join. A zero time.Time attribute (a thing that has not happened yet, such as a
// member's first contact) is written as "never", not as 0001-01-01. format is "text" or
// "json".
func LogHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: zeroTimeNever}
	switch format {
	case "text", "":
		return traceHandler{slog.NewTextHandler(w, opts)}, nil
	case "json":
		return traceHandler{slog.NewJSONHandler(w, opts)}, nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// WithTrace wraps h so that records made in a traced context carry trace_id and span_id.
func WithTrace(h slog.Handler) slog.Handler { return traceHandler{h} }

// traceHandler adds the trace and span IDs of a record's context.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// zeroTimeNever writes a zero time as "never" (slog.HandlerOptions.ReplaceAttr).
func zeroTimeNever(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindTime && a.Value.Time().IsZero() {
		return slog.String(a.Key, "never")
	}
	return a
}
