package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// otlpReceiver is an OTLP/HTTP receiver (protobuf) inside the test: it decodes what the
// shardhost processes export and keeps the spans, with their resource's shardhost.node,
// and the names of the metrics.
type otlpReceiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []receivedSpan
	metrics map[string]bool
}

type receivedSpan struct {
	node string
	span *tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{metrics: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp proto.Message
	switch req.URL.Path {
	case "/v1/traces":
		var in coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			node := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "shardhost.node" {
					node = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, receivedSpan{node, s})
				}
			}
		}
		r.mu.Unlock()
		resp = &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var in colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rm := range in.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					r.metrics[m.Name] = true
				}
			}
		}
		r.mu.Unlock()
		resp = &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, req)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// trace returns the spans received for a trace ID (hex).
func (r *otlpReceiver) trace(id string) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if hex.EncodeToString(s.span.TraceId) == id {
			out = append(out, s)
		}
	}
	return out
}

func (r *otlpReceiver) hasMetric(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.metrics[name]
}

// TestOTLPTraceAcrossThreeProcesses: three shardhost processes export spans and metrics
// by OTLP/HTTP to a receiver inside the test. An ask through one member, with -v, gives
// its trace ID; the trace arrives from two processes with the parents right across them:
// the asker's CLIENT span is the parent of the owner's SERVER span, under which the
// entity's handling and activation are.
func TestOTLPTraceAcrossThreeProcesses(t *testing.T) {
	rcv := newOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
	t.Setenv("OTEL_SERVICE_NAME", "shardhost-e2e")

	a := startHost(t, "")
	b := startHost(t, a.bind)
	c := startHost(t, a.bind)
	hosts := []*host{a, b, c}
	waitForCluster(t, hosts)
	wasm := testwasm.Path(t, "counter")
	if _, errText, ok := cli(t, a, nil, "deploy", "--type", "counter", wasm); !ok {
		t.Fatalf("deploy: %s", errText)
	}
	// An entity that lives on another member than a.
	var id, owner string
	for i := 0; id == ""; i++ {
		cand := "otlp-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		out, errText, ok := cli(t, a, nil, "ask", "-v", "counter/"+cand, "inc")
		if !ok || strings.TrimSpace(out) != "1" {
			t.Fatalf("ask: %q %q", out, errText)
		}
		if !strings.Contains(errText, "hosted on "+a.bind) {
			id = cand
			for _, h := range hosts {
				if strings.Contains(errText, "hosted on "+h.bind) {
					owner = h.bind
				}
			}
		}
	}
	out, errText, ok := cli(t, a, nil, "ask", "-v", "counter/"+id, "inc")
	if !ok || strings.TrimSpace(out) != "2" {
		t.Fatalf("ask: %q %q", out, errText)
	}
	var traceID string
	for _, line := range strings.Split(errText, "\n") {
		if rest, ok := strings.CutPrefix(line, "trace "); ok {
			traceID = strings.TrimSpace(rest)
		}
	}
	if len(traceID) != 32 {
		t.Fatalf("ask -v printed no trace ID: %q", errText)
	}

	var spans []receivedSpan
	byName := func(name string, kind tracepb.Span_SpanKind) *receivedSpan {
		for i := range spans {
			if spans[i].span.Name == name && spans[i].span.Kind == kind {
				return &spans[i]
			}
		}
		return nil
	}
	testutil.EventuallyNil(t, 30*time.Second, "trace "+traceID+" whole", func() error {
		spans = rcv.trace(traceID)
		if byName("handle counter", tracepb.Span_SPAN_KIND_INTERNAL) != nil && byName("POST /v1/ask", tracepb.Span_SPAN_KIND_SERVER) != nil {
			return nil
		}
		return fmt.Errorf("%d spans", len(spans))
	})
	nodes := map[string]bool{}
	for _, s := range spans {
		nodes[s.node] = true
	}
	if !nodes[a.bind] || !nodes[owner] || len(nodes) < 2 {
		t.Fatalf("the trace came from %v, want %s and %s", nodes, a.bind, owner)
	}
	server := byName("sharding/deliver", tracepb.Span_SPAN_KIND_SERVER)
	client := byName("sharding/deliver", tracepb.Span_SPAN_KIND_CLIENT)
	if server == nil || client == nil {
		t.Fatalf("no sharding/deliver client and server spans in %d spans", len(spans))
	}
	if client.node != a.bind || server.node != owner || string(server.span.ParentSpanId) != string(client.span.SpanId) {
		t.Fatalf("client on %s, server on %s (owner %s), server's parent %x, client %x",
			client.node, server.node, owner, server.span.ParentSpanId, client.span.SpanId)
	}
	handle := byName("handle counter", tracepb.Span_SPAN_KIND_INTERNAL)
	if handle == nil || string(handle.span.ParentSpanId) != string(server.span.SpanId) || handle.node != owner {
		t.Fatalf("the entity's handling is not under the owner's server span")
	}
	if handle.span.EndTimeUnixNano > server.span.EndTimeUnixNano {
		t.Errorf("the owner's server span ends before its child")
	}
	testutil.Eventually(t, 30*time.Second, "metrics pushed by OTLP", func() bool {
		return rcv.hasMetric("shardhost.entity.message.duration") && rcv.hasMetric("http.server.request.duration")
	})
}
