package ddata

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// Attribute keys of the replicator's spans and metrics.
const (
	attrOperation   = attribute.Key("shardhost.ddata.operation")
	attrConsistency = attribute.Key("shardhost.ddata.consistency")
	attrKey         = attribute.Key("shardhost.ddata.key")
	attrType        = attribute.Key("shardhost.ddata.type")
	attrAnswered    = attribute.Key("shardhost.ddata.replicas.answered")
	attrNeeded      = attribute.Key("shardhost.ddata.replicas.needed")
	attrMessage     = attribute.Key("shardhost.ddata.message")
)

type operation uint8

const (
	opGet operation = iota
	opUpdate
	opDelete
)

var opNames = [...]string{"get", "update", "delete"}

// spanNames are the names of the replicator's spans, by operation.
var spanNames = [...]string{"ddata get", "ddata update", "ddata delete"}

// verbs are the words of consistency levels ("from 2", "to 2") by operation.
var verbs = [...]string{"from", "to", "to"}

// levelNames name consistency levels in metric attributes (bounded: no counts).
var levelNames = [...]string{levelLocal: "local", levelN: "n", levelMajority: "majority", levelAll: "all"}

// msgKind is the kind of a replicator message, for the bytes-sent counter.
type msgKind uint8

const (
	msgStatus msgKind = iota
	msgGossip
	msgDelta
	msgWrite
	msgRead
	msgReply
	msgPruning
	numMsgKinds
)

var msgKindNames = [numMsgKinds]string{"status", "gossip", "delta", "write", "read", "reply", "pruning"}

func kindOf(v any) msgKind {
	switch v.(type) {
	case statusMsg:
		return msgStatus
	case gossipMsg:
		return msgGossip
	case deltaMsg:
		return msgDelta
	case writeMsg:
		return msgWrite
	case readMsg:
		return msgRead
	case pruningSeenMsg:
		return msgPruning
	}
	return msgReply
}

// Outcome names the outcome of an operation: "ok" or the kind of its error.
func Outcome(err error) string {
	switch {
	case err == nil:
		return obs.OutcomeOK
	case errors.Is(err, ErrNotFound):
		return "not-found"
	case errors.Is(err, ErrDataDeleted):
		return "data-deleted"
	case errors.Is(err, ErrGetFailure), errors.Is(err, ErrUpdateTimeout):
		return "timeout"
	case errors.Is(err, ErrModifyFailure):
		return "modify-failure"
	case errors.Is(err, ErrTypeMismatch):
		return "type-mismatch"
	case errors.Is(err, ErrBadKey):
		return "bad-key"
	case errors.Is(err, ErrStoreFailure):
		return "store-failure"
	case errors.Is(err, ErrReplicatorClosed):
		return "closed"
	}
	return "_OTHER"
}

type opKey struct {
	op      operation
	level   level
	outcome string
}

// replicatorTelemetry is what the replicator records.
type replicatorTelemetry struct {
	tracer   trace.Tracer
	traced   bool
	ops      metric.Int64Counter
	duration metric.Float64Histogram
	attrs    *obs.AttrCache[opKey]
}

func (r *Replicator) instrument() {
	t := &r.tel
	if obs.Enabled(r.cfg.TracerProvider) {
		t.tracer, t.traced = obs.Tracer(r.cfg.TracerProvider, "ddata"), true
	}
	meter := obs.Meter(r.cfg.MeterProvider, "ddata")
	t.attrs = obs.NewAttrCache(func(k opKey) attribute.Set {
		return attribute.NewSet(attrOperation.String(opNames[k.op]), attrConsistency.String(levelNames[k.level]),
			obs.Outcome.String(k.outcome))
	})
	t.ops = obs.Must(meter.Int64Counter("shardhost.ddata.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Distributed data gets, updates and deletes, by consistency and outcome. [shardhost.ddata.operation, shardhost.ddata.consistency, shardhost.outcome]")))
	t.duration = obs.Must(meter.Float64Histogram("shardhost.ddata.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of distributed data gets, updates and deletes, by consistency and outcome. [shardhost.ddata.operation, shardhost.ddata.consistency, shardhost.outcome]")))
	if r.cfg.MeterProvider == nil {
		return
	}
	keys := obs.Must(meter.Int64ObservableGauge("shardhost.ddata.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys this replica holds, deleted ones included. []")))
	sent := obs.Must(meter.Int64ObservableCounter("shardhost.ddata.sent", metric.WithUnit("By"),
		metric.WithDescription("Bytes of replicator messages sent, by shardhost.ddata.message (delta, gossip, status, write, read, reply, pruning). [shardhost.ddata.message]")))
	var kinds [numMsgKinds]metric.ObserveOption
	for i, name := range msgKindNames {
		kinds[i] = metric.WithAttributeSet(attribute.NewSet(attrMessage.String(name)))
	}
	obs.Must(meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r.mu.Lock()
		n := len(r.data)
		r.mu.Unlock()
		o.ObserveInt64(keys, int64(n))
		for i := range kinds {
			o.ObserveInt64(sent, int64(r.sentBytes[i].Load()), kinds[i])
		}
		return nil
	}, keys, sent))
}

// start begins an operation: a span when ctx is traced. done records its outcome.
func (t *replicatorTelemetry) start(ctx context.Context, op operation, key string, c consistency, typ DataType) (context.Context, func(ReplicatedData, error)) {
	begin := time.Now()
	var span trace.Span
	if t.traced && obs.Traced(ctx) {
		attrs := []attribute.KeyValue{attrKey.String(key), attrConsistency.String(c.String(verbs[op]))}
		if typ != "" {
			attrs = append(attrs, attrType.String(string(typ)))
		}
		if c.level == levelLocal {
			attrs = append(attrs, attrAnswered.Int(1), attrNeeded.Int(1))
		}
		ctx, span = t.tracer.Start(ctx, spanNames[op], trace.WithAttributes(attrs...))
	}
	return ctx, func(d ReplicatedData, err error) {
		outcome := Outcome(err)
		if t.ops != nil {
			a := t.attrs.Get(opKey{op, c.level, outcome})
			t.ops.Add(context.Background(), 1, a)
			t.duration.Record(context.Background(), time.Since(begin).Seconds(), a)
		}
		if span == nil {
			return
		}
		if typ == "" && d != nil {
			span.SetAttributes(attrType.String(string(d.Type())))
		}
		span.SetAttributes(obs.Outcome.String(outcome))
		if err != nil {
			obs.Fail(span, err, outcome)
		}
		span.End()
	}
}

// answered records on ctx's span how many replicas answered a read or acknowledged a
// write (this one included), of how many needed.
func answered(ctx context.Context, ok, needed int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrAnswered.Int(ok), attrNeeded.Int(needed))
	}
}
