package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/shardhost/shardhost/internal/testwasm"
)

func TestParseAPITokens(t *testing.T) {
	good := `# shardhost API tokens
admin  0123456789abcdef-admin

client ` + TokenDigest("0123456789abcdef-client") + `
read	0123456789abcdef-read
`
	toks, err := parseAPITokens(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]Role{
		"0123456789abcdef-admin":  RoleAdmin,
		"0123456789abcdef-client": RoleClient,
		"0123456789abcdef-read":   RoleRead,
	} {
		if got, ok := toks.Role(token); !ok || got != want {
			t.Errorf("Role(%q) = %v, %v; want %v", token, got, ok, want)
		}
	}
	for _, token := range []string{"", "0123456789abcdef-admi", "0123456789abcdef-admin ", TokenDigest("0123456789abcdef-client")} {
		if r, ok := toks.Role(token); ok || r != RoleNone {
			t.Errorf("Role(%q) = %v, %v; want none", token, r, ok)
		}
	}

	for name, bad := range map[string]string{
		"empty":          "# nothing\n\n",
		"unknown role":   "root 0123456789abcdef0123\n",
		"short token":    "admin secret\n",
		"one field":      "admin\n",
		"three fields":   "admin 0123456789abcdef0123 extra\n",
		"bad digest":     "admin sha256:abcd\n",
		"not hex":        "admin sha256:" + strings.Repeat("zz", 32) + "\n",
		"duplicate":      "admin 0123456789abcdef0123\nread 0123456789abcdef0123\n",
		"dup as digest":  "admin 0123456789abcdef0123\nread " + TokenDigest("0123456789abcdef0123") + "\n",
		"role with case": "Admin 0123456789abcdef0123\n",
	} {
		if _, err := parseAPITokens(strings.NewReader(bad)); !errors.Is(err, ErrBadTokens) {
			t.Errorf("%s: err %v, want ErrBadTokens", name, err)
		}
	}
	if _, err := LoadAPITokens(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrBadTokens) {
		t.Errorf("missing file: %v", err)
	}
}

// routePatternRE finds the patterns given to the ServeMux in the API's source.
var routePatternRE = regexp.MustCompile(`mux\.Handle(?:Func)?\("([^"]+)"`)

// TestEveryRouteHasARole: every route the API registers has an explicit entry in
// routeRoles (a route without one needs admin, which is safe but may not be meant), and
// every entry names a registered route.
func TestEveryRouteHasARole(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routePatternRE.FindAllStringSubmatch(string(b), -1) {
			registered[m[1]] = true
		}
	}
	if len(registered) < 10 {
		t.Fatalf("found only %d routes in the source: %v", len(registered), registered)
	}
	for p := range registered {
		if _, ok := routeRoles[p]; !ok {
			t.Errorf("route %q has no entry in routeRoles (it needs admin until it has one)", p)
		}
	}
	for p := range routeRoles {
		if !registered[p] {
			t.Errorf("routeRoles has %q, which no route registers", p)
		}
	}
	if routeRole("POST /v1/new-thing", false) != RoleAdmin {
		t.Error("a route missing from routeRoles must need admin")
	}
	if routeRole("GET /alive", false) != RoleNone || routeRole("GET /alive", true) != RoleRead {
		t.Error("the probes are open, unless AuthAll")
	}
}

// writeTokens writes a tokens file with one token per role and returns it loaded.
func testTokens(t *testing.T) *APITokens {
	t.Helper()
	toks, err := parseAPITokens(strings.NewReader("admin admin-token-0123456789\nclient client-token-0123456789\nread " +
		TokenDigest("read-token-0123456789") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// authRequest sends a request with a bearer token ("" for none) and returns the status
// and the error body.
func authRequest(t *testing.T, n *Node, method, path, token string, body []byte) (int, apiError) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.APIAddr()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e apiError
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s %s: error body is not JSON: %q", method, path, b)
		}
		if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", method, path)
		}
	}
	return resp.StatusCode, e
}

// TestAPITokensAndRoles: with a tokens file, a request without a token or with a wrong
// one gets 401, a role too low 403 (JSON errors with codes), and each role reaches what
// it may; the probes and /metrics stay open. Refused requests have their server span,
// named by route and failed with error.type, and count in http.server.request.duration.
func TestAPITokensAndRoles(t *testing.T) {
	sp := newSpans(t)
	n := tracedNodes(t, 1, sp, func(c *Config) {
		c.API.Tokens = testTokens(t)
		withMetrics(t, c)
	})[0]
	const admin, client, read = "admin-token-0123456789", "client-token-0123456789", "read-token-0123456789"
	wasm := testwasm.Bytes(t, "abitest")

	for _, tc := range []struct {
		method, path, token string
		body                []byte
		want                int
		code                string
	}{
		{"POST", "/v1/types/abitest", "", wasm, 401, "unauthenticated"},
		{"POST", "/v1/types/abitest", "wrong-token-0123456789", wasm, 401, "unauthenticated"},
		{"POST", "/v1/types/abitest", client, wasm, 403, "forbidden"},
		{"POST", "/v1/types/abitest", read, wasm, 403, "forbidden"},
		{"POST", "/v1/types/abitest", admin, wasm, 200, ""},
		{"GET", "/v1/types", "", nil, 401, "unauthenticated"},
		{"GET", "/v1/types", read, nil, 200, ""},
		{"GET", "/v1/members", read, nil, 200, ""},
		{"POST", askPath("abitest", "a"), read, []byte("count"), 403, "forbidden"},
		{"POST", askPath("abitest", "a"), client, []byte("count"), 200, ""},
		{"POST", askPath("abitest", "a"), admin, []byte("count"), 200, ""},
		{"GET", "/v1/ddata/keys", read, nil, 200, ""},
		{"POST", "/v1/ddata/keys/k?type=gcounter", client, []byte("incr 1"), 403, "forbidden"},
		{"POST", "/v1/ddata/keys/k?type=gcounter", admin, []byte("incr 1"), 200, ""},
		{"GET", "/v1/ddata/keys/k", read, nil, 403, "forbidden"},
		{"GET", "/v1/ddata/keys/k", client, nil, 200, ""},
		{"POST", "/v1/members/" + n.Self().Address + "/down", client, nil, 403, "forbidden"},
		{"GET", "/v1/nothing-here", "", nil, 401, "unauthenticated"},
		{"GET", "/v1/nothing-here", read, nil, 404, "bad-request"},
		{"GET", "/alive", "", nil, 200, ""},
		{"GET", "/ready", "", nil, 200, ""},
		{"GET", "/metrics", "", nil, 200, ""},
		{"GET", "/v1/health", "", nil, 200, ""},
	} {
		status, e := authRequest(t, n, tc.method, tc.path, tc.token, tc.body)
		if status != tc.want || e.Code != tc.code {
			t.Errorf("%s %s with %q: %d %+v, want %d %q", tc.method, tc.path, tc.token, status, e, tc.want, tc.code)
		}
	}
	for _, h := range []string{"Basic YWRtaW46eA==", "Bearer", "Bearer  ", admin} {
		req, _ := http.NewRequest("GET", "http://"+n.APIAddr()+"/v1/types", nil)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %q: %d, want 401", h, resp.StatusCode)
		}
	}

	tid, status, tp, _ := tracedRequest(t, n, "POST", "/v1/types/abitest", "x", "Authorization", "Bearer "+client)
	if status != 403 || tp == "" {
		t.Fatalf("traced refusal: %d, traceparent %q", status, tp)
	}
	s := sp.wait(tid, "POST /v1/types/{name}", nil)
	if v, _ := attr(s, "error.type"); s.Status().Code != codes.Error || v.AsString() != "forbidden" {
		t.Errorf("refused deploy's span: status %v, error.type %q", s.Status(), v.Emit())
	}
	if v, _ := attr(s, "http.route"); v.AsString() != "/v1/types/{name}" {
		t.Errorf("refused deploy's span: http.route %q", v.Emit())
	}
	fams := scrape(t, n)
	if v, _ := sample(fams, "http_server_request_duration_seconds", map[string]string{"http_response_status_code": "401", "http_route": "/v1/types/{name}"}); v < 2 {
		t.Errorf("http.server.request.duration counts %v deploys answered 401, want 2", v)
	}
	if v, _ := sample(fams, "http_server_request_duration_seconds", map[string]string{"http_response_status_code": "403"}); v < 7 {
		t.Errorf("http.server.request.duration counts %v requests answered 403, want 7", v)
	}
}

// TestAPIAuthAll: with AuthAll the probes and /metrics need a role too.
func TestAPIAuthAll(t *testing.T) {
	n := startNode(t, nil, func(c *Config) {
		c.API.Tokens = testTokens(t)
		c.API.AuthAll = true
		withMetrics(t, c)
	})
	for _, path := range []string{"/alive", "/ready", "/metrics", "/v1/health"} {
		if status, e := authRequest(t, n, "GET", path, "", nil); status != 401 || e.Code != "unauthenticated" {
			t.Errorf("GET %s without a token: %d %+v", path, status, e)
		}
		if status, _ := authRequest(t, n, "GET", path, "read-token-0123456789", nil); status == 401 || status == 403 {
			t.Errorf("GET %s with a read token: %d", path, status)
		}
	}
}
