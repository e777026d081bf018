package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

func TestParseHTTPRoute(t *testing.T) {
	for _, s := range []string{"/shop/{id}/...", "/shop/{id}", "/a/b.c/~d_e-f/{id}/..."} {
		if _, err := parseHTTPRoute(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for s, want := range map[string]string{
		"shop/{id}":          "does not start with /",
		"/{id}/...":          "{id} is not its last segment",
		"/shop":              "{id} is not its last segment",
		"/shop/{id}/x":       "{id} is not its last segment",
		"/shop/{id}/{id}":    "segment \"{id}\" is not made of",
		"/sh op/{id}":        "is not made of letters",
		"/shop//{id}":        "is not made of letters",
		"/../{id}":           "is not made of letters",
		"/v1/{id}/...":       "the API's own",
		"/ui/{id}":           "the API's own",
		"/metrics/{id}":      "the API's own",
		"/shop/{id}/.../...": "{id} is not its last segment",
	} {
		_, err := parseHTTPRoute(s)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrBadRequest with %q", s, err, want)
		}
	}
	r, _ := parseHTTPRoute("/shop/{id}/...")
	exact, _ := parseHTTPRoute("/shop/{id}")
	for path, want := range map[string][3]string{ // id, rest, ok (with /..., exact)
		"/shop/alice":          {"alice", "", "yy"},
		"/shop/alice/":         {"alice", "/", "yn"},
		"/shop/alice/items/x":  {"alice", "/items/x", "yn"},
		"/shop/a%2Fb%20c/item": {"a/b c", "/item", "yn"},
		"/shop/":               {"", "", "nn"},
		"/shop":                {"", "", "nn"},
		"/shopx/alice":         {"", "", "nn"},
		"/other/alice":         {"", "", "nn"},
		"/shop/%zz":            {"", "", "nn"},
	} {
		for k, route := range []httpRoute{r, exact} {
			id, rest, ok := route.match(path)
			if ok != (want[2][k] == 'y') || ok && k == 0 && (id != want[0] || rest != want[1]) {
				t.Errorf("%s on %s: %q %q %v, want %v", path, route.pattern, id, rest, ok, want)
			}
		}
	}
	over := func(a, b string) bool {
		ra, _ := parseHTTPRoute(a)
		rb, _ := parseHTTPRoute(b)
		return ra.overlaps(rb) && rb.overlaps(ra)
	}
	if !over("/shop/{id}/...", "/shop/{id}") || !over("/shop/{id}", "/shop/cart/{id}/...") || over("/shop/{id}", "/shops/{id}") ||
		over("/a/b/{id}", "/a/c/{id}") {
		t.Error("overlaps")
	}
}

func TestHTTPRouteSettings(t *testing.T) {
	for q, want := range map[string]string{
		"http_route=/a/{id}&http_route=/a/b/{id}":    "overlaps /a/{id}",
		"http_route=/a/{id}&http_public=/b/{id}":     "is not one of the type's HTTP routes",
		"http_public=/a/{id}":                        "http_public names routes given with http_route",
		"http_route=/a/{id}&http_max_body=2000000":   "HTTP max body",
		"http_route=/a/{id}&http_rate=-1":            "http_rate",
		"http_route=/v1/{id}":                        "the API's own",
		"http_route=/a/{id}&http_max_body=12kb":      "http_max_body",
		"http_route=" + strings.Repeat("/a", 9) + "": "{id}",
	} {
		v, _ := url.ParseQuery(q)
		_, err := deploySettings("t", v)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrBadRequest with %q", q, err, want)
		}
	}
	v, _ := url.ParseQuery("http_route=/a/{id}/...&http_route=/b/{id}&http_public=/b/{id}&http_max_body=100&http_rate=2.5")
	st, err := deploySettings("t", v)
	if err != nil || strings.Join(st.HTTPRoutes, " ") != "/a/{id}/... /b/{id}" || strings.Join(st.HTTPPublic, " ") != "/b/{id}" ||
		st.HTTPMaxBody != 100 || st.HTTPRate != 2.5 {
		t.Fatalf("%+v %v", st, err)
	}
	// A redeploy that names no routes keeps them; one with http_route= clears them.
	prev := TypeInfo{HTTPRoutes: st.HTTPRoutes, HTTPPublic: st.HTTPPublic, HTTPMaxBody: 100, HTTPRate: 2.5}
	kept := inheritSettings(sharding.TypeSettings{}, url.Values{}, prev)
	if len(kept.HTTPRoutes) != 2 || len(kept.HTTPPublic) != 1 || kept.HTTPMaxBody != 100 || kept.HTTPRate != 2.5 {
		t.Fatalf("inherited %+v", kept)
	}
	cleared, _ := url.ParseQuery("http_route=")
	st, _ = deploySettings("t", cleared)
	if st = inheritSettings(st, cleared, prev); len(st.HTTPRoutes) != 0 || len(st.HTTPPublic) != 0 {
		t.Fatalf("cleared %+v", st)
	}
}

// routeDo sends a request to a route of n's API and returns the response and its body.
func routeDo(t *testing.T, n *Node, method, path string, body []byte, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.APIAddr()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestHTTPRoutesCart: the cart example deployed with a route serves it through any
// member, as the entity its path names, which is the entity the API's asks reach; the
// request is the entity's message, in its history. A type without an HTTP handler is
// 501, an oversize body 413, a spent rate 429, an overlapping route is refused at
// deploy; each is counted, and the request has its server span named by the route.
func TestHTTPRoutesCart(t *testing.T) {
	sp := newSpans(t)
	nodes := tracedNodes(t, 2, sp, func(c *Config) { withMetrics(t, c) })
	c := client(t, nodes[0])
	deployWebhook(t, c, testwasm.RustBytes(t, "cart"), "cart", url.Values{"http_route": {"/shop/{id}/..."}, "http_max_body": {"64"}})

	resp, body := routeDo(t, nodes[0], "POST", "/shop/alice/items", []byte("apple"), "Content-Type", "text/plain")
	if resp.StatusCode != 201 || body != `["apple"]` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("POST: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	routeDo(t, nodes[1], "POST", "/shop/alice/items", []byte("pear"))
	for _, n := range nodes {
		resp, body = routeDo(t, n, "GET", "/shop/alice/", nil)
		if resp.StatusCode != 200 || body != `["apple","pear"]` || resp.Header.Get(NodeHeader) == "" {
			t.Fatalf("GET through %s: %d %q %v", n.Self().Address, resp.StatusCode, body, resp.Header)
		}
	}
	askWant(t, c, "cart", "alice", "list", 200, `["apple","pear"]`)
	if resp, body = routeDo(t, nodes[1], "GET", "/shop/bob", nil); resp.StatusCode != 200 || body != "[]" {
		t.Fatalf("another cart: %d %q", resp.StatusCode, body)
	}
	if resp, body = routeDo(t, nodes[0], "GET", "/shop/alice/other", nil); resp.StatusCode != 404 || body != "cart: no /other here" {
		t.Fatalf("the entity's 404: %d %q", resp.StatusCode, body)
	}

	// The requests are the entity's messages: journaled, of kind http.
	h := c.do("GET", "/v1/entities/cart/alice/history", nil)
	if h.status != 200 || strings.Count(string(h.body), `"kind": "http"`) != 5 {
		t.Fatalf("history: %d %s", h.status, h.body)
	}

	// Bad input: each refused with its status and code, the node keeps serving.
	if resp, body = routeDo(t, nodes[1], "POST", "/shop/alice/items", bytes.Repeat([]byte("x"), 65)); resp.StatusCode != 413 ||
		!strings.Contains(body, "http-max-body") {
		t.Fatalf("an oversize body: %d %s", resp.StatusCode, body)
	}
	if resp, body = routeDo(t, nodes[0], "GET", "/nowhere/alice", nil); resp.StatusCode != 404 {
		t.Fatalf("no route: %d %s", resp.StatusCode, body)
	}
	r := c.do("POST", "/v1/types/shop2?"+url.Values{"http_route": {"/shop/special/{id}"}}.Encode(), testwasm.RustBytes(t, "echo-rust"))
	if r.status != 400 || !strings.Contains(r.err.Error, "overlaps /shop/{id}/... of the entity type cart") {
		t.Fatalf("an overlapping route: %d %+v", r.status, r.err)
	}
	deployWebhook(t, c, testwasm.RustBytes(t, "echo-rust"), "echo", url.Values{"http_route": {"/echo/{id}"}, "http_rate": {"0.001"}})
	if resp, body = routeDo(t, nodes[1], "GET", "/echo/e1", nil); resp.StatusCode != 501 || !strings.Contains(body, codeNoHTTPHandler) {
		t.Fatalf("no handler: %d %s", resp.StatusCode, body)
	}
	if resp, body = routeDo(t, nodes[1], "GET", "/echo/e1", nil); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body, codeRateLimited) {
		t.Fatalf("over the rate: %d %s", resp.StatusCode, body)
	}
	askWant(t, c, "echo", "e1", "echo still here", 200, "still here")

	fams := scrape(t, nodes[1])
	for k, want := range map[[2]string]float64{{"cart", "ok"}: 3, {"cart", "4xx"}: 0, {"cart", "too-large"}: 1,
		{"echo", codeNoHTTPHandler}: 1, {"echo", codeRateLimited}: 1} {
		if got, _ := sample(fams, "shardhost_http_route_requests_total", map[string]string{"shardhost_entity_type": k[0],
			"shardhost_outcome": k[1]}); got != want {
			t.Errorf("shardhost_http_route_requests_total{%s, %s} on the second member = %v, want %v", k[0], k[1], got, want)
		}
	}
	tid, status, _, _ := tracedRequest(t, nodes[1], "GET", "/shop/alice/", "")
	if status != 200 {
		t.Fatalf("traced GET: %d", status)
	}
	span := sp.wait(tid, "GET /shop/{id}/...", func(s sdktrace.ReadOnlySpan) bool {
		v, ok := attr(s, "http.route")
		return ok && v.AsString() == "/shop/{id}/..."
	})
	if v, _ := attr(span, "shardhost.entity.type"); v.AsString() != "cart" {
		t.Errorf("the server span's entity type %q", v.Emit())
	}
}

// mirrorResponse encodes a guest's response for the mirror test guest to give back.
func mirrorResponse(status uint32, headers string, body string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, status)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(headers)))
	return append(append(b, headers...), body...)
}

// TestHTTPRouteRefusesBadResponses: a guest's response with a header injection (a CR,
// a NUL), a header the API sets, a bad status or a malformed encoding is refused with
// 502 bad-http-response, and the entity goes on serving.
func TestHTTPRouteRefusesBadResponses(t *testing.T) {
	n := startNodes(t, 1, nil)[0]
	deployWebhook(t, client(t, n), testwasm.GuestBytes(t, "mirror"), "mirror", url.Values{"http_route": {"/m/{id}/..."}})
	resp, body := routeDo(t, n, "POST", "/m/x/", mirrorResponse(203, "X-A: 1\nx-b: two words\n", "fine"))
	if resp.StatusCode != 203 || body != "fine" || resp.Header.Get("X-A") != "1" || resp.Header.Get("X-B") != "two words" {
		t.Fatalf("a good response: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	for name, raw := range map[string][]byte{
		"CR in a value":      mirrorResponse(200, "Location: /a\r\n", ""),
		"CR LF in a value":   mirrorResponse(200, "Location: /a\r\nSet-Cookie: admin=1\n", ""),
		"NUL in a value":     mirrorResponse(200, "X-A: a\x00b\n", ""),
		"a name not a token": mirrorResponse(200, "X A: 1\n", ""),
		"no colon":           mirrorResponse(200, "Set-Cookie\n", ""),
		"no final LF":        mirrorResponse(200, "X-A: 1", ""),
		"Content-Length":     mirrorResponse(200, "Content-Length: 5\n", "toolong"),
		"Transfer-Encoding":  mirrorResponse(200, "Transfer-Encoding: chunked\n", ""),
		"traceparent":        mirrorResponse(200, "traceparent: 00-x\n", ""),
		"status 99":          mirrorResponse(99, "", ""),
		"status 600":         mirrorResponse(600, "", ""),
		"headers overrun":    binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 200), 100),
		"short":              {1, 2, 3},
	} {
		resp, body := routeDo(t, n, "POST", "/m/x/", raw)
		if resp.StatusCode != 502 || !strings.Contains(body, codeBadHTTPResponse) || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s: %d %s %v", name, resp.StatusCode, body, resp.Header)
		}
	}
	if resp, body := routeDo(t, n, "POST", "/m/x/", mirrorResponse(200, "", "still")); resp.StatusCode != 200 || body != "still" {
		t.Fatalf("after the refusals: %d %q", resp.StatusCode, body)
	}
}

// TestHTTPRouteAuth: with API tokens, a route needs the client role, and the guest does
// not see the caller's token; a route deployed public needs none and passes the
// Authorization header on.
func TestHTTPRouteAuth(t *testing.T) {
	n := startNodes(t, 1, func(c *Config) { c.API.Tokens = testTokens(t) })[0]
	const admin, client, read = "admin-token-0123456789", "client-token-0123456789", "read-token-0123456789"
	deploy := url.Values{"http_route": {"/m/{id}/...", "/pub/{id}/..."}, "http_public": {"/pub/{id}/..."}}
	if status, e := authRequest(t, n, "POST", "/v1/types/mirror?"+deploy.Encode(), admin, testwasm.GuestBytes(t, "mirror")); status != 200 {
		t.Fatalf("deploy: %d %+v", status, e)
	}
	ok := mirrorResponse(200, "", "ok")
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/m/a/", "", 401}, {"/m/a/", "wrong-token-0123456789", 401}, {"/m/a/", read, 403},
		{"/m/a/", client, 200}, {"/m/a/", admin, 200}, {"/pub/a/", "", 200}, {"/pub/a/", "app-credential", 200},
		{"/nowhere/a", "", 401},
	} {
		if status, e := authRequest(t, n, "POST", tc.path, tc.token, ok); status != tc.want {
			t.Errorf("%s with %q: %d %+v, want %d", tc.path, tc.token, status, e, tc.want)
		}
	}
	// What the guest gets, from the encoding the host builds:
	req, _ := http.NewRequest("GET", "http://x/m/a/rest?q=1", nil)
	req.Header.Set("Authorization", "Bearer "+client)
	req.Header.Set("Connection", "close")
	req.Header.Set("X-App", "1")
	m := routeMatch{rest: "/rest"}
	got := string(encodeHTTPRequest(req, m, []byte("B")))
	if strings.Contains(got, client) || strings.Contains(got, "Connection") || !strings.Contains(got, "X-App: 1\n") ||
		!strings.Contains(got, "/m/a/rest") || !strings.Contains(got, "q=1") || !strings.HasSuffix(got, "B") {
		t.Errorf("the request on a route that is not public: %q", got)
	}
	m.public = true
	if got := string(encodeHTTPRequest(req, m, nil)); !strings.Contains(got, "Authorization: Bearer "+client) {
		t.Errorf("the request on a public route: %q", got)
	}
}

// TestHTTPRouteJournalReplay: an HTTP request is journaled like an ask: after the member
// that hosts the cart is killed, the cart comes back elsewhere by replaying its journal,
// the requests' records run through shardhost_http again, and it holds what the
// acknowledged requests added.
func TestHTTPRouteJournalReplay(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.RustBytes(t, "cart"), sharding.TypeSettings{Name: "cart",
		HTTPRoutes: []string{"/shop/{id}/..."}}); err != nil {
		t.Fatal(err)
	}
	id := entityOn(t, nodes[0], nodes[2], "cart", "list")
	for _, item := range []string{"apple", "pear"} {
		if resp, body := routeDo(t, nodes[0], "POST", "/shop/"+id+"/items", []byte(item)); resp.StatusCode != 201 {
			t.Fatalf("POST %s: %d %s", item, resp.StatusCode, body)
		}
	}
	if err := nodes[2].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the cart served after the kill", func() error {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := nodes[1].Sharding().Ask(actx, "cart", id, []byte("list"))
		if err != nil {
			return err
		}
		if string(r.Payload) != `["apple","pear"]` {
			t.Fatalf("the cart after the kill holds %s, want the two acknowledged items", r.Payload)
		}
		return nil
	})
	if resp, body := routeDo(t, nodes[1], "GET", "/shop/"+id+"/", nil); resp.StatusCode != 200 || body != `["apple","pear"]` {
		t.Fatalf("GET after the kill: %d %q", resp.StatusCode, body)
	}
}
