package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Header names of the API.
const (
	// IdempotencyKeyHeader carries a tell's or an ask's idempotency key.
	IdempotencyKeyHeader = "Idempotency-Key"
	// NodeHeader names, in an ask's reply, the member that hosts the entity.
	NodeHeader = "Shardhost-Node"
)

// Defaults of the retry policy (WithRetry).
const (
	DefaultMaxAttempts = 4
	DefaultBackoff     = 50 * time.Millisecond
	DefaultMaxBackoff  = 2 * time.Second
)

// Client talks to a shardhost cluster's HTTP API through the members given to New. It
// is safe for concurrent use. It starts no goroutine of its own; its HTTP transport
// keeps idle connections open (CloseIdleConnections closes them).
type Client struct {
	endpoints  []string // base URLs, no trailing slash
	http       *http.Client
	token      string
	attempts   int
	backoff    time.Duration
	maxBackoff time.Duration
	prop       propagation.TextMapPropagator
	userAgent  string
	// preferred is the index of the endpoint that answered last: calls start there.
	preferred atomic.Uint32
}

// settings gathers the Options.
type settings struct {
	token                     string
	tlsConfig                 *tls.Config
	caFile, certFile, keyFile string
	httpClient                *http.Client
	attempts                  int
	backoff, maxBackoff       time.Duration
	prop                      propagation.TextMapPropagator
	userAgent                 string
}

// Option configures a Client (New).
type Option func(*settings) error

// WithToken sends the bearer token with every request (Authorization: Bearer TOKEN),
// as the API's tokens (docs/security.md) want. An empty token sends none.
func WithToken(token string) Option {
	return func(s *settings) error {
		if strings.ContainsAny(token, " \t\r\n") {
			return errors.New("client: WithToken: the token has white space in it")
		}
		s.token = token
		return nil
	}
}

// WithTLSConfig uses tc for HTTPS (nil: the system's roots, no client certificate):
// its RootCAs verify the members' certificates and its Certificates are the client
// certificate. Bare HOST:PORT endpoints are then HTTPS. WithCAFile and
// WithClientCertificate add to it.
func WithTLSConfig(tc *tls.Config) Option {
	return func(s *settings) error {
		s.tlsConfig = tc.Clone()
		if s.tlsConfig == nil {
			s.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return nil
	}
}

// WithCAFile trusts the CA certificates of the PEM file (the cluster's CA, as
// shardhost certs create-ca writes it) to verify the members' certificates. Bare
// HOST:PORT endpoints are then HTTPS.
func WithCAFile(path string) Option {
	return func(s *settings) error {
		s.caFile = path
		return nil
	}
}

// WithClientCertificate presents the certificate and key of these PEM files to members
// that ask for one (mutual TLS). Bare HOST:PORT endpoints are then HTTPS.
func WithClientCertificate(certFile, keyFile string) Option {
	return func(s *settings) error {
		if (certFile == "") != (keyFile == "") {
			return errors.New("client: WithClientCertificate: the certificate and the key go together")
		}
		s.certFile, s.keyFile = certFile, keyFile
		return nil
	}
}

// WithHTTPClient sends the requests with hc (its Transport, Timeout, ...). The TLS
// options then do not apply: hc's transport has its own.
func WithHTTPClient(hc *http.Client) Option {
	return func(s *settings) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil client")
		}
		s.httpClient = hc
		return nil
	}
}

// WithRetry sets the retry policy: at most attempts tries per call in all (1: no
// retry), each retry on the next endpoint, after a wait drawn at random between 0 and
// backoff·2^(retry-1), capped at maxBackoff ("full jitter"), or the reply's Retry-After
// if longer. The defaults are DefaultMaxAttempts, DefaultBackoff and DefaultMaxBackoff.
// What is retried: see the package documentation, "Retries".
func WithRetry(attempts int, backoff, maxBackoff time.Duration) Option {
	return func(s *settings) error {
		if attempts < 1 || backoff < 0 || maxBackoff < backoff {
			return fmt.Errorf("client: WithRetry(%d, %v, %v): want attempts ≥ 1 and 0 ≤ backoff ≤ maxBackoff", attempts, backoff, maxBackoff)
		}
		s.attempts, s.backoff, s.maxBackoff = attempts, backoff, maxBackoff
		return nil
	}
}

// WithPropagator injects the caller's context into each request with p instead of the
// default, W3C Trace Context (traceparent, tracestate). For example
// otel.GetTextMapPropagator() to follow the process's OpenTelemetry setup.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(s *settings) error {
		if p == nil {
			return errors.New("client: WithPropagator: nil propagator")
		}
		s.prop = p
		return nil
	}
}

// WithUserAgent sets the User-Agent header of the requests.
func WithUserAgent(ua string) Option {
	return func(s *settings) error {
		s.userAgent = ua
		return nil
	}
}

// New returns a Client of the cluster whose members' APIs are at endpoints: each a URL
// (http://host:port, https://host:port) or a bare HOST:PORT, which is http, or https
// when a TLS option is given. Calls go to one member and, on the failures the retry
// policy allows, on to the next. Errors: no endpoint, an endpoint that is not an
// http(s) URL, a CA or certificate file that cannot be read, a bad option.
func New(endpoints []string, opts ...Option) (*Client, error) {
	s := settings{attempts: DefaultMaxAttempts, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff,
		prop: propagation.TraceContext{}, userAgent: "shardhost-client-go"}
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if len(endpoints) == 0 {
		return nil, errors.New("client: no endpoint: give the API address (HOST:PORT) of at least one member")
	}
	tc, err := s.tls()
	if err != nil {
		return nil, err
	}
	c := &Client{token: s.token, attempts: s.attempts, backoff: s.backoff, maxBackoff: s.maxBackoff, prop: s.prop,
		userAgent: s.userAgent, http: s.httpClient}
	for _, e := range endpoints {
		base, err := baseURL(e, tc != nil)
		if err != nil {
			return nil, err
		}
		c.endpoints = append(c.endpoints, base)
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		c.http = &http.Client{Transport: tr}
	}
	return c, nil
}

// CloseIdleConnections closes the connections to members that are kept open for the
// next calls (and the goroutines of the HTTP transport that serve them). The Client
// stays usable: later calls open new ones.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Endpoints returns the base URLs of the members the client calls, in order.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// baseURL checks an endpoint and gives it a scheme: https when tlsOn.
func baseURL(e string, tlsOn bool) (string, error) {
	base := e
	if !strings.Contains(base, "://") {
		scheme := "http://"
		if tlsOn {
			scheme = "https://"
		}
		base = scheme + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("client: endpoint %q is not an http(s) URL or HOST:PORT", e)
	}
	return strings.TrimRight(base, "/"), nil
}

// tls builds the TLS settings from the options; nil when none is given.
func (s *settings) tls() (*tls.Config, error) {
	if s.tlsConfig == nil && s.caFile == "" && s.certFile == "" {
		return nil, nil
	}
	tc := s.tlsConfig
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if s.caFile != "" {
		b, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA file: %w", err)
		}
		pool := tc.RootCAs
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client: CA file %s: no PEM certificate in it", s.caFile)
		}
		tc.RootCAs = pool
	}
	if s.certFile != "" {
		cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate: %w", err)
		}
		tc.Certificates = append(tc.Certificates, cert)
	}
	return tc, nil
}

// CallOption sets something on one call.
type CallOption func(*call)

type call struct {
	header     http.Header
	idempotent bool
	timeout    time.Duration
}

// WithIdempotencyKey sends the call with the idempotency key k (the Idempotency-Key
// header, at most 256 bytes of UTF-8): a retry with the same key gets the first reply,
// and the entity handles the message once, for the type's idempotency retention. A
// call with a key is retried on 503 replies and broken connections (see "Retries").
func WithIdempotencyKey(k string) CallOption {
	return func(c *call) {
		if k != "" {
			c.set(IdempotencyKeyHeader, k)
			c.idempotent = true
		}
	}
}

// WithHeader adds a request header to the call.
func WithHeader(key, value string) CallOption {
	return func(c *call) { c.set(key, value) }
}

// Idempotent marks a Do call as safe to send twice, so that it is retried like a GET.
func Idempotent() CallOption {
	return func(c *call) { c.idempotent = true }
}

// WithAskTimeout bounds how long the member waits for the entity's reply to an Ask (the
// API's timeout parameter). Without it, the time left before the context's deadline is
// sent, or nothing (the member's default ask timeout, 5 s unless configured).
func WithAskTimeout(d time.Duration) CallOption {
	return func(c *call) { c.timeout = d }
}

func (c *call) set(key, value string) {
	if c.header == nil {
		c.header = http.Header{}
	}
	c.header.Set(key, value)
}

// Response is the API's successful reply to a Do call.
type Response struct {
	// Status is the HTTP status code (2xx).
	Status int
	Header http.Header
	Body   []byte
	// Endpoint is the base URL of the member that answered.
	Endpoint string
}

// apiErrorBody is the API's error object.
type apiErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Do sends one request to the API: method, path (with its query, such as
// "/v1/entities?type=cart") and body (nil for none), and returns the reply of a 2xx
// status. GET, HEAD and calls marked Idempotent or carrying an idempotency key are
// retried as the package documentation says; others only when they did not reach a
// member. Errors: *APIError for an error reply, *RequestError when no member answered,
// the context's error when it ended first.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, opts ...CallOption) (*Response, error) {
	var cl call
	for _, o := range opts {
		o(&cl)
	}
	if method == http.MethodGet || method == http.MethodHead {
		cl.idempotent = true
	}
	return c.do(ctx, method, path, body, &cl)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, cl *call) (*Response, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("client: path %q does not start with /", path)
	}
	start := int(c.preferred.Load())
	var last error
	for try := 0; try < c.attempts; try++ {
		if try > 0 {
			if c.wait(ctx, try, last) != nil {
				break
			}
		}
		i := (start + try) % len(c.endpoints)
		resp, err := c.once(ctx, c.endpoints[i], method, path, body, cl)
		if err == nil {
			c.preferred.Store(uint32(i))
			return resp, nil
		}
		last = err
		if ctx.Err() != nil || !retryable(err, cl.idempotent) {
			break
		}
	}
	if err := ctx.Err(); err != nil && !errors.Is(last, err) {
		return nil, fmt.Errorf("%w (last failure: %w)", err, last)
	}
	return nil, last
}

// wait sleeps before retry number try: full jitter over an exponential backoff, or the
// Retry-After of the last reply if longer. It fails without sleeping when the context's
// deadline would pass first.
func (c *Client) wait(ctx context.Context, try int, last error) error {
	ceil := c.backoff
	for i := 1; i < try && ceil < c.maxBackoff; i++ {
		ceil *= 2
	}
	ceil = min(ceil, c.maxBackoff)
	d := time.Duration(0)
	if ceil > 0 {
		d = rand.N(ceil + 1)
	}
	var ae *APIError
	if errors.As(last, &ae) {
		if s, err := strconv.Atoi(ae.Header.Get("Retry-After")); err == nil && s > 0 {
			d = max(d, min(time.Duration(s)*time.Second, c.maxBackoff))
		}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryable reports whether a failed try may be sent again: one that reached no
// member, or was refused before any entity saw it (not-delivered, overloaded), always;
// any other 503 reply, a 504 outcome-unknown or a broken connection only for an
// idempotent call.
func retryable(err error, idempotent bool) bool {
	var re *RequestError
	if errors.As(err, &re) {
		return !re.Sent || idempotent
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case CodeNotDelivered, CodeOverloaded:
		return true
	case CodeEntityPaused, CodeEntityBackoff:
		return false // they last longer than a retry's wait
	case CodeOutcomeUnknown:
		return idempotent
	}
	return ae.Status == http.StatusServiceUnavailable && idempotent
}

// once sends the request to one member.
func (c *Client) once(ctx context.Context, endpoint, method, path string, body []byte, cl *call) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var sent atomic.Bool
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	req, err := http.NewRequestWithContext(tctx, method, endpoint+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	c.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &RequestError{Endpoint: endpoint, Sent: sent.Load(), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &RequestError{Endpoint: endpoint, Sent: true, Err: fmt.Errorf("reading the reply: %w", err)}
	}
	if resp.StatusCode >= 400 {
		var e apiErrorBody
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e = apiErrorBody{}
		}
		return nil, decodeError(endpoint, resp.StatusCode, resp.Header, b, e.Code, e.Error)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Endpoint: endpoint}, nil
}

// getJSON sends an idempotent GET and decodes its JSON reply into v.
func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	r, err := c.do(ctx, http.MethodGet, path, nil, &call{idempotent: true})
	if err != nil {
		return err
	}
	return decode(r, v)
}

func decode(r *Response, v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("client: the reply of %s is not what this client expects: %w", r.Endpoint, err)
	}
	return nil
}
