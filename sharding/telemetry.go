package sharding

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// Attribute keys of sharding's spans and metrics, beside obs's.
const (
	attrActivationState  = attribute.Key("shardhost.activation.state") // fresh, restored
	attrPassivationCause = attribute.Key("shardhost.passivation.cause")
	attrBufferReason     = attribute.Key("shardhost.buffer.reason") // resolving, handoff, entity-type
	attrDeadLetterReason = attribute.Key("shardhost.dead_letter.reason")
	attrReminderKind     = attribute.Key("shardhost.reminder.kind") // reminder, scheduled
	attrEntitiesStopped  = attribute.Key("shardhost.handoff.entities_stopped")
	attrMessagesBuffered = attribute.Key("shardhost.handoff.messages_buffered")
	attrHops             = attribute.Key("shardhost.hops")
	attrHome             = attribute.Key("shardhost.shard.home")
	attrEpoch            = attribute.Key("shardhost.shard.epoch")
)

// Causes of a passivation (shardhost.passivation.cause).
const (
	causeIdle      = "idle"
	causeMaxActive = "max-active"
	causeMemory    = "memory-limit"
	causeRequested = "requested"
	causeCommand   = "command"  // Sharding.Passivate: shardhost passivate
	causeUndeploy  = "undeploy" // Sharding.StopType: shardhost undeploy
	causeHandoff   = "handoff"
	causeShutdown  = "shutdown"
	causeStale     = "stale-allocation"
	causeLease     = "lease-lapsed" // the hosting lease lapsed (Config.HostingLease)
	causeStateTTL  = "state-ttl"    // idle longer than TypeSettings.StateTTL: its state is deleted next
)

// Reasons a message was buffered (shardhost.buffer.reason).
const (
	bufferResolving = "resolving"
	bufferHandoff   = "handoff"
	bufferType      = "entity-type"
)

// messageKindIndex numbers the kinds of handled messages for the attribute caches:
// ask, tell, timer, changed, reminder.
type messageKindIndex uint8

const (
	kindAsk messageKindIndex = iota
	kindTell
	kindTimer
	kindChanged
	kindReminder
	numKinds
)

var kindNames = [numKinds]string{"ask", "tell", "timer", "changed", "reminder"}

func kindIndex(d *delivery) messageKindIndex {
	switch d.env.Kind {
	case KindTimer:
		return kindTimer
	case KindChanged:
		return kindChanged
	case KindReminder:
		return kindReminder
	}
	if d.ask {
		return kindAsk
	}
	return kindTell
}

// shardingTelemetry holds the instruments of sharding, made once.
type shardingTelemetry struct {
	tracer trace.Tracer
	// traced: a tracer provider was given. Spans of background work (passivation,
	// handoff) start new traces only then.
	traced bool
	// metered: a meter provider was given. Without one, a handled message is not
	// timed (its arrival is not read off the clock).
	metered bool

	messageDur      metric.Float64Histogram
	activations     metric.Int64Counter
	activationDur   metric.Float64Histogram
	passivations    metric.Int64Counter
	expired         metric.Int64Counter
	active          metric.Int64UpDownCounter
	paused          metric.Int64UpDownCounter
	handoffs        metric.Int64Counter
	handoffDur      metric.Float64Histogram
	buffered        metric.Int64Counter
	deadLetters     metric.Int64Counter
	repeats         metric.Int64Counter
	lateness        metric.Float64Histogram
	late            metric.Int64Counter
	messageFailure  *obs.AttrCache[messageKey]
	byTypeAnd       *obs.AttrCache[typeAndKey]
	activationAttrs *obs.AttrCache[activationKey]
}

// activationKey is the attribute set of an activation.
type activationKey struct{ typ, state, outcome string }

// messageKey is the attribute set of a handled message that failed.
type messageKey struct {
	typ     string
	kind    messageKindIndex
	remote  bool
	outcome string
}

// typeAndKey is an attribute set of an entity type and one more attribute.
type typeAndKey struct {
	typ   string
	key   attribute.Key
	value string
}

func newShardingTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) *shardingTelemetry {
	t := &shardingTelemetry{tracer: obs.Tracer(tp, "sharding"), traced: obs.Enabled(tp), metered: mp != nil}
	m := obs.Meter(mp, "sharding")
	t.messageDur = obs.Must(m.Float64Histogram("shardhost.entity.message.duration", metric.WithUnit("s"),
		metric.WithDescription("Messages handled by entities hosted here (its count), and the time from each one's arrival in its entity's mailbox to the end of its handling (mailbox wait, activation, guest call, checkpoint); kind is ask, tell, timer or changed, source local (routed first by this member) or remote. [shardhost.entity.type, shardhost.message.kind, shardhost.message.source, shardhost.outcome]"),
		metric.WithExplicitBucketBoundaries(0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)))
	t.activations = obs.Must(m.Int64Counter("shardhost.entity.activations", metric.WithUnit("{activation}"),
		metric.WithDescription("Entity activations, by entity type, state (fresh, restored: from saved state) and outcome. [shardhost.entity.type, shardhost.activation.state, shardhost.outcome]")))
	t.activationDur = obs.Must(m.Float64Histogram("shardhost.entity.activation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of entity activations (state load, instantiation or restore, on_activate), by entity type and state. [shardhost.entity.type, shardhost.activation.state]")))
	t.passivations = obs.Must(m.Int64Counter("shardhost.entity.passivations", metric.WithUnit("{passivation}"),
		metric.WithDescription("Entities stopped with their state saved, by entity type and cause (idle, max-active, requested, handoff, shutdown, stale-allocation). [shardhost.entity.type, shardhost.passivation.cause]")))
	t.expired = obs.Must(m.Int64Counter("shardhost.entities.expired", metric.WithUnit("{entity}"),
		metric.WithDescription("Entities whose state was deleted for being idle longer than their type's state TTL (TypeSettings.StateTTL), by entity type. [shardhost.entity.type]")))
	t.active = obs.Must(m.Int64UpDownCounter("shardhost.entities.active", metric.WithUnit("{entity}"),
		metric.WithDescription("Active entities (with an instance) hosted here, by entity type. [shardhost.entity.type]")))
	t.paused = obs.Must(m.Int64UpDownCounter("shardhost.entities.paused", metric.WithUnit("{entity}"),
		metric.WithDescription("Entities paused on a message that kept failing, hosted here, by entity type (shardhost resume or skip). [shardhost.entity.type]")))
	t.handoffs = obs.Must(m.Int64Counter("shardhost.shard.handoffs", metric.WithUnit("{handoff}"),
		metric.WithDescription("Shards this member handed off, by entity type and outcome. [shardhost.entity.type, shardhost.outcome]")))
	t.handoffDur = obs.Must(m.Float64Histogram("shardhost.shard.handoff.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of shard handoffs, from the begin message to the coordinator's acknowledgement, by entity type. [shardhost.entity.type]")))
	t.buffered = obs.Must(m.Int64Counter("shardhost.messages.buffered", metric.WithUnit("{message}"),
		metric.WithDescription("Messages buffered by this member's regions, by entity type and reason (resolving: the shard's home; handoff; entity-type: the type being resolved). [shardhost.entity.type, shardhost.buffer.reason]")))
	t.repeats = obs.Must(m.Int64Counter("shardhost.messages.repeats", metric.WithUnit("{message}"),
		metric.WithDescription("Messages answered from their sender's high-water mark without being handled: repeats of effectively-once sends between entities, by entity type. [shardhost.entity.type]")))
	t.lateness = obs.Must(m.Float64Histogram("shardhost.reminders.lateness", metric.WithUnit("s"),
		metric.WithDescription("Reminders and scheduled messages delivered by the shards hosted here (its count), and how late each was: from its due time to its delivery (0 when on time), by entity type and kind (reminder, scheduled). [shardhost.entity.type, shardhost.reminder.kind]"),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)))
	t.late = obs.Must(m.Int64Counter("shardhost.reminders.late", metric.WithUnit("{firing}"),
		metric.WithDescription("Reminders and scheduled messages delivered more than 5 s after their due time (a member or the cluster was down, or the shard's home fell behind), by entity type and kind (reminder, scheduled). [shardhost.entity.type, shardhost.reminder.kind]")))
	t.deadLetters = obs.Must(m.Int64Counter("shardhost.dead_letters", metric.WithUnit("{message}"),
		metric.WithDescription("Messages dropped as dead letters, by entity type and reason: buffer-full, mailbox-full, expired (its deadline passed before its entity took it), or for a tell that failed after it left its sender the failure's code (entity-error, guest-trap, guest-deadline, activation-failed, not-delivered, outcome-unknown, ...). [shardhost.entity.type, shardhost.dead_letter.reason]")))
	t.messageFailure = obs.NewAttrCache(func(k messageKey) attribute.Set {
		return messageAttrs(k.typ, k.kind, k.remote, k.outcome)
	})
	t.activationAttrs = obs.NewAttrCache(func(k activationKey) attribute.Set {
		return attribute.NewSet(obs.EntityType.String(k.typ), attrActivationState.String(k.state), obs.Outcome.String(k.outcome))
	})
	t.byTypeAnd = obs.NewAttrCache(func(k typeAndKey) attribute.Set {
		if k.key == "" {
			return attribute.NewSet(obs.EntityType.String(k.typ))
		}
		return attribute.NewSet(obs.EntityType.String(k.typ), k.key.String(k.value))
	})
	return t
}

func messageAttrs(typ string, kind messageKindIndex, remote bool, outcome string) attribute.Set {
	src := "local"
	if remote {
		src = "remote"
	}
	return attribute.NewSet(obs.EntityType.String(typ), obs.MessageKind.String(kindNames[kind]),
		obs.MessageSource.String(src), obs.Outcome.String(outcome))
}

// typeAttr returns the attribute set of typ and one more attribute (none if key is "").
func (t *shardingTelemetry) typeAttr(typ string, key attribute.Key, value string) metric.MeasurementOption {
	return t.byTypeAnd.Get(typeAndKey{typ, key, value})
}

// registerShards registers the observable gauge of the shards each region hosts.
func (s *Sharding) registerShards(mp metric.MeterProvider) {
	if mp == nil {
		return
	}
	m := obs.Meter(mp, "sharding")
	shards := obs.Must(m.Int64ObservableGauge("shardhost.shards", metric.WithUnit("{shard}"),
		metric.WithDescription("Shards hosted by this member's region of each entity type. [shardhost.entity.type]")))
	mailbox := obs.Must(m.Int64ObservableGauge("shardhost.entities.mailbox.depth", metric.WithUnit("{message}"),
		metric.WithDescription("Messages waiting in the mailboxes of the entities hosted here, by entity type: a type whose entities fall behind. [shardhost.entity.type]")))
	stateSize := obs.Must(m.Int64ObservableGauge("shardhost.entities.state.size", metric.WithUnit("By"),
		metric.WithDescription("Sum of the last saved or loaded state of the entities this member knows (hosted shards, active or passivated since), by entity type. [shardhost.entity.type]")))
	obs.Must(m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, r := range s.allRegions() {
			r.mu.Lock()
			n, queued, state := 0, 0, int64(0)
			r.eachHostedLocked(func(sh *shard) {
				n++
				for _, e := range sh.entities {
					e.mu.Lock()
					queued += e.queued()
					e.mu.Unlock()
					state += e.stats.stateBytes.Load()
				}
			})
			r.mu.Unlock()
			o.ObserveInt64(shards, int64(n), r.tel.typeOnly)
			o.ObserveInt64(mailbox, int64(queued), r.tel.typeOnly)
			o.ObserveInt64(stateSize, state, r.tel.typeOnly)
		}
		return nil
	}, shards, mailbox, stateSize))
}

// regionTelemetry holds a region's pre-made attribute sets, so that recording a handled
// message allocates nothing.
type regionTelemetry struct {
	typeOnly metric.MeasurementOption
	// ok[kind][remote] is the attribute set of a message handled without error, as the
	// options of a Record call (passed on with ..., no slice is made per call).
	ok [numKinds][2][]metric.RecordOption
	// Span names: "handle counter", "activate counter", ...; tellName by kind ("tell
	// counter", "timer counter", "changed counter").
	handleName, activateName, passivateName, saveName, bufferedName, resolveName, handoffName, askName string
	tellName                                                                                           [numKinds]string
}

func newRegionTelemetry(typ string) regionTelemetry {
	rt := regionTelemetry{typeOnly: metric.WithAttributeSet(attribute.NewSet(obs.EntityType.String(typ)))}
	for k := range numKinds {
		for remote := range 2 {
			rt.ok[k][remote] = []metric.RecordOption{metric.WithAttributeSet(messageAttrs(typ, k, remote == 1, obs.OutcomeOK))}
		}
		rt.tellName[k] = kindNames[k] + " " + typ
	}
	rt.handleName = "handle " + typ
	rt.activateName = "activate " + typ
	rt.passivateName = "passivate " + typ
	rt.saveName = "save " + typ
	rt.bufferedName = "buffered " + typ
	rt.resolveName = "shard home " + typ
	rt.handoffName = "handoff " + typ
	rt.askName = "ask " + typ
	return rt
}

// entityAttrs is the attribute set of every span about one entity.
func (e *entity) entityAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{obs.EntityType.String(e.r.settings.Name), obs.EntityID.String(e.id),
		obs.ShardID.Int(e.shard), obs.Node.String(e.r.s.self)}
}

// recordMessage records a handled message, done at now: its count and duration since
// arrival. Only when metered.
func (e *entity) recordMessage(kind messageKindIndex, remote bool, arrived, now time.Time, err error) {
	t := e.r.s.tel
	if err == nil {
		r := 0
		if remote {
			r = 1
		}
		t.messageDur.Record(context.Background(), now.Sub(arrived).Seconds(), e.r.tel.ok[kind][r]...)
		return
	}
	t.messageDur.Record(context.Background(), now.Sub(arrived).Seconds(),
		t.messageFailure.Get(messageKey{e.r.settings.Name, kind, remote, ErrorCode(err)}))
}

// failSpan marks span failed with err's error code as error.type.
func failSpan(span trace.Span, err error) {
	if err != nil {
		obs.Fail(span, err, ErrorCode(err))
	}
}
