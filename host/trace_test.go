package host

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// TestTraceFollowsAMessageAcrossHosts: an ask through one node to an entity on another
// gives one trace with the API, region, forward, activation and guest call spans, the
// remote ones parented through the envelope's W3C trace context.
func TestTraceFollowsAMessageAcrossHosts(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	defer tp.Shutdown(context.Background())
	nodes := startNodes(t, 2, func(c *Config) { c.TracerProvider = tp })
	if _, err := nodes[0].Deploy(context.Background(), testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter"}); err != nil {
		t.Fatal(err)
	}
	// Find an entity that lives on node 1, asking through node 0's API.
	var id string
	for i := 0; ; i++ {
		id = "traced-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		r := client(t, nodes[0]).ask("counter", id, "inc")
		if r.status != 200 {
			t.Fatalf("ask: %d %s", r.status, r.body)
		}
		if r.node == nodes[1].Self().Address {
			break
		}
	}
	var apiSpan sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "api ask" {
			for _, a := range s.Attributes() {
				if a.Key == "shardhost.entity_id" && a.Value.AsString() == id {
					apiSpan = s
				}
			}
		}
	}
	if apiSpan == nil {
		t.Fatal("no api ask span for the entity")
	}
	trace := apiSpan.SpanContext().TraceID()
	seen := map[string]bool{}
	for _, s := range recorder.Ended() {
		if s.SpanContext().TraceID() == trace {
			seen[s.Name()] = true
		}
	}
	for _, want := range []string{"api ask", "shard region ask", "forward", "shard region receive", "activate", "guest call"} {
		if !seen[want] {
			t.Errorf("trace %s lacks a %q span; it has %v", trace, want, seen)
		}
	}
}
