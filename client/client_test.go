package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/host"
)

func newClient(t *testing.T, endpoints []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testCtx is a context that ends with the test, at most five minutes from now (a
// loaded machine is slow; nothing waits for the deadline).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestMessagesQueriesAndListings(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, []string{api})
	id := "messages-" + t.Name()
	r, err := c.AskReply(ctx, "counter", id, []byte("inc 5"))
	if err != nil || string(r.Payload) != "5" {
		t.Fatalf("ask inc 5: %q, %v; want 5", r, err)
	}
	if r.Node != node.Self().Address {
		t.Errorf("reply's node %q, want %q", r.Node, node.Self().Address)
	}
	if err := c.Tell(ctx, "counter", id, []byte("inc 2")); err != nil {
		t.Fatal(err)
	}
	// The tell is queued before the ask in the entity's mailbox: the ask sees it.
	if got, err := c.Ask(ctx, "counter", id, []byte("get")); err != nil || string(got) != "7" {
		t.Fatalf("ask get after a tell: %q, %v; want 7", got, err)
	}
	if got, err := c.Query(ctx, "counter", id, []byte("get")); err != nil || string(got) != "7" {
		t.Fatalf("query get: %q, %v; want 7", got, err)
	}
	// An empty payload is a message, which counter refuses.
	if _, err := c.Ask(ctx, "counter", id, nil); !errors.Is(err, client.ErrEntity) {
		t.Fatalf("empty ask: %v, want ErrEntity", err)
	}

	d, err := c.Describe(ctx, "counter", id)
	if err != nil || !d.Seen || d.Status != "active" || d.Member != node.Self().Address || d.Type != "counter" || d.ID != id {
		t.Fatalf("describe: %+v, %v", d, err)
	}
	if d, err := c.Describe(ctx, "counter", "never-seen"); err != nil || d.Seen {
		t.Fatalf("describe of an entity never seen: %+v, %v", d, err)
	}

	page, err := c.Entities(ctx, client.EntityFilter{Type: "counter", Prefix: id})
	if err != nil || len(page.Rows) != 1 || page.Rows[0].ID != id || page.Rows[0].MessagesHandled < 3 {
		t.Fatalf("entities with prefix %q: %+v, %v", id, page, err)
	}
	// Pages of one row: AllEntities follows the cursor.
	for i := range 3 {
		if _, err := c.Ask(ctx, "counter", id+"-page-"+strconv.Itoa(i), []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for row, err := range c.AllEntities(ctx, client.EntityFilter{Type: "counter", Prefix: id + "-page-", Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, row.ID)
	}
	if len(ids) != 3 {
		t.Fatalf("all entities, a page of one at a time: %v, want 3", ids)
	}
	if _, err := c.Entities(ctx, client.EntityFilter{Type: "nosuchtype"}); !errors.Is(err, client.ErrUnknownType) {
		t.Fatalf("entities of an unknown type: %v", err)
	}

	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].Status != "up" || ms[0].API != api || len(ms[0].UID) != 16 {
		t.Fatalf("members: %+v, %v", ms, err)
	}
	rep, err := c.Shards(ctx)
	if err != nil || len(rep.Regions) != 1 || rep.Regions[0].Node != node.Self().Address || len(rep.Regions[0].Shards) == 0 {
		t.Fatalf("shards: %+v, %v", rep, err)
	}
}

func TestDeployAndUndeploy(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, []string{api})
	res, err := c.Deploy(ctx, "counter2", counterWasm, url.Values{"shards": {"8"}})
	if err != nil || res.Type.Name != "counter2" || res.Type.Shards != 8 || res.Type.Version != 1 || len(res.Members) != 1 || !res.Members[0].Ready {
		t.Fatalf("deploy: %+v, %v", res, err)
	}
	again, err := c.Deploy(ctx, "counter2", counterWasm, nil)
	if err != nil || !again.Unchanged || again.Type.Version != 1 {
		t.Fatalf("deploy of the same module again: %+v, %v; want unchanged", again, err)
	}
	if got, err := c.Ask(ctx, "counter2", "a", []byte("inc")); err != nil || string(got) != "1" {
		t.Fatalf("ask: %q, %v", got, err)
	}
	if _, err := c.Deploy(ctx, "counter3", []byte("not wasm"), nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("deploy of a module that is not one: %v, want ErrBadRequest", err)
	}
	if _, err := c.Deploy(ctx, "counter2", counterWasm, url.Values{"shards": {"9"}}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a change of the number of shards: %v, want ErrBadRequest", err)
	}
	un, err := c.Undeploy(ctx, "counter2", false)
	if err != nil || un.Type.Name != "counter2" || !un.Type.Removed {
		t.Fatalf("undeploy: %+v, %v", un, err)
	}
	if _, err := c.Ask(ctx, "counter2", "a", []byte("inc")); !errors.Is(err, client.ErrUnknownType) {
		t.Fatalf("ask after undeploy: %v, want ErrUnknownType", err)
	}
	if _, err := c.Undeploy(ctx, "counter2", false); !errors.Is(err, client.ErrUnknownType) {
		t.Fatalf("second undeploy: %v, want ErrUnknownType", err)
	}
}

// Pause holds an entity: asks fail with ErrEntityPaused until Resume; a second pause
// or resume says it did nothing.
func TestPauseAndResume(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, []string{api})
	if got, err := c.Ask(ctx, "counter", "paused", []byte("inc")); err != nil || string(got) != "1" {
		t.Fatalf("ask: %q, %v", got, err)
	}
	if paused, err := c.Pause(ctx, "counter", "paused"); err != nil || !paused {
		t.Fatalf("pause: %v, %v", paused, err)
	}
	if paused, err := c.Pause(ctx, "counter", "paused"); err != nil || paused {
		t.Fatalf("pause again: %v, %v; want false", paused, err)
	}
	if _, err := c.Ask(ctx, "counter", "paused", []byte("inc")); !errors.Is(err, client.ErrEntityPaused) {
		t.Fatalf("ask of a paused entity: %v, want ErrEntityPaused", err)
	}
	if resumed, err := c.Resume(ctx, "counter", "paused"); err != nil || !resumed {
		t.Fatalf("resume: %v, %v", resumed, err)
	}
	if resumed, err := c.Resume(ctx, "counter", "paused"); err != nil || resumed {
		t.Fatalf("resume again: %v, %v; want false", resumed, err)
	}
	if got, err := c.Ask(ctx, "counter", "paused", []byte("inc")); err != nil || string(got) != "2" {
		t.Fatalf("ask after the resume: %q, %v; want 2", got, err)
	}
	if _, err := c.Pause(ctx, "nosuchtype", "x"); !errors.Is(err, client.ErrUnknownType) {
		t.Fatalf("pause of an unknown type: %v, want ErrUnknownType", err)
	}
}

func TestErrorsAreTypedWithTheirCodes(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t, []string{api})

	_, err := c.Ask(ctx, "countr", "a", []byte("get"))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != client.CodeUnknownType || !strings.Contains(ae.Message, `did you mean "counter"`) {
		t.Fatalf("unknown type: %#v", err)
	}
	for _, want := range []error{client.ErrUnknownType, client.ErrNotFound} {
		if !errors.Is(err, want) {
			t.Errorf("unknown type: %v does not match %v", err, want)
		}
	}
	for _, not := range []error{client.ErrEntity, client.ErrUnavailable, client.ErrTimeout, client.ErrBadRequest} {
		if errors.Is(err, not) {
			t.Errorf("unknown type: %v matches %v", err, not)
		}
	}
	if ae.Header.Get("traceparent") == "" {
		t.Errorf("an error reply's headers are kept: %v", ae.Header)
	}

	_, err = c.Ask(ctx, "counter", "a", []byte("bogus"))
	if !errors.Is(err, client.ErrEntity) || !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(err.Error(), `counter: unknown message "bogus"`) {
		t.Fatalf("an entity's error: %v", err)
	}
	_, err = c.Ask(ctx, "counter", "", []byte("get"))
	if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("an empty ID: %v", err)
	}
	_, err = c.Do(ctx, "GET", "/v1/nosuchroute", nil)
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("no such route: %v", err)
	}
	// A ddata key that does not exist: the API's not-found code.
	_, err = c.Do(ctx, "GET", "/v1/ddata/keys/no-such-key", nil)
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ae) || ae.Code != client.CodeNotFound {
		t.Fatalf("a ddata key that does not exist: %v", err)
	}
}

// A member with API tokens: no token is ErrUnauthorized, a read token asking is
// ErrForbidden, a client token works.
func TestTokens(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	const readTok, clientTok = "read-token-0123456789", "client-token-0123456789"
	if err := os.WriteFile(file, []byte("read "+readTok+"\nclient "+clientTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := host.LoadAPITokens(file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNode(filepath.Join(dir, "node"), func(cfg *host.Config) { cfg.API.Tokens = tokens })
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	_, err = newClient(t, []string{n.APIAddr()}).Members(ctx)
	var ae *client.APIError
	if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &ae) || ae.Status != 401 || ae.Code != client.CodeUnauthenticated {
		t.Fatalf("no token: %v, want ErrUnauthorized", err)
	}
	if _, err := newClient(t, []string{n.APIAddr()}, client.WithToken("wrong-token-0123456789")).Members(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("an unknown token: %v, want ErrUnauthorized", err)
	}
	read := newClient(t, []string{n.APIAddr()}, client.WithToken(readTok))
	if ms, err := read.Members(ctx); err != nil || len(ms) != 1 {
		t.Fatalf("read token, members: %v, %v", ms, err)
	}
	if _, err := read.Ask(ctx, "counter", "a", []byte("get")); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("read token, ask: %v, want ErrForbidden", err)
	}
	if _, err := newClient(t, []string{n.APIAddr()}, client.WithToken(clientTok)).Ask(ctx, "nosuchtype", "a", []byte("get")); !errors.Is(err, client.ErrUnknownType) {
		t.Fatalf("client token, ask: %v, want ErrUnknownType (past authentication)", err)
	}
}

// faultProxy stands in front of the member: the first fail requests get what the
// test's fault does; later ones go to the member. It counts the requests it saw.
type faultProxy struct {
	fail  atomic.Int32
	seen  atomic.Int32
	fault func(w http.ResponseWriter, r *http.Request, forward http.Handler)
	srv   *http.Server
	addr  string
	mu    sync.Mutex
	reqs  []*http.Request
	// quit is closed when the test ends: a fault that waits stops waiting.
	quit chan struct{}
}

// req returns the i-th request the proxy saw.
func (p *faultProxy) req(i int) *http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs[i]
}

func newFaultProxy(t *testing.T, fail int, fault func(w http.ResponseWriter, r *http.Request, forward http.Handler)) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: api})
	p := &faultProxy{fault: fault, addr: l.Addr().String(), quit: make(chan struct{})}
	p.fail.Store(int32(fail))
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.seen.Add(1)
		p.mu.Lock()
		p.reqs = append(p.reqs, r.Clone(context.Background()))
		p.mu.Unlock()
		if p.fail.Add(-1) >= 0 {
			p.fault(w, r, forward)
			return
		}
		forward.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); p.srv.Serve(l) }()
	t.Cleanup(func() {
		close(p.quit)
		p.srv.Close()
		<-done
	})
	return p
}

// unavailable answers as a member that is stopping does.
func unavailable(code string) func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
	return func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":"member stopping (a test's fault)","code":%q}`, code)
	}
}

var fastRetry = client.WithRetry(4, time.Millisecond, 10*time.Millisecond)

func TestRetryOn503(t *testing.T) {
	ctx := testCtx(t)
	id := "retry-" + t.Name()

	// A query is idempotent: retried past two 503s.
	p := newFaultProxy(t, 2, unavailable(client.CodeUnavailable))
	c := newClient(t, []string{p.addr}, fastRetry)
	if got, err := c.Query(ctx, "counter", id, []byte("get")); err != nil || string(got) != "0" {
		t.Fatalf("query through two 503s: %q, %v", got, err)
	}
	if n := p.seen.Load(); n != 3 {
		t.Fatalf("the proxy saw %d requests, want 3", n)
	}

	// An ask without a key is not sent again after an unavailable reply...
	p = newFaultProxy(t, 1, unavailable(client.CodeUnavailable))
	c = newClient(t, []string{p.addr}, fastRetry)
	_, err := c.Ask(ctx, "counter", id, []byte("inc"))
	if !errors.Is(err, client.ErrUnavailable) || p.seen.Load() != 1 {
		t.Fatalf("ask without a key on a 503: %v after %d requests; want ErrUnavailable after 1", err, p.seen.Load())
	}
	// ...but is after not-delivered, which says it never reached its entity.
	p = newFaultProxy(t, 1, unavailable(client.CodeNotDelivered))
	c = newClient(t, []string{p.addr}, fastRetry)
	if got, err := c.Ask(ctx, "counter", id, []byte("inc")); err != nil || string(got) != "1" || p.seen.Load() != 2 {
		t.Fatalf("ask without a key on not-delivered: %q, %v after %d requests; want 1 after 2", got, err, p.seen.Load())
	}
	// With a key, it is retried on any 503.
	p = newFaultProxy(t, 2, unavailable(client.CodeStateNotSaved))
	c = newClient(t, []string{p.addr}, fastRetry)
	if got, err := c.Ask(ctx, "counter", id, []byte("inc"), client.WithIdempotencyKey(id+"-k1")); err != nil || string(got) != "2" || p.seen.Load() != 3 {
		t.Fatalf("ask with a key on 503s: %q, %v after %d requests; want 2 after 3", got, err, p.seen.Load())
	}
	// The tries are capped: the last failure is returned.
	p = newFaultProxy(t, 100, unavailable(client.CodeOverloaded))
	c = newClient(t, []string{p.addr}, fastRetry)
	if _, err := c.Query(ctx, "counter", id, []byte("get")); !errors.Is(err, client.ErrOverloaded) || p.seen.Load() != 4 {
		t.Fatalf("query on 503s only: %v after %d requests; want ErrOverloaded after 4", err, p.seen.Load())
	}
	// entity-paused is never retried: it lasts.
	p = newFaultProxy(t, 100, unavailable(client.CodeEntityPaused))
	c = newClient(t, []string{p.addr}, fastRetry)
	if _, err := c.Query(ctx, "counter", id, []byte("get")); !errors.Is(err, client.ErrEntityPaused) || p.seen.Load() != 1 {
		t.Fatalf("query on entity-paused: %v after %d requests; want ErrEntityPaused after 1", err, p.seen.Load())
	}
}

// closedPort returns an address on which nothing listens.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRetryOnADeadEndpoint(t *testing.T) {
	ctx := testCtx(t)
	id := "dead-" + t.Name()
	dead := closedPort(t)
	c := newClient(t, []string{dead, api}, fastRetry)
	// Nothing was sent to the dead member: even an ask without a key goes on.
	if got, err := c.Ask(ctx, "counter", id, []byte("inc")); err != nil || string(got) != "1" {
		t.Fatalf("ask with the first endpoint dead: %q, %v", got, err)
	}
	// The member that answered is tried first from then on.
	if got, err := c.Ask(ctx, "counter", id, []byte("inc")); err != nil || string(got) != "2" {
		t.Fatalf("second ask: %q, %v", got, err)
	}
	// Only dead members: a *RequestError that sent nothing, matching ErrUnavailable.
	c = newClient(t, []string{dead, closedPort(t)}, fastRetry)
	_, err := c.Ask(ctx, "counter", id, []byte("inc"))
	var re *client.RequestError
	if !errors.As(err, &re) || re.Sent || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("no member alive: %#v", err)
	}
}

// A connection that breaks after the request was sent: the member may have handled the
// message. Without a key it is not sent again; with one it is, and the entity handles
// it once.
func TestBrokenConnectionAndIdempotencyKey(t *testing.T) {
	ctx := testCtx(t)
	id := "broken-" + t.Name()
	// The fault forwards the request to the member, then breaks the connection instead
	// of answering: the reply is lost.
	lose := func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		forward.ServeHTTP(discard{}, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	p := newFaultProxy(t, 1, lose)
	c := newClient(t, []string{p.addr}, fastRetry)
	_, err := c.Ask(ctx, "counter", id, []byte("inc"))
	var re *client.RequestError
	if !errors.As(err, &re) || !re.Sent || p.seen.Load() != 1 {
		t.Fatalf("ask without a key, reply lost: %v after %d requests; want a *RequestError with Sent after 1", err, p.seen.Load())
	}
	if got, _ := c.Query(ctx, "counter", id, []byte("get")); string(got) != "1" {
		t.Fatalf("the lost ask was handled: count %q, want 1", got)
	}

	p = newFaultProxy(t, 1, lose)
	c = newClient(t, []string{p.addr}, fastRetry)
	key := id + "-key"
	got, err := c.Ask(ctx, "counter", id, []byte("inc"), client.WithIdempotencyKey(key))
	if err != nil || string(got) != "2" || p.seen.Load() != 2 {
		t.Fatalf("ask with a key, first reply lost: %q, %v after %d requests; want 2 after 2", got, err, p.seen.Load())
	}
	for i := range int(p.seen.Load()) {
		if r := p.req(i); r.Header.Get(client.IdempotencyKeyHeader) != key {
			t.Fatalf("a try went without the key: %v", r.Header)
		}
	}
	// The same key again gets the first reply; the entity handled it once.
	if got, err := c.Ask(ctx, "counter", id, []byte("inc"), client.WithIdempotencyKey(key)); err != nil || string(got) != "2" {
		t.Fatalf("ask with the same key again: %q, %v; want the first reply, 2", got, err)
	}
	if got, _ := c.Query(ctx, "counter", id, []byte("get")); string(got) != "2" {
		t.Fatalf("count %q, want 2: the keyed message was handled once", got)
	}
	// A tell with a key is kept once too.
	if err := c.Tell(ctx, "counter", id, []byte("inc 10"), client.WithIdempotencyKey(id+"-tell")); err != nil {
		t.Fatal(err)
	}
	if err := c.Tell(ctx, "counter", id, []byte("inc 10"), client.WithIdempotencyKey(id+"-tell")); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Ask(ctx, "counter", id, []byte("get")); string(got) != "12" {
		t.Fatalf("count %q after a keyed tell sent twice, want 12", got)
	}
	// A key the API refuses (over 256 bytes) is bad input.
	if _, err := c.Ask(ctx, "counter", id, []byte("inc"), client.WithIdempotencyKey(strings.Repeat("k", 300))); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a key over the cap: %v, want ErrBadRequest", err)
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func TestContextDeadline(t *testing.T) {
	// A member that never answers: the call ends at the context's deadline.
	var p *faultProxy
	hang := func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		io.Copy(io.Discard, r.Body) // so that the server watches the connection
		select {
		case <-r.Context().Done():
		case <-p.quit:
		}
	}
	p = newFaultProxy(t, 100, hang)
	c := newClient(t, []string{p.addr}, fastRetry)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Ask(ctx, "counter", "a", []byte("get"), client.WithIdempotencyKey("deadline"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ask past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if n := p.seen.Load(); n != 1 {
		t.Fatalf("%d tries, want 1: none after the deadline", n)
	}
	// The ask's timeout sent to the member is below the time left.
	q := p.req(0).URL.Query()
	d, err := time.ParseDuration(q.Get("timeout"))
	if err != nil || d <= 0 || d >= 300*time.Millisecond {
		t.Fatalf("ask's timeout %q, want a duration under the 300ms left", q.Get("timeout"))
	}
	// A context already done sends nothing.
	if _, err := c.Ask(ctx, "counter", "a", []byte("get")); !errors.Is(err, context.DeadlineExceeded) || p.seen.Load() != 1 {
		t.Fatalf("ask with a context done: %v", err)
	}
	// WithAskTimeout: the member gives up and answers outcome-unknown... here the real
	// member answers at once, and the parameter is passed.
	p2 := newFaultProxy(t, 0, nil)
	c = newClient(t, []string{p2.addr})
	if _, err := c.Ask(testCtx(t), "counter", "a", []byte("get"), client.WithAskTimeout(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := p2.req(0).URL.Query().Get("timeout"); got != "1.5s" {
		t.Fatalf("timeout=%q, want 1.5s", got)
	}
}

func TestTraceContextPropagated(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(testCtx(t), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	p := newFaultProxy(t, 0, nil)
	c := newClient(t, []string{p.addr})
	r, err := c.AskReply(ctx, "counter", "trace", []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.req(0).Header.Get("traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent sent %q", got)
	}
	// The member's reply names the same trace: its server span joined it.
	if got := r.Header.Get("traceparent"); !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Fatalf("the member's traceparent %q is not in the caller's trace", got)
	}
	// Without a span in the context, none is sent.
	if _, err := c.Members(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := p.req(1).Header.Get("traceparent"); got != "" {
		t.Fatalf("traceparent %q sent without a span in the context", got)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		endpoints []string
		opts      []client.Option
		want      string
	}{
		{nil, nil, "no endpoint"},
		{[]string{"ftp://h:1"}, nil, "not an http(s) URL"},
		{[]string{"http://"}, nil, "not an http(s) URL"},
		{[]string{"h:1"}, []client.Option{client.WithCAFile("/no/such/ca.pem")}, "CA file"},
		{[]string{"h:1"}, []client.Option{client.WithClientCertificate("c.pem", "")}, "go together"},
		{[]string{"h:1"}, []client.Option{client.WithRetry(0, 0, 0)}, "attempts ≥ 1"},
		{[]string{"h:1"}, []client.Option{client.WithToken("two words")}, "white space"},
	} {
		if _, err := client.New(c.endpoints, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want an error containing %q", c.endpoints, err, c.want)
		}
	}
	c := newClient(t, []string{"127.0.0.1:1", "https://h:2/", "h:3"})
	if got := strings.Join(c.Endpoints(), " "); got != "http://127.0.0.1:1 https://h:2 http://h:3" {
		t.Fatalf("endpoints %s", got)
	}
	c = newClient(t, []string{"h:3"}, client.WithTLSConfig(nil))
	if got := c.Endpoints()[0]; got != "https://h:3" {
		t.Fatalf("with TLS, a bare HOST:PORT is %s, want https", got)
	}
}
