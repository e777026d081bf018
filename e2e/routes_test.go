package e2e

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// routeRequest sends a plain HTTP request to a host's API address and returns the
// status, the body and the member that hosts the entity (Shardhost-Node).
func routeRequest(t *testing.T, h *host, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+h.api+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s via %s: %v", method, path, h.api, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Shardhost-Node")
}

// TestHTTPRouteThroughTwoMembers: the cart deployed with an HTTP route by the CLI is
// served by plain HTTP through either member of a two-process cluster, as the same
// entity; an overlapping route and an oversize body are refused, and the members go on.
func TestHTTPRouteThroughTwoMembers(t *testing.T) {
	hosts := startCluster(t, 2, fast...)
	a, b := hosts[0], hosts[1]
	out, errText, ok := cli(t, a, nil, "deploy", "--type", "cart", "--http-route", "/shop/{id}/...", "--http-max-body", "100",
		testwasm.RustPath(t, "cart"))
	if !ok || !strings.Contains(out, "/shop/{id}/...") {
		t.Fatalf("deploy: ok=%v\n%s%s", ok, out, errText)
	}
	status, body, _ := routeRequest(t, a, "POST", "/shop/alice/items", "apple")
	if status != 201 || body != `["apple"]` {
		t.Fatalf("POST via the first member: %d %q", status, body)
	}
	status, body, _ = routeRequest(t, b, "POST", "/shop/alice/items", "pear")
	if status != 201 || body != `["apple","pear"]` {
		t.Fatalf("POST via the second member: %d %q", status, body)
	}
	var owners []string
	for _, h := range hosts {
		status, body, node := routeRequest(t, h, "GET", "/shop/alice/", "")
		if status != 200 || body != `["apple","pear"]` || node == "" {
			t.Fatalf("GET via %s: %d %q %q", h.api, status, body, node)
		}
		owners = append(owners, node)
	}
	if owners[0] != owners[1] {
		t.Fatalf("two members say different hosts of the cart: %v", owners)
	}
	if s, reply, _, err := api(b, "ask", "cart", "alice", "list"); err != nil || s != 200 || reply != `["apple","pear"]` {
		t.Fatalf("the ask sees %d %q %v", s, reply, err)
	}

	mustFail(t, b, nil, "overlaps /shop/{id}/... of the entity type cart", "deploy", "--type", "echo",
		"--http-route", "/shop/{id}", testwasm.RustPath(t, "echo-rust"))
	mustFail(t, b, nil, "the API's own", "deploy", "--type", "echo", "--http-route", "/v1/{id}", testwasm.RustPath(t, "echo-rust"))
	status, body, _ = routeRequest(t, b, "POST", "/shop/alice/items", string(bytes.Repeat([]byte("x"), 101)))
	if status != 413 {
		t.Fatalf("an oversize body: %d %s", status, body)
	}
	if status, body, _ = routeRequest(t, a, "GET", "/shop/alice/", ""); status != 200 || body != `["apple","pear"]` {
		t.Fatalf("after the refusals: %d %q", status, body)
	}
}
