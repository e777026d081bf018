package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// testLogger discards the nodes' logs, unless SHARDHOST_TEST_LOG is set: then they go
// to stderr, at that level (debug, info, warn, error).
func testLogger() *slog.Logger {
	level, ok := os.LookupEnv("SHARDHOST_TEST_LOG")
	if !ok {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// startNode starts a node on 127.0.0.1 with OS-chosen ports.
func startNode(t testing.TB, join []string, mutate func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.TransportAddr = "127.0.0.1:0"
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Join = join
	cfg.DataDir = t.TempDir()
	cfg.GossipProfile = "local"
	cfg.Lifecycle = tolerantLifecycle()
	cfg.Runtime.CacheDir = cacheDir
	// Message deadlines in tests assume compiled code; deploy_test.go tests the
	// interpreter's path with this off.
	cfg.Runtime.CompileBeforeServing = true
	cfg.Logger = testLogger()
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Kill() })
	return n
}

func startNodes(t *testing.T, count int, mutate func(*Config)) []*Node {
	t.Helper()
	nodes := []*Node{startNode(t, nil, mutate)}
	for i := 1; i < count; i++ {
		nodes = append(nodes, startNode(t, []string{nodes[0].Self().Address}, mutate))
	}
	waitMembers(t, nodes)
	return nodes
}

// waitMembers waits until every node sees every node up, and converged; it fails tb
// after 30 s.
func waitMembers(tb testing.TB, nodes []*Node) {
	tb.Helper()
	testutil.EventuallyNil(tb, 30*time.Second, fmt.Sprintf("%d up members in a converged view", len(nodes)), func() error {
		for _, n := range nodes {
			v := n.Membership().View()
			up := 0
			for _, m := range v.Members {
				if m.Status == cluster.StatusUp && m.Reachable {
					up++
				}
			}
			if !v.Converged || up != len(nodes) || len(v.Members) != len(nodes) {
				return fmt.Errorf("%s sees %v (converged %v)", n.Self().Address, v.Members, v.Converged)
			}
		}
		return nil
	})
}

type apiClient struct {
	t    *testing.T
	base string
}

func client(t *testing.T, n *Node) apiClient { return apiClient{t, "http://" + n.APIAddr()} }

type apiResult struct {
	status int
	body   []byte
	node   string
	err    apiError
}

func (c apiClient) do(method, path string, body []byte) apiResult {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	res := apiResult{status: resp.StatusCode, body: b, node: resp.Header.Get(NodeHeader)}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &res.err); err != nil {
			c.t.Fatalf("%s %s: error body is not JSON: %q", method, path, b)
		}
	}
	return res
}

func (c apiClient) ask(typ, id, msg string) apiResult {
	c.t.Helper()
	return c.do("POST", "/v1/ask?type="+url.QueryEscape(typ)+"&id="+url.QueryEscape(id), []byte(msg))
}

func (c apiClient) tell(typ, id, msg string) apiResult {
	c.t.Helper()
	return c.do("POST", "/v1/tell?type="+url.QueryEscape(typ)+"&id="+url.QueryEscape(id), []byte(msg))
}

func TestThreeNodesDeployAndServeCounters(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	deploy := client(t, nodes[1]).do("POST", "/v1/types/counter", testwasm.Bytes(t, "counter"))
	if deploy.status != 200 {
		t.Fatalf("deploy: %d %s", deploy.status, deploy.body)
	}
	var res DeployResult
	if err := json.Unmarshal(deploy.body, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != 3 || res.Type.NumberOfShards != 100 || res.Type.Version != 1 {
		t.Fatalf("deploy result %+v", res)
	}
	for _, m := range res.Members {
		if !m.Ready {
			t.Fatalf("not ready on %s: %s", m.Node, m.Error)
		}
	}
	// 60 entities, IDs in several scripts, incremented through every node.
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("ctr-%d-é/ü 日本", i)
			for k := 0; k <= i%4; k++ {
				if r := client(t, nodes[(i+k)%3]).tell("counter", id, "inc"); r.status != http.StatusAccepted {
					t.Errorf("tell: %d %s", r.status, r.body)
				}
			}
		}()
	}
	wg.Wait()
	hosts := map[string]bool{}
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("ctr-%d-é/ü 日本", i)
		want := strconv.Itoa(i%4 + 1)
		// Tells from different nodes race each other; wait until all have arrived.
		var r apiResult
		testutil.EventuallyNil(t, 30*time.Second, id+" = "+want, func() error {
			if r = client(t, nodes[i%3]).ask("counter", id, "get"); r.status != 200 || string(r.body) != want {
				return fmt.Errorf("%d %q", r.status, r.body)
			}
			return nil
		})
		hosts[r.node] = true
	}
	if len(hosts) < 2 {
		t.Fatalf("every entity on %v", hosts)
	}
	var shards ShardsReport
	if r := client(t, nodes[2]).do("GET", "/v1/shards", nil); r.status != 200 || json.Unmarshal(r.body, &shards) != nil {
		t.Fatalf("shards: %d %s", r.status, r.body)
	}
	total := 0
	for _, reg := range shards.Regions {
		for _, sh := range reg.Shards {
			total += sh.Entities
		}
	}
	if len(shards.Regions) != 3 || total != 60 {
		t.Fatalf("shards report: %d regions, %d entities: %s", len(shards.Regions), total, mustJSON(shards))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestLateJoinerGetsDeployedTypes(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	if r := client(t, nodes[0]).do("POST", "/v1/types/counter?shards=7", testwasm.Bytes(t, "counter")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	late := startNode(t, []string{nodes[1].Self().Address}, nil)
	waitMembers(t, append(nodes, late))
	testutil.EventuallyNil(t, 10*time.Second, "the late joiner to know the type", func() error {
		if types := late.Types(); len(types) != 1 || types[0].NumberOfShards != 7 {
			return fmt.Errorf("it knows %v", types)
		}
		return nil
	})
	// It can host entities: ask until one lands on it (least-shard sends new shards there).
	for i := 0; i < 50; i++ {
		r := client(t, late).ask("counter", "late-"+strconv.Itoa(i), "inc")
		if r.status != 200 {
			t.Fatalf("ask via late joiner: %d %s", r.status, r.body)
		}
		if r.node == late.Self().Address {
			return
		}
	}
	t.Fatal("no entity was hosted on the late joiner")
}

func TestAPIBadInputs(t *testing.T) {
	nodes := startNodes(t, 2, func(c *Config) {
		c.Runtime.MessageDeadline = 300 * time.Millisecond
		c.Runtime.MaxMessageSize = 1024
	})
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy faulty: %d %s", r.status, r.body)
	}
	cases := []struct {
		name   string
		res    apiResult
		status int
		code   string
		text   string
	}{
		{"not wasm", c.do("POST", "/v1/types/x", []byte("hello")), 400, "bad-request", "not a WebAssembly binary"},
		{"no exports", c.do("POST", "/v1/types/x", []byte("\x00asm\x01\x00\x00\x00")), 400, "bad-request", "missing required exports"},
		{"bad type name", c.do("POST", "/v1/types/bad%20name", testwasm.Bytes(t, "counter")), 400, "bad-request", "entity type name"},
		{"shards change", c.do("POST", "/v1/types/faulty?shards=5", testwasm.Bytes(t, "faulty")), 409, "bad-request", "cannot change"},
		{"unknown type", c.ask("nope", "a", "x"), 404, "unknown-entity-type", "unknown entity type"},
		{"type typo", c.ask("faulti", "a", "x"), 404, "unknown-entity-type", `"faulti"; did you mean "faulty"?`},
		{"empty id", c.ask("faulty", "", "x"), 400, "bad-request", "empty entity ID"},
		{"missing type", c.do("POST", "/v1/ask?id=a", nil), 400, "bad-request", "type is missing"},
		{"payload over cap", c.ask("faulty", "a", strings.Repeat("x", 1025)), 413, "bad-request", "over the cap"},
		{"tell over cap", c.tell("faulty", "a", strings.Repeat("x", 1025)), 413, "bad-request", "over the cap"},
		{"entity error", c.ask("faulty", "a", "fail"), 422, "entity-error", "failure requested"},
		{"trap", c.ask("faulty", "a", "trap"), 500, "guest-trap", "panic: faulty: trap requested"},
		{"loop", c.ask("faulty", "b", "loop"), 504, "guest-deadline", "deadline"},
		{"unknown endpoint", c.do("GET", "/v2/whatever", nil), 404, "bad-request", "no such endpoint"},
	}
	for _, tc := range cases {
		if tc.res.status != tc.status || tc.res.err.Code != tc.code || !strings.Contains(tc.res.err.Error, tc.text) {
			t.Errorf("%s: %d %+v, want %d %s containing %q", tc.name, tc.res.status, tc.res.err, tc.status, tc.code, tc.text)
		}
	}
	// After all that, both nodes still serve, and the trapped and looping entities come back.
	for _, n := range nodes {
		for _, id := range []string{"a", "b"} {
			if r := client(t, n).ask("faulty", id, "echo ok"); r.status != 200 || string(r.body) != "ok" {
				t.Fatalf("after bad inputs, %s via %s: %d %s", id, n.Self().Address, r.status, r.body)
			}
		}
	}
}

func TestAPIMembersAndHealth(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	r := client(t, nodes[1]).do("GET", "/v1/members", nil)
	var members []map[string]any
	if err := json.Unmarshal(r.body, &members); err != nil || len(members) != 2 {
		t.Fatalf("members: %s", r.body)
	}
	for _, m := range members {
		if m["status"] != "up" || m["uid"] == "" || m["address"] == "" || m["reachable"] != true {
			t.Fatalf("member %v", m)
		}
	}
	if r := client(t, nodes[0]).do("GET", "/v1/health", nil); r.status != 200 || !strings.Contains(string(r.body), nodes[0].Self().Address) {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
}

// tolerantLifecycle is quick to form a cluster but slow to find a member unreachable:
// these tests do not crash members, and a loaded CI machine under the race detector must
// not make them look crashed.
func tolerantLifecycle() cluster.CoreConfig {
	c := cluster.DefaultLocalCoreConfig()
	c.FailureDetector.AcceptableHeartbeatPause = 5 * time.Second
	c.SBRStableAfter = 10 * time.Second
	return c
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A redeploy keeps the settings its query leaves out, reports what it changed, and
// reset_settings=true starts from the defaults.
func TestRedeployKeepsSettings(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := client(t, nodes[0])
	wasm := testwasm.Bytes(t, "counter")
	deploy := func(query string) DeployResult {
		t.Helper()
		r := c.do("POST", "/v1/types/counter?"+query, wasm)
		var res DeployResult
		if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
			t.Fatalf("deploy ?%s: %d %s", query, r.status, r.body)
		}
		return res
	}
	first := deploy("checkpoint=every-message&passivate_after=2s&max_active=7")
	if len(first.Changed) != 0 {
		t.Fatalf("a new type changed %v", first.Changed)
	}
	res := deploy("max_active=9")
	if res.Type.Checkpoint != "every-message" || res.Type.PassivateAfterMs != 2000 || res.Type.MaxActive != 9 {
		t.Fatalf("redeploy with one flag: %+v", res.Type)
	}
	if len(res.Changed) != 1 || res.Changed["max-active"] != "7" {
		t.Fatalf("changed %v, want max-active (was 7)", res.Changed)
	}
	if len(res.Settings) != 22 || res.Settings[2] != (Setting{"checkpoint", "every-message"}) || res.Settings[3] != (Setting{"history", "1000"}) {
		t.Fatalf("settings %v", res.Settings)
	}
	res = deploy("passivate_after=0s")
	if res.Type.PassivateAfterMs != 0 || res.Type.Checkpoint != "every-message" || res.Changed["passivate-after"] != "2s" {
		t.Fatalf("passivate_after cleared: %+v, changed %v", res.Type, res.Changed)
	}
	res = deploy("reset_settings=true")
	if res.Type.Checkpoint != "journal" || res.Type.MaxActive != 0 || res.Changed["checkpoint"] != "every-message" {
		t.Fatalf("reset: %+v, changed %v", res.Type, res.Changed)
	}
	// The history a base leaves behind: set, kept by a redeploy, none at 0.
	res = deploy("history=5")
	if res.Type.History != 5 || res.Settings[3] != (Setting{"history", "5"}) || res.Changed["history"] != "1000" {
		t.Fatalf("history=5: %+v, settings %v, changed %v", res.Type, res.Settings, res.Changed)
	}
	if res = deploy("max_active=1"); res.Type.History != 5 {
		t.Fatalf("a redeploy without history: %+v", res.Type)
	}
	if res = deploy("history=0"); res.Type.History != -1 || res.Settings[3] != (Setting{"history", "0"}) {
		t.Fatalf("history=0: %+v, settings %v", res.Type, res.Settings)
	}
	// Or a duration, which counts in place of the records.
	if res = deploy("history=24h"); res.Type.HistoryAgeMs != 86_400_000 || res.Settings[3] != (Setting{"history", "24h0m0s"}) {
		t.Fatalf("history=24h: %+v, settings %v", res.Type, res.Settings)
	}
	if st := res.Type.Settings(); st.HistoryAge != 24*time.Hour {
		t.Fatalf("history=24h: sharding settings %+v", st)
	}
	if res = deploy("max_active=2"); res.Type.HistoryAgeMs != 86_400_000 {
		t.Fatalf("a redeploy without history: %+v", res.Type)
	}
	if res.Settings[4] != (Setting{"idempotency-retention", "24h0m0s"}) {
		t.Fatalf("the default idempotency retention: %v", res.Settings)
	}
	if res = deploy("idempotency_retention=1h"); res.Type.IdempotencyRetentionMs != 3_600_000 || res.Settings[4] != (Setting{"idempotency-retention", "1h0m0s"}) {
		t.Fatalf("idempotency_retention=1h: %+v, settings %v", res.Type, res.Settings)
	}
	// Outbound HTTP: none by default; set, kept by a redeploy, cleared by egress=.
	if res.Settings[12] != (Setting{"egress", ""}) || res.Settings[13] != (Setting{"egress-timeout", "10s"}) {
		t.Fatalf("the default egress settings: %v", res.Settings)
	}
	res = deploy("egress=https://api.example.com,http://10.0.0.5:8080&egress_timeout=2s&egress_max_response=4096&egress_rate=0.5")
	if strings.Join(res.Type.Egress, " ") != "https://api.example.com http://10.0.0.5:8080" || res.Type.EgressTimeoutMs != 2000 ||
		res.Type.EgressMaxResponse != 4096 || res.Type.EgressRate != 0.5 || res.Changed["egress"] != "" || len(res.Changed) != 4 {
		t.Fatalf("egress: %+v, changed %v", res.Type, res.Changed)
	}
	if res = deploy("max_active=3"); len(res.Type.Egress) != 2 || res.Type.EgressRate != 0.5 {
		t.Fatalf("a redeploy without egress: %+v", res.Type)
	}
	if res = deploy("egress="); len(res.Type.Egress) != 0 || res.Type.EgressTimeoutMs != 2000 {
		t.Fatalf("egress= : %+v", res.Type)
	}
	for _, bad := range []string{"egress=ftp://x", "egress=http://x/path", "egress_timeout=x", "egress_rate=-1", "egress_max_response=99999999999"} {
		if r := c.do("POST", "/v1/types/counter?"+bad, wasm); r.status != 400 {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	// The state TTL: off by default; set, kept by a redeploy, cleared by 0; too short,
	// negative or not a duration refused.
	if res.Settings[21] != (Setting{"state-ttl", "0s"}) || res.Type.Settings().StateTTL != 0 {
		t.Fatalf("the default state TTL: %v", res.Settings)
	}
	if res = deploy("state_ttl=720h"); res.Type.StateTTLMs != 720*3_600_000 || res.Settings[21] != (Setting{"state-ttl", "720h0m0s"}) ||
		res.Changed["state-ttl"] != "0s" || res.Type.Settings().StateTTL != 720*time.Hour {
		t.Fatalf("state_ttl=720h: %+v, settings %v, changed %v", res.Type, res.Settings, res.Changed)
	}
	if res = deploy("max_active=4"); res.Type.StateTTLMs != 720*3_600_000 {
		t.Fatalf("a redeploy without state_ttl: %+v", res.Type)
	}
	for _, bad := range []string{"state_ttl=30s", "state_ttl=-1h", "state_ttl=soon"} {
		if r := c.do("POST", "/v1/types/counter?"+bad, wasm); r.status != 400 || !strings.Contains(string(r.body), "state_ttl") {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if res = deploy("state_ttl=0"); res.Type.StateTTLMs != 0 || res.Changed["state-ttl"] != "720h0m0s" {
		t.Fatalf("state_ttl=0: %+v, changed %v", res.Type, res.Changed)
	}
	// Delivery: effectively-once by default; at-most-once set, kept by a redeploy; a bad
	// one refused.
	if res.Settings[16] != (Setting{"delivery", "effectively-once"}) {
		t.Fatalf("the default delivery: %v", res.Settings)
	}
	if res = deploy("delivery=at-most-once"); res.Type.Delivery != "at-most-once" || res.Type.Settings().Delivery != sharding.DeliveryAtMostOnce ||
		res.Changed["delivery"] != "effectively-once" {
		t.Fatalf("delivery=at-most-once: %+v, changed %v", res.Type, res.Changed)
	}
	if res = deploy("max_active=4"); res.Type.Delivery != "at-most-once" {
		t.Fatalf("a redeploy without delivery: %+v", res.Type)
	}
	if r := c.do("POST", "/v1/types/counter?delivery=twice", wasm); r.status != 400 || !strings.Contains(string(r.body), "at-most-once") {
		t.Errorf("delivery=twice: %d %s", r.status, r.body)
	}
	// The passivation strategy: lru by default, set, kept by a redeploy; a bad one is
	// refused and changes nothing.
	if res.Settings[8] != (Setting{"passivation-strategy", "lru"}) {
		t.Fatalf("the default passivation strategy: %v", res.Settings)
	}
	res = deploy("passivation_strategy=w-tinylfu")
	if res.Type.PassivationStrategy != "w-tinylfu" || res.Settings[8] != (Setting{"passivation-strategy", "w-tinylfu"}) || res.Changed["passivation-strategy"] != "lru" {
		t.Fatalf("passivation_strategy=w-tinylfu: %+v, settings %v, changed %v", res.Type, res.Settings, res.Changed)
	}
	if st := res.Type.Settings(); st.PassivationStrategy != sharding.PassivationWTinyLFU {
		t.Fatalf("passivation_strategy=w-tinylfu: sharding settings %+v", st)
	}
	if r := c.do("POST", "/v1/types/counter?passivation_strategy=mru", wasm); r.status != 400 || !strings.Contains(string(r.body), "passivation_strategy") {
		t.Fatalf("passivation_strategy=mru: %d %s", r.status, r.body)
	}
	if res = deploy("max_active=4"); res.Type.PassivationStrategy != "w-tinylfu" {
		t.Fatalf("a redeploy without passivation_strategy: %+v", res.Type)
	}
}

// Passivate and undeploy through the API: a passivated entity comes back with
// its state; an undeployed type is refused as unknown on every member, its entities
// passivated with their state, which a new deploy of the name takes up.
func TestPassivateAndUndeploy(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	wasm := testwasm.Bytes(t, "counter")
	if r := c.do("POST", "/v1/types/counter", wasm); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	for _, id := range []string{"a", "b", "c"} {
		if r := c.ask("counter", id, "inc 5"); r.status != 200 || string(r.body) != "5" {
			t.Fatalf("inc %s: %d %s", id, r.status, r.body)
		}
	}
	passivate := func(id string) string {
		t.Helper()
		r := client(t, nodes[1]).do("POST", "/v1/passivate?type=counter&id="+id, nil)
		var res map[string]string
		if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
			t.Fatalf("passivate %s: %d %s", id, r.status, r.body)
		}
		return res["status"]
	}
	if got := passivate("a"); got != "passivated" {
		t.Fatalf("passivate a: %q", got)
	}
	if got := passivate("a"); got != "inactive" {
		t.Fatalf("passivate a again: %q", got)
	}
	if r := c.ask("counter", "a", "inc"); string(r.body) != "6" {
		t.Fatalf("after passivation: %d %s, want 6", r.status, r.body)
	}
	if r := c.do("DELETE", "/v1/types/nope", nil); r.status != 404 || r.err.Code != "unknown-entity-type" {
		t.Fatalf("undeploy unknown: %d %s", r.status, r.body)
	}
	r := c.do("DELETE", "/v1/types/counter", nil)
	var res UndeployResult
	if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil || len(res.Members) != 2 || !res.Members[0].Ready || !res.Members[1].Ready {
		t.Fatalf("undeploy: %d %s", r.status, r.body)
	}
	for _, n := range nodes {
		if r := client(t, n).ask("counter", "b", "inc"); r.status != 404 || r.err.Code != "unknown-entity-type" {
			t.Fatalf("ask after undeploy via %s: %d %s", n.Self().Address, r.status, r.body)
		}
		if types := n.Types(); len(types) != 0 {
			t.Fatalf("types after undeploy: %v", types)
		}
	}
	if r := c.do("POST", "/v1/types/counter", wasm); r.status != 200 {
		t.Fatalf("deploy again: %d %s", r.status, r.body)
	}
	for id, want := range map[string]string{"a": "7", "b": "6", "c": "6"} {
		if r := c.ask("counter", id, "inc"); string(r.body) != want {
			t.Fatalf("%s after redeploy: %d %s, want %s (its state kept)", id, r.status, r.body, want)
		}
	}
}

// undeploy --delete-state: the type's state is gone from the built-in store on every
// member, so a new deploy of the name starts afresh; a retry on the removed type works.
func TestUndeployDeletesState(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := client(t, nodes[0])
	wasm := testwasm.Bytes(t, "counter")
	if r := c.do("POST", "/v1/types/counter", wasm); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if r := c.ask("counter", id, "inc 5"); string(r.body) != "5" {
			t.Fatalf("inc %s: %d %s", id, r.status, r.body)
		}
	}
	r := client(t, nodes[1]).do("DELETE", "/v1/types/counter?delete_state=true", nil)
	var res UndeployResult
	if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil || !res.StateDeleted {
		t.Fatalf("undeploy --delete-state: %d %s", r.status, r.body)
	}
	if r := c.do("DELETE", "/v1/types/counter", nil); r.status != 404 {
		t.Fatalf("undeploy of a removed type: %d %s, want 404", r.status, r.body)
	}
	if r := c.do("DELETE", "/v1/types/counter?delete_state=true", nil); r.status != 200 {
		t.Fatalf("retried deletion: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/types/counter", wasm); r.status != 200 {
		t.Fatalf("deploy again: %d %s", r.status, r.body)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if r := client(t, nodes[2]).ask("counter", id, "inc"); string(r.body) != "1" {
			t.Fatalf("%s after the deletion: %d %s, want 1 (a fresh entity)", id, r.status, r.body)
		}
	}
}

// TestDeployIdenticalBytesIsUnchanged: the same module with the same settings makes no
// new version; another setting, or other bytes, does.
func TestDeployIdenticalBytesIsUnchanged(t *testing.T) {
	n := startNodes(t, 1, nil)[0]
	ctx := context.Background()
	wasm := testwasm.Bytes(t, "abitest")
	first, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "abitest"})
	if err != nil || first.Unchanged || first.Type.Version != 1 {
		t.Fatalf("first deploy: %+v %v", first.Type, err)
	}
	again, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "abitest"})
	if err != nil || !again.Unchanged || again.Type.Version != 1 || len(n.Modules()) != 1 {
		t.Fatalf("the same again: unchanged %v version %d, %d module versions, %v", again.Unchanged, again.Type.Version, len(n.Modules()), err)
	}
	changed, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "abitest", Checkpoint: "every-message"})
	if err != nil || changed.Unchanged || changed.Type.Version != 2 {
		t.Fatalf("another setting: unchanged %v version %d, %v", changed.Unchanged, changed.Type.Version, err)
	}
}

// TestConfigCarriesTheStoreAndTickSettings: the state store's settings and membership's
// tick interval come from Config, not constants: values the store or membership refuse
// make Start fail with their errors.
func TestConfigCarriesTheStoreAndTickSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"replicas", func(c *Config) { c.BuiltinStateStore.Replicas = 65 }, "Replicas 65 out of range"},
		{"tick", func(c *Config) { c.TickInterval = -time.Second }, "tick interval must be positive"},
	} {
		cfg := DefaultConfig()
		cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		cfg.DataDir, cfg.GossipProfile, cfg.Logger = t.TempDir(), "local", testLogger()
		cfg.Runtime.CacheDir = cacheDir
		tc.mutate(&cfg)
		n, err := Start(context.Background(), cfg)
		if err == nil {
			n.Kill()
			t.Fatalf("%s: started", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
