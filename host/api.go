package host

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// The management API, version 1. Requests and replies are JSON, except message payloads
// and replies, which are the raw bytes. Every error is {"error": TEXT, "code": CODE}
// with a 4xx or 5xx status.
//
//	POST /v1/types/{name}[?shards=N&...] body: the module → DeployResult (deploySettings)
//	GET  /v1/types                       → [TypeStatus]: each type with its entities by version
//	GET  /v1/modules                     → [ModuleInfo]: every type's versions, newest first, with their entities
//	POST /v1/types/{name}/upgrade[?dry_run=true&now=true] → UpgradeResult (upgrade.go)
//	  a deploy with canary=P% or canary_ids=A,B[&canary_max_failure_rate=R&canary_window=D
//	  &canary_min_messages=N] is a canary (DeployCanary, rollout.go)
//	GET  /v1/types/{name}/rollout          → RolloutStatus
//	POST /v1/types/{name}/rollout/promote  → TypeInfo
//	POST /v1/types/{name}/rollout/rollback → RollbackResult
//	POST /v1/tell?type=T&id=ID           body: payload → 202 {"status":"accepted"}
//	POST /v1/tell?type=T&id=ID&deliver_at=TIME|deliver_in=D → 202 ScheduledTellResult (scheduled.go)
//	GET  /v1/scheduled[?type=T[&id=ID]][&limit=N] → ScheduledList
//	DELETE /v1/scheduled/{id}            → ScheduledCancelResult; 404 {"code":"not-found"}
//	POST /v1/ask?type=T&id=ID[&timeout=D] body: payload → 200 reply bytes; header Shardhost-Node
//	  (both take an Idempotency-Key header: a retry with the key gets the first reply)
//	GET  /v1/entities/{type}/{id}/history[?since=SEQ&limit=N] → HistoryPage (history.go)
//	POST /v1/entities/{type}/{id}/revert?to=SEQ|messages=N → TimeTravelResult
//	POST /v1/entities/{type}/{id}/fork?new=ID[&at=SEQ]     → TimeTravelResult
//	POST /v1/entities/{type}/{id}/resume, .../skip          → {"entity":E,"status":S}
//	GET  /v1/members                     → [Member]
//	GET  /v1/cluster                     → the view: self, leader, converged, members
//	POST /v1/members/{address}/down      → mark the member down (an operator's decision)
//	POST /v1/members/{address}/leave     → make the member leave gracefully
//	POST /v1/leave                       → make this member leave gracefully
//	GET  /v1/shards                      → {"regions":[{"node":A,"shards":[{"type":T,"id":S,"entities":N}]}]}
//	GET  /v1/ddata/keys                  → the keys this member holds (api_ddata.go)
//	GET  /v1/ddata/keys/{key}[?consistency=C]   → the key's value
//	POST /v1/ddata/keys/{key}?type=T[&consistency=C] body: an operation → the new value
//	DELETE /v1/ddata/keys/{key}[?consistency=C] → delete the key for good
//	GET  /v1/keys, POST /v1/keys/{install,use,remove} → gossip keys, cluster-wide (keys.go)
//	GET  /v1/health                      → {"status":"ok","node":A}: an alias of /alive
//	GET  /alive                          → 200 {"status":"alive","node":A} while the process serves
//	GET  /ready[?state=admitted|settled] → 200 {"status":"ready",...} or 503 {"status":"not-ready","reason":R,...}
//	  (state= adds a condition on the state store's ring: readyState)
//	GET  /metrics                        → the metrics in the Prometheus text format
//	GET  /v1/openapi.json                → this API's OpenAPI 3.1 description (openapi.go)
//	ANY  /PREFIX/{id}[/...]               → an entity type's HTTP route: the entity's own response (routes.go)
//
// Every request has an HTTP server span (otelhttp, named by route: "POST /v1/ask"), and
// every response a traceparent header (W3C Trace Context) naming its trace: the span's
// when tracing is on, otherwise the caller's or a new unsampled one.
//
// With APIConfig.Tokens or a client CA, every route but the probes and /metrics needs a
// role (auth.go: routeRoles): 401 {"code":"unauthenticated"} without known credentials,
// 403 {"code":"forbidden"} for a role too low. Past APIConfig.MaxConcurrentRequests
// requests in progress, 503 {"code":"overloaded"} with Retry-After (apilimits.go).
//
// The entity ID is any UTF-8 text, URL-encoded in the query.

// NodeHeader names the response header that gives the address of the member that
// hosts the entity which answered an ask.
const NodeHeader = "Shardhost-Node"

// Handler returns the node's management API, with its telemetry: an HTTP server span
// per request (except the probes and /metrics), http.server.* metrics, and the
// traceparent response header.
func (n *Node) Handler() http.Handler {
	mux := n.routes()
	tp := n.cfg.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := n.cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	// Authentication and the limits run inside the server span, so that a refused
	// request has its span and its http.server.* metrics like any other.
	h := n.authorize(mux, n.limit(mux))
	return otelhttp.NewHandler(traceparentHeader(h), "shardhost API",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(n.prop),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/metrics", "/alive", "/ready", "/v1/health":
				return false
			}
			return true
		}))
}

// traceparentHeader gives every response the traceparent (and tracestate) of the
// request's server span, so that a caller can find its trace.
// It also sets http.route on the span once the mux has matched the request.
//
// With tracing off and no traceparent sent, the request has no span context: it gets a
// new one (random trace and span IDs, not sampled), carried by the request's context, so
// that the response still names a trace and the logs this member writes for the request
// (trace_id) name the same one. Nothing is recorded, exported or sent to other members.
func traceparentHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		if !span.SpanContext().IsValid() {
			orig := r
			r = r.WithContext(trace.ContextWithSpanContext(r.Context(), newUnsampledSpanContext()))
			// The mux sets the pattern on the request it gets: otelhttp reads the
			// route (http.route of its metrics) from the one it holds.
			defer func() { orig.Pattern = r.Pattern }()
		}
		propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(w.Header()))
		next.ServeHTTP(w, r)
		if r.Pattern != "" && span.IsRecording() {
			route := r.Pattern
			if i := strings.IndexByte(route, ' '); i >= 0 {
				route = route[i+1:]
			}
			span.SetAttributes(attribute.String("http.route", route))
		}
	})
}

func (n *Node) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/types/{name}", n.apiDeploy)
	mux.HandleFunc("DELETE /v1/types/{name}", n.apiUndeploy)
	mux.HandleFunc("POST /v1/types/{name}/upgrade", n.apiUpgrade)
	mux.HandleFunc("GET /v1/types/{name}/rollout", n.apiRolloutStatus)
	mux.HandleFunc("POST /v1/types/{name}/rollout/promote", n.apiRolloutPromote)
	mux.HandleFunc("POST /v1/types/{name}/rollout/rollback", n.apiRolloutRollback)
	mux.HandleFunc("GET /v1/types", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.TypeReport(r.Context())) })
	mux.HandleFunc("GET /v1/modules", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.ModuleReport(r.Context()))
	})
	mux.HandleFunc("POST /v1/passivate", n.apiPassivate)
	mux.HandleFunc("POST /v1/tell", n.apiTell)
	mux.HandleFunc("GET /v1/scheduled", n.apiScheduledList)
	mux.HandleFunc("DELETE /v1/scheduled/{id}", n.apiScheduledCancel)
	mux.HandleFunc("POST /v1/ask", n.apiAsk)
	mux.HandleFunc("POST /v1/query", n.apiQuery)
	mux.HandleFunc("GET /v1/entities", n.apiListEntities)
	mux.HandleFunc("GET /v1/entities/{type}/{id}", n.apiDescribeEntity)
	mux.HandleFunc("GET /v1/entities/{type}/{id}/history", n.apiHistory)
	mux.HandleFunc("POST /v1/entities/{type}/{id}/revert", n.apiRevert)
	mux.HandleFunc("POST /v1/entities/{type}/{id}/fork", n.apiFork)
	mux.HandleFunc("POST /v1/entities/{type}/{id}/pause", n.apiPause)
	mux.HandleFunc("POST /v1/entities/{type}/{id}/resume", n.apiResume)
	mux.HandleFunc("POST /v1/entities/{type}/{id}/skip", n.apiResume)
	mux.HandleFunc("GET /v1/entities/{type}/{id}/base", n.apiBase)
	mux.HandleFunc("GET /v1/entities/{type}/{id}/journal", n.apiJournal)
	mux.HandleFunc("GET /v1/entities/{type}/{id}/reminders", n.apiReminders)
	mux.HandleFunc("GET /v1/entities/{type}/{id}/logs", n.apiEntityLogs)
	mux.HandleFunc("GET /v1/logs", n.apiEntityLogs)
	mux.HandleFunc("GET /v1/modules/{digest}", n.apiModule)
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.Members()) })
	mux.HandleFunc("GET /v1/shards", n.apiShards)
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.membership.View()) })
	mux.HandleFunc("POST /v1/members/{address}/down", func(w http.ResponseWriter, r *http.Request) {
		n.memberAction(w, r, r.PathValue("address"), "down", n.membership.DownMember)
	})
	mux.HandleFunc("POST /v1/members/{address}/leave", func(w http.ResponseWriter, r *http.Request) {
		n.memberAction(w, r, r.PathValue("address"), "leave", n.membership.LeaveMember)
	})
	mux.HandleFunc("POST /v1/leave", func(w http.ResponseWriter, r *http.Request) {
		n.memberAction(w, r, n.Self().Address, "leave", n.membership.LeaveMember)
	})
	mux.HandleFunc("POST /v1/state/members/{address}/forget", n.apiForgetStateMember)
	n.ddataRoutes(mux)
	n.consoleRoutes(mux)
	n.keyRoutes(mux)
	n.openAPIRoutes(mux)
	// /v1/health predates the probes: it stays, as an alias of /alive.
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": n.Self().Address})
	})
	mux.HandleFunc("GET /alive", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "alive", "node": n.Self().Address})
	})
	mux.HandleFunc("GET /ready", n.apiReady)
	if n.cfg.MetricsHandler != nil {
		mux.Handle("GET /metrics", n.cfg.MetricsHandler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if n.serveRoute(w, r) {
			return
		}
		writeError(w, r, fmt.Errorf("%w: no such endpoint %s %s", ErrBadRequest, r.Method, r.URL.Path), http.StatusNotFound)
	})
	return mux
}

// Readiness is the body of GET /ready.
type Readiness struct {
	Status string `json:"status"` // ready, not-ready
	Node   string `json:"node"`
	// Reason says why the member is not ready.
	Reason       string `json:"reason,omitempty"`
	MemberStatus string `json:"member_status"`
	Converged    bool   `json:"converged"`
}

// Ready reports whether the member should get traffic, as Akka Management's readiness
// check: it is up in a converged view, its regions have started (Start has returned), a
// region of every entity type in its catalog runs (types learned by gossip are prepared
// in the background), and it is neither leaving nor out of the cluster. Otherwise Reason
// says why not.
func (n *Node) Ready() Readiness {
	v := n.membership.View()
	self := n.membership.Self()
	rd := Readiness{Status: "not-ready", Node: self.Address, MemberStatus: self.Status.String(), Converged: v.Converged}
	closed := n.owner.Closed()
	select {
	case <-n.started:
	default:
		rd.Reason = "starting: the regions have not started"
		return rd
	}
	switch {
	case closed:
		rd.Reason = "shutting down"
	case v.Exited:
		rd.Reason = "out of the cluster: " + v.ExitReason
	case n.sharding.Leaving() || self.Status == cluster.StatusLeaving || self.Status == cluster.StatusExiting:
		rd.Reason = "leaving the cluster"
	case self.Status != cluster.StatusUp:
		rd.Reason = "member status is " + self.Status.String() + ", not up"
	case !v.Converged:
		rd.Reason = "the membership view has not converged"
	default:
		rd.Status = "ready"
		for _, t := range n.catalog.list() {
			if !n.sharding.HasRegion(t.Name) {
				rd.Status = "not-ready"
				rd.Reason = "entity type " + t.Name + " is not ready here yet (its module is being fetched or compiled, or could not be)"
				break
			}
		}
	}
	return rd
}

// Conditions GET /ready?state=C adds to Ready's (readyState).
const (
	// readyAdmitted: the built-in state store's ring admits this member with its
	// data directory: it is neither joining (up, not admitted yet) nor replaced (admitted
	// with a data directory it no longer has). A member that comes up at a new address,
	// or on a new directory, is so from the handover round that admits it, which also
	// lets go of the members gone since the last round (replstore: handover rounds).
	readyAdmitted = "admitted"
	// readySettled: the ring is settled as this member sees it: it admits exactly
	// the members up, each with its data directory (no member retained, joining or
	// replaced; replstore.Ring.Settled).
	readySettled = "settled"
)

// readyState adds the state store's condition state (readyAdmitted or
// readySettled; "" adds none) to rd, a member ready by Ready's conditions: rd with
// Status not-ready and Reason saying why if the condition does not hold. A state store
// without a ring (PostgreSQL) always meets both. An unknown condition is
// ErrBadRequest.
func (n *Node) readyState(rd Readiness, state string) (Readiness, error) {
	switch state {
	case "", readyAdmitted, readySettled:
	default:
		return rd, fmt.Errorf("%w: state=%q: want %s or %s", ErrBadRequest, state, readyAdmitted, readySettled)
	}
	if state == "" || rd.Status != "ready" {
		return rd, nil
	}
	ring, ok := n.StateRing()
	if !ok {
		return rd, nil // no ring: nothing to hand over between members
	}
	self := n.Self().Address // the ring names a member by its stable name, if it has one
	if name := n.Self().Name; name != "" {
		self = name
	}
	var joining []string
	for _, a := range ring.Live {
		if !slices.Contains(ring.Admitted, a) {
			joining = append(joining, a)
		}
	}
	switch {
	case slices.Contains(ring.Replaced, self):
		rd.Reason = "the state store's ring has admitted this member with another data directory: a handover round admits its new one"
	case !slices.Contains(ring.Admitted, self):
		rd.Reason = "the state store's ring has not admitted this member yet: a handover round admits it"
	case state == readySettled && !ring.Settled:
		rd.Reason = fmt.Sprintf("the state store's ring is not settled (retained: %s; joining: %s; replaced: %s): a handover round settles it",
			addrList(ring.Retained), addrList(joining), addrList(ring.Replaced))
	default:
		return rd, nil
	}
	rd.Status = "not-ready"
	return rd, nil
}

// addrList is addrs comma-separated, or "none".
func addrList(addrs []string) string {
	if len(addrs) == 0 {
		return "none"
	}
	return strings.Join(addrs, ",")
}

func (n *Node) apiReady(w http.ResponseWriter, r *http.Request) {
	rd, err := n.readyState(n.Ready(), r.URL.Query().Get("state"))
	if err != nil {
		writeError(w, r, err, http.StatusBadRequest)
		return
	}
	status := http.StatusOK
	if rd.Status != "ready" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, rd)
}

func (n *Node) memberAction(w http.ResponseWriter, r *http.Request, address, action string, do func(string) error) {
	if err := do(address); err != nil {
		status := http.StatusConflict
		if errors.Is(err, cluster.ErrNoSuchMember) {
			status = http.StatusNotFound
		}
		writeError(w, r, err, status)
		return
	}
	n.log.InfoContext(r.Context(), "operator action", "action", action, "member", address)
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "action": action, "member": address})
}

// ForgetResult is the body of POST /v1/state/members/{address}/forget's reply.
type ForgetResult struct {
	Member     string   `json:"member"`
	RetainedBy []string `json:"retained_by"` // the members up that retained it
}

func (n *Node) apiForgetStateMember(w http.ResponseWriter, r *http.Request) {
	addr := r.PathValue("address")
	by, err := n.ForgetStateMember(r.Context(), addr)
	switch {
	case errors.Is(err, replstore.ErrMemberNotGone), errors.Is(err, ErrNoStateRing):
		writeError(w, r, err, http.StatusConflict)
		return
	case err != nil:
		writeError(w, r, err, 0)
		return
	}
	if by == nil {
		by = []string{}
	}
	writeJSON(w, http.StatusOK, ForgetResult{Member: addr, RetainedBy: by})
}

// apiError is the body of every error reply.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// statusOf maps an error to its HTTP status and code.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrModuleTooLarge), errors.Is(err, ErrMessageTooLarge):
		return http.StatusRequestEntityTooLarge, sharding.CodeBadRequest
	case errors.Is(err, ErrInvalidModule), errors.Is(err, ErrBadRequest), errors.Is(err, sharding.ErrInvalidListQuery):
		return http.StatusBadRequest, sharding.CodeBadRequest
	case errors.Is(err, ErrShardsChanged):
		return http.StatusConflict, sharding.CodeBadRequest
	}
	code := sharding.ErrorCode(withCode(err))
	switch code {
	case sharding.CodeUnknownType, sharding.CodeNotFound:
		return http.StatusNotFound, code
	case sharding.CodeBadRequest:
		return http.StatusBadRequest, code
	case sharding.CodeEntityError:
		return http.StatusUnprocessableEntity, code
	case sharding.CodeGuestDeadline:
		return http.StatusGatewayTimeout, code
	case sharding.CodeReplyTooLarge:
		return http.StatusBadGateway, code
	case sharding.CodeOverloaded, sharding.CodeBackoff, sharding.CodeStateNotSaved, sharding.CodeStateNotLoaded,
		sharding.CodeUnavailable, sharding.CodeEntityPaused:
		return http.StatusServiceUnavailable, code
	case codeNoHTTPHandler:
		return http.StatusNotImplemented, code
	case codeRateLimited:
		return http.StatusTooManyRequests, code
	case codeBadHTTPResponse:
		return http.StatusBadGateway, code
	case sharding.CodeNotDelivered:
		// The message never reached its entity: sending it again is safe (Retry-After).
		return http.StatusServiceUnavailable, code
	case sharding.CodeOutcomeUnknown:
		// It may have been handled: only an idempotency key makes a retry safe.
		return http.StatusGatewayTimeout, code
	}
	return http.StatusInternalServerError, code
}

// notDeliveredRetryAfter is the Retry-After of a message not delivered, in seconds: a
// shard whose member is gone has a new home once the member is downed.
const notDeliveredRetryAfter = "1"

// writeError answers with err, and marks the request's span failed (a refusal too:
// bad input, an unknown type, a size cap) with error.type set to the code. A message
// not delivered is answered with Retry-After.
func writeError(w http.ResponseWriter, r *http.Request, err error, status int) {
	code := sharding.ErrorCode(withCode(err))
	if status == 0 {
		status, code = statusOf(err)
	}
	if code == sharding.CodeNotDelivered {
		w.Header().Set("Retry-After", notDeliveredRetryAfter)
	}
	obs.Fail(trace.SpanFromContext(r.Context()), err, code)
	writeJSON(w, status, apiError{Error: err.Error(), Code: code})
}

// readBody reads at most max bytes of the request body; more is ErrMessageTooLarge
// (or ErrModuleTooLarge for a module).
func readBody(r *http.Request, max int, tooLarge error) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the request body: %v", ErrBadRequest, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%w: over the cap of %d bytes", tooLarge, max)
	}
	return b, nil
}

// target reads and checks the entity type and ID of a tell or ask.
func (n *Node) target(r *http.Request) (typ, id string, err error) {
	q := r.URL.Query()
	typ, id = q.Get("type"), q.Get("id")
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.SetAttributes(obs.EntityType.String(typ), obs.EntityID.String(id))
	}
	if typ == "" {
		return "", "", fmt.Errorf("%w: the entity type is missing (type=)", ErrBadRequest)
	}
	if err := ValidateTypeName(typ); err != nil {
		return "", "", err
	}
	if err := checkEntityID(id); err != nil {
		return "", "", err
	}
	if _, ok := n.catalog.get(typ); !ok {
		return "", "", n.unknownType(typ)
	}
	return typ, id, nil
}

// nearestType returns the deployed type name closest to typ by edit distance (ignoring
// case), if one is close enough to be a likely typo: at most a third of the longer
// name's letters apart. Empty when none is.
// unknownType is the error for a type that is not deployed: sharding's
// ErrUnknownEntityType with the name, and the nearest deployed name when one is close
// (a typo).
func (n *Node) unknownType(typ string) error {
	if near := n.nearestType(typ); near != "" {
		return fmt.Errorf("%w: %q; did you mean %q?", sharding.ErrUnknownEntityType, typ, near)
	}
	return fmt.Errorf("%w: %q", sharding.ErrUnknownEntityType, typ)
}

func (n *Node) nearestType(typ string) string {
	best, bestD := "", -1
	for _, t := range n.catalog.list() {
		d := editDistance(strings.ToLower(typ), strings.ToLower(t.Name))
		if limit := max(len(typ), len(t.Name)) / 3; d <= max(limit, 1) && (bestD < 0 || d < bestD) {
			best, bestD = t.Name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// apiPassivate is POST /v1/passivate?type=T&id=ID: the entity's region passivates it
// (its state saved); the answer says whether it was active.
func (n *Node) apiPassivate(w http.ResponseWriter, r *http.Request) {
	typ, id, err := n.target(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.Sharding.AskTimeout)
	defer cancel()
	done, err := n.sharding.Passivate(ctx, typ, id)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	status := sharding.PassivateInactive
	if done {
		status = sharding.PassivateDone
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": status, "entity": typ + "/" + id})
}

// IdempotencyKeyHeader names the request header of a tell's or an ask's idempotency
// key (sharding.Message.IdempotencyKey): a retry with the same key gets the first
// reply, and the entity handles the message once.
const IdempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey reads a request's idempotency key. Errors: ErrBadRequest (a key over
// sharding.MaxIdempotencyKeyLen bytes or not UTF-8).
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := sharding.CheckIdempotencyKey(key); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrBadRequest, IdempotencyKeyHeader, err)
	}
	return key, nil
}

func (n *Node) apiTell(w http.ResponseWriter, r *http.Request) {
	typ, id, payload, err := n.entityRequest(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	if due, ok, err := scheduledDue(r); err != nil || ok {
		if err != nil {
			writeError(w, r, err, 0)
			return
		}
		n.apiScheduleTell(w, r, typ, id, payload, key, due)
		return
	}
	if err := n.sharding.TellMessage(r.Context(), sharding.Message{EntityType: typ, EntityID: id, Payload: payload,
		IdempotencyKey: key}); err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
}

func (n *Node) apiAsk(w http.ResponseWriter, r *http.Request) {
	typ, id, payload, err := n.entityRequest(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	timeout := n.cfg.Sharding.AskTimeout
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeError(w, r, fmt.Errorf("%w: timeout=%q is not a positive duration", ErrBadRequest, s), 0)
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	reply, err := n.sharding.AskMessage(ctx, sharding.Message{EntityType: typ, EntityID: id, Payload: payload,
		IdempotencyKey: key})
	if err != nil {
		var re *sharding.RemoteError
		if errors.As(err, &re) && re.Node != "" {
			w.Header().Set(NodeHeader, re.Node)
		}
		writeError(w, r, err, 0)
		return
	}
	w.Header().Set(NodeHeader, reply.Node)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(reply.Payload)
}

// ShardsReport is the API's view of cluster sharding (Akka's ClusterShardingStats).
type ShardsReport struct {
	Regions []RegionReport `json:"regions"`
	// Errors lists members that did not answer.
	Errors []string `json:"errors,omitempty"`
}

// RegionReport is what one member hosts.
type RegionReport struct {
	Node   string        `json:"node"`
	Shards []ShardReport `json:"shards"`
	// Passivations counts the entities passivated on the member since it started.
	Passivations uint64 `json:"passivations"`
	// BufferedDuringHandoff counts the messages the member buffered because their
	// shard was being handed off, since it started.
	BufferedDuringHandoff uint64 `json:"buffered_during_handoff"`
	// DeadLetters counts the messages dropped because a buffer or mailbox was full, and
	// the tells that failed (the entity refused one, trapped, ...), since start.
	DeadLetters uint64 `json:"dead_letters"`
}

// ShardReport is one hosted shard and its number of active entities.
type ShardReport struct {
	Type     string `json:"type"`
	ID       int    `json:"id"`
	Entities int    `json:"entities"`
}

func (n *Node) apiShards(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.shardsReport(r.Context()))
}

// newUnsampledSpanContext returns a span context with random trace and span IDs
// (W3C Trace Context: 16 and 8 bytes, never all zero) and no sampled flag.
func newUnsampledSpanContext() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	}
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64())
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}
