package host

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero/api"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// Outbound HTTP from entities (abi/SPEC.md, "v1: outbound HTTP"; docs/security.md,
// "Outbound HTTP"). The host function http_request makes a request with Go's net/http on
// the entity's behalf, under its type's settings: an allowlist of scheme://host[:port]
// patterns (empty by default: an entity reaches nothing), a timeout within the message
// deadline, a cap on the response body and a rate per entity. The proxy comes from the
// environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), TLS certificates are verified, and a
// redirect is followed only to an allowed URL, at most egressMaxRedirects times.
// Loopback, private, link-local and other non-public addresses are refused unless the
// allowlist names them: a pattern whose host is that IP address, or "localhost" for the
// loopback addresses. The check runs on the address actually dialled (a net.Dialer
// Control hook), so a name that resolves to a public address when checked and to a
// private one when dialled (DNS rebinding) is refused too.
//
// The call is a host call like the others for recovery and the journal (recovery.go,
// journal.go): its answer, the response or the error, is recorded, and a replay answers
// from the record without calling out again. A member that crashes after the request
// and before the message's record is durable does not have the answer: the message runs
// again and so does the request (README, "Outbound HTTP").

// Defaults and bounds of the egress settings.
const (
	defaultEgressTimeout     = 10 * time.Second
	maxEgressTimeout         = 10 * time.Minute
	defaultEgressMaxResponse = 1 << 20
	maxEgressMaxResponse     = 16 << 20
	defaultEgressRate        = 10.0
	maxEgressRate            = 10000.0
	maxEgressPatterns        = 256
	egressMaxRedirects       = 5
	// egressMaxResponseHeaders bounds the response headers, in bytes.
	egressMaxResponseHeaders = 64 << 10
)

// The errors of http_request; their text starts with the name the guest and the metrics
// see. errEgressTimeout maps to abi.CodeTimeout, the others to their own codes.
var (
	errEgressDenied      = errors.New("egress-denied")
	errEgressTooLarge    = errors.New("egress-too-large")
	errEgressFailed      = errors.New("egress-failed")
	errEgressRateLimited = errors.New("egress-rate-limited")
	errEgressTimeout     = errors.New("egress-timeout")
)

// egressCode maps an error of http_request to its code; ok is false for another error.
func egressCode(err error) (abi.Code, bool) {
	switch {
	case errors.Is(err, errEgressDenied):
		return abi.CodeEgressDenied, true
	case errors.Is(err, errEgressTooLarge):
		return abi.CodeEgressTooLarge, true
	case errors.Is(err, errEgressRateLimited):
		return abi.CodeEgressRateLimited, true
	case errors.Is(err, errEgressTimeout):
		return abi.CodeTimeout, true
	case errors.Is(err, errEgressFailed):
		return abi.CodeEgressFailed, true
	}
	return 0, false
}

// egressOutcome names err for the metrics and the span's error.type.
func egressOutcome(err error) string {
	for _, e := range []error{errEgressDenied, errEgressTooLarge, errEgressRateLimited, errEgressTimeout, errEgressFailed} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if errors.Is(err, ErrBadRequest) || errors.Is(err, ErrMessageTooLarge) {
		return "bad-request"
	}
	return "error"
}

// egressPattern is one entry of an allowlist: scheme://host[:port], where host is a name,
// an IP address, or "*.domain" (any name under domain, not domain itself).
type egressPattern struct {
	scheme, host, port string
	wildcard           bool   // host is the domain after "*."
	ip                 net.IP // host as an IP address, if it is one
}

// parseEgressPattern parses one allowlist entry. Errors: ErrBadRequest.
func parseEgressPattern(s string) (egressPattern, error) {
	bad := func(why string) (egressPattern, error) {
		return egressPattern{}, fmt.Errorf("%w: egress pattern %q: %s (want scheme://host[:port], such as https://api.example.com or http://10.0.0.5:8080)",
			ErrBadRequest, s, why)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad(err.Error())
	}
	p := egressPattern{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	switch {
	case p.scheme != "http" && p.scheme != "https":
		return bad("the scheme is not http or https")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return bad("only a scheme, a host and a port")
	case p.host == "" || p.host == "*." || strings.Contains(p.host[1:], "*"):
		return bad("the host is missing or has a * other than a leading *.")
	case strings.HasPrefix(p.host, "*") && !strings.HasPrefix(p.host, "*."):
		return bad("a wildcard is *.domain")
	}
	if strings.HasPrefix(u.Host, ":") || strings.HasSuffix(u.Host, ":") {
		return bad("an empty port")
	}
	if p.port == "" {
		p.port = defaultPort(p.scheme)
	} else if n, err := strconv.Atoi(p.port); err != nil || n < 1 || n > 65535 {
		return bad("the port is not 1 to 65535")
	}
	if strings.HasPrefix(p.host, "*.") {
		p.wildcard, p.host = true, p.host[2:]
	}
	p.ip = net.ParseIP(p.host)
	if p.wildcard && p.ip != nil {
		return bad("a wildcard over an IP address")
	}
	return p, nil
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// matchHost reports whether host:port (host in lower case) is p's.
func (p egressPattern) matchHost(host, port string) bool {
	if port != p.port {
		return false
	}
	if p.wildcard {
		return strings.HasSuffix(host, "."+p.host)
	}
	if p.ip != nil {
		ip := net.ParseIP(host)
		return ip != nil && ip.Equal(p.ip)
	}
	return host == p.host
}

// names reports whether p names ip explicitly, so that it may be dialled though it is
// not public: p's host is that IP address, or "localhost" for a loopback address.
func (p egressPattern) names(ip net.IP) bool {
	if p.wildcard {
		return false
	}
	if p.ip != nil {
		return p.ip.Equal(ip)
	}
	return p.host == "localhost" && ip.IsLoopback()
}

// egressPolicy is a type's egress settings, parsed.
type egressPolicy struct {
	allow       []egressPattern
	timeout     time.Duration
	maxResponse int64
	rate        float64
}

// newEgressPolicy parses st's egress settings, with the defaults for those at 0.
// Errors: ErrBadRequest.
func newEgressPolicy(st sharding.TypeSettings) (*egressPolicy, error) {
	p := &egressPolicy{timeout: st.EgressTimeout, maxResponse: st.EgressMaxResponse, rate: st.EgressRate}
	if len(st.EgressAllow) > maxEgressPatterns {
		return nil, fmt.Errorf("%w: %d egress patterns, at most %d", ErrBadRequest, len(st.EgressAllow), maxEgressPatterns)
	}
	for _, s := range st.EgressAllow {
		pat, err := parseEgressPattern(s)
		if err != nil {
			return nil, err
		}
		p.allow = append(p.allow, pat)
	}
	switch {
	case p.timeout < 0 || p.timeout > maxEgressTimeout:
		return nil, fmt.Errorf("%w: egress timeout %s is not 0 to %s", ErrBadRequest, p.timeout, maxEgressTimeout)
	case p.maxResponse < 0 || p.maxResponse > maxEgressMaxResponse:
		return nil, fmt.Errorf("%w: egress max response %d is not 0 to %d bytes", ErrBadRequest, p.maxResponse, maxEgressMaxResponse)
	case p.rate < 0 || p.rate > maxEgressRate || math.IsNaN(p.rate):
		return nil, fmt.Errorf("%w: egress rate %v is not 0 to %v requests per second", ErrBadRequest, p.rate, maxEgressRate)
	}
	if p.timeout == 0 {
		p.timeout = defaultEgressTimeout
	}
	if p.maxResponse == 0 {
		p.maxResponse = defaultEgressMaxResponse
	}
	if p.rate == 0 {
		p.rate = defaultEgressRate
	}
	return p, nil
}

// validateEgress checks st's egress settings. Errors: ErrBadRequest.
func validateEgress(st sharding.TypeSettings) error {
	_, err := newEgressPolicy(st)
	return err
}

// match returns the pattern that allows u, if one does.
func (p *egressPolicy) match(u *url.URL) (egressPattern, bool) {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = defaultPort(scheme)
	}
	for _, pat := range p.allow {
		if pat.scheme == scheme && pat.matchHost(host, port) {
			return pat, true
		}
	}
	return egressPattern{}, false
}

// check returns errEgressDenied unless u is allowed.
func (p *egressPolicy) check(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: %s: the scheme is not http or https", errEgressDenied, redactURL(u))
	}
	if _, ok := p.match(u); !ok {
		return fmt.Errorf("%w: %s is not on the entity type's egress allowlist", errEgressDenied, redactURL(u))
	}
	return nil
}

// redactURL is u without its user information and query, for errors and spans.
func redactURL(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return c.String()
}

// publicIP reports whether ip is an ordinary public unicast address.
func publicIP(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	if ip4 := ip.To4(); ip4 != nil {
		// 0.0.0.0/8, 100.64.0.0/10 (shared address space), 192.0.0.0/24, 198.18.0.0/15
		// (benchmarking), 240.0.0.0/4 and the broadcast address.
		switch {
		case ip4[0] == 0, ip4[0] == 100 && ip4[1]&0xc0 == 64, ip4[0] == 192 && ip4[1] == 0 && ip4[2] == 0,
			ip4[0] == 198 && ip4[1]&0xfe == 18, ip4[0] >= 240:
			return false
		}
	}
	return true
}

// egressDialKey carries an *egressPolicy in a request's context to the dialer.
type egressDialKey struct{}

// egressClient is a node's HTTP client for its entities' requests, and its metrics. Safe
// for concurrent use.
type egressClient struct {
	client   *http.Client
	requests metric.Int64Counter
	duration metric.Float64Histogram
	attrs    *obs.AttrCache[[2]string]
}

func newEgressClient(mp metric.MeterProvider) *egressClient {
	e := &egressClient{}
	tr := &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		DialContext:     e.dial,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		// No idle connections: nothing outlives a request (no goroutine to stop at
		// shutdown), at the cost of a new connection per request.
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: egressMaxResponseHeaders,
	}
	e.client = &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > egressMaxRedirects {
			return fmt.Errorf("%w: more than %d redirects", errEgressFailed, egressMaxRedirects)
		}
		p, _ := req.Context().Value(egressDialKey{}).(*egressPolicy)
		if p == nil {
			return fmt.Errorf("%w: no egress policy", errEgressDenied)
		}
		if err := p.check(req.URL); err != nil {
			return fmt.Errorf("%w (a redirect from %s)", err, redactURL(via[len(via)-1].URL))
		}
		return nil
	}}
	m := obs.Meter(mp, "host")
	e.requests = obs.Must(m.Int64Counter("shardhost.egress.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Outbound HTTP requests of entities (http_request), by entity type and outcome (ok, egress-denied, egress-timeout, egress-too-large, egress-failed, egress-rate-limited, bad-request). [shardhost.entity.type, shardhost.outcome]")))
	e.duration = obs.Must(m.Float64Histogram("shardhost.egress.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of the outbound HTTP requests of entities that reached the network, by entity type and outcome. [shardhost.entity.type, shardhost.outcome]")))
	e.attrs = obs.NewAttrCache(func(k [2]string) attribute.Set {
		return attribute.NewSet(obs.EntityType.String(k[0]), obs.Outcome.String(k[1]))
	})
	return e
}

// dial dials addr for a request whose context carries its *egressPolicy: the proxy
// from the environment as it is, any other address only if every IP address it is
// dialled at is public or named by the policy (checked on the resolved address, in the
// dialer's Control hook).
func (e *egressClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p, _ := ctx.Value(egressDialKey{}).(*egressPolicy)
	if p == nil {
		return nil, fmt.Errorf("%w: no egress policy", errEgressDenied)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errEgressFailed, err)
	}
	d := &net.Dialer{}
	if proxy, _ := ctx.Value(egressProxyKey{}).(string); proxy == "" || proxy != addr {
		host = strings.ToLower(host)
		d.Control = func(_, address string, _ syscall.RawConn) error {
			h, _, err := net.SplitHostPort(address)
			ip := net.ParseIP(h)
			if err != nil || ip == nil {
				return fmt.Errorf("%w: cannot check the address %q", errEgressDenied, address)
			}
			if publicIP(ip) {
				return nil
			}
			for _, pat := range p.allow {
				if pat.matchHost(host, port) && pat.names(ip) {
					return nil
				}
			}
			return fmt.Errorf("%w: %s is at %s, a non-public address the egress allowlist does not name", errEgressDenied, host, ip)
		}
	}
	return d.DialContext(ctx, network, addr)
}

// egressProxyKey carries the proxy's host:port, if the request goes through one.
type egressProxyKey struct{}

// httpRequestArgs is a guest's request, checked.
type httpRequestArgs struct {
	method  string
	u       *url.URL
	header  http.Header
	body    []byte
	timeout time.Duration // the guest's; 0: the type's
}

// egressServices is what an instance in a node gives http_request (a wasmEntity).
type egressServices interface {
	httpRequest(ctx context.Context, a httpRequestArgs) (out []byte, err error)
}

var _ egressServices = (*wasmEntity)(nil)

// hostHTTPRequest is http_request(method, url, headers, body, timeout_ms) -> code.
func hostHTTPRequest(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	switch {
	case uint32(stack[3]) > abi.MaxHTTPURL:
		inst.finish(stack, nil, fmt.Errorf("%w: a URL of %d bytes, at most %d", ErrBadRequest, uint32(stack[3]), abi.MaxHTTPURL))
		return
	case uint32(stack[5]) > abi.MaxHTTPHeaders:
		inst.finish(stack, nil, fmt.Errorf("%w: %d bytes of headers, at most %d", ErrBadRequest, uint32(stack[5]), abi.MaxHTTPHeaders))
		return
	case int(uint32(stack[7])) > inst.m.rt.cfg.MaxMessageSize:
		inst.finish(stack, nil, fmt.Errorf("%w: a request body of %d bytes, the cap is %d", ErrMessageTooLarge, uint32(stack[7]), inst.m.rt.cfg.MaxMessageSize))
		return
	}
	args, ok := inst.textArgs(mod, stack, "method", "URL", "headers")
	if !ok {
		return
	}
	a, err := parseHTTPRequest(args[0], args[1], args[2])
	if err != nil {
		inst.finish(stack, nil, err)
		return
	}
	a.body = append([]byte(nil), read(mod, uint32(stack[6]), uint32(stack[7]))...)
	if ms := int32(uint32(stack[8])); ms > 0 {
		a.timeout = time.Duration(ms) * time.Millisecond
	}
	svc, ok := inst.svc.(egressServices)
	switch {
	case !inst.messaging():
		inst.finish(stack, nil, fmt.Errorf("%w: http_request outside a message or on_activate", errNotAllowed))
	case inst.svc == nil || !ok:
		inst.finish(stack, nil, errNoServices)
	default:
		cctx := inst.ctx
		if inst.msgCtx != nil {
			cctx = trace.ContextWithSpan(cctx, trace.SpanFromContext(inst.msgCtx))
		}
		out, err := svc.httpRequest(cctx, a)
		inst.finish(stack, out, err)
	}
}

// parseHTTPRequest checks a guest's method, URL and header lines ("Name: value\n").
// Errors: ErrBadRequest (a CR, LF or NUL in a header, a header the host sets, a bad
// method or URL).
func parseHTTPRequest(method, rawURL, headers string) (httpRequestArgs, error) {
	a := httpRequestArgs{method: method, header: http.Header{}}
	if a.method == "" {
		a.method = http.MethodGet
	}
	if !validToken(a.method) {
		return a, fmt.Errorf("%w: method %q is not an HTTP token", ErrBadRequest, method)
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return a, fmt.Errorf("%w: %q is not an absolute http or https URL", ErrBadRequest, rawURL)
	}
	a.u = u
	for line := range strings.SplitSeq(strings.TrimSuffix(headers, "\n"), "\n") {
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		value = strings.TrimLeft(value, " \t")
		switch {
		case !ok || !validToken(name):
			return a, fmt.Errorf("%w: header line %q is not Name: value", ErrBadRequest, line)
		case strings.ContainsAny(value, "\r\n\x00"):
			return a, fmt.Errorf("%w: header %s has a CR, LF or NUL in its value", ErrBadRequest, name)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Upgrade", "Trailer", "Proxy-Authorization":
			return a, fmt.Errorf("%w: header %s is the host's to set", ErrBadRequest, name)
		}
		a.header.Add(name, value)
	}
	return a, nil
}

// validToken reports whether s is an RFC 9110 token (a method or a header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// egressBucket is an entity's request rate: a token bucket of rate tokens per second
// holding at most max(1, rate). Used by the entity's instance only (never concurrently).
type egressBucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at now, at rate per second, and reports whether there was one.
func (b *egressBucket) take(now time.Time, rate float64) bool {
	burst := max(1, rate)
	if b.last.IsZero() {
		b.tokens = burst
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// httpRequest makes the entity's request a under its type's egress settings and
// returns the response as http_request's result: status (u32 LE), the headers' length
// (u32 LE), the header lines, the body. ctx is the instance's (its cancellation is the
// message deadline) with the message's span.
func (e *wasmEntity) httpRequest(ctx context.Context, a httpRequestArgs) (out []byte, err error) {
	n := e.n
	start := time.Now()
	reached := false
	span := noopSpan
	if n.traced {
		port := a.u.Port()
		if port == "" {
			port = defaultPort(a.u.Scheme)
		}
		pn, _ := strconv.Atoi(port)
		ctx, span = n.tracer.Start(ctx, a.method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("http.request.method", a.method), attribute.String("url.full", redactURL(a.u)),
			attribute.String("server.address", a.u.Hostname()), attribute.Int("server.port", pn),
			obs.EntityType.String(e.typ), obs.EntityID.String(e.id)))
	}
	defer func() {
		outcome := obs.OutcomeOK
		if err != nil {
			outcome = egressOutcome(err)
			span.SetAttributes(attribute.String("error.type", outcome))
			span.SetStatus(codes.Error, err.Error())
		}
		set := n.egress.attrs.Get([2]string{e.typ, outcome})
		n.egress.requests.Add(context.Background(), 1, set)
		if reached {
			n.egress.duration.Record(context.Background(), time.Since(start).Seconds(), set)
		}
		span.End()
	}()
	info, ok := n.catalog.get(e.typ)
	if !ok {
		return nil, n.unknownType(e.typ)
	}
	p, err := newEgressPolicy(info.Settings())
	if err != nil {
		return nil, err
	}
	if err := p.check(a.u); err != nil {
		return nil, err
	}
	if !e.egressRate.take(time.Now(), p.rate) {
		return nil, fmt.Errorf("%w: more than %v requests per second from %s", errEgressRateLimited, p.rate, e.name())
	}
	timeout := p.timeout
	if a.timeout > 0 && a.timeout < timeout {
		timeout = a.timeout
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, egressDialKey{}, p), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, a.method, a.u.String(), bytes.NewReader(a.body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	req.Header = a.header
	if len(a.body) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if proxy, err := http.ProxyFromEnvironment(req); err == nil && proxy != nil {
		pport := proxy.Port()
		if pport == "" {
			pport = defaultPort(proxy.Scheme)
		}
		req = req.WithContext(context.WithValue(ctx, egressProxyKey{}, net.JoinHostPort(proxy.Hostname(), pport)))
	}
	if n.traced {
		n.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	reached = true
	resp, err := n.egress.client.Do(req)
	if err != nil {
		return nil, egressError(ctx, a.u, err)
	}
	defer resp.Body.Close()
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.ContentLength > p.maxResponse {
		return nil, fmt.Errorf("%w: %s answered %d bytes, the cap is %d", errEgressTooLarge, redactURL(a.u), resp.ContentLength, p.maxResponse)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.maxResponse+1))
	if err != nil {
		return nil, egressError(ctx, a.u, err)
	}
	if int64(len(body)) > p.maxResponse {
		return nil, fmt.Errorf("%w: %s answered more than the cap of %d bytes", errEgressTooLarge, redactURL(a.u), p.maxResponse)
	}
	hdr := encodeHeaders(resp.Header)
	out = make([]byte, 8, 8+len(hdr)+len(body))
	binary.LittleEndian.PutUint32(out[0:], uint32(resp.StatusCode))
	binary.LittleEndian.PutUint32(out[4:], uint32(len(hdr)))
	out = append(append(out, hdr...), body...)
	if resp.StatusCode >= 500 {
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(resp.StatusCode)))
	}
	return out, nil
}

// egressError classifies an error of the client: the allowlist's (a redirect, the
// dialled address), the timeout, or another failure.
func egressError(ctx context.Context, u *url.URL, err error) error {
	switch {
	case errors.Is(err, errEgressDenied), errors.Is(err, errEgressFailed):
		return unwrapURLError(err)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %s: no answer in time", errEgressTimeout, redactURL(u))
	}
	return fmt.Errorf("%w: %s: %v", errEgressFailed, redactURL(u), unwrapURLError(err))
}

// unwrapURLError drops the *url.Error around err (its text repeats the URL, with its
// query).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// encodeHeaders renders h as "Name: value\n" lines, names sorted.
func encodeHeaders(h http.Header) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b []byte
	for _, k := range names {
		for _, v := range h[k] {
			b = append(append(append(append(b, k...), ": "...), v...), '\n')
		}
	}
	return b
}

// egressSettingList renders t's egress settings as the deploy flags take them.
func egressSettingList(t TypeInfo) []Setting {
	timeout := time.Duration(t.EgressTimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = defaultEgressTimeout
	}
	maxResp := t.EgressMaxResponse
	if maxResp == 0 {
		maxResp = defaultEgressMaxResponse
	}
	rate := t.EgressRate
	if rate == 0 {
		rate = defaultEgressRate
	}
	return []Setting{
		{"egress", strings.Join(t.Egress, ",")},
		{"egress-timeout", timeout.String()},
		{"egress-max-response", strconv.FormatInt(maxResp, 10)},
		{"egress-rate", strconv.FormatFloat(rate, 'g', -1, 64)},
	}
}

// egressQuery reads the egress settings of a deploy request's query into st: egress
// (scheme://host[:port] patterns, comma-separated or repeated; "egress=" clears them),
// egress_timeout (a duration), egress_max_response (bytes) and egress_rate (requests per
// second per entity). Errors: ErrBadRequest.
func egressQuery(st *sharding.TypeSettings, q url.Values) error {
	st.EgressAllow = nil
	for _, v := range q["egress"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				st.EgressAllow = append(st.EgressAllow, s)
			}
		}
	}
	if s := q.Get("egress_timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: egress_timeout=%q is not a duration", ErrBadRequest, s)
		}
		st.EgressTimeout = d
	}
	if s := q.Get("egress_max_response"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%w: egress_max_response=%q is not a number of bytes", ErrBadRequest, s)
		}
		st.EgressMaxResponse = v
	}
	if s := q.Get("egress_rate"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: egress_rate=%q is not a number of requests per second", ErrBadRequest, s)
		}
		st.EgressRate = v
	}
	return validateEgress(*st)
}

// inheritEgress gives st the previous version's egress settings the query leaves out.
func inheritEgress(st sharding.TypeSettings, q url.Values, prev TypeInfo) sharding.TypeSettings {
	if !q.Has("egress") {
		st.EgressAllow = prev.Egress
	}
	if !q.Has("egress_timeout") {
		st.EgressTimeout = time.Duration(prev.EgressTimeoutMs) * time.Millisecond
	}
	if !q.Has("egress_max_response") {
		st.EgressMaxResponse = prev.EgressMaxResponse
	}
	if !q.Has("egress_rate") {
		st.EgressRate = prev.EgressRate
	}
	return st
}
