package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// HTTP routes to entities (docs/http-routes.md; abi/SPEC.md, "HTTP routes"). A type
// deployed with --http-route /shop/{id}/... has every member's API serve the requests
// under that path: the segment in place of {id} names the entity, and the request goes
// to it through sharding as an ask of kind KindHTTP whose payload is the request in the
// ABI's HTTP request encoding. The guest's shardhost_http export answers with the
// status, headers and body. The request is the entity's message: journaled with its
// host calls and replayed like any ask, with the Idempotency-Key header as its key.
//
// Routes live at the root of the API's address. Their first segment may not be one of
// the API's own (v1, ui, alive, ready, metrics), and the literal part of a route (what
// comes before {id}) may not begin another's, of the same type or another: a deploy
// that would break either rule is refused. A route needs the client role unless the
// deploy names it public (--public), and each member admits at most the type's
// http-rate requests per second per route (429 past it) with bodies of at most its
// http-max-body bytes (413).

// Defaults and bounds of the route settings.
const (
	maxHTTPRoutes        = 16
	maxHTTPRouteLength   = 256
	maxHTTPRouteSegments = 16
	defaultHTTPMaxBody   = 256 << 10
	defaultHTTPRate      = 100.0
	maxHTTPRate          = 1e6
	httpRouteID          = "{id}"
	httpRouteRest        = "..."
)

// reservedRouteSegments are the first path segments of the API's own routes.
var reservedRouteSegments = []string{"v1", "ui", "alive", "ready", "metrics"}

// The codes of a route's refusals, besides those of an ask (statusOf).
const (
	codeNoHTTPHandler   = "no-http-handler"   // the type's module has no shardhost_http (501)
	codeRateLimited     = "rate-limited"      // the route's rate on this member is spent (429)
	codeBadHTTPResponse = "bad-http-response" // the guest's response cannot be sent (502)
)

var (
	// errRouteRateLimited: the route's requests per second on this member are spent.
	errRouteRateLimited = errors.New("host: the route's request rate is spent")
	// errBadHTTPResponse: the guest answered with a response the API cannot send: a
	// malformed encoding, a status outside 200-599, a header name that is not a token,
	// a CR, LF or NUL in a value, or a header the API sets itself.
	errBadHTTPResponse = errors.New("host: the entity's HTTP response is malformed")
)

// errNoHTTP is the error of an HTTP request to an entity whose module serves none.
func errNoHTTP(entity string) error {
	return &codedError{codeNoHTTPHandler, fmt.Errorf("%s has no HTTP handler (its module exports no %s, or its SDK entity defines none): "+
		"add one (Go SDK: HTTPHandler; Rust SDK: Entity::serve_http) and deploy the type again", entity, abi.ExportHTTP)}
}

// httpRoute is a parsed route pattern: "/" lits... "/{id}" and, with rest, "/...".
type httpRoute struct {
	pattern string
	lits    []string
	rest    bool
}

// parseHTTPRoute parses a route pattern. Errors: ErrBadRequest.
func parseHTTPRoute(s string) (httpRoute, error) {
	bad := func(why string) (httpRoute, error) {
		return httpRoute{}, fmt.Errorf("%w: HTTP route %q: %s (want /PREFIX/{id} or /PREFIX/{id}/..., such as /shop/{id}/...)", ErrBadRequest, s, why)
	}
	if len(s) > maxHTTPRouteLength {
		return bad(fmt.Sprintf("over %d bytes", maxHTTPRouteLength))
	}
	if !strings.HasPrefix(s, "/") {
		return bad("it does not start with /")
	}
	segs := strings.Split(s[1:], "/")
	if len(segs) > maxHTTPRouteSegments {
		return bad(fmt.Sprintf("over %d segments", maxHTTPRouteSegments))
	}
	r := httpRoute{pattern: s}
	if segs[len(segs)-1] == httpRouteRest {
		r.rest, segs = true, segs[:len(segs)-1]
	}
	if len(segs) < 2 || segs[len(segs)-1] != httpRouteID {
		return bad("{id} is not its last segment (before /...)")
	}
	r.lits = segs[:len(segs)-1]
	for _, l := range r.lits {
		if l == "" || l == "." || l == ".." || strings.IndexFunc(l, func(c rune) bool { return !routeLiteralChar(c) }) >= 0 {
			return bad(fmt.Sprintf("segment %q is not made of letters, digits, '-', '.', '_' and '~'", l))
		}
	}
	if slices.Contains(reservedRouteSegments, r.lits[0]) {
		return bad(fmt.Sprintf("/%s/ is the API's own (the routes under /v1, /ui, /alive, /ready and /metrics are taken)", r.lits[0]))
	}
	return r, nil
}

func routeLiteralChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// overlaps reports whether a path could be meant for both r and o: the literal part of
// one begins the other's.
func (r httpRoute) overlaps(o httpRoute) bool {
	n := min(len(r.lits), len(o.lits))
	return slices.Equal(r.lits[:n], o.lits[:n])
}

// match returns the entity ID (unescaped) and the rest of the path after it (escaped,
// as sent: "" or "/..."), for escaped, a request's escaped path.
func (r httpRoute) match(escaped string) (id, rest string, ok bool) {
	p, found := strings.CutPrefix(escaped, "/")
	if !found {
		return "", "", false
	}
	for _, l := range r.lits {
		seg, tail, _ := strings.Cut(p, "/")
		if seg != l || len(tail) == len(p) {
			return "", "", false
		}
		p = tail
	}
	raw, tail, more := strings.Cut(p, "/")
	if more {
		if !r.rest {
			return "", "", false
		}
		rest = "/" + tail
	}
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" {
		return "", "", false
	}
	return id, rest, true
}

// routeSettings are a type's parsed route settings.
type routeSettings struct {
	routes  []httpRoute
	public  map[string]bool
	maxBody int64
	rate    float64
}

// newRouteSettings parses st's route settings, with the defaults for those at 0.
// Errors: ErrBadRequest.
func newRouteSettings(st sharding.TypeSettings) (*routeSettings, error) {
	rs := &routeSettings{public: map[string]bool{}, maxBody: st.HTTPMaxBody, rate: st.HTTPRate}
	if len(st.HTTPRoutes) > maxHTTPRoutes {
		return nil, fmt.Errorf("%w: %d HTTP routes, at most %d", ErrBadRequest, len(st.HTTPRoutes), maxHTTPRoutes)
	}
	for _, s := range st.HTTPRoutes {
		r, err := parseHTTPRoute(s)
		if err != nil {
			return nil, err
		}
		for _, o := range rs.routes {
			if r.overlaps(o) {
				return nil, fmt.Errorf("%w: HTTP route %s overlaps %s, another route of %s: the part before {id} of one may not begin the other's",
					ErrBadRequest, r.pattern, o.pattern, st.Name)
			}
		}
		rs.routes = append(rs.routes, r)
	}
	for _, p := range st.HTTPPublic {
		if !slices.Contains(st.HTTPRoutes, p) {
			return nil, fmt.Errorf("%w: --public %s is not one of the type's HTTP routes (%s)", ErrBadRequest, p, strings.Join(st.HTTPRoutes, ", "))
		}
		rs.public[p] = true
	}
	switch {
	case rs.maxBody < 0 || rs.maxBody > abi.MaxMessageSize:
		return nil, fmt.Errorf("%w: HTTP max body %d is not 0 to %d bytes", ErrBadRequest, rs.maxBody, abi.MaxMessageSize)
	case rs.rate < 0 || rs.rate > maxHTTPRate || math.IsNaN(rs.rate):
		return nil, fmt.Errorf("%w: HTTP rate %v is not 0 to %v requests per second", ErrBadRequest, rs.rate, maxHTTPRate)
	}
	if rs.maxBody == 0 {
		rs.maxBody = defaultHTTPMaxBody
	}
	if rs.rate == 0 {
		rs.rate = defaultHTTPRate
	}
	return rs, nil
}

// checkHTTPRoutes checks st's route settings, and that none of its routes overlaps a
// route of another deployed type. Errors: ErrBadRequest.
//
// Two deploys of different types through different members at once may both pass:
// matchRoute then picks the type whose name sorts first, the same on every member.
func (n *Node) checkHTTPRoutes(st sharding.TypeSettings) error {
	rs, err := newRouteSettings(st)
	if err != nil || len(rs.routes) == 0 {
		return err
	}
	for _, t := range n.catalog.list() {
		if t.Name == st.Name {
			continue
		}
		for _, s := range t.HTTPRoutes {
			o, err := parseHTTPRoute(s)
			if err != nil {
				continue
			}
			for _, r := range rs.routes {
				if r.overlaps(o) {
					return fmt.Errorf("%w: HTTP route %s overlaps %s of the entity type %s: the part before {id} of one may not begin the other's (undeploy %s or change its routes first)",
						ErrBadRequest, r.pattern, o.pattern, t.Name, t.Name)
				}
			}
		}
	}
	return nil
}

// routeMatch is the route a request is for.
type routeMatch struct {
	typ      string
	route    httpRoute
	public   bool
	id, rest string
	settings *routeSettings
}

// matchRoute returns the deployed route that serves path (escaped), if one does.
func (n *Node) matchRoute(path string) (routeMatch, bool) {
	types := n.catalog.list()
	sort.Slice(types, func(i, j int) bool { return types[i].Name < types[j].Name })
	for _, t := range types {
		if len(t.HTTPRoutes) == 0 {
			continue
		}
		for _, s := range t.HTTPRoutes {
			r, err := parseHTTPRoute(s)
			if err != nil {
				continue
			}
			if id, rest, ok := r.match(path); ok {
				rs, err := newRouteSettings(t.Settings())
				if err != nil {
					return routeMatch{}, false
				}
				return routeMatch{typ: t.Name, route: r, public: rs.public[s], id: id, rest: rest, settings: rs}, true
			}
		}
	}
	return routeMatch{}, false
}

// routeLimiter holds each route's rate on this member. Safe for concurrent use.
type routeLimiter struct {
	mu      sync.Mutex
	buckets map[string]*egressBucket // by type and pattern
}

// take takes a token of m's route at now, and reports whether there was one.
func (l *routeLimiter) take(m routeMatch, now time.Time) bool {
	key := m.typ + "\x00" + m.route.pattern
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*egressBucket{}
	}
	b := l.buckets[key]
	if b == nil {
		b = &egressBucket{}
		l.buckets[key] = b
	}
	return b.take(now, m.settings.rate)
}

// routeTelemetry counts the requests of the routes.
type routeTelemetry struct {
	requests metric.Int64Counter
	attrs    *obs.AttrCache[[2]string]
}

func newRouteTelemetry(mp metric.MeterProvider) *routeTelemetry {
	m := obs.Meter(mp, "host")
	t := &routeTelemetry{}
	t.requests = obs.Must(m.Int64Counter("shardhost.http_route.requests", metric.WithUnit("{request}"),
		metric.WithDescription("HTTP requests served by the entity types' HTTP routes on this member, by entity type and outcome (ok, the status class of the entity's answer as 4xx or 5xx, too-large, rate-limited, no-http-handler, bad-http-response, or the code of a failed ask). [shardhost.entity.type, shardhost.outcome]")))
	t.attrs = obs.NewAttrCache(func(k [2]string) attribute.Set {
		return attribute.NewSet(obs.EntityType.String(k[0]), obs.Outcome.String(k[1]))
	})
	return t
}

func (t *routeTelemetry) count(typ, outcome string) {
	t.requests.Add(context.Background(), 1, t.attrs.Get([2]string{typ, outcome}))
}

// requestHeadersDropped are the request headers an entity does not get: hop-by-hop
// headers, and on a route that is not public the API's credentials.
var requestHeadersDropped = []string{"Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// encodeHTTPRequest renders r (its body read already) in the ABI's HTTP request
// encoding: method, path, rest, query and headers, each as a u32 little-endian length
// and its bytes, then the body.
func encodeHTTPRequest(r *http.Request, m routeMatch, body []byte) []byte {
	h := r.Header.Clone()
	for _, k := range requestHeadersDropped {
		h.Del(k)
	}
	if !m.public {
		h.Del("Authorization")
	}
	hdr := encodeHeaders(h)
	fields := [][]byte{[]byte(r.Method), []byte(r.URL.EscapedPath()), []byte(m.rest), []byte(r.URL.RawQuery), hdr}
	size := len(body)
	for _, f := range fields {
		size += 4 + len(f)
	}
	out := make([]byte, 0, size)
	for _, f := range fields {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(f)))
		out = append(out, f...)
	}
	return append(out, body...)
}

// responseHeadersRefused are the headers a guest may not set: the API sets them.
var responseHeadersRefused = []string{"Connection", "Content-Length", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Traceparent", "Tracestate", textproto.CanonicalMIMEHeaderKey(NodeHeader)}

// decodeHTTPResponse reads the guest's reply in the ABI's HTTP response encoding.
// Errors: errBadHTTPResponse, saying what is wrong.
func decodeHTTPResponse(b []byte) (status int, h http.Header, body []byte, err error) {
	bad := func(format string, args ...any) (int, http.Header, []byte, error) {
		return 0, nil, nil, fmt.Errorf("%w: %s", errBadHTTPResponse, fmt.Sprintf(format, args...))
	}
	if len(b) < 8 {
		return bad("%d bytes, fewer than a status and a header length", len(b))
	}
	st := binary.LittleEndian.Uint32(b)
	n := binary.LittleEndian.Uint32(b[4:])
	if st < 200 || st > 599 {
		return bad("status %d is not 200 to 599", st)
	}
	if uint64(n) > uint64(len(b)-8) {
		return bad("a header block of %d bytes in a reply of %d", n, len(b))
	}
	h = http.Header{}
	block := b[8 : 8+n]
	for len(block) > 0 {
		line, tail, found := bytes.Cut(block, []byte{'\n'})
		if !found {
			return bad("the last header line has no \\n")
		}
		block = tail
		name, value, ok := strings.Cut(string(line), ":")
		if !ok || !isToken(name) {
			return bad("header line %q is not Name: value with a token as its name", truncate(string(line), 64))
		}
		value = strings.TrimLeft(value, " \t")
		if strings.ContainsAny(value, "\r\n\x00") {
			return bad("header %s holds a CR, LF or NUL (header injection)", name)
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(responseHeadersRefused, name) {
			return bad("header %s is the API's to set", name)
		}
		h.Add(name, value)
	}
	return int(st), h, b[8+n:], nil
}

// isToken reports whether s is an HTTP token (RFC 9110): a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// serveRoute serves a request for an entity route, and reports false when no route
// matches (the caller answers 404).
func (n *Node) serveRoute(w http.ResponseWriter, r *http.Request) bool {
	m, ok := n.matchRoute(r.URL.EscapedPath())
	if !ok {
		return false
	}
	// The span's http.route and the http.server.* metrics name the route.
	r.Pattern = m.route.pattern
	span := trace.SpanFromContext(r.Context())
	if span.IsRecording() {
		span.SetAttributes(obs.EntityType.String(m.typ), obs.EntityID.String(m.id))
	}
	fail := func(err error, status int, outcome string) {
		n.routeTel.count(m.typ, outcome)
		writeError(w, r, err, status)
	}
	if err := checkEntityID(m.id); err != nil {
		fail(err, 0, sharding.CodeBadRequest)
		return true
	}
	if !n.routeLimit.take(m, time.Now()) {
		w.Header().Set("Retry-After", "1")
		fail(&codedError{codeRateLimited, fmt.Errorf("%w: %s admits %v requests per second per member (deploy --http-rate)",
			errRouteRateLimited, m.route.pattern, m.settings.rate)}, http.StatusTooManyRequests, codeRateLimited)
		return true
	}
	if r.ContentLength > m.settings.maxBody {
		fail(fmt.Errorf("%w: a body of %d bytes, the route's cap is %d (deploy --http-max-body)", ErrMessageTooLarge, r.ContentLength, m.settings.maxBody),
			http.StatusRequestEntityTooLarge, "too-large")
		return true
	}
	body, err := readBody(r, int(m.settings.maxBody), ErrMessageTooLarge)
	if err != nil {
		status, outcome := 0, sharding.CodeBadRequest
		if errors.Is(err, ErrMessageTooLarge) {
			err = fmt.Errorf("%w (deploy --http-max-body)", err)
			status, outcome = http.StatusRequestEntityTooLarge, "too-large"
		}
		fail(err, status, outcome)
		return true
	}
	payload := encodeHTTPRequest(r, m, body)
	if len(payload) > n.cfg.Runtime.MaxMessageSize {
		fail(fmt.Errorf("%w: the request with its headers is %d bytes, over the message cap of %d", ErrMessageTooLarge, len(payload), n.cfg.Runtime.MaxMessageSize),
			http.StatusRequestEntityTooLarge, "too-large")
		return true
	}
	key, err := idempotencyKey(r)
	if err != nil {
		fail(err, 0, sharding.CodeBadRequest)
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.Sharding.AskTimeout)
	defer cancel()
	reply, err := n.sharding.AskMessage(ctx, sharding.Message{EntityType: m.typ, EntityID: m.id, Payload: payload,
		Kind: sharding.KindHTTP, IdempotencyKey: key})
	if err != nil {
		var re *sharding.RemoteError
		if errors.As(err, &re) && re.Node != "" {
			w.Header().Set(NodeHeader, re.Node)
		}
		_, code := statusOf(err)
		fail(err, 0, code)
		return true
	}
	status, h, out, err := decodeHTTPResponse(reply.Payload)
	if err != nil {
		err = fmt.Errorf("%s/%s: %w", m.typ, m.id, err)
		n.log.WarnContext(r.Context(), "HTTP route: the entity's response is refused", "entity", m.typ+"/"+m.id, "route", m.route.pattern, "err", err)
		fail(&codedError{codeBadHTTPResponse, err}, http.StatusBadGateway, codeBadHTTPResponse)
		return true
	}
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.Header().Set(NodeHeader, reply.Node)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(out)
	}
	outcome := "ok"
	if status >= 400 {
		outcome = strconv.Itoa(status/100) + "xx"
	}
	n.routeTel.count(m.typ, outcome)
	return true
}

// httpRouteSettingList renders t's route settings as the deploy flags take them.
func httpRouteSettingList(t TypeInfo) []Setting {
	maxBody := t.HTTPMaxBody
	if maxBody == 0 {
		maxBody = defaultHTTPMaxBody
	}
	rate := t.HTTPRate
	if rate == 0 {
		rate = defaultHTTPRate
	}
	return []Setting{
		{"http-route", strings.Join(t.HTTPRoutes, ",")},
		{"public", strings.Join(t.HTTPPublic, ",")},
		{"http-max-body", strconv.FormatInt(maxBody, 10)},
		{"http-rate", strconv.FormatFloat(rate, 'g', -1, 64)},
	}
}

// httpRouteQuery reads the route settings of a deploy request's query into st:
// http_route (a pattern; repeated for more; "http_route=" clears them), http_public (a
// pattern among them served without authentication; repeated), http_max_body (bytes)
// and http_rate (requests per second per route on each member). Errors: ErrBadRequest.
func httpRouteQuery(st *sharding.TypeSettings, q url.Values) error {
	st.HTTPRoutes, st.HTTPPublic = nil, nil
	for _, v := range q["http_route"] {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(st.HTTPRoutes, v) {
			st.HTTPRoutes = append(st.HTTPRoutes, v)
		}
	}
	for _, v := range q["http_public"] {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(st.HTTPPublic, v) {
			st.HTTPPublic = append(st.HTTPPublic, v)
		}
	}
	if s := q.Get("http_max_body"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%w: http_max_body=%q is not a number of bytes", ErrBadRequest, s)
		}
		st.HTTPMaxBody = v
	}
	if s := q.Get("http_rate"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: http_rate=%q is not a number of requests per second", ErrBadRequest, s)
		}
		st.HTTPRate = v
	}
	if q.Has("http_public") && !q.Has("http_route") {
		return fmt.Errorf("%w: http_public names routes given with http_route in the same deploy", ErrBadRequest)
	}
	_, err := newRouteSettings(*st)
	return err
}

// inheritHTTPRoutes gives st the previous version's route settings the query leaves
// out. The routes and which of them are public go together.
func inheritHTTPRoutes(st sharding.TypeSettings, q url.Values, prev TypeInfo) sharding.TypeSettings {
	if !q.Has("http_route") {
		st.HTTPRoutes, st.HTTPPublic = prev.HTTPRoutes, prev.HTTPPublic
	}
	if !q.Has("http_max_body") {
		st.HTTPMaxBody = prev.HTTPMaxBody
	}
	if !q.Has("http_rate") {
		st.HTTPRate = prev.HTTPRate
	}
	return st
}
