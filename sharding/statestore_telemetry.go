package sharding

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// Attribute keys of the state store's spans and metrics.
const (
	attrStateOperation = attribute.Key("shardhost.state.operation")
	attrStateBytes     = attribute.Key("shardhost.state.bytes")
	attrStateRemember  = attribute.Key("shardhost.state.remember")
	attrStateEntities  = attribute.Key("shardhost.state.entities")
	attrJournalRecords = attribute.Key("shardhost.journal.records")
)

type stateOp uint8

const (
	stateOpSave stateOp = iota
	stateOpLoad
	stateOpRemember
	stateOpRemembered
	stateOpSaveBatch
	stateOpFence
	stateOpAppend
	stateOpRead
	stateOpTruncate
	numStateOps
)

var stateOpNames = [numStateOps]string{"save", "load", "remember", "remembered", "save_batch", "fence",
	"journal_append", "journal_read", "journal_truncate"}
var stateSpanNames = [numStateOps]string{"state save", "state load", "state remember", "state remembered", "state save batch", "state fence",
	"journal append", "journal read", "journal truncate"}

// instrumentedStateStore decorates any StateStore with spans (in a traced context) and
// metrics, so that every implementation gets them.
type instrumentedStateStore struct {
	store    StateStore
	tracer   trace.Tracer
	traced   bool
	self     string
	ops      metric.Int64Counter
	duration metric.Float64Histogram
	io       metric.Int64Counter
	fenced   metric.Int64Counter
	attrs    *obs.AttrCache[stateOpKey]
	ioAttrs  [numStateOps]metric.MeasurementOption
}

type stateOpKey struct {
	op      stateOp
	outcome string
}

var _ StateStore = (*instrumentedStateStore)(nil)

// instrumentStateStore returns store recording, for every Save, Load, Remember,
// Remembered and (when store has them) SaveBatch, FenceShard and the journal's
// AppendJournal, ReadJournal and TruncateJournal: a span when the
// context is traced ("state save", ...: the entity's attributes, bytes, and the
// replicas asked and answered when the store sets them on the span, as package
// replstore does), and the metrics shardhost.state.operations,
// shardhost.state.operation.duration, shardhost.state.io and
// shardhost.state.fencing.refusals. self is this member's address (shardhost.node).
// Sharding applies it to Config.States itself. fence is the store's FenceShard so
// recorded, or nil when the store has none (StateStoreAs finds no ShardFencer);
// journal is the store's JournalStore so recorded, or nil when it keeps no journals.
func instrumentStateStore(store StateStore, self string, tp trace.TracerProvider, mp metric.MeterProvider) (_ StateStore, fence stateFenceFunc, journal JournalStore) {
	m := obs.Meter(mp, "sharding")
	s := &instrumentedStateStore{store: store, tracer: obs.Tracer(tp, "sharding"), traced: obs.Enabled(tp), self: self}
	s.ops = obs.Must(m.Int64Counter("shardhost.state.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Entity state store operations (save, load, remember, remembered, save_batch, fence, journal_append, journal_read, journal_truncate), by outcome. [shardhost.state.operation, shardhost.outcome]")))
	s.duration = obs.Must(m.Float64Histogram("shardhost.state.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of entity state store operations, by operation and outcome. [shardhost.state.operation, shardhost.outcome]")))
	s.io = obs.Must(m.Int64Counter("shardhost.state.io", metric.WithUnit("By"),
		metric.WithDescription("Bytes of entity state saved and loaded, by operation. [shardhost.state.operation]")))
	s.fenced = obs.Must(m.Int64Counter("shardhost.state.fencing.refusals", metric.WithUnit("{refusal}"),
		metric.WithDescription("State writes refused because the writer's allocation epoch was stale (fencing). []")))
	s.attrs = obs.NewAttrCache(func(k stateOpKey) attribute.Set {
		return attribute.NewSet(attrStateOperation.String(stateOpNames[k.op]), obs.Outcome.String(k.outcome))
	})
	for op := range numStateOps {
		s.ioAttrs[op] = metric.WithAttributeSet(attribute.NewSet(attrStateOperation.String(stateOpNames[op])))
	}
	if f, ok := StateStoreAs[ShardFencer](store); ok {
		fence = func(ctx context.Context, typ string, shard int, epoch uint64) error {
			ctx, span, start := s.startShard(ctx, stateOpFence, typ, shard, attrEpoch.Int64(int64(epoch)))
			err := f.FenceShard(ctx, typ, shard, epoch)
			s.done(stateOpFence, span, start, 0, err)
			return err
		}
	}
	if j, ok := StateStoreAs[JournalStore](store); ok {
		journal = &instrumentedJournal{instrumentedStateStore: s, journal: j}
	}
	if b, ok := StateStoreAs[BatchStateStore](store); ok {
		return &instrumentedBatchStateStore{instrumentedStateStore: s, batch: b}, fence, journal
	}
	return s, fence, journal
}

// instrumentedJournal records the journal's operations as the decorator does the
// others: spans "journal append" (with the records and bytes), "journal read" and
// "journal truncate".
type instrumentedJournal struct {
	*instrumentedStateStore
	journal JournalStore
}

var _ JournalStore = (*instrumentedJournal)(nil)

func (s *instrumentedJournal) AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error {
	ctx, span, start := s.startKey(ctx, stateOpAppend, key, attrEpoch.Int64(int64(epoch)), attrJournalRecords.Int(len(recs)))
	err := s.journal.AppendJournal(ctx, key, epoch, recs)
	n := 0
	if err == nil {
		for _, r := range recs {
			n += len(r.Data)
		}
	}
	s.done(stateOpAppend, span, start, n, err)
	return err
}

func (s *instrumentedJournal) ReadJournal(ctx context.Context, key EntityKey, from uint64, limit int) ([]JournalRecord, error) {
	ctx, span, start := s.startKey(ctx, stateOpRead, key)
	recs, err := s.journal.ReadJournal(ctx, key, from, limit)
	n := 0
	for _, r := range recs {
		n += len(r.Data)
	}
	if span != nil {
		span.SetAttributes(attrJournalRecords.Int(len(recs)))
	}
	s.done(stateOpRead, span, start, n, err)
	return recs, err
}

func (s *instrumentedJournal) TruncateJournal(ctx context.Context, key EntityKey, epoch uint64, before uint64) error {
	ctx, span, start := s.startKey(ctx, stateOpTruncate, key, attrEpoch.Int64(int64(epoch)))
	err := s.journal.TruncateJournal(ctx, key, epoch, before)
	s.done(stateOpTruncate, span, start, 0, err)
	return err
}

// stateFenceFunc is a ShardFencer's FenceShard.
type stateFenceFunc func(ctx context.Context, typ string, shard int, epoch uint64) error

// Unwrap returns the decorated store: StateStoreAs finds its other abilities
// (ExternalStateStore) through it.
func (s *instrumentedStateStore) Unwrap() StateStore { return s.store }

// instrumentedBatchStateStore is the decorator over a store with batch saves: a
// SaveBatch is one "save_batch" operation (span "state save batch", with the number of
// entities and the bytes saved).
type instrumentedBatchStateStore struct {
	*instrumentedStateStore
	batch BatchStateStore
}

var _ BatchStateStore = (*instrumentedBatchStateStore)(nil)

func (s *instrumentedBatchStateStore) SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []StateSave) error {
	ctx, span, start := s.startShard(ctx, stateOpSaveBatch, typ, shard, attrEpoch.Int64(int64(epoch)), attrStateEntities.Int(len(saves)))
	err := s.batch.SaveBatch(ctx, typ, shard, epoch, saves)
	n := 0
	if err == nil {
		for _, sv := range saves {
			n += len(sv.State)
		}
	}
	s.done(stateOpSaveBatch, span, start, n, err)
	return err
}

// stateOutcome names the outcome of a state store operation.
func stateOutcome(err error) string {
	switch {
	case err == nil:
		return obs.OutcomeOK
	case errors.Is(err, ErrNoState):
		return "no-state"
	case errors.Is(err, ErrStaleEpoch):
		return "stale-epoch"
	case errors.Is(err, ErrStoreUnavailable):
		return "unavailable"
	case errors.Is(err, ErrStateTooLarge):
		return "too-large"
	case errors.Is(err, ErrInvalidStateKey):
		return "invalid-key"
	case errors.Is(err, ErrCorruptRecord):
		return "corrupt"
	}
	return "_OTHER"
}

// startKey starts an operation on an entity's key: its start time, and in a traced
// context its span, with the key's attributes and more. The attributes are made only
// for a span: an operation untraced allocates none.
func (s *instrumentedStateStore) startKey(ctx context.Context, op stateOp, key EntityKey, more ...attribute.KeyValue) (context.Context, trace.Span, time.Time) {
	start := time.Now()
	if !s.traced || !obs.Traced(ctx) {
		return ctx, nil, start
	}
	ctx, span := s.tracer.Start(ctx, stateSpanNames[op], trace.WithAttributes(s.keyAttrs(key, more...)...))
	return ctx, span, start
}

// startShard is startKey for an operation on a shard.
func (s *instrumentedStateStore) startShard(ctx context.Context, op stateOp, typ string, shard int, more ...attribute.KeyValue) (context.Context, trace.Span, time.Time) {
	start := time.Now()
	if !s.traced || !obs.Traced(ctx) {
		return ctx, nil, start
	}
	attrs := append([]attribute.KeyValue{obs.EntityType.String(typ), obs.ShardID.Int(shard), obs.Node.String(s.self)}, more...)
	ctx, span := s.tracer.Start(ctx, stateSpanNames[op], trace.WithAttributes(attrs...))
	return ctx, span, start
}

func (s *instrumentedStateStore) done(op stateOp, span trace.Span, start time.Time, bytes int, err error) {
	outcome := stateOutcome(err)
	a := s.attrs.Get(stateOpKey{op, outcome})
	ctx := context.Background()
	s.ops.Add(ctx, 1, a)
	s.duration.Record(ctx, time.Since(start).Seconds(), a)
	if bytes > 0 {
		s.io.Add(ctx, int64(bytes), s.ioAttrs[op])
	}
	if errors.Is(err, ErrStaleEpoch) {
		s.fenced.Add(ctx, 1)
	}
	if span == nil {
		return
	}
	if op == stateOpSave || op == stateOpLoad || op == stateOpSaveBatch || op == stateOpAppend || op == stateOpRead {
		span.SetAttributes(attrStateBytes.Int(bytes))
	}
	span.SetAttributes(obs.Outcome.String(outcome))
	if err != nil && !errors.Is(err, ErrNoState) {
		obs.Fail(span, err, outcome)
	}
	span.End()
}

func (s *instrumentedStateStore) keyAttrs(key EntityKey, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{obs.EntityType.String(key.Type), obs.EntityID.String(key.ID),
		obs.ShardID.Int(key.Shard), obs.Node.String(s.self)}, more...)
}

func (s *instrumentedStateStore) Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error {
	ctx, span, start := s.startKey(ctx, stateOpSave, key, attrEpoch.Int64(int64(epoch)))
	err := s.store.Save(ctx, key, epoch, state)
	n := 0
	if err == nil {
		n = len(state)
	}
	s.done(stateOpSave, span, start, n, err)
	return err
}

func (s *instrumentedStateStore) Load(ctx context.Context, key EntityKey) ([]byte, error) {
	ctx, span, start := s.startKey(ctx, stateOpLoad, key)
	b, err := s.store.Load(ctx, key)
	s.done(stateOpLoad, span, start, len(b), err)
	return b, err
}

func (s *instrumentedStateStore) Remember(ctx context.Context, key EntityKey, epoch uint64, remember bool) error {
	ctx, span, start := s.startKey(ctx, stateOpRemember, key, attrEpoch.Int64(int64(epoch)), attrStateRemember.Bool(remember))
	err := s.store.Remember(ctx, key, epoch, remember)
	s.done(stateOpRemember, span, start, 0, err)
	return err
}

func (s *instrumentedStateStore) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	ctx, span, start := s.startShard(ctx, stateOpRemembered, typ, shard)
	ids, err := s.store.Remembered(ctx, typ, shard)
	if span != nil {
		span.SetAttributes(attrStateEntities.Int(len(ids)))
	}
	s.done(stateOpRemembered, span, start, 0, err)
	return ids, err
}

// withTraceOf returns base (its values and cancellation) carrying the span of ctx: work
// a store does on its own lifetime for a traced caller stays in the caller's trace.
func withTraceOf(base, ctx context.Context) context.Context {
	return trace.ContextWithSpan(base, trace.SpanFromContext(ctx))
}
