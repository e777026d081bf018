package telemetry

import (
	"context"
	"testing"

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
