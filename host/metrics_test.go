package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/telemetry"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// withMetrics gives a node's configuration the metric pipeline of a shardhost process.
func withMetrics(t *testing.T, c *Config) {
	m, err := telemetry.NewMetrics(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	c.MeterProvider, c.MetricsHandler = m.Provider, m.Handler
}

// scrape reads GET /metrics of a node over HTTP and parses the Prometheus text format.
func scrape(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + n.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	body, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// sample sums the values of family name's series whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

func familyNames(fams map[string]*dto.MetricFamily) string {
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, "\n")
}

// TestMetricsEndpointCountsTraffic sends known traffic through one member to entities on
// another, scrapes GET /metrics of both over HTTP, parses the Prometheus text, and finds
// the counts equal to what was sent.
func TestMetricsEndpointCountsTraffic(t *testing.T) {
	nodes := startNodes(t, 2, func(c *Config) { withMetrics(t, c) })
	deployOn(t, nodes[0], "abitest")
	id := entityOn(t, nodes[0], nodes[1], "abitest", "count") // 1 ask, through the API's Go call
	const asks, tells = 7, 5
	c := client(t, nodes[0])
	for i := 0; i < asks; i++ {
		if r := c.ask("abitest", id, "count"); r.status != 200 {
			t.Fatalf("ask: %d %s", r.status, r.body)
		}
	}
	for i := 0; i < tells; i++ {
		if r := c.tell("abitest", id, "count"); r.status != 202 {
			t.Fatalf("tell: %d %s", r.status, r.body)
		}
	}
	if r := c.ask("nope", "x", "y"); r.status != 404 {
		t.Fatalf("unknown type: %d", r.status)
	}
	typ := map[string]string{"shardhost_entity_type": "abitest"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"shardhost_entity_type": "abitest"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// An instrument records after the reply it measures has gone (an HTTP server's
	// duration once the handler returned, an RPC's once the reply was written): the
	// scrapes are read until every count is there, and a count that never comes is
	// reported.
	type check struct {
		fams  *map[string]*dto.MetricFamily
		name  string
		want  map[string]string
		value float64
	}
	var owner, front map[string]*dto.MetricFamily
	checks := []check{
		{&owner, "shardhost_entity_message_duration_seconds", with("shardhost_message_kind", "ask", "shardhost_message_source", "remote", "shardhost_outcome", "ok"), asks + 1},
		{&owner, "shardhost_entity_message_duration_seconds", with("shardhost_message_kind", "tell", "shardhost_message_source", "remote", "shardhost_outcome", "ok"), tells},
		{&owner, "shardhost_entity_activations_total", with("shardhost_activation_state", "fresh", "shardhost_outcome", "ok"), 1},
		{&owner, "shardhost_entities_active", typ, 1},
		{&owner, "shardhost_guest_call_duration_seconds", typ, asks + tells + 1},
		{&owner, "shardhost_cluster_members", map[string]string{"shardhost_member_status": "up"}, 2},
		{&owner, "shardhost_cluster_converged", nil, 1},
		{&owner, "rpc_server_duration_milliseconds", map[string]string{"rpc_method": "deliver", "rpc_service": "sharding"}, asks + 1},
		{&front, "http_server_request_duration_seconds", map[string]string{"http_route": "/v1/ask", "http_response_status_code": "200"}, asks},
		{&front, "http_server_request_duration_seconds", map[string]string{"http_route": "/v1/tell", "http_response_status_code": "202"}, tells},
		{&front, "http_server_request_duration_seconds", map[string]string{"http_route": "/v1/ask", "http_response_status_code": "404"}, 1},
		{&front, "rpc_client_duration_milliseconds", map[string]string{"rpc_method": "deliver"}, asks + 1},
		{&front, "shardhost_deploys_total", with("shardhost_outcome", "ok"), 1},
		{&owner, "shardhost_entities_mailbox_depth", typ, 0},
		{&owner, "shardhost_module_version_current", typ, 1},
		{&front, "shardhost_module_version_current", typ, 1},
	}
	testutil.EventuallyNil(t, 15*time.Second, "the metrics' values", func() error {
		owner, front = scrape(t, nodes[1]), scrape(t, nodes[0])
		var mismatches []string
		for _, c := range checks {
			if got, found := sample(*c.fams, c.name, c.want); !found || got != c.value {
				mismatches = append(mismatches, fmt.Sprintf("%s%v = %v (found %v), want %v", c.name, c.want, got, found, c.value))
			}
		}
		if len(mismatches) > 0 {
			return errors.New(strings.Join(mismatches, "\n"))
		}
		return nil
	})
	for _, name := range []string{"shardhost_entity_memory_bytes", "shardhost_shards", "shardhost_transport_frames_total",
		"shardhost_transport_io_bytes_total", "shardhost_ddata_keys", "shardhost_state_operations_total", "go_memory_used_bytes",
		"go_goroutine_count", "shardhost_cluster_phi", "shardhost_entities_state_size_bytes"} {
		if _, ok := owner[name]; !ok {
			t.Errorf("no %s; the families are:\n%s", name, familyNames(owner))
		}
	}
	if v, _ := sample(owner, "shardhost_entity_memory_bytes", typ); v <= 0 {
		t.Errorf("entity memory %v", v)
	}
	// Entity IDs are never metric labels.
	for name, f := range owner {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetValue() == id || strings.Contains(l.GetName(), "entity_id") {
					t.Errorf("%s has the label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

var scraped = map[*Node]map[string]*dto.MetricFamily{}

// nodes0 scrapes the first node once per test.
func nodes0(t *testing.T, nodes []*Node) map[string]*dto.MetricFamily {
	if f, ok := scraped[nodes[0]]; ok {
		return f
	}
	f := scrape(t, nodes[0])
	scraped[nodes[0]] = f
	return f
}

// readiness reads GET /ready.
func readiness(t *testing.T, n *Node) (int, Readiness) {
	t.Helper()
	resp, err := http.Get("http://" + n.APIAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rd Readiness
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, rd
}

// TestReadyProbe: /alive answers 200 while the process serves; /ready is 503 with a
// reason while the member is joining (not up: the cluster waits for a second member),
// 200 once it is up in a converged view, and 503 again during a graceful leave.
func TestReadyProbe(t *testing.T) {
	lc := tolerantLifecycle()
	lc.MinMembers = 2
	first := startNode(t, nil, func(c *Config) { c.Lifecycle = lc })
	if r := client(t, first).do("GET", "/alive", nil); r.status != 200 {
		t.Fatalf("/alive: %d", r.status)
	}
	status, rd := readiness(t, first)
	if status != http.StatusServiceUnavailable || rd.Status != "not-ready" || !strings.Contains(rd.Reason, "joining") {
		t.Fatalf("/ready before up: %d %+v", status, rd)
	}
	second := startNode(t, []string{first.Self().Address}, func(c *Config) { c.Lifecycle = lc })
	waitMembers(t, []*Node{first, second})
	for _, n := range []*Node{first, second} {
		testutil.Eventually(t, 15*time.Second, "/ready to answer 200", func() bool { s, _ := readiness(t, n); return s == 200 })
	}
	_, rd = readiness(t, second)
	if rd.Status != "ready" || rd.MemberStatus != "up" || !rd.Converged {
		t.Fatalf("/ready when up: %+v", rd)
	}
	// A graceful leave: not ready from the moment it begins.
	if r := client(t, second).do("POST", "/v1/leave", nil); r.status != 202 {
		t.Fatalf("leave: %d %s", r.status, r.body)
	}
	testutil.Eventually(t, 15*time.Second, "/ready to answer 503 during the leave", func() bool {
		s, rd := readiness(t, second)
		return s == http.StatusServiceUnavailable && (strings.Contains(rd.Reason, "leaving") || strings.Contains(rd.Reason, "out of the cluster"))
	})
	if r := client(t, second).do("GET", "/alive", nil); r.status != 200 {
		t.Fatalf("/alive while leaving: %d", r.status)
	}
	<-second.Exited()
	s, rd := readiness(t, second)
	if s != http.StatusServiceUnavailable || rd.Reason == "" {
		t.Fatalf("/ready after leaving: %d %+v", s, rd)
	}
	testutil.Eventually(t, 15*time.Second, "the leaver to be removed", func() bool {
		for _, m := range first.Members() {
			if m.Address == second.Self().Address && m.Status != cluster.StatusRemoved {
				return false
			}
		}
		return true
	})
}

// TestReadyWaitsForEveryKnownType: a member whose catalog holds a type it has no region
// of (learned by gossip, its module not yet fetched, or here never to be: no member has
// it) is not ready, and says which type; it is once the type runs here.
func TestReadyWaitsForEveryKnownType(t *testing.T) {
	n := startNodes(t, 1, nil)[0]
	testutil.Eventually(t, 15*time.Second, "/ready to answer 200", func() bool { s, _ := readiness(t, n); return s == 200 })
	ghost := n.catalog.next(sharding.TypeSettings{Name: "ghost", NumberOfShards: 10}, strings.Repeat("ab", 32), 100, "127.0.0.1:1", nil)
	n.catalog.merge([]TypeInfo{ghost})
	if s, rd := readiness(t, n); s != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "entity type ghost") {
		t.Fatalf("/ready with a type whose module no member has: %d %+v", s, rd)
	}
	if _, err := n.Deploy(context.Background(), testwasm.Bytes(t, "abitest"), sharding.TypeSettings{Name: "ghost"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "/ready to answer 200 once ghost runs", func() bool { s, _ := readiness(t, n); return s == 200 })
}
