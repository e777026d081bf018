package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// hookServer is the outside service of the egress tests: an HTTP server on loopback
// that counts and keeps the posts to /hook and has a few bad routes.
type hookServer struct {
	*httptest.Server
	mu    sync.Mutex
	posts []hookPost
}

type hookPost struct{ body, key, traceparent string }

func newHookServer(t *testing.T) *hookServer {
	s := &hookServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.posts = append(s.posts, hookPost{string(b), r.Header.Get("Idempotency-Key"), r.Header.Get("traceparent")})
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 4096)))
	})
	stop := make(chan struct{})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // then the server notices the client closing
		select {           // answers only when the client gives up
		case <-r.Context().Done():
		case <-stop:
		}
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(stop)
		s.Close()
	})
	return s
}

func (s *hookServer) seen() []hookPost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookPost(nil), s.posts...)
}

// deployWebhook deploys examples/wasm/webhook as typ with the query settings.
func deployWebhook(t *testing.T, c apiClient, wasm []byte, typ string, settings url.Values) {
	t.Helper()
	if r := c.do("POST", "/v1/types/"+typ+"?"+settings.Encode(), wasm); r.status != 200 {
		t.Fatalf("deploy %s: %d %s", typ, r.status, r.body)
	}
}

// askWant asks typ/id msg and fails unless the answer (the reply, or "CODE: error")
// has the status and contains want.
func askWant(t *testing.T, c apiClient, typ, id, msg string, status int, want string) {
	t.Helper()
	r := c.ask(typ, id, msg)
	got := string(r.body)
	if r.status >= 400 {
		got = r.err.Code + ": " + r.err.Error
	}
	if r.status != status || !strings.Contains(got, want) {
		t.Fatalf("%s %q: %d %.300s, want %d %q", typ, msg, r.status, got, status, want)
	}
}

// TestEgressWebhook: the webhook example posts to an HTTP server on loopback that its
// type's allowlist names; a URL off the allowlist, a redirect off it, a redirect loop,
// an oversized response, a slow server and a spent rate each reach the guest as an error
// with its code, are counted, and the entity keeps serving. After a trap, recovery
// replays the post from its record: the server saw one request.
func TestEgressWebhook(t *testing.T) {
	for _, comp := range testwasm.GoCompilers {
		t.Run(comp.Name, func(t *testing.T) {
			wasm := comp.Bytes(t, "webhook")
			srv := newHookServer(t)
			nodes := startNodes(t, 1, func(c *Config) {
				withMetrics(t, c)
				c.Runtime.MessageDeadline = 20 * time.Second
			})
			c := client(t, nodes[0])
			base := srv.URL // http://127.0.0.1:PORT
			deployWebhook(t, c, wasm, "hook", url.Values{"egress": {base}, "egress_max_response": {"1024"},
				"egress_timeout": {"500ms"}})

			askWant(t, c, "hook", "w1", "post "+base+"/hook hello world", 200, "202")
			if p := srv.seen(); len(p) != 1 || p[0].body != "hello world" || p[0].key != "w1/1" {
				t.Fatalf("the server saw %+v", p)
			}
			askWant(t, c, "hook", "w1", "post http://192.0.2.1/hook x", 422, "egress-denied")
			askWant(t, c, "hook", "w1", "post https://"+strings.TrimPrefix(base, "http://")+"/hook x", 422, "egress-denied")
			askWant(t, c, "hook", "w1", "post "+base+"/away x", 422, "egress-denied")
			askWant(t, c, "hook", "w1", "post "+base+"/loop x", 422, "redirects")
			askWant(t, c, "hook", "w1", "post "+base+"/big x", 422, "egress-too-large")
			askWant(t, c, "hook", "w1", "post "+base+"/slow x", 422, "egress-timeout")
			askWant(t, c, "hook", "w1", "sent", 200, "1")

			// Recovery: the trap costs its message alone, and the replay of the post
			// before it answers from the record.
			askWant(t, c, "hook", "w1", "panic", 500, "guest-trap")
			askWant(t, c, "hook", "w1", "sent", 200, "1")
			if p := srv.seen(); len(p) != 1 {
				t.Fatalf("after the trap and recovery the server saw %d requests, want 1: %+v", len(p), p)
			}
			askWant(t, c, "hook", "w1", "post "+base+"/hook again", 200, "202")
			if p := srv.seen(); len(p) != 2 || p[1].key != "w1/2" {
				t.Fatalf("the server saw %+v", p)
			}

			// Without an allowlist nothing is reached; the rate is per entity.
			deployWebhook(t, c, wasm, "hook-closed", nil)
			askWant(t, c, "hook-closed", "w1", "post "+base+"/hook x", 422, "egress-denied")
			deployWebhook(t, c, wasm, "hook-slowrate", url.Values{"egress": {base}, "egress_rate": {"0.001"}})
			askWant(t, c, "hook-slowrate", "w1", "post "+base+"/hook x", 200, "202")
			askWant(t, c, "hook-slowrate", "w1", "post "+base+"/hook x", 422, "egress-rate-limited")
			askWant(t, c, "hook-slowrate", "w2", "post "+base+"/hook x", 200, "202")
			if p := srv.seen(); len(p) != 4 {
				t.Fatalf("the server saw %d requests, want 4", len(p))
			}

			fams := scrape(t, nodes[0])
			for outcome, want := range map[string]float64{"ok": 2, "egress-denied": 3, "egress-failed": 1,
				"egress-too-large": 1, "egress-timeout": 1} {
				if got, _ := sample(fams, "shardhost_egress_requests_total", map[string]string{"shardhost_entity_type": "hook",
					"shardhost_outcome": outcome}); got != want {
					t.Errorf("shardhost_egress_requests_total{hook, %s} = %v, want %v\n%s", outcome, got, want, familyNames(fams))
				}
			}
		})
	}
}

// TestEgressLocalhostNamed: "localhost" in the allowlist names the loopback addresses.
// The request carries the message's trace context and is traced as a client span.
func TestEgressLocalhostNamedAndTraced(t *testing.T) {
	srv := newHookServer(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	sp := newSpans(t)
	nodes := tracedNodes(t, 1, sp, nil)
	c := client(t, nodes[0])
	deployWebhook(t, c, testwasm.TinyGoBytes(t, "webhook"), "hook", url.Values{"egress": {"http://localhost:" + port}})
	tid, status, _, body := tracedRequest(t, nodes[0], "POST", askPath("hook", "w1"), "post http://localhost:"+port+"/hook hi")
	if status != 200 || body != "202" {
		t.Fatalf("%d %s", status, body)
	}
	span := sp.wait(tid, "POST", func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindClient })
	for k, v := range map[string]string{"http.request.method": "POST", "server.address": "localhost",
		"url.full": "http://localhost:" + port + "/hook"} {
		if got, ok := attr(span, k); !ok || got.AsString() != v {
			t.Errorf("%s = %v, want %s", k, got.Emit(), v)
		}
	}
	if got, ok := attr(span, "http.response.status_code"); !ok || got.AsInt64() != 202 {
		t.Errorf("http.response.status_code = %v", got.Emit())
	}
	p := srv.seen()
	if len(p) != 1 || !strings.Contains(p[0].traceparent, tid.String()) {
		t.Fatalf("the server saw %+v, want a traceparent of trace %s", p, tid)
	}
}

// TestEgressDialRefusesUnnamedPrivateAddresses: the check at connect time, on the address
// dialled: a loopback address that no pattern names is refused even when the URL passed
// the allowlist (a name that resolved elsewhere when checked: DNS rebinding).
func TestEgressDialRefusesUnnamedPrivateAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e := newEgressClient(nil)
	policy := func(allow ...string) context.Context {
		p, err := newEgressPolicy(sharding.TypeSettings{EgressAllow: allow})
		if err != nil {
			t.Fatal(err)
		}
		return context.WithValue(context.Background(), egressDialKey{}, p)
	}
	for _, tc := range []struct {
		allow []string
		ok    bool
	}{
		{[]string{"http://*.example.com:" + port}, false},
		{[]string{"http://127.0.0.2:" + port}, false},
		{[]string{"http://127.0.0.1:" + port}, true},
		{[]string{"http://localhost:" + port}, false}, // dialled as 127.0.0.1: the pattern's host is localhost
		{nil, false},
	} {
		conn, err := e.dial(policy(tc.allow...), "tcp", "127.0.0.1:"+port)
		if conn != nil {
			conn.Close()
		}
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errEgressDenied)) {
			t.Errorf("allow %v: %v", tc.allow, err)
		}
	}
	for ip, public := range map[string]bool{"127.0.0.1": false, "10.1.2.3": false, "192.168.0.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "::1": false, "fd00::1": false, "fe80::1": false, "8.8.8.8": true,
		"2001:4860:4860::8888": true, "::ffff:127.0.0.1": false} {
		if publicIP(net.ParseIP(ip)) != public {
			t.Errorf("publicIP(%s) = %v", ip, !public)
		}
	}
}

func TestEgressPatterns(t *testing.T) {
	for _, bad := range []string{"", "ftp://x", "http://", "http://x/path", "http://x?q", "http://u@x", "http://*", "http://a*.x",
		"http://x.*.y", "http://*.10.0.0.1", "http://x:0", "http://x:99999", "http://x:", "x.example.com"} {
		if _, err := parseEgressPattern(bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	p, err := newEgressPolicy(sharding.TypeSettings{EgressAllow: []string{"https://api.example.com", "http://*.svc.example:8080",
		"http://[::1]:9000", "HTTP://Mixed.Example"}})
	if err != nil {
		t.Fatal(err)
	}
	for raw, ok := range map[string]bool{
		"https://api.example.com/v1?x=1": true, "https://api.example.com:443/": true, "http://api.example.com/": false,
		"https://api.example.com:8443/": false, "https://evil.api.example.com/": false, "https://api.example.com.evil/": false,
		"http://a.svc.example:8080/": true, "http://a.b.svc.example:8080/": true, "http://svc.example:8080/": false,
		"http://a.svc.example/": false, "http://[::1]:9000/": true, "http://mixed.example/": true,
	} {
		u, _ := url.Parse(raw)
		if err := p.check(u); ok != (err == nil) {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for _, st := range []sharding.TypeSettings{{EgressTimeout: -1}, {EgressTimeout: time.Hour}, {EgressMaxResponse: -1},
		{EgressMaxResponse: 1 << 40}, {EgressRate: -1}} {
		if err := validateEgress(st); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: %v", st, err)
		}
	}
}

func TestEgressRequestHeaders(t *testing.T) {
	a, err := parseHTTPRequest("", "https://x.example/p", "X-A: 1\nx-a: 2\nContent-Type:  text/plain\n")
	if err != nil || a.method != "GET" || strings.Join(a.header["X-A"], ",") != "1,2" || a.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("%+v %v", a, err)
	}
	for _, tc := range [][3]string{
		{"GET", "https://x.example/", "X-A: 1\rHost: evil\n"},
		{"GET", "https://x.example/", "X-A: 1\r\n"},
		{"GET", "https://x.example/", "X-A: a\x00\n"},
		{"GET", "https://x.example/", "no colon\n"},
		{"GET", "https://x.example/", "Bad Name: v\n"},
		{"GET", "https://x.example/", "Host: other.example\n"},
		{"GET", "https://x.example/", "Content-Length: 5\n"},
		{"GET", "https://x.example/", "Transfer-Encoding: chunked\n"},
		{"GE T", "https://x.example/", ""},
		{"GET", "/relative", ""},
		{"GET", "file:///etc/passwd", ""},
	} {
		if _, err := parseHTTPRequest(tc[0], tc[1], tc[2]); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: %v", tc, err)
		}
	}
}

// TestEgressBucket: the rate's token bucket, on a clock of its own.
func TestEgressBucket(t *testing.T) {
	var b egressBucket
	now := time.Unix(1000, 0)
	for i := 0; i < 2; i++ {
		if !b.take(now, 2) {
			t.Fatalf("take %d refused within the burst", i)
		}
	}
	if b.take(now, 2) {
		t.Fatal("a third take at once")
	}
	if !b.take(now.Add(500*time.Millisecond), 2) || b.take(now.Add(500*time.Millisecond), 2) {
		t.Fatal("half a second at 2/s gives one token")
	}
}

// TestEgressCodes: the errors of http_request map to their codes, also through the
// errors the client wraps them in, and the journal keeps the call by name.
func TestEgressCodes(t *testing.T) {
	for err, want := range map[error]abi.Code{
		fmt.Errorf("x: %w", errEgressDenied):                             abi.CodeEgressDenied,
		&url.Error{Op: "Post", Err: errEgressTooLarge}:                   abi.CodeEgressTooLarge,
		fmt.Errorf("%w: x", errEgressTimeout):                            abi.CodeTimeout,
		fmt.Errorf("%w: x", errEgressFailed):                             abi.CodeEgressFailed,
		fmt.Errorf("%w: x", errEgressRateLimited):                        abi.CodeEgressRateLimited,
		fmt.Errorf("%w: header", ErrBadRequest):                          abi.CodeBadRequest,
		&net.OpError{Op: "dial", Err: fmt.Errorf("%w", errEgressDenied)}: abi.CodeEgressDenied,
	} {
		if got := codeOf(err); got != want {
			t.Errorf("%v: code %d, want %d", err, got, want)
		}
	}
	calls := []hostRecord{{fn: abi.ImportHTTPRequest, ret: uint64(abi.CodeOK), result: []byte{202, 0, 0, 0, 0, 0, 0, 0}}}
	b, err := encodeEffects(calls, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := decodeEffects(b)
	if err != nil || len(got) != 1 || got[0].fn != abi.ImportHTTPRequest || string(got[0].result) != string(calls[0].result) {
		t.Fatalf("%+v %v", got, err)
	}
}

// TestEgressJournalReplayDoesNotCallAgain: under the journal, a member killed after a
// post was acknowledged: the entity's new home replays its records, the post's answer
// from the record, and the server saw one request.
func TestEgressJournalReplayDoesNotCallAgain(t *testing.T) {
	srv := newHookServer(t)
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.TinyGoBytes(t, "webhook"), sharding.TypeSettings{Name: "hook",
		EgressAllow: []string{srv.URL}}); err != nil {
		t.Fatal(err)
	}
	id := entityOn(t, nodes[0], nodes[2], "hook", "sent")
	ask := func(msg string) (string, error) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := nodes[0].Sharding().Ask(actx, "hook", id, []byte(msg))
		return string(r.Payload), err
	}
	if got, err := ask("post " + srv.URL + "/hook once"); err != nil || got != "202" {
		t.Fatalf("post: %q %v", got, err)
	}
	if err := nodes[2].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the entity served after the kill", func() error {
		got, err := ask("sent")
		if err != nil {
			return err
		}
		if got != "1" {
			t.Fatalf("sent %q after the kill, want 1 (the acknowledged post)", got)
		}
		return nil
	})
	if p := srv.seen(); len(p) != 1 {
		t.Fatalf("the server saw %d requests, want 1: %+v", len(p), p)
	}
}
