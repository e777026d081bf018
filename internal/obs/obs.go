// Package obs holds what shardhost's packages share to record telemetry: the attribute
// keys of their spans and metrics, span helpers that follow the OpenTelemetry semantic
// conventions, and a cache of attribute sets so that hot paths allocate nothing per
// measurement. It depends on the OpenTelemetry API only (no SDK).
package obs

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Attribute keys of shardhost's spans and metrics. Entity IDs are span attributes only,
// never metric attributes (their number is unbounded).
const (
	EntityType = attribute.Key("shardhost.entity.type")
	EntityID   = attribute.Key("shardhost.entity.id")
	ShardID    = attribute.Key("shardhost.shard.id")
	// Node is the member (gossip address) that did the work.
	Node = attribute.Key("shardhost.node")
	// MessageKind is ask, tell, timer or changed.
	MessageKind = attribute.Key("shardhost.message.kind")
	// MessageSource is local (routed first by this member) or remote.
	MessageSource = attribute.Key("shardhost.message.source")
	// Outcome is "ok" or the failure's code (sharding's error codes, ddata's, ...).
	Outcome = attribute.Key("shardhost.outcome")
	// ErrorType is the semantic conventions' error.type: the failure's code.
	ErrorType = attribute.Key("error.type")

	RPCSystem          = attribute.Key("rpc.system")
	RPCService         = attribute.Key("rpc.service")
	RPCMethod          = attribute.Key("rpc.method")
	ServerAddress      = attribute.Key("server.address")
	ServerPort         = attribute.Key("server.port")
	NetworkPeerAddr    = attribute.Key("network.peer.address")
	NetworkPeerPort    = attribute.Key("network.peer.port")
	MessagingSystem    = attribute.Key("messaging.system")
	MessagingOp        = attribute.Key("messaging.operation.type")
	MessagingDest      = attribute.Key("messaging.destination.name")
	NetworkIODirection = attribute.Key("network.io.direction")
)

// RPCSystemName is the rpc.system of member-to-member requests.
const RPCSystemName = "shardhost"

// OutcomeOK is the Outcome of a success.
const OutcomeOK = "ok"

// Tracer returns tp's tracer for a package, or a no-op tracer when tp is nil.
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return tp.Tracer("github.com/shardhost/shardhost/" + pkg)
}

// Meter returns mp's meter for a package, or a no-op meter when mp is nil.
func Meter(mp metric.MeterProvider, pkg string) metric.Meter {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	return mp.Meter("github.com/shardhost/shardhost/" + pkg)
}

// Propagator returns p, or W3C Trace Context and Baggage when p is nil.
func Propagator(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p == nil {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return p
}

// Fail marks span failed: the error as an exception event, the status Error with the
// error's text, and error.type = code.
func Fail(span trace.Span, err error, code string) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(ErrorType.String(code))
}

// Traced reports whether ctx carries a span context: work done in it should make spans.
func Traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// Must returns v, or panics with err: for instruments, whose creation fails only on a
// bad name, a programming error.
func Must[T any](v T, err error) T {
	if err != nil {
		panic("obs: " + err.Error())
	}
	return v
}

// AttrCache caches one measurement option (an attribute set) per key, so that recording
// a measurement allocates nothing once a key has been seen. The keys must be of bounded
// number (entity types, codes, kinds): never entity IDs. Safe for concurrent use.
type AttrCache[K comparable] struct {
	mu   sync.RWMutex
	m    map[K]metric.MeasurementOption
	make func(K) attribute.Set
}

// NewAttrCache returns a cache whose entries make builds.
func NewAttrCache[K comparable](make func(K) attribute.Set) *AttrCache[K] {
	return &AttrCache[K]{m: map[K]metric.MeasurementOption{}, make: make}
}

// Get returns the measurement option of k.
func (c *AttrCache[K]) Get(k K) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(c.make(k))
	c.mu.Lock()
	c.m[k] = o
	c.mu.Unlock()
	return o
}

// Enabled reports whether tp makes real spans: not nil and not the no-op provider.
// Packages skip span work entirely when it does not.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, isNoop := tp.(tracenoop.TracerProvider)
	return !isNoop
}
