package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// describedOperation is one operation of openapi.json.
type describedOperation struct {
	Method, Path string // GET, /v1/entities/{type}/{id}
	Role         string // x-shardhost-role
}

// describedOperations lists the operations of openapi.json.
func describedOperations(t *testing.T) []describedOperation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	var ops []describedOperation
	for path, item := range doc.Paths {
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
			default:
				continue // parameters, summary, ...
			}
			var o struct {
				Role string `json:"x-shardhost-role"`
			}
			if err := json.Unmarshal(raw, &o); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ops = append(ops, describedOperation{strings.ToUpper(method), path, o.Role})
		}
	}
	return ops
}

// registeredRoute is a route of the API's ServeMux, found in the package's source.
type registeredRoute struct {
	Pattern string // as given to the mux: "GET /v1/ddata/keys/{key...}"
	File    string
}

// described is the operation a mux pattern is in openapi.json: its method and its path
// with a trailing wildcard {key...} written {key}.
func (r registeredRoute) described() (method, path string) {
	method, path, _ = strings.Cut(r.Pattern, " ")
	return method, strings.ReplaceAll(path, "...}", "}")
}

// registeredRoutes lists the API's routes registered in the package's source
// (routePatternRE, as TestEveryRouteHasARole finds them), less the console's pages
// (/ui, which the description leaves out) and the catch-all "/".
func registeredRoutes(t *testing.T) []registeredRoute {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []registeredRoute
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routePatternRE.FindAllStringSubmatch(string(b), -1) {
			p := m[1]
			if _, path, _ := strings.Cut(p, " "); p == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/") {
				continue
			}
			out = append(out, registeredRoute{p, "host/" + f})
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d routes in the source: %v", len(out), out)
	}
	return out
}

// exampleURL is a request URL for a described path: each {param} filled in.
func exampleURL(path string) string {
	return regexp.MustCompile(`\{[^}]+\}`).ReplaceAllStringFunc(path, func(p string) string {
		if p == "{digest}" {
			return strings.Repeat("0", 64)
		}
		return "x" + strings.Trim(p, "{}")
	})
}

// The description and the routes cannot drift apart: every route the package
// registers is described, with the role it needs, and every described operation
// reaches that route on the API's real ServeMux. A failure names the route and what to
// add (docs/api.md, "Adding a route").
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	ops := describedOperations(t)
	described := map[string]describedOperation{}
	for _, o := range ops {
		described[o.Method+" "+o.Path] = o
	}
	routes := registeredRoutes(t)
	registered := map[string]registeredRoute{}
	for _, r := range routes {
		method, path := r.described()
		registered[method+" "+path] = r
		o, ok := described[method+" "+path]
		if !ok {
			t.Errorf("route %q (registered in %s) is not in host/%s: add paths[%q].%s, with its parameters, request body, responses and x-shardhost-role (docs/api.md, \"Adding a route\")",
				r.Pattern, r.File, openAPIFile, path, strings.ToLower(method))
			continue
		}
		want, ok := routeRoles[r.Pattern]
		if !ok {
			continue // TestEveryRouteHasARole says so
		}
		if o.Role != want.String() {
			t.Errorf("paths[%q].%s has x-shardhost-role %q; route %q needs %q (routeRoles)", path, strings.ToLower(method), o.Role, r.Pattern, want)
		}
	}
	// The real mux: each described operation reaches the route it describes.
	n := &Node{cfg: Config{MetricsHandler: http.NotFoundHandler()}}
	mux := n.routes()
	for _, o := range ops {
		r, ok := registered[o.Method+" "+o.Path]
		if !ok {
			t.Errorf("host/%s describes %s %s, which no route registers: remove it, or register the route", openAPIFile, o.Method, o.Path)
			continue
		}
		req, err := http.NewRequest(o.Method, "http://node"+exampleURL(o.Path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, pattern := mux.Handler(req); pattern != r.Pattern {
			t.Errorf("%s %s reaches the mux's route %q, not %q", o.Method, exampleURL(o.Path), pattern, r.Pattern)
		}
	}
}

// openAPIClient sends requests to a node, checks each request and each response
// against openapi.json with libopenapi-validator, and counts the routes it reached.
type openAPIClient struct {
	t       *testing.T
	base    string
	v       validator.Validator
	mux     *http.ServeMux
	reached map[string]bool // mux patterns
}

type openAPICall struct {
	method, path string
	query        url.Values
	body         []byte
	contentType  string
	header       http.Header
	token        string
	// badRequest: the request is meant to break the description (its validation must
	// fail); the response is checked all the same.
	badRequest bool
}

type openAPIReply struct {
	status int
	body   []byte
	header http.Header
}

func (c *openAPIClient) newRequest(call openAPICall) *http.Request {
	u := c.base + call.path
	if len(call.query) > 0 {
		u += "?" + call.query.Encode()
	}
	req, err := http.NewRequest(call.method, u, bytes.NewReader(call.body))
	if err != nil {
		c.t.Fatal(err)
	}
	if call.body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for k, vs := range call.header {
		req.Header[k] = vs
	}
	if call.contentType != "" {
		req.Header.Set("Content-Type", call.contentType)
	}
	if call.token != "" {
		req.Header.Set("Authorization", "Bearer "+call.token)
	}
	return req
}

func validationErrors(errs []*vErrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s", e.Error())
		if e.HowToFix != "" {
			fmt.Fprintf(&b, " (fix: %s)", e.HowToFix)
		}
	}
	return b.String()
}

// do sends call, fails the test when the request or the response does not match the
// description, and returns the reply.
func (c *openAPIClient) do(call openAPICall) openAPIReply {
	c.t.Helper()
	name := call.method + " " + call.path
	if ok, errs := c.v.ValidateHttpRequestSync(c.newRequest(call)); ok == call.badRequest {
		if call.badRequest {
			c.t.Errorf("%s: the request breaks the description, but its validation passed", name)
		} else {
			c.t.Errorf("%s: the request does not match the description:%s", name, validationErrors(errs))
		}
	}
	req := c.newRequest(call)
	_, pattern := c.mux.Handler(req)
	c.reached[pattern] = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := c.v.ValidateHttpResponse(c.newRequest(call), resp); !ok {
		c.t.Errorf("%s: the response (%d %s) does not match the description:%s", name, resp.StatusCode, body, validationErrors(errs))
	}
	return openAPIReply{resp.StatusCode, body, resp.Header}
}

// want sends call and fails the test unless the reply has the status.
func (c *openAPIClient) want(status int, call openAPICall) openAPIReply {
	c.t.Helper()
	r := c.do(call)
	if r.status != status {
		c.t.Fatalf("%s %s?%s: %d %s, want %d", call.method, call.path, call.query.Encode(), r.status, r.body, status)
	}
	return r
}

// credentialsGiven checks a request against a security scheme of the description: the
// validator's own check takes any mutualTLS request.
func credentialsGiven(_ context.Context, in *config.AuthenticationInput) error {
	switch in.SecuritySchemeName {
	case "bearerAuth":
		scheme, token, ok := strings.Cut(in.Request.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return errors.New("no Authorization: Bearer TOKEN")
		}
		return nil
	case "mutualTLS":
		if in.Request.TLS == nil || len(in.Request.TLS.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		return nil
	}
	return fmt.Errorf("security scheme %q is not one the API has", in.SecuritySchemeName)
}

// Every route of the API, driven with real requests to a real node running a real
// module, each request and each response checked against the description by
// libopenapi-validator (OpenAPI 3.1, JSON Schema 2020-12). Routes that need a state
// this single node cannot reach (a member that is gone) are driven to their documented
// error replies, which are checked the same way.
func TestOpenAPIValidatesRealTraffic(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc, config.WithAuthenticationFunc(credentialsGiven))
	if len(errs) > 0 {
		t.Fatalf("the validator: %v", errs)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		t.Fatalf("%s is not a valid OpenAPI 3.1 document:%s", openAPIFile, validationErrors(errs))
	}
	n := startNode(t, nil, func(c *Config) {
		c.API.Tokens = testTokens(t)
		c.GossipKey = bytes.Repeat([]byte{7}, 32)
		withMetrics(t, c)
	})
	waitMembers(t, []*Node{n})
	c := &openAPIClient{t: t, base: "http://" + n.APIAddr(), v: v, mux: n.routes(), reached: map[string]bool{}}
	const admin, client, read = "admin-token-0123456789", "client-token-0123456789", "read-token-0123456789"
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	wasm := testwasm.Bytes(t, "counter")

	// The open routes, and the description served as it is in the repository.
	if r := c.want(200, openAPICall{method: "GET", path: "/v1/openapi.json"}); !bytes.Equal(r.body, openAPIDocument) {
		t.Fatal("GET /v1/openapi.json is not host/openapi.json")
	}
	c.want(200, openAPICall{method: "GET", path: "/alive"})
	c.want(200, openAPICall{method: "GET", path: "/v1/health"})
	c.want(200, openAPICall{method: "GET", path: "/metrics"})
	testutil.EventuallyNil(t, 30*time.Second, "ready", func() error {
		if r := c.do(openAPICall{method: "GET", path: "/ready"}); r.status != 200 {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})

	// Authentication: the security schemes and the 401 and 403 replies.
	c.want(401, openAPICall{method: "GET", path: "/v1/types", badRequest: true})
	c.want(403, openAPICall{method: "POST", path: "/v1/types/counter", body: wasm, contentType: "application/wasm", token: read})

	// Deploy, message, query.
	var dep DeployResult
	r := c.want(200, openAPICall{method: "POST", path: "/v1/types/counter", query: q("shards", "4", "history", "100", "max_retries", "3"),
		body: wasm, contentType: "application/wasm", token: admin})
	if err := json.Unmarshal(r.body, &dep); err != nil {
		t.Fatal(err)
	}
	c.want(200, openAPICall{method: "POST", path: "/v1/types/spare", body: wasm, contentType: "application/wasm", token: admin})
	c.want(202, openAPICall{method: "POST", path: "/v1/tell", query: q("type", "counter", "id", "a"), body: []byte("inc 5"),
		contentType: "application/octet-stream", token: client})
	if r := c.want(200, openAPICall{method: "POST", path: "/v1/ask", query: q("type", "counter", "id", "a", "timeout", "30s"),
		body: []byte("inc"), contentType: "application/octet-stream", token: client,
		header: http.Header{"Idempotency-Key": {"k-1"}}}); string(r.body) != "6" || r.header.Get(NodeHeader) == "" {
		t.Fatalf("ask: %s, node %q", r.body, r.header.Get(NodeHeader))
	}
	c.want(422, openAPICall{method: "POST", path: "/v1/ask", query: q("type", "counter", "id", "a"), body: []byte("dance"),
		contentType: "text/plain", token: client})
	c.want(404, openAPICall{method: "POST", path: "/v1/ask", query: q("type", "countr", "id", "a"), body: []byte("get"),
		contentType: "text/plain", token: client})
	c.want(400, openAPICall{method: "POST", path: "/v1/tell", query: q("type", "counter"), body: []byte("get"),
		contentType: "text/plain", token: client, badRequest: true})
	// Scheduled messages: one scheduled an hour ahead, listed, cancelled; an unknown ID.
	var sched ScheduledTellResult
	r = c.want(202, openAPICall{method: "POST", path: "/v1/tell", query: q("type", "counter", "id", "a", "deliver_in", "1h"),
		body: []byte("inc 1"), contentType: "application/octet-stream", token: client})
	if err := json.Unmarshal(r.body, &sched); err != nil || sched.Status != "scheduled" || sched.ID == "" {
		t.Fatalf("scheduled tell: %s %v", r.body, err)
	}
	c.want(400, openAPICall{method: "POST", path: "/v1/tell", query: q("type", "counter", "id", "a", "deliver_at", "noon"),
		body: []byte("inc 1"), contentType: "text/plain", token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/scheduled", query: q("type", "counter", "id", "a"), token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/scheduled", query: q("limit", "10"), token: client})
	c.want(400, openAPICall{method: "GET", path: "/v1/scheduled", query: q("limit", "0"), token: client, badRequest: true})
	c.want(200, openAPICall{method: "DELETE", path: "/v1/scheduled/" + sched.ID, token: client})
	c.want(404, openAPICall{method: "DELETE", path: "/v1/scheduled/" + sched.ID, token: client})
	c.want(200, openAPICall{method: "POST", path: "/v1/passivate", query: q("type", "counter", "id", "a"), token: admin})
	if r := c.want(200, openAPICall{method: "POST", path: "/v1/query", query: q("type", "counter", "id", "a"), body: []byte("get"),
		contentType: "application/octet-stream", token: read}); string(r.body) != "6" {
		t.Fatalf("query: %s", r.body)
	}

	// Types and modules.
	c.want(200, openAPICall{method: "GET", path: "/v1/types", token: read})
	c.want(200, openAPICall{method: "GET", path: "/v1/modules", token: read})
	if r := c.want(200, openAPICall{method: "GET", path: "/v1/modules/" + dep.Type.Digest, token: admin}); !bytes.Equal(r.body, wasm) {
		t.Fatal("GET /v1/modules/{digest} is not the module")
	}
	c.want(404, openAPICall{method: "GET", path: "/v1/modules/" + strings.Repeat("ab", 32), token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/types/counter/upgrade", query: q("dry_run", "true"), token: admin})

	// Entities.
	c.want(200, openAPICall{method: "GET", path: "/v1/entities", query: q("type", "counter", "limit", "10"), token: read})
	c.want(400, openAPICall{method: "GET", path: "/v1/entities", query: q("colour", "red"), token: read})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a", token: read})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a/history", query: q("limit", "10"), token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a/journal", token: admin})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a/base", token: admin})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a/reminders", token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/entities/counter/a/logs", query: q("level", "debug"), token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/logs", query: q("type", "counter", "limit", "5"), token: client})
	c.want(200, openAPICall{method: "POST", path: "/v1/entities/counter/a/revert", query: q("messages", "1"), token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/entities/counter/a/fork", query: q("new", "b"), token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/entities/counter/a/pause", token: admin})
	c.want(403, openAPICall{method: "POST", path: "/v1/entities/counter/a/pause", token: client})
	c.want(200, openAPICall{method: "POST", path: "/v1/entities/counter/a/resume", token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/entities/counter/a/skip", token: admin})

	// A canary rollout: promoted, then another rolled back.
	c.want(200, openAPICall{method: "POST", path: "/v1/types/counter", query: q("canary", "50%"),
		body: withCustomSection(wasm, "v2"), contentType: "application/wasm", token: admin})
	c.want(200, openAPICall{method: "GET", path: "/v1/types/counter/rollout", token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/types/counter/rollout/promote", token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/types/counter", query: q("canary_ids", "a,b"),
		body: withCustomSection(wasm, "v3"), contentType: "application/wasm", token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/types/counter/rollout/rollback", token: admin})

	// The cluster.
	c.want(200, openAPICall{method: "GET", path: "/v1/members", token: read})
	c.want(200, openAPICall{method: "GET", path: "/v1/shards", token: read})
	c.want(200, openAPICall{method: "GET", path: "/v1/cluster", token: read})
	c.want(404, openAPICall{method: "POST", path: "/v1/members/127.0.0.1:1/down", token: admin})
	c.want(404, openAPICall{method: "POST", path: "/v1/members/127.0.0.1:1/leave", token: admin})
	c.want(409, openAPICall{method: "POST", path: "/v1/state/members/" + n.Self().Address + "/forget", token: admin})

	// Distributed data.
	c.want(200, openAPICall{method: "POST", path: "/v1/ddata/keys/hits", query: q("type", "gcounter"), body: []byte("incr 5"),
		contentType: "text/plain", token: admin})
	c.want(200, openAPICall{method: "GET", path: "/v1/ddata/keys/hits", query: q("consistency", "local"), token: client})
	c.want(200, openAPICall{method: "GET", path: "/v1/ddata/keys", token: read})
	c.want(409, openAPICall{method: "POST", path: "/v1/ddata/keys/hits", query: q("type", "orset"), body: []byte("add x"),
		contentType: "text/plain", token: admin})
	c.want(200, openAPICall{method: "DELETE", path: "/v1/ddata/keys/hits", token: admin})
	c.want(410, openAPICall{method: "GET", path: "/v1/ddata/keys/hits", token: client})
	c.want(404, openAPICall{method: "GET", path: "/v1/ddata/keys/never", token: client})

	// Gossip keys.
	c.want(200, openAPICall{method: "GET", path: "/v1/keys", token: admin})
	c.want(200, openAPICall{method: "POST", path: "/v1/keys/install", body: []byte(`{"key":"` + strings.Repeat("AQID", 8) + `"}`),
		contentType: "application/json", token: admin})
	c.want(404, openAPICall{method: "POST", path: "/v1/keys/rotate", body: []byte(`{"id":"x"}`), contentType: "application/json",
		token: admin, badRequest: true})

	// The end: undeploy, and this member leaves.
	c.want(200, openAPICall{method: "DELETE", path: "/v1/types/spare", query: q("delete_state", "false"), token: admin})
	c.want(202, openAPICall{method: "POST", path: "/v1/leave", token: admin})

	for _, rt := range registeredRoutes(t) {
		if !c.reached[rt.Pattern] {
			t.Errorf("route %q (%s) was not driven: give it a request here", rt.Pattern, rt.File)
		}
	}
}
