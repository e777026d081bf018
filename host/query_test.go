package host

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// A query answers from the entity's state, on any member, whether the entity is
// active, passivated or was never seen, and changes nothing: not the entity's state,
// not its status, and the host calls that would change anything fail with read-only.
func TestQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	nodes := startNodes(t, 2, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.GuestBytes(t, "querier"), sharding.TypeSettings{Name: "querier", NumberOfShards: 4}); err != nil {
		t.Fatal(err)
	}
	ask := func(id, msg, want string) {
		t.Helper()
		r, err := nodes[0].Sharding().Ask(ctx, "querier", id, []byte(msg))
		if err != nil || string(r.Payload) != want {
			t.Fatalf("ask querier/%s %q: %q, %v; want %q", id, msg, r.Payload, err, want)
		}
	}
	query := func(n *Node, id, q string) string {
		t.Helper()
		out, err := n.Query(ctx, "querier", id, []byte(q))
		if err != nil {
			t.Fatalf("query querier/%s %q via %s: %v", id, q, n.Self().Address, err)
		}
		return string(out)
	}
	for i := 0; i < 3; i++ {
		ask("a", "inc", string(rune('1'+i)))
	}
	for _, n := range nodes {
		if got := query(n, "a", "get"); got != "3" {
			t.Fatalf("query get of the active querier/a via %s: %s, want 3", n.Self().Address, got)
		}
	}
	if got := query(nodes[1], "a", "bump"); got != "103" {
		t.Fatalf("bump: %s", got)
	}
	for _, q := range []string{"tell", "ask", "timer", "update"} {
		if got := query(nodes[0], "a", q); !strings.Contains(got, "read-only") {
			t.Errorf("query %s: %q, want a read-only error", q, got)
		}
	}
	if _, err := nodes[0].Query(ctx, "querier", "a", []byte("trap")); !errors.As(err, new(*GuestError)) {
		t.Errorf("query trap: %v, want a *GuestError", err)
	}
	if _, err := nodes[0].Query(ctx, "querier", "a", []byte("nope")); !errors.As(err, new(*EntityError)) ||
		!strings.Contains(err.Error(), `unknown query "nope"`) {
		t.Errorf("refused query: %v", err)
	}
	// Nothing the queries did reached the entity or anything else.
	ask("a", "inc", "4")
	if d, err := nodes[0].Sharding().DescribeEntity(ctx, "querier", "other"); err != nil || d.Seen {
		t.Errorf("querier/other after the queries' tell and ask: seen %v, %v", d.Seen, err)
	}
	if got := query(nodes[0], "a", "get"); got != "4" {
		t.Fatalf("query get after one more inc: %s, want 4", got)
	}

	// A passivated entity is queried from its saved state, and stays passivated.
	if _, err := nodes[0].Sharding().Passivate(ctx, "querier", "a"); err != nil {
		t.Fatal(err)
	}
	if got := query(nodes[1], "a", "get"); got != "4" {
		t.Fatalf("query get of the passivated querier/a: %s, want 4", got)
	}
	if d, err := nodes[0].Sharding().DescribeEntity(ctx, "querier", "a"); err != nil || d.Status != sharding.StatusPassivated {
		t.Errorf("querier/a after a query: %q, %v; want passivated", d.Status, err)
	}

	// An ID never seen runs on a new instance, and is still never seen.
	if got := query(nodes[0], "never", "get"); got != "0" {
		t.Fatalf("query get of querier/never: %s, want 0", got)
	}
	if d, err := nodes[0].Sharding().DescribeEntity(ctx, "querier", "never"); err != nil || d.Seen {
		t.Errorf("querier/never after a query: seen %v, %v", d.Seen, err)
	}

	// Through the API, with its errors.
	c := client(t, nodes[1])
	if r := c.do("POST", "/v1/query?type=querier&id=a", []byte("get")); r.status != http.StatusOK || string(r.body) != "4" {
		t.Errorf("POST /v1/query: %d %q %v", r.status, r.body, r.err)
	}
	if r := c.do("POST", "/v1/query?type=nosuch&id=a", []byte("get")); r.status != http.StatusNotFound {
		t.Errorf("POST /v1/query of an unknown type: %d %q", r.status, r.body)
	}
	if r := c.do("POST", "/v1/query?type=querier&id=", []byte("get")); r.status != http.StatusBadRequest {
		t.Errorf("POST /v1/query without an ID: %d %q", r.status, r.body)
	}
}

// A module whose entity answers no query gets an error that says how to add one.
func TestQueryWithoutQuerier(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	nodes := startNodes(t, 1, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.GuestBytes(t, "versioned"), sharding.TypeSettings{Name: "versioned", NumberOfShards: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := nodes[0].Query(ctx, "versioned", "a", []byte("get"))
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "answer no query") ||
		!strings.Contains(err.Error(), "Querier") {
		t.Fatalf("query of an entity without Query: %v", err)
	}
	r := client(t, nodes[0]).do("POST", "/v1/query?type=versioned&id=a", []byte("get"))
	if r.status != http.StatusBadRequest || !strings.Contains(r.err.Error, "Entity::query") {
		t.Fatalf("POST /v1/query of an entity without Query: %d %q", r.status, r.body)
	}
}

// The Rust examples answer through Entity::query, from an explicit and a transparent
// state, active and passivated; echo-rust keeps the default and answers no query.
func TestQueryRust(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	nodes := startNodes(t, 1, nil)
	n, ctx := nodes[0], context.Background()
	for name, wasm := range map[string][]byte{
		"explicit":    testwasm.RustBytes(t, "counter-rust"),
		"transparent": testwasm.RustBytesWith(t, "counter-rust", testwasm.RustTransparent...),
	} {
		if _, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: name, NumberOfShards: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Sharding().Ask(ctx, name, "c", []byte("inc 41")); err != nil {
			t.Fatal(err)
		}
		for _, passivate := range []bool{false, true} {
			if passivate {
				if _, err := n.Sharding().Passivate(ctx, name, "c"); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := n.Query(ctx, name, "c", []byte("get")); err != nil || string(out) != "41" {
				t.Fatalf("%s: query get (passivated %v): %q, %v", name, passivate, out, err)
			}
		}
	}
	if _, err := n.Deploy(ctx, testwasm.RustBytes(t, "echo-rust"), sharding.TypeSettings{Name: "echo", NumberOfShards: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Query(ctx, "echo", "a", []byte("get")); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "Entity::query") {
		t.Fatalf("query of echo-rust: %v", err)
	}
}

// The Go examples, built by each Go compiler here (TinyGo and Go's port), answer get
// through Query.
func TestQueryGoExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	nodes := startNodes(t, 1, nil)
	n, ctx := nodes[0], context.Background()
	for _, c := range testwasm.GoCompilers {
		for _, ex := range []struct{ name, msg, want string }{{"counter", "inc 41", "41"}, {"bank", "deposit 41", "41"}} {
			typ := ex.name + "-" + strings.ToLower(c.Name)
			if _, err := n.Deploy(ctx, c.Bytes(t, ex.name), sharding.TypeSettings{Name: typ, NumberOfShards: 2}); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Sharding().Ask(ctx, typ, "x", []byte(ex.msg)); err != nil {
				t.Fatal(err)
			}
			if out, err := n.Query(ctx, typ, "x", []byte("get")); err != nil || string(out) != ex.want {
				t.Errorf("%s: query get: %q, %v; want %s", typ, out, err, ex.want)
			}
		}
	}
}
