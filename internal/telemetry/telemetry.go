// Package telemetry builds the OpenTelemetry pipelines of a shardhost process from the
// standard OTEL_* environment variables: the tracer provider, the meter provider with
// its Prometheus handler (always on, served at GET /metrics) and optional OTLP push, the
// propagators, and the slog handler that stamps records with their trace.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/runtime"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// sdkDisabled reports OTEL_SDK_DISABLED=true.
func sdkDisabled() bool { return strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") }

// Resource describes the process: service.name (OTEL_SERVICE_NAME, else "shardhost"),
// shardhost.node = node, and whatever OTEL_RESOURCE_ATTRIBUTES adds.
func Resource(ctx context.Context, node string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("shardhost.node", node)}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		attrs = append(attrs, semconv.ServiceName("shardhost"))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	return res, nil
}

// TracerProvider returns the tracer provider the environment asks for, and a function
// that flushes and stops it. With OTEL_TRACES_EXPORTER unset or "none", or
// OTEL_SDK_DISABLED=true, tracing is off (a no-op provider). Otherwise the exporter is
// autoexport's choice: "console" prints spans to stdout, "otlp" sends them as
// OTEL_EXPORTER_OTLP_* say, through a batching span processor. The sampler is
// OTEL_TRACES_SAMPLER's (default parentbased_always_on). The resource is Resource's.
func TracerProvider(ctx context.Context, node string) (trace.TracerProvider, func(context.Context) error, error) {
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if !tracesEnabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%s: %w", exporter, err)
	}
	res, err := Resource(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// LoggerProvider returns the OpenTelemetry logger provider the environment asks for,
// which the node gives every entity log line (host.RuntimeConfig.LoggerProvider), and a
// function that flushes and stops it. With OTEL_LOGS_EXPORTER unset or "none", or
// OTEL_SDK_DISABLED=true, it returns nil: no export. Otherwise the exporter is
// autoexport's choice ("otlp": OTEL_EXPORTER_OTLP_* say where, over
// OTEL_EXPORTER_OTLP_LOGS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, default
// http/protobuf; "console": stdout), behind a batching processor. The resource is
// Resource's.
func LoggerProvider(ctx context.Context, node string) (otellog.LoggerProvider, func(context.Context) error, error) {
	exporter := strings.TrimSpace(os.Getenv("OTEL_LOGS_EXPORTER"))
	if exporter == "" || exporter == "none" || sdkDisabled() {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewLogExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTEL_LOGS_EXPORTER=%s: %w", exporter, err)
	}
	res, err := Resource(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewBatchProcessor(exp)), sdklog.WithResource(res))
	return lp, lp.Shutdown, nil
}

// tracesEnabled reports whether the environment turns tracing on (TracerProvider).
func tracesEnabled() bool {
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	return exporter != "" && exporter != "none" && !sdkDisabled()
}

// Metrics is a process's metric pipeline.
type Metrics struct {
	// Provider makes the instruments; give it to the node (host.Config.MeterProvider).
	Provider metric.MeterProvider
	// Handler serves every instrument in the Prometheus text format (GET /metrics).
	Handler http.Handler
	// Shutdown flushes the push exporter, if any, and stops the pipeline.
	Shutdown func(context.Context) error
}

// NewMetrics builds the metric pipeline: an OpenTelemetry meter provider whose
// instruments are always readable in the Prometheus text format through Handler (the
// OpenTelemetry Prometheus exporter on a registry of its own), plus, when
// OTEL_METRICS_EXPORTER names one ("otlp", "console"), autoexport's periodic push
// reader (OTEL_METRIC_EXPORT_INTERVAL, default 60 s; OTEL_EXPORTER_OTLP_*). Unset,
// "none" and "prometheus" add nothing: Prometheus is served at /metrics already. The Go
// runtime's metrics (go.*, the contrib runtime instrumentation) are registered too.
// Exemplars (trace_based by default, or OTEL_METRICS_EXEMPLAR_FILTER) are off while
// tracing is.
// OTEL_SDK_DISABLED=true gives a no-op provider and an empty Handler.
func NewMetrics(ctx context.Context, node string) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	if sdkDisabled() {
		return &Metrics{Provider: metricnoop.NewMeterProvider(), Handler: handler, Shutdown: func(context.Context) error { return nil }}, nil
	}
	res, err := Resource(ctx, node)
	if err != nil {
		return nil, err
	}
	prom, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: Prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if !tracesEnabled() && os.Getenv("OTEL_METRICS_EXEMPLAR_FILTER") == "" {
		// Exemplars name sampled spans: with tracing off there are none, and the
		// filter would only cost each measurement its check.
		opts = append(opts, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	}
	switch name := strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER")); name {
	case "", "none", "prometheus":
	default:
		reader, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTEL_METRICS_EXPORTER=%s: %w", name, err)
		}
		opts = append(opts, sdkmetric.WithReader(reader))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	if err := runtime.Start(runtime.WithMeterProvider(mp)); err != nil {
		mp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: Go runtime metrics: %w", err)
	}
	return &Metrics{Provider: mp, Handler: handler, Shutdown: mp.Shutdown}, nil
}

// Propagator returns the propagators OTEL_PROPAGATORS names (autoprop: tracecontext,
// baggage, b3, b3multi, jaeger, xray, ottrace, none), by default W3C Trace Context and
// W3C Baggage.
func Propagator() (propagation.TextMapPropagator, error) {
	p := autoprop.NewTextMapPropagator()
	if v := os.Getenv("OTEL_PROPAGATORS"); v != "" {
		// NewTextMapPropagator falls back to the default on a bad value; say so instead.
		var names []string
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if _, err := autoprop.TextMapPropagator(names...); err != nil {
			return nil, fmt.Errorf("telemetry: OTEL_PROPAGATORS=%s: %w", v, err)
		}
	}
	if p == nil {
		return nil, errors.New("telemetry: no propagator")
	}
	return p, nil
}
