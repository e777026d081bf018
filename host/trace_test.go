package host

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// spans is a recorder of every span the nodes of a test end, with helpers to assert
// span trees.
type spans struct {
	t   *testing.T
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newSpans(t *testing.T) *spans {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(baggageRecorder{}), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &spans{t: t, rec: rec, tp: tp}
}

// baggageRecorder copies the baggage member "tenant" of a span's context into the span
// (test.tenant), to show that baggage reaches the spans of every member.
type baggageRecorder struct{}

func (baggageRecorder) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if m := baggage.FromContext(ctx).Member("tenant"); m.Value() != "" {
		s.SetAttributes(attribute.String("test.tenant", m.Value()))
	}
}
func (baggageRecorder) OnEnd(sdktrace.ReadOnlySpan)      {}
func (baggageRecorder) Shutdown(context.Context) error   { return nil }
func (baggageRecorder) ForceFlush(context.Context) error { return nil }

// of returns the ended spans of a trace.
func (s *spans) of(tid trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		if sp.SpanContext().TraceID() == tid {
			out = append(out, sp)
		}
	}
	return out
}

// wait waits until the trace has a span named name (and matching ok, if given), and
// returns it.
func (s *spans) wait(tid trace.TraceID, name string, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	s.t.Helper()
	var found sdktrace.ReadOnlySpan
	testutil.EventuallyNil(s.t, 15*time.Second, fmt.Sprintf("a span %q in trace %s", name, tid), func() error {
		for _, sp := range s.of(tid) {
			if sp.Name() == name && (ok == nil || ok(sp)) {
				found = sp
				return nil
			}
		}
		return fmt.Errorf("the trace has:\n%s", s.tree(tid))
	})
	return found
}

// waitAny is wait across every trace.
func (s *spans) waitAny(name string, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	s.t.Helper()
	var found sdktrace.ReadOnlySpan
	testutil.Eventually(s.t, 15*time.Second, fmt.Sprintf("a span %q to end", name), func() bool {
		for _, sp := range s.rec.Ended() {
			if sp.Name() == name && (ok == nil || ok(sp)) {
				found = sp
				return true
			}
		}
		return false
	})
	return found
}

// tree renders a trace as an indented tree, for failure messages and docs/observability.md.
func (s *spans) tree(tid trace.TraceID) string {
	all := s.of(tid)
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, sp := range all {
		ids[sp.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, sp := range all {
		if p := sp.Parent().SpanID(); ids[p] {
			children[p] = append(children[p], sp)
		} else {
			roots = append(roots, sp)
		}
	}
	var b strings.Builder
	var walk func(sp sdktrace.ReadOnlySpan, depth int)
	walk = func(sp sdktrace.ReadOnlySpan, depth int) {
		node := ""
		for _, a := range sp.Attributes() {
			if a.Key == "shardhost.node" {
				node = " @" + a.Value.AsString()
			}
		}
		fmt.Fprintf(&b, "%s%s (%s)%s %v\n", strings.Repeat("  ", depth), sp.Name(), sp.SpanKind(), node, sp.EndTime().Sub(sp.StartTime()).Round(time.Microsecond))
		kids := children[sp.SpanContext().SpanID()]
		sortByStart(kids)
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	sortByStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func sortByStart(sp []sdktrace.ReadOnlySpan) {
	for i := 1; i < len(sp); i++ {
		for j := i; j > 0 && sp[j].StartTime().Before(sp[j-1].StartTime()); j-- {
			sp[j], sp[j-1] = sp[j-1], sp[j]
		}
	}
}

// parentOf returns the span of the trace that is sp's parent.
func (s *spans) parentOf(sp sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	for _, p := range s.of(sp.SpanContext().TraceID()) {
		if p.SpanContext().SpanID() == sp.Parent().SpanID() {
			return p
		}
	}
	return nil
}

// under asserts that child's parent is named parent (and returns it), and that the child
// lies within it in time.
func (s *spans) under(child sdktrace.ReadOnlySpan, parent string) sdktrace.ReadOnlySpan {
	s.t.Helper()
	p := s.parentOf(child)
	if p == nil || p.Name() != parent {
		s.t.Fatalf("%q should be a child of %q; the trace is:\n%s", child.Name(), parent, s.tree(child.SpanContext().TraceID()))
	}
	if child.StartTime().Before(p.StartTime()) || child.EndTime().After(p.EndTime()) {
		s.t.Errorf("%q (%v–%v) is not within its parent %q (%v–%v)", child.Name(), child.StartTime(), child.EndTime(),
			p.Name(), p.StartTime(), p.EndTime())
	}
	return p
}

func attr(sp sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range sp.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrIs(key, value string) func(sdktrace.ReadOnlySpan) bool {
	return func(sp sdktrace.ReadOnlySpan) bool {
		v, ok := attr(sp, key)
		return ok && v.Emit() == value
	}
}

// entitySpan asserts that sp carries the entity attribute set.
func entitySpan(t *testing.T, sp sdktrace.ReadOnlySpan, typ, id, node string) {
	t.Helper()
	want := map[string]string{"shardhost.entity.type": typ, "shardhost.entity.id": id, "shardhost.node": node}
	for k, v := range want {
		if got, ok := attr(sp, k); !ok || got.AsString() != v {
			t.Errorf("span %q: %s = %q, want %q", sp.Name(), k, got.Emit(), v)
		}
	}
	if _, ok := attr(sp, "shardhost.shard.id"); !ok {
		t.Errorf("span %q has no shardhost.shard.id", sp.Name())
	}
}

// tracedRequest sends an API request as part of a new trace (its traceparent header)
// and returns the trace ID, the response's status and traceparent header, and its body.
func tracedRequest(t *testing.T, n *Node, method, path, body string, header ...string) (trace.TraceID, int, string, string) {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	rand.Read(tid[:])
	rand.Read(sid[:])
	req, err := http.NewRequest(method, "http://"+n.APIAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", tid, sid))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return tid, resp.StatusCode, resp.Header.Get("traceparent"), string(b)
}

func askPath(typ, id string) string {
	return "/v1/ask?type=" + url.QueryEscape(typ) + "&id=" + url.QueryEscape(id)
}

func tracedNodes(t *testing.T, count int, sp *spans, mutate func(*Config)) []*Node {
	return startNodes(t, count, func(c *Config) {
		c.TracerProvider = sp.tp
		if mutate != nil {
			mutate(c)
		}
	})
}

// TestTraceLocalAsk: an ask through the API of the member that hosts the entity is one
// trace: the HTTP server span named by route, the entity's handling of the message
// (with the guest call's host calls) and its first activation, each with the entity's
// attribute set, every child within its parent; the response names the server span in
// its traceparent header.
func TestTraceLocalAsk(t *testing.T) {
	sp := newSpans(t)
	n := tracedNodes(t, 1, sp, nil)[0]
	deployOn(t, n, "abitest")
	tid, status, tp, body := tracedRequest(t, n, "POST", askPath("abitest", "local"), "count")
	if status != 200 || body != "1" {
		t.Fatalf("ask: %d %q", status, body)
	}
	root := sp.wait(tid, "POST /v1/ask", nil)
	if root.SpanKind() != trace.SpanKindServer || !strings.Contains(tp, root.SpanContext().SpanID().String()) ||
		!strings.Contains(tp, tid.String()) {
		t.Fatalf("server span %v kind %v, response traceparent %q", root.SpanContext(), root.SpanKind(), tp)
	}
	if v, _ := attr(root, "http.route"); v.AsString() != "/v1/ask" {
		t.Errorf("http.route = %q", v.Emit())
	}
	self := n.Self().Address
	handle := sp.wait(tid, "handle abitest", nil)
	sp.under(handle, "POST /v1/ask")
	sp.under(sp.wait(tid, "activate abitest", nil), "handle abitest")
	sp.under(sp.wait(tid, "instantiate abitest", nil), "activate abitest")
	for _, s := range []sdktrace.ReadOnlySpan{handle, sp.wait(tid, "activate abitest", nil)} {
		entitySpan(t, s, "abitest", "local", self)
	}
	if v, _ := attr(handle, "shardhost.guest.host_calls"); v.Type() != attribute.INT64 {
		t.Errorf("handle: no shardhost.guest.host_calls")
	}
	if v, _ := attr(handle, "shardhost.message.kind"); v.AsString() != "ask" {
		t.Errorf("handle: message kind %q", v.Emit())
	}
	if v, _ := attr(sp.wait(tid, "activate abitest", nil), "shardhost.activation.state"); v.AsString() != "fresh" {
		t.Errorf("activation state %q", v.Emit())
	}
}

// TestTraceRemoteAskAndRestoredActivation: an ask through one member to an entity on
// another crosses as an RPC (client span, then the owner's server span that covers the
// entity's work); a first activation there loads state from the store; after a
// passivation the next activation restores it ("state load" with bytes, "restore").
func TestTraceRemoteAskAndRestoredActivation(t *testing.T) {
	sp := newSpans(t)
	nodes := tracedNodes(t, 2, sp, nil)
	deployOn(t, nodes[0], "abitest")
	id := entityOn(t, nodes[0], nodes[1], "abitest", "count")
	owner := nodes[1].Self().Address

	tid, status, _, body := tracedRequest(t, nodes[0], "POST", askPath("abitest", id), "count", "baggage", "tenant=acme")
	if status != 200 || body != "2" {
		t.Fatalf("ask: %d %q", status, body)
	}
	sp.wait(tid, "POST /v1/ask", nil)
	// The baggage crossed to the owner.
	if v, _ := attr(sp.wait(tid, "handle abitest", nil), "test.tenant"); v.AsString() != "acme" {
		t.Errorf("the owner's span has baggage tenant %q, want acme", v.Emit())
	}
	server := sp.wait(tid, "sharding/deliver", func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer })
	cli := sp.under(server, "sharding/deliver")
	if cli.SpanKind() != trace.SpanKindClient {
		t.Fatalf("the server span's parent is a %v span", cli.SpanKind())
	}
	for k, want := range map[string]string{"rpc.system": "shardhost", "rpc.service": "sharding", "rpc.method": "deliver"} {
		for _, s := range []sdktrace.ReadOnlySpan{cli, server} {
			if v, _ := attr(s, k); v.AsString() != want {
				t.Errorf("%v span: %s = %q, want %q", s.SpanKind(), k, v.Emit(), want)
			}
		}
	}
	if _, ok := attr(cli, "server.address"); !ok {
		t.Error("the client span has no server.address")
	}
	if _, ok := attr(server, "network.peer.address"); !ok {
		t.Error("the server span has no network.peer.address")
	}
	handle := sp.wait(tid, "handle abitest", nil)
	sp.under(handle, "sharding/deliver")
	entitySpan(t, handle, "abitest", id, owner)

	// A tell: a PRODUCER span on the sender, the owner's CONSUMER span its child.
	tid, status, _, _ = tracedRequest(t, nodes[0], "POST", "/v1/tell?type=abitest&id="+id, "count")
	if status != 202 {
		t.Fatalf("tell: %d", status)
	}
	consumer := sp.wait(tid, "handle abitest", nil)
	producer := sp.parentOf(consumer)
	if consumer.SpanKind() != trace.SpanKindConsumer || producer == nil || producer.Name() != "tell abitest" ||
		producer.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("tell trace:\n%s", sp.tree(tid))
	}
	entitySpan(t, consumer, "abitest", id, owner)
	testutil.Eventually(t, 15*time.Second, "the entity to answer count", func() bool { return client(t, nodes[0]).ask("abitest", id, "count").status == 200 })

	// Passivation (asked for by the entity), then a restored activation.
	if r := client(t, nodes[0]).ask("abitest", id, "passivate"); r.status != 200 {
		t.Fatalf("passivate: %d %s", r.status, r.body)
	}
	testutil.Eventually(t, 15*time.Second, "the entity to passivate", func() bool { return !activeIn(nodes[1], "abitest", id) })
	pass := sp.waitAny("passivate abitest", attrIs("shardhost.passivation.cause", "requested"))
	if len(pass.Links()) != 1 {
		t.Errorf("the requested passivation has %d links, want 1 (the message that asked)", len(pass.Links()))
	}
	sp.wait(pass.SpanContext().TraceID(), "state save", nil)
	tid, status, _, body = tracedRequest(t, nodes[0], "POST", askPath("abitest", id), "count")
	if status != 200 || body != "5" {
		t.Fatalf("ask after passivation: %d %q", status, body)
	}
	act := sp.wait(tid, "activate abitest", nil)
	if v, _ := attr(act, "shardhost.activation.state"); v.AsString() != "restored" {
		t.Errorf("activation state %q, want restored; trace:\n%s", v.Emit(), sp.tree(tid))
	}
	load := sp.wait(tid, "state load", nil)
	sp.under(load, "activate abitest")
	if v, _ := attr(load, "shardhost.state.bytes"); v.AsInt64() <= 0 {
		t.Errorf("state load bytes %v", v.Emit())
	}
	if v, _ := attr(load, "shardhost.state.replicas.answered"); v.AsInt64() < 1 {
		t.Errorf("state load replicas answered %v", v.Emit())
	}
	sp.under(sp.wait(tid, "restore abitest", nil), "activate abitest")
	entitySpan(t, load, "abitest", id, owner)
	t.Logf("restored activation across members:\n%s", sp.tree(tid))
}

// TestTraceGuestMajorityWrite: a guest's WriteMajority is a "ddata update" span under
// the span of the message it handles, with the key, type, consistency and replicas, and the writes to the
// other replicas are RPCs in the same trace.
func TestTraceGuestMajorityWrite(t *testing.T) {
	sp := newSpans(t)
	nodes := tracedNodes(t, 3, sp, nil)
	// A deploy through the API: every member prepares the type in the deploy's trace.
	tid, status, _, body := tracedRequest(t, nodes[0], "POST", "/v1/types/abitest", string(testwasm.Bytes(t, "abitest")))
	if status != 200 {
		t.Fatalf("deploy: %d %s", status, body)
	}
	sp.under(sp.wait(tid, "deploy abitest", nil), "POST /v1/types/{name}")
	prepared := map[string]bool{}
	for _, n := range nodes {
		p := sp.wait(tid, "prepare abitest", attrIs("shardhost.node", n.Self().Address))
		prepared[n.Self().Address] = true
		if n != nodes[0] {
			sp.under(p, "host/prepare")
		}
	}
	tid, status, _, body = tracedRequest(t, nodes[0], "POST", askPath("abitest", "w"), "ddup hits gcounter majority incr 2")
	if status != 200 || body != "2" {
		t.Fatalf("ddup: %d %q", status, body)
	}
	up := sp.wait(tid, "ddata update", attrIs("shardhost.ddata.key", "hits"))
	sp.under(up, "handle abitest")
	for k, want := range map[string]string{"shardhost.ddata.key": "hits", "shardhost.ddata.type": "gcounter",
		"shardhost.ddata.consistency": "majority", "shardhost.outcome": "ok", "shardhost.ddata.replicas.answered": "2",
		"shardhost.ddata.replicas.needed": "2"} {
		if v, _ := attr(up, k); v.Emit() != want {
			t.Errorf("ddata update: %s = %q, want %q", k, v.Emit(), want)
		}
	}
	// The writes to the other replicas are RPCs under it.
	sp.wait(tid, "ddata/write", func(s sdktrace.ReadOnlySpan) bool {
		c := sp.parentOf(s)
		return s.SpanKind() == trace.SpanKindServer && c != nil && c.Parent().SpanID() == up.SpanContext().SpanID()
	})
	// The API's own ddata calls are traced too.
	tid, status, _, _ = tracedRequest(t, nodes[1], "GET", "/v1/ddata/keys/hits?consistency=all", "")
	if status != 200 {
		t.Fatalf("ddata get: %d", status)
	}
	get := sp.wait(tid, "ddata get", nil)
	sp.under(get, "GET /v1/ddata/keys/{key...}")
	if v, _ := attr(get, "shardhost.ddata.replicas.answered"); v.AsInt64() != 3 {
		t.Errorf("ddata get replicas answered %v", v.Emit())
	}
}

// TestTraceTrapAndRefusals: a trap marks the entity's handling and the HTTP span failed with error.type guest-trap and an exception event; a refused request
// (unknown type, bad input) still has its HTTP span, failed.
func TestTraceTrapAndRefusals(t *testing.T) {
	sp := newSpans(t)
	n := tracedNodes(t, 1, sp, nil)[0]
	deployOn(t, n, "abitest")
	tid, status, _, _ := tracedRequest(t, n, "POST", askPath("abitest", "tr"), "trap")
	if status != 500 {
		t.Fatalf("trap: %d", status)
	}
	for _, name := range []string{"handle abitest", "POST /v1/ask"} {
		s := sp.wait(tid, name, nil)
		if s.Status().Code != codes.Error {
			t.Errorf("%s: status %v", name, s.Status())
		}
		if v, _ := attr(s, "error.type"); v.AsString() != sharding.CodeGuestTrap {
			t.Errorf("%s: error.type %q", name, v.Emit())
		}
	}
	found := false
	for _, e := range sp.wait(tid, "handle abitest", nil).Events() {
		found = found || e.Name == "exception"
	}
	if !found {
		t.Error("the message's span has no exception event")
	}
	for path, code := range map[string]string{askPath("nope", "x"): sharding.CodeUnknownType, "/v1/ask?type=abitest": sharding.CodeBadRequest} {
		tid, status, tp, _ := tracedRequest(t, n, "POST", path, "x")
		if status < 400 || tp == "" {
			t.Fatalf("%s: %d, traceparent %q", path, status, tp)
		}
		s := sp.wait(tid, "POST /v1/ask", nil)
		if v, _ := attr(s, "error.type"); s.Status().Code != codes.Error || v.AsString() != code {
			t.Errorf("%s: status %v error.type %q", path, s.Status(), v.Emit())
		}
	}
}

// TestTraceTimerStartsALinkedTrace: a timer's message starts a trace of its own, linked
// to the span of the message that set the timer; its spans are a PRODUCER "timer" and the
// entity's CONSUMER handling.
func TestTraceTimerStartsALinkedTrace(t *testing.T) {
	sp := newSpans(t)
	n := tracedNodes(t, 1, sp, nil)[0]
	deployOn(t, n, "abitest")
	tid, status, _, _ := tracedRequest(t, n, "POST", askPath("abitest", "tm"), "timer once 20 0 ping")
	if status != 200 {
		t.Fatalf("timer: %d", status)
	}
	setter := sp.wait(tid, "handle abitest", nil)
	fired := sp.waitAny("timer abitest", nil)
	if fired.SpanContext().TraceID() == tid || fired.Parent().IsValid() {
		t.Fatalf("the timer's message is not a new trace: %v parent %v", fired.SpanContext(), fired.Parent())
	}
	if fired.SpanKind() != trace.SpanKindProducer || len(fired.Links()) != 1 ||
		fired.Links()[0].SpanContext.SpanID() != setter.SpanContext().SpanID() {
		t.Fatalf("timer span kind %v, links %v; want a PRODUCER linked to %v", fired.SpanKind(), fired.Links(), setter.SpanContext())
	}
	handle := sp.wait(fired.SpanContext().TraceID(), "handle abitest", nil)
	if handle.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("the timer message's handling is %v", handle.SpanKind())
	}
	if v, _ := attr(handle, "shardhost.message.kind"); v.AsString() != "timer" {
		t.Errorf("message kind %q", v.Emit())
	}

	// A subscription's change messages too, linked to the subscription's span.
	tid, status, _, _ = tracedRequest(t, n, "POST", askPath("abitest", "sb"), "sub topics")
	if status != 200 {
		t.Fatalf("sub: %d", status)
	}
	subscriber := sp.wait(tid, "ddata subscribe", nil)
	sp.under(subscriber, "handle abitest")
	if r := client(t, n).do("POST", "/v1/ddata/keys/topics?type=gcounter", []byte("incr 1")); r.status != 200 {
		t.Fatalf("ddata update: %d %s", r.status, r.body)
	}
	changed := sp.waitAny("changed abitest", nil)
	if changed.Parent().IsValid() || len(changed.Links()) != 1 || changed.Links()[0].SpanContext.SpanID() != subscriber.SpanContext().SpanID() {
		t.Fatalf("the change's trace: parent %v links %v, want a root linked to %v", changed.Parent(), changed.Links(), subscriber.SpanContext())
	}
}

// TestTraceHandoffLinksTheMessagesItHeld: while a member hands its shards off (a
// graceful leave), messages for them are buffered; each buffered message's wait is a
// span linked to the handoff span of its shard, which records the entities it stopped
// and the messages it buffered.
func TestTraceHandoffLinksTheMessagesItHeld(t *testing.T) {
	sp := newSpans(t)
	nodes := tracedNodes(t, 2, sp, nil)
	// Under the passivation policy: with two members, a durable write needs both, so
	// under the journal the asks in flight while one leaves fail (not saved) until its
	// replicas are handed over, which is not what this test is about.
	if _, err := nodes[0].Deploy(context.Background(), testwasm.Bytes(t, "abitest"),
		sharding.TypeSettings{Name: "abitest", Checkpoint: sharding.CheckpointPassivation}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; len(ids) < 8; i++ {
		id := "h" + strconv.Itoa(i)
		r, err := nodes[0].Sharding().Ask(context.Background(), "abitest", id, []byte("count"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == nodes[1].Self().Address {
			ids = append(ids, id)
		}
	}
	// Load: askers through node 0 to the entities on node 1, until it has left.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed, asked atomic.Int64
	var firstErr atomic.Value
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, span := sp.tp.Tracer("test").Start(context.Background(), "load")
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := nodes[0].Sharding().Ask(actx, "abitest", id, []byte("count")); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				asked.Add(1)
				cancel()
				span.End()
			}
		}()
	}
	// The load under way before the leave: as many asks answered as there are askers.
	testutil.Eventually(t, 30*time.Second, "the load to start", func() bool { return asked.Load() >= int64(len(ids)) })
	if err := nodes[1].Close(); err != nil {
		t.Logf("close: %v", err)
	}
	close(stop)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Errorf("%d asks failed during the handoff, the first with: %v", f, firstErr.Load())
	}
	handoffs := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range sp.rec.Ended() {
		if s.Name() == "handoff abitest" {
			handoffs[s.SpanContext().SpanID()] = s
		}
	}
	if len(handoffs) == 0 {
		t.Fatal("no handoff span")
	}
	linked := 0
	for _, s := range sp.rec.Ended() {
		if s.Name() != "buffered abitest" {
			continue
		}
		if v, _ := attr(s, "shardhost.buffer.reason"); v.AsString() != "handoff" {
			continue
		}
		for _, l := range s.Links() {
			if h, ok := handoffs[l.SpanContext.SpanID()]; ok {
				linked++
				if n, _ := attr(h, "shardhost.handoff.entities_stopped"); n.AsInt64() < 1 {
					t.Errorf("the handoff that held a message stopped %v entities", n.Emit())
				}
			}
		}
	}
	if linked == 0 {
		t.Fatalf("no buffered message links to a handoff span (%d handoffs)", len(handoffs))
	}
	t.Logf("%d buffered messages link to one of %d handoff spans", linked, len(handoffs))
}

// deployOn deploys a test module as the entity type of its name.
func deployOn(t *testing.T, n *Node, name string) {
	t.Helper()
	if _, err := n.Deploy(context.Background(), testwasm.Bytes(t, name), sharding.TypeSettings{Name: name}); err != nil {
		t.Fatal(err)
	}
}

// entityOn returns an entity ID of typ that lives on owner, found by asking msg through
// via (the entity has handled msg once).
func entityOn(t *testing.T, via, owner *Node, typ, msg string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		id := "e" + strconv.Itoa(i)
		r, err := via.Sharding().Ask(context.Background(), typ, id, []byte(msg))
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == owner.Self().Address {
			return id
		}
	}
	t.Fatal("no entity landed on the owner")
	return ""
}

// activeIn reports whether typ/id is active on n.
func activeIn(n *Node, typ, id string) bool {
	for _, sh := range n.Sharding().LocalState().Shards {
		if sh.Type != typ {
			continue
		}
		for _, e := range sh.Entities {
			if e == id {
				return true
			}
		}
	}
	return false
}

// TestTraceCrossMemberFirstActivation: the first message to an entity whose shard has no
// home yet, sent through a member that is neither the coordinator's nor the entity's:
// the shard home is resolved by a request to the coordinator (RPC spans), which
// allocates the shard (its write to distributed data, HostShard to the owner), the message
// waits in the buffer (a span linked to the resolution), then crosses to the owner,
// where the entity is activated (state load, instantiation) and handles it. The trace
// is logged: docs/observability.md shows one.
func TestTraceCrossMemberFirstActivation(t *testing.T) {
	sp := newSpans(t)
	nodes := tracedNodes(t, 3, sp, nil)
	deployOn(t, nodes[0], "counter")
	coordinator := nodes[0] // the oldest member
	via, owner := nodes[2], nodes[1]
	if v := coordinator.Membership().View(); !v.HasLeader {
		t.Fatal("no leader")
	}
	for i := 0; i < 200; i++ {
		id := "first-" + strconv.Itoa(i)
		tid, status, _, body := tracedRequest(t, via, "POST", askPath("counter", id), "inc")
		if status != 200 || body != "1" {
			t.Fatalf("ask: %d %q", status, body)
		}
		handle := sp.wait(tid, "handle counter", nil)
		if v, _ := attr(handle, "shardhost.node"); v.AsString() != owner.Self().Address {
			continue
		}
		sp.wait(tid, "POST /v1/ask", nil)
		home := sp.wait(tid, "shard home counter", nil)
		sp.under(sp.wait(tid, "sharding/get-shard-home", func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindClient }), "shard home counter")
		server := sp.wait(tid, "sharding/get-shard-home", func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer })
		alloc := sp.wait(tid, "allocate counter", nil)
		if p := sp.parentOf(alloc); p == nil || p.SpanContext().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("the allocation is not under the coordinator's server span")
		}
		sp.wait(tid, "sharding/host-shard", func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer })
		buf := sp.wait(tid, "buffered counter", nil)
		if len(buf.Links()) != 1 || buf.Links()[0].SpanContext.SpanID() != home.SpanContext().SpanID() {
			t.Errorf("the buffered wait links to %v, want the shard home span", buf.Links())
		}
		sp.under(sp.wait(tid, "state load", nil), "activate counter")
		sp.under(sp.wait(tid, "instantiate counter", nil), "activate counter")
		t.Logf("cross-member first activation (via %s, coordinator %s, owner %s):\n%s", via.Self().Address,
			coordinator.Self().Address, owner.Self().Address, sp.tree(tid))
		return
	}
	t.Fatal("no entity landed on the owner")
}

// TestTraceparentWithTracingOff: with no tracer provider, every API response still names
// a trace in its traceparent header: the caller's (its trace ID and sampled flag kept) or
// a new unsampled one, a different one per request.
func TestTraceparentWithTracingOff(t *testing.T) {
	n := startNodes(t, 1, nil)[0]
	deployOn(t, n, "abitest")
	seen := map[string]bool{}
	for _, r := range []struct{ method, path, body string }{
		{"POST", askPath("abitest", "off"), "count"},
		{"POST", askPath("nope", "x"), "x"},
		{"GET", "/v1/members", ""},
		{"GET", "/alive", ""},
		{"GET", "/metrics", ""},
	} {
		req, err := http.NewRequest(r.method, "http://"+n.APIAddr()+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		tp := resp.Header.Get("traceparent")
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != "00" ||
			parts[1] == strings.Repeat("0", 32) || parts[2] == strings.Repeat("0", 16) {
			t.Fatalf("%s %s: %d, traceparent %q", r.method, r.path, resp.StatusCode, tp)
		}
		if seen[parts[1]] {
			t.Fatalf("%s %s: trace ID %s given twice", r.method, r.path, parts[1])
		}
		seen[parts[1]] = true
	}
	tid, status, tp, body := tracedRequest(t, n, "POST", askPath("abitest", "off"), "count")
	if status != 200 || body != "2" || !strings.HasPrefix(tp, "00-"+tid.String()+"-") || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("ask with a traceparent: %d %q, traceparent %q, want trace %s", status, body, tp, tid)
	}
}

// TestTraceDeployLearnedByGossipIsLinked: a member that joins after a deploy learns of the
// type by gossip; its "prepare" span starts a trace of its own, linked to the deploy's.
func TestTraceDeployLearnedByGossipIsLinked(t *testing.T) {
	sp := newSpans(t)
	first := tracedNodes(t, 1, sp, nil)[0]
	tid, status, _, body := tracedRequest(t, first, "POST", "/v1/types/abitest", string(testwasm.Bytes(t, "abitest")))
	if status != 200 {
		t.Fatalf("deploy: %d %s", status, body)
	}
	deploy := sp.wait(tid, "deploy abitest", nil)
	late := startNode(t, []string{first.Self().Address}, func(c *Config) { c.TracerProvider = sp.tp })
	p := sp.waitAny("prepare abitest", attrIs("shardhost.node", late.Self().Address))
	if p.Parent().IsValid() || p.SpanContext().TraceID() == tid {
		t.Fatalf("the late member's prepare: parent %v, trace %v; want a trace of its own", p.Parent(), p.SpanContext().TraceID())
	}
	if len(p.Links()) != 1 || p.Links()[0].SpanContext.SpanID() != deploy.SpanContext().SpanID() ||
		p.Links()[0].SpanContext.TraceID() != tid {
		t.Fatalf("the late member's prepare links %v, want the deploy span %v", p.Links(), deploy.SpanContext())
	}
}
