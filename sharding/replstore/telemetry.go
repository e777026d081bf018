package replstore

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the replicas a state store operation asked and heard from, on the
// operation's span (sharding's instrumentation of Config.States makes it).
const (
	attrReplicasAsked  = attribute.Key("shardhost.state.replicas.asked")
	attrReplicasAnswer = attribute.Key("shardhost.state.replicas.answered")
)

// recordReplicas records, on the span of the state store operation ctx belongs to, how
// many replicas it asked and how many answered (or acknowledged). It does nothing
// outside a recording span.
func recordReplicas(ctx context.Context, asked, answered int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrReplicasAsked.Int(asked), attrReplicasAnswer.Int(answered))
	}
}

// withTraceOf returns base (its values and cancellation) carrying the span of ctx: work
// the store does on its own lifetime for a traced caller stays in the caller's trace.
func withTraceOf(base, ctx context.Context) context.Context {
	return trace.ContextWithSpan(base, trace.SpanFromContext(ctx))
}
