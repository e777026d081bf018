// Package telemetry builds the OpenTelemetry tracer provider of a shardhost process from
// the standard OTEL_* environment variables.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerProvider returns the tracer provider the environment asks for, and a function
// that flushes and stops it. With OTEL_TRACES_EXPORTER unset or "none", or
// OTEL_SDK_DISABLED=true, tracing is off (a no-op provider). Otherwise the exporter is
// autoexport's choice: "console" prints spans to stdout, "otlp" sends them as
// OTEL_EXPORTER_OTLP_* say. The service name is OTEL_SERVICE_NAME or "shardhost";
// node is recorded as the resource attribute shardhost.node.
func TracerProvider(ctx context.Context, node string) (trace.TracerProvider, func(context.Context) error, error) {
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" || exporter == "none" || strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%s: %w", exporter, err)
	}
	attrs := []attribute.KeyValue{attribute.String("shardhost.node", node)}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		attrs = append(attrs, semconv.ServiceName("shardhost"))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
