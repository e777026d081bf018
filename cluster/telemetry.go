package cluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// messengerTelemetry is what a Messenger records: spans and trace context of requests,
// rpc durations, the transport's counters. The zero value of each part does nothing.
type messengerTelemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	traced bool

	clientDur, serverDur metric.Float64Histogram
	metered              bool
	methods              *obs.AttrCache[string]
}

// statser is a transport that counts what it does (TCPTransport, InmemTransport).
type statser interface{ Stats() TransportStats }

func newMessengerTelemetry(o messengerOptions, t Transport) *messengerTelemetry {
	tel := &messengerTelemetry{}
	if obs.Enabled(o.tp) {
		tel.tracer, tel.prop, tel.traced = obs.Tracer(o.tp, "cluster"), obs.Propagator(o.prop), true
	}
	if o.mp == nil {
		return tel
	}
	meter := obs.Meter(o.mp, "cluster")
	tel.metered = true
	tel.methods = obs.NewAttrCache(func(topic string) attribute.Set {
		svc, method := splitTopic(topic)
		return attribute.NewSet(obs.RPCSystem.String(obs.RPCSystemName), obs.RPCService.String(svc), obs.RPCMethod.String(method))
	})
	buckets := metric.WithExplicitBucketBoundaries(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
	tel.clientDur = obs.Must(meter.Float64Histogram("rpc.client.duration", metric.WithUnit("ms"),
		metric.WithDescription("Duration of member-to-member requests sent, until their reply. [rpc.system, rpc.service, rpc.method]"), buckets))
	tel.serverDur = obs.Must(meter.Float64Histogram("rpc.server.duration", metric.WithUnit("ms"),
		metric.WithDescription("Duration of member-to-member requests received, until the reply is sent. [rpc.system, rpc.service, rpc.method]"), buckets))
	if st, ok := t.(statser); ok {
		in := metric.WithAttributeSet(attribute.NewSet(obs.NetworkIODirection.String("receive")))
		out := metric.WithAttributeSet(attribute.NewSet(obs.NetworkIODirection.String("transmit")))
		frames := obs.Must(meter.Int64ObservableCounter("shardhost.transport.frames", metric.WithUnit("{frame}"),
			metric.WithDescription("Node-to-node frames sent and received. [network.io.direction]")))
		bytes := obs.Must(meter.Int64ObservableCounter("shardhost.transport.io", metric.WithUnit("By"),
			metric.WithDescription("Bytes of node-to-node frames sent and received, length prefixes included. [network.io.direction]")))
		dropped := obs.Must(meter.Int64ObservableCounter("shardhost.transport.frames.dropped", metric.WithUnit("{frame}"),
			metric.WithDescription("Frames given to the transport that never reached the network (queue full, peer unreachable, write failure). []")))
		malformed := obs.Must(meter.Int64ObservableCounter("shardhost.transport.frames.malformed", metric.WithUnit("{frame}"),
			metric.WithDescription("Inbound frames refused as malformed or too large. []")))
		connErrs := obs.Must(meter.Int64ObservableCounter("shardhost.transport.connection.errors", metric.WithUnit("{error}"),
			metric.WithDescription("Failed dials and failed writes to peers. []")))
		refused := obs.Must(meter.Int64ObservableCounter("shardhost.transport.connections.refused", metric.WithUnit("{connection}"),
			metric.WithDescription("Inbound connections closed before they were authenticated: too many authenticating, a failed TLS handshake, no frame in time. []")))
		waits := obs.Must(meter.Int64ObservableCounter("shardhost.transport.backpressure.waits", metric.WithUnit("{wait}"),
			metric.WithDescription("Times a connection's reader stopped until one of its frames in flight was done (the per-connection cap). []")))
		obs.Must(meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			s := st.Stats()
			o.ObserveInt64(frames, int64(s.FramesSent), out)
			o.ObserveInt64(frames, int64(s.FramesReceived), in)
			o.ObserveInt64(bytes, int64(s.BytesSent), out)
			o.ObserveInt64(bytes, int64(s.BytesReceived), in)
			o.ObserveInt64(dropped, int64(s.FramesDropped))
			o.ObserveInt64(malformed, int64(s.MalformedFrames))
			o.ObserveInt64(connErrs, int64(s.ConnectionErrors))
			o.ObserveInt64(refused, int64(s.RefusedConnections))
			o.ObserveInt64(waits, int64(s.BackpressureWaits))
			return nil
		}, frames, bytes, dropped, malformed, connErrs, refused, waits))
	}
	return tel
}

// splitTopic splits "sharding/deliver" into rpc.service "sharding" and rpc.method
// "deliver".
func splitTopic(topic string) (service, method string) {
	if i := strings.LastIndexByte(topic, '/'); i >= 0 {
		return topic[:i], topic[i+1:]
	}
	return "", topic
}

// peerAttrs are the attributes naming a member-to-member peer (host:port) under the keys
// hostKey and portKey.
func peerAttrs(hostKey, portKey attribute.Key, addr string) []attribute.KeyValue {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return []attribute.KeyValue{hostKey.String(addr)}
	}
	port, _ := strconv.Atoi(p)
	return []attribute.KeyValue{hostKey.String(h), portKey.Int(port)}
}

// inject returns ctx's trace context for a frame, or nil when ctx is not traced.
func (t *messengerTelemetry) inject(ctx context.Context) map[string]string {
	if !t.traced || !obs.Traced(ctx) {
		return nil
	}
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// clientStart starts a request's CLIENT span when ctx is traced and returns the context
// to send it in, and done, to call once with the request's outcome.
func (t *messengerTelemetry) clientStart(ctx context.Context, addr, topic string) (context.Context, func(error)) {
	var start time.Time
	if t.metered {
		start = time.Now()
	}
	var span trace.Span
	if t.traced && obs.Traced(ctx) {
		svc, method := splitTopic(topic)
		attrs := append([]attribute.KeyValue{obs.RPCSystem.String(obs.RPCSystemName), obs.RPCService.String(svc),
			obs.RPCMethod.String(method)}, peerAttrs(obs.ServerAddress, obs.ServerPort, addr)...)
		ctx, span = t.tracer.Start(ctx, topic, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	}
	if span == nil && !t.metered {
		return ctx, func(error) {}
	}
	return ctx, func(err error) {
		if t.metered {
			t.clientDur.Record(context.Background(), float64(time.Since(start))/float64(time.Millisecond), t.methods.Get(topic))
		}
		if span != nil {
			if err != nil {
				obs.Fail(span, err, rpcErrorType(err))
			}
			span.End()
		}
	}
}

// rpcErrorType is the error.type of a failed request.
func rpcErrorType(err error) string {
	switch {
	case errors.Is(err, ErrRequestTimeout):
		return "timeout"
	case errors.Is(err, ErrRemote):
		return "remote"
	case errors.Is(err, ErrTransportClosed):
		return "closed"
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrQueueFull):
		return "unreachable"
	}
	return "_OTHER"
}

// serverStart gives a received frame its context: the sender's trace context and, for a
// traced request, a SERVER span that Reply ends.
func (t *messengerTelemetry) serverStart(r *Request, carrier map[string]string) {
	if t.metered && !r.oneWay {
		r.start = time.Now()
	}
	if !t.traced || len(carrier) == 0 {
		return
	}
	ctx := t.prop.Extract(context.Background(), propagation.MapCarrier(carrier))
	if !r.oneWay && obs.Traced(ctx) {
		svc, method := splitTopic(r.Topic)
		attrs := append([]attribute.KeyValue{obs.RPCSystem.String(obs.RPCSystemName), obs.RPCService.String(svc),
			obs.RPCMethod.String(method)}, peerAttrs(obs.NetworkPeerAddr, obs.NetworkPeerPort, r.From)...)
		ctx, r.span = t.tracer.Start(ctx, r.Topic, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	}
	r.ctx = ctx
}

// serverDone ends a request's server span and records its duration.
func (t *messengerTelemetry) serverDone(r *Request, err error) {
	if t.metered && !r.start.IsZero() {
		t.serverDur.Record(context.Background(), float64(time.Since(r.start))/float64(time.Millisecond), t.methods.Get(r.Topic))
	}
	if r.span != nil {
		if err != nil {
			obs.Fail(r.span, err, "remote")
		}
		r.span.End()
	}
}

// instrument registers the membership metrics on the configured meter.
func (m *Membership) instrument() {
	meter := obs.Meter(m.cfg.MeterProvider, "cluster")
	m.leaderChanges = obs.Must(meter.Int64Counter("shardhost.cluster.leader.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Times this member saw the leader change to another member. []")))
	if m.cfg.MeterProvider == nil {
		return
	}
	members := obs.Must(meter.Int64ObservableGauge("shardhost.cluster.members", metric.WithUnit("{member}"),
		metric.WithDescription("Members in this member's view, by status. [shardhost.member.status]")))
	unreachable := obs.Must(meter.Int64ObservableGauge("shardhost.cluster.members.unreachable", metric.WithUnit("{member}"),
		metric.WithDescription("Members that a failure detector finds unreachable, in this member's view. []")))
	converged := obs.Must(meter.Int64ObservableGauge("shardhost.cluster.converged", metric.WithUnit("{bool}"),
		metric.WithDescription("1 when every reachable member has seen the current membership state, else 0. []")))
	phi := obs.Must(meter.Float64ObservableGauge("shardhost.cluster.phi", metric.WithUnit("{phi}"),
		metric.WithDescription("Phi accrual suspicion level of each member this member monitors, by shardhost.member. [shardhost.member]")))
	byStatus := make([]metric.ObserveOption, len(statusNames))
	for i, name := range statusNames {
		if i > 0 {
			byStatus[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("shardhost.member.status", name)))
		}
	}
	obs.Must(meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := m.View()
		counts := make([]int64, len(statusNames))
		var unreach int64
		for _, mem := range v.Members {
			if int(mem.Status) < len(counts) {
				counts[mem.Status]++
			}
			if !mem.Reachable {
				unreach++
			}
		}
		for i := 1; i < len(counts); i++ {
			if StatusRemoved != MemberStatus(i) {
				o.ObserveInt64(members, counts[i], byStatus[i])
			}
		}
		o.ObserveInt64(unreachable, unreach)
		c := int64(0)
		if v.Converged {
			c = 1
		}
		o.ObserveInt64(converged, c)
		if p := m.phi.Load(); p != nil {
			for n, val := range *p {
				o.ObserveFloat64(phi, val, metric.WithAttributes(attribute.String("shardhost.member", n.Address)))
			}
		}
		return nil
	}, members, unreachable, converged, phi))
	if tt := m.tlsGossip; tt != nil {
		refused := obs.Must(meter.Int64ObservableCounter("shardhost.gossip.connections.refused", metric.WithUnit("{connection}"),
			metric.WithDescription("Gossip connections over mutual TLS that failed their handshake or acceptance (a peer without a member certificate of the cluster CA, or a broken connection), or were closed because too many were handshaking. []")))
		dropped := obs.Must(meter.Int64ObservableCounter("shardhost.gossip.packets.dropped", metric.WithUnit("{packet}"),
			metric.WithDescription("Gossip packets over mutual TLS not sent or not delivered (queue full, peer unreachable), as UDP would lose them. []")))
		obs.Must(meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			st := tt.Stats()
			o.ObserveInt64(refused, int64(st.HandshakeFailures+st.RefusedConns))
			o.ObserveInt64(dropped, int64(st.PacketsDropped))
			return nil
		}, refused, dropped))
	}
}
