package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// Attribute keys of the host's spans and metrics, beside obs's.
const (
	attrModuleDigest = attribute.Key("shardhost.module.digest")
	attrModuleVer    = attribute.Key("shardhost.module.version")
	attrEngine       = attribute.Key("shardhost.module.engine") // interpreter, compiler, compiler-background
	attrMessageBytes = attribute.Key("shardhost.message.bytes")
	attrHostCalls    = attribute.Key("shardhost.guest.host_calls")
	attrRestoreKind  = attribute.Key("shardhost.restore.kind") // guest, instance
	attrFailure      = attribute.Key("shardhost.guest.failure")
)

// runtimeTelemetry holds the instruments of a wasmRuntime and its instances.
type runtimeTelemetry struct {
	traced         bool
	metered        bool // a meter provider was given: guest calls are timed
	callDur        metric.Float64Histogram
	mu             sync.Mutex
	hostCallTotals map[string]*atomic.Int64 // by entity type
	memory         metric.Int64UpDownCounter
	compileDur     metric.Float64Histogram
	byType         *obs.AttrCache[string]
}

func newRuntimeTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) *runtimeTelemetry {
	m := obs.Meter(mp, "host")
	t := &runtimeTelemetry{traced: obs.Enabled(tp), metered: mp != nil, hostCallTotals: map[string]*atomic.Int64{}}
	t.callDur = obs.Must(m.Float64Histogram("shardhost.guest.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of calls into guests for messages (shardhost_receive), failed ones included (the outcome of each message is in shardhost.entity.message.duration). [shardhost.entity.type]"),
		metric.WithExplicitBucketBoundaries(0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)))
	// Host calls are counted in an atomic per type and read at collection: one
	// measurement less on each message's path.
	hostCalls := obs.Must(m.Int64ObservableCounter("shardhost.guest.host_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Host function calls guests made while handling messages; divided by the count of shardhost.guest.call.duration, the host calls per message. [shardhost.entity.type]")))
	obs.Must(m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		for typ, n := range t.hostCallTotals {
			o.ObserveInt64(hostCalls, n.Load(), t.byType.Get(typ))
		}
		return nil
	}, hostCalls))
	t.memory = obs.Must(m.Int64UpDownCounter("shardhost.entity.memory", metric.WithUnit("By"),
		metric.WithDescription("Linear memory of the active wasm instances, by entity type. [shardhost.entity.type]")))
	t.compileDur = obs.Must(m.Float64Histogram("shardhost.module.compile.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to compile a module, by engine: interpreter (a deploy's validation, with the checks and a probe instance), compiler (the same, compiled; from the compilation cache when it has it), compiler-background (the compilation that replaces the interpreter's code). [shardhost.module.engine]")))
	t.byType = obs.NewAttrCache(func(typ string) attribute.Set { return attribute.NewSet(obs.EntityType.String(typ)) })
	return t
}

// hostCallsOf returns the counter of the host calls of typ's guests.
func (t *runtimeTelemetry) hostCallsOf(typ string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.hostCallTotals[typ]
	if n == nil {
		n = &atomic.Int64{}
		t.hostCallTotals[typ] = n
	}
	return n
}

// entityAttrsKey carries, in the context of an instantiation, the attribute set of the
// entity's spans (type, ID, shard, node), which the node knows and the runtime does not.
type entityAttrsKey struct{}

func withEntityAttrs(ctx context.Context, attrs []attribute.KeyValue) context.Context {
	return context.WithValue(ctx, entityAttrsKey{}, attrs)
}

// entityAttrs returns the attribute set of an entity's spans: what the node put in ctx,
// else its type and ID.
func entityAttrs(ctx context.Context, typ, id string) []attribute.KeyValue {
	if a, ok := ctx.Value(entityAttrsKey{}).([]attribute.KeyValue); ok {
		return a
	}
	return []attribute.KeyValue{obs.EntityType.String(typ), obs.EntityID.String(id)}
}

// guestOutcome is the outcome of a guest call: ok, entity-error, guest-trap,
// guest-deadline or internal.
func guestOutcome(err error) string {
	if err == nil {
		return obs.OutcomeOK
	}
	return sharding.ErrorCode(withCode(err))
}

// trackMemory moves the instance's share of shardhost.entity.memory to its memory's
// current size (0 once closed).
func (i *wasmInstance) trackMemory() {
	if i.memOpt == nil {
		return
	}
	size := int64(0)
	if !i.closed && i.mem != nil {
		size = int64(i.mem.Size())
	}
	if d := size - i.memCounted; d != 0 {
		i.m.rt.tel.memory.Add(context.Background(), d, i.memOpt)
		i.memCounted = size
	}
}

// nodeTelemetry holds the node's own instruments.
type nodeTelemetry struct {
	deploys  metric.Int64Counter
	failures metric.Int64Counter
	backoffs metric.Int64Counter
	restores metric.Int64Counter
	upgrades metric.Int64Counter
	attrs    *obs.AttrCache[[2]string]
}

// registerModuleVersions observes the module version each deployed type's new
// activations use (shardhost.module.version.current), from the catalog.
func registerModuleVersions(mp metric.MeterProvider, c *catalog) {
	if mp == nil {
		return
	}
	m := obs.Meter(mp, "host")
	current := obs.Must(m.Int64ObservableGauge("shardhost.module.version.current", metric.WithUnit("{version}"),
		metric.WithDescription("The version of each entity type's module that new activations use (1 at the first deploy), by entity type; an active entity's own version is in shardhost entities. [shardhost.entity.type]")))
	obs.Must(m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, t := range c.list() {
			if !t.Removed {
				o.ObserveInt64(current, int64(t.Version), metric.WithAttributes(obs.EntityType.String(t.Name)))
			}
		}
		return nil
	}, current))
}

func newNodeTelemetry(mp metric.MeterProvider) *nodeTelemetry {
	m := obs.Meter(mp, "host")
	t := &nodeTelemetry{}
	t.deploys = obs.Must(m.Int64Counter("shardhost.deploys", metric.WithUnit("{deploy}"),
		metric.WithDescription("Deployments taken by this member's API, by entity type and outcome. [shardhost.entity.type, shardhost.outcome]")))
	t.failures = obs.Must(m.Int64Counter("shardhost.entity.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Guest failures (guest-trap, guest-deadline) that ended an instance, by entity type and error.type. [shardhost.entity.type, error.type]")))
	t.backoffs = obs.Must(m.Int64Counter("shardhost.entity.backoffs", metric.WithUnit("{backoff}"),
		metric.WithDescription("Times an entity that kept failing was put to rest (backoff), by entity type. [shardhost.entity.type]")))
	t.restores = obs.Must(m.Int64Counter("shardhost.entity.restores", metric.WithUnit("{restore}"),
		metric.WithDescription("Instances made from saved state, by entity type and kind (guest: shardhost_restore; instance: a transparent snapshot; compiled: an active entity moved from the interpreter to its compiled module). [shardhost.entity.type, shardhost.restore.kind]")))
	t.upgrades = obs.Must(m.Int64Counter("shardhost.entity.upgrades", metric.WithUnit("{upgrade}"),
		metric.WithDescription("Entities with explicit state moved, at an activation, from an older version of their module to their type's current one (shardhost_migrate, or shardhost_restore), by entity type and outcome (ok; failed: the entity stays on its version). [shardhost.entity.type, shardhost.outcome]")))
	t.attrs = obs.NewAttrCache(func(k [2]string) attribute.Set {
		parts := []attribute.KeyValue{obs.EntityType.String(k[0])}
		switch {
		case k[1] == "":
		case len(k[1]) > 2 && k[1][:2] == "o:":
			parts = append(parts, obs.Outcome.String(k[1][2:]))
		case len(k[1]) > 2 && k[1][:2] == "e:":
			parts = append(parts, obs.ErrorType.String(k[1][2:]))
		case len(k[1]) > 2 && k[1][:2] == "r:":
			parts = append(parts, attrRestoreKind.String(k[1][2:]))
		}
		return attribute.NewSet(parts...)
	})
	return t
}

// guestFailure counts a guest failure of an entity of type typ.
func (n *Node) guestFailure(typ string, err error) {
	var ge *GuestError
	if !errors.As(err, &ge) {
		return
	}
	n.tel.failures.Add(context.Background(), 1, n.tel.attrs.Get([2]string{typ, "e:" + guestOutcome(err)}))
}

// since is time.Since in seconds.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
