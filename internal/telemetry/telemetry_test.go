package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestOffByDefault(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tp, shutdown, err := TracerProvider(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Fatalf("provider %T, want no-op", tp)
	}
	shutdown(context.Background())
}

func TestConsoleExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	tp, shutdown, err := TracerProvider(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		t.Fatal("console gave a no-op provider")
	}
	_, span := tp.Tracer("test").Start(context.Background(), "hello")
	if !span.SpanContext().IsValid() {
		t.Fatal("span has no trace ID")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownExporterIsAnError(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	if _, _, err := TracerProvider(context.Background(), "n"); err == nil {
		t.Fatal("no error")
	}
}

func TestLogRecordsCarryTheirTrace(t *testing.T) {
	var buf bytes.Buffer
	h, err := LogHandler(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(h).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "traced")
	log.Info("untraced")
	log.DebugContext(ctx, "below the level")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["trace_id"] != span.SpanContext().TraceID().String() || rec["span_id"] != span.SpanContext().SpanID().String() || rec["component"] != "test" {
		t.Fatalf("traced record: %v", rec)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Fatalf("untraced record: %s", lines[1])
	}
	if _, err := LogHandler(&buf, "xml", slog.LevelInfo); err == nil {
		t.Fatal("log format xml accepted")
	}
	buf.Reset()
	h, _ = LogHandler(&buf, "text", slog.LevelDebug)
	slog.New(h).DebugContext(ctx, "text")
	if !strings.Contains(buf.String(), "trace_id="+span.SpanContext().TraceID().String()) {
		t.Fatalf("text record: %q", buf.String())
	}
}

func TestPropagatorsFollowTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_PROPAGATORS", "b3,baggage")
	p, err := Propagator()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Join(p.Fields(), ",")
	if !strings.Contains(fields, "b3") || !strings.Contains(fields, "baggage") || strings.Contains(fields, "traceparent") {
		t.Fatalf("fields %s", fields)
	}
	t.Setenv("OTEL_PROPAGATORS", "")
	p, _ = Propagator()
	if f := strings.Join(p.Fields(), ","); !strings.Contains(f, "traceparent") || !strings.Contains(f, "baggage") {
		t.Fatalf("default fields %s", f)
	}
	t.Setenv("OTEL_PROPAGATORS", "carrier-pigeon")
	if _, err := Propagator(); err == nil {
		t.Fatal("an unknown propagator was accepted")
	}
}

func TestMetricsPipeline(t *testing.T) {
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	m, err := NewMetrics(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Provider.Meter("t").Int64Counter("shardhost.test.things", metric.WithUnit("{thing}"))
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	m.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if !strings.Contains(body, "shardhost_test_things_total 3") && !strings.Contains(body, "shardhost_test_things_total{") {
		t.Fatalf("no counter in:\n%s", body)
	}
	if !strings.Contains(body, "go_goroutine_count") || !strings.Contains(body, `shardhost_node="n1"`) {
		t.Fatalf("no runtime metrics or resource:\n%s", body)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_METRICS_EXPORTER", "console")
	m, err = NewMetrics(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	m.Shutdown(context.Background())
	t.Setenv("OTEL_METRICS_EXPORTER", "carrier-pigeon")
	if _, err := NewMetrics(context.Background(), "n1"); err == nil {
		t.Fatal("an unknown metrics exporter was accepted")
	}
}
