package host

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// Who may call the management API (docs/security.md). A caller proves who it is with a
// bearer token from the API's tokens file, or with a client certificate signed by the
// API's client CA; either gives it a role. Every route needs a role (routeRoles); the
// probes and /metrics need none unless APIConfig.AuthAll is set.

// Errors of API authentication.
var (
	// errUnauthenticated: the request has no credentials, or credentials the API does
	// not know (HTTP 401).
	errUnauthenticated = errors.New("host: unauthenticated")
	// errForbidden: the caller's role may not do this (HTTP 403).
	errForbidden = errors.New("host: forbidden")
	// ErrBadTokens: a tokens file that cannot be used.
	ErrBadTokens = errors.New("host: bad API tokens file")
)

// Role is what an API caller may do. Roles are ordered: admin may do everything client
// may, and client everything read may.
type Role uint8

const (
	// RoleNone is no role: only the open routes (the probes and /metrics).
	RoleNone Role = iota
	// RoleRead may list members, shards, types, modules and distributed data keys.
	RoleRead
	// RoleClient may also tell and ask entities and read distributed data values.
	RoleClient
	// RoleAdmin may also deploy and undeploy, passivate entities, down and leave
	// members, write and delete distributed data and manage gossip keys.
	RoleAdmin
)

var roleNames = [...]string{"none", "read", "client", "admin"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole parses admin, client or read.
func ParseRole(s string) (Role, error) {
	for r := RoleRead; r <= RoleAdmin; r++ {
		if s == roleNames[r] {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("unknown role %q (want admin, client or read)", s)
}

// routeRoles is the role each route of the API needs (by its ServeMux pattern). A route
// missing here needs admin: a new route is closed until someone decides otherwise
// (TestEveryRouteHasARole). The open routes are the probes and /metrics.
var routeRoles = map[string]Role{
	"POST /v1/types/{name}":                   RoleAdmin,
	"DELETE /v1/types/{name}":                 RoleAdmin,
	"POST /v1/types/{name}/upgrade":           RoleAdmin,
	"GET /v1/types/{name}/rollout":            RoleAdmin,
	"POST /v1/types/{name}/rollout/promote":   RoleAdmin,
	"POST /v1/types/{name}/rollout/rollback":  RoleAdmin,
	"POST /v1/passivate":                      RoleAdmin,
	"GET /v1/types":                           RoleRead,
	"GET /v1/modules":                         RoleRead,
	"POST /v1/tell":                           RoleClient,
	"GET /v1/scheduled":                       RoleClient,
	"DELETE /v1/scheduled/{id}":               RoleClient,
	"POST /v1/ask":                            RoleClient,
	"GET /v1/members":                         RoleRead,
	"GET /v1/shards":                          RoleRead,
	"GET /v1/cluster":                         RoleRead,
	"POST /v1/members/{address}/down":         RoleAdmin,
	"POST /v1/members/{address}/leave":        RoleAdmin,
	"POST /v1/leave":                          RoleAdmin,
	"POST /v1/state/members/{address}/forget": RoleAdmin,
	"GET /v1/ddata/keys":                      RoleRead,
	"GET /v1/ddata/keys/{key...}":             RoleClient,
	"GET /v1/entities/{type}/{id}/history":    RoleClient,
	"GET /v1/entities/{type}/{id}/logs":       RoleClient, // what entities print may be data
	"GET /v1/logs":                            RoleClient,
	"GET /v1/entities":                        RoleRead,
	"POST /v1/query":                          RoleRead,
	"GET /v1/entities/{type}/{id}":            RoleRead,
	// An entity's reminders, payloads with them (as history previews payloads).
	"GET /v1/entities/{type}/{id}/reminders": RoleClient,
	"POST /v1/entities/{type}/{id}/revert":   RoleAdmin,
	"POST /v1/entities/{type}/{id}/fork":     RoleAdmin,
	"POST /v1/entities/{type}/{id}/pause":    RoleAdmin,
	"POST /v1/entities/{type}/{id}/resume":   RoleAdmin,
	"POST /v1/entities/{type}/{id}/skip":     RoleAdmin,
	"POST /v1/ddata/keys/{key...}":           RoleAdmin,
	"DELETE /v1/ddata/keys/{key...}":         RoleAdmin,
	"GET /v1/keys":                           RoleAdmin,
	"POST /v1/keys/{op}":                     RoleAdmin,
	"GET /v1/health":                         RoleNone,
	"GET /alive":                             RoleNone,
	"GET /ready":                             RoleNone,
	"GET /metrics":                           RoleNone,
	// The API's description: the repository's file, nothing about the cluster (openapi.go).
	"GET /v1/openapi.json": RoleNone,
	// The web console (console.go): pages need read (distributed data values client,
	// as their route does), actions admin; logging in needs nothing.
	"GET /ui":                                RoleRead,
	"GET /ui/{$}":                            RoleRead,
	"GET /ui/static/style.css":               RoleNone,
	"GET /ui/login":                          RoleNone,
	"POST /ui/login":                         RoleNone,
	"POST /ui/logout":                        RoleNone,
	"GET /ui/members":                        RoleRead,
	"GET /ui/types":                          RoleRead,
	"GET /ui/shards":                         RoleRead,
	"GET /ui/data":                           RoleClient,
	"GET /ui/activity":                       RoleRead,
	"GET /ui/charts":                         RoleRead,
	"GET /ui/entities":                       RoleRead,
	"POST /ui/entities/{type}/{id}/{action}": RoleAdmin,
	"GET /ui/entities/{type}/{id}":           RoleRead,
	"POST /ui/entities/{type}/{id}/query":    RoleRead,
	"GET /ui/entities/{type}/{id}/logs":      RoleClient,
	"POST /ui/deploy":                        RoleAdmin,
	"POST /ui/members/{address}/{action}":    RoleAdmin,
	// What a local replay downloads (replay.go): every message's payload and the
	// entity's whole state, which no client route gives out, and a module's bytes.
	"GET /v1/entities/{type}/{id}/base":    RoleAdmin,
	"GET /v1/entities/{type}/{id}/journal": RoleAdmin,
	"GET /v1/modules/{digest}":             RoleAdmin,
	// Any other path: 404 for a caller the API knows, 401 for anyone else.
	"/": RoleRead,
}

// routeRole returns the role a route needs; with authAll, the open routes need read.
func routeRole(pattern string, authAll bool) Role {
	need, ok := routeRoles[pattern]
	if !ok {
		return RoleAdmin
	}
	if need == RoleNone && authAll {
		return RoleRead
	}
	return need
}

// APITokens are the bearer tokens the API accepts, each with a role: the contents of an
// --api-tokens-file. Only SHA-256 digests are kept. Safe for concurrent use (immutable).
type APITokens struct {
	tokens []apiToken
}

type apiToken struct {
	digest [sha256.Size]byte
	role   Role
}

// minTokenLength is the length, in bytes, below which a token given in clear in a
// tokens file is refused: a token must be a random secret, not a password.
const minTokenLength = 16

// parseAPITokens reads a tokens file: one token per line, as "ROLE TOKEN" or "ROLE
// sha256:HEX" (the hex SHA-256 digest of the token, so that the file does not hold the
// token itself). ROLE is admin, client or read. Blank lines and lines starting with '#'
// are skipped. Errors wrap ErrBadTokens and name the line; a file without tokens is an
// error.
func parseAPITokens(r io.Reader) (*APITokens, error) {
	t := &APITokens{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%w: line %d: want ROLE TOKEN or ROLE sha256:HEX", ErrBadTokens, line)
		}
		role, err := ParseRole(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTokens, line, err)
		}
		tok := apiToken{role: role}
		if h, ok := strings.CutPrefix(fields[1], "sha256:"); ok {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%w: line %d: sha256: wants 64 hex digits", ErrBadTokens, line)
			}
			copy(tok.digest[:], b)
		} else {
			if len(fields[1]) < minTokenLength {
				return nil, fmt.Errorf("%w: line %d: a token has at least %d characters (make one with shardhost tokens create)",
					ErrBadTokens, line, minTokenLength)
			}
			tok.digest = sha256.Sum256([]byte(fields[1]))
		}
		for _, o := range t.tokens {
			if o.digest == tok.digest {
				return nil, fmt.Errorf("%w: line %d: the same token twice", ErrBadTokens, line)
			}
		}
		t.tokens = append(t.tokens, tok)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokens, err)
	}
	if len(t.tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrBadTokens)
	}
	return t, nil
}

// LoadAPITokens reads the tokens file at path (parseAPITokens).
func LoadAPITokens(path string) (*APITokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokens, err)
	}
	defer f.Close()
	t, err := parseAPITokens(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// TokenDigest returns the form of token that a tokens file may hold instead of the
// token: "sha256:" and the hex SHA-256 digest.
func TokenDigest(token string) string {
	d := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(d[:])
}

// Role returns the role of token, and false if the file does not hold it. The token's
// digest is compared with every digest in constant time, so the time taken says
// nothing about which token matched or how much of it.
func (t *APITokens) Role(token string) (Role, bool) {
	d := sha256.Sum256([]byte(token))
	found := 0
	role := RoleNone
	for _, tok := range t.tokens {
		eq := subtle.ConstantTimeCompare(d[:], tok.digest[:])
		found |= eq
		role = Role(subtle.ConstantTimeSelect(eq, int(tok.role), int(role)))
	}
	return role, found == 1
}

// caller is who made an API request, as far as the API could tell.
type caller struct {
	role Role
	// id names the caller in logs: "token sha256:1234abcd" (a prefix of the token's
	// digest) or "certificate CN=..,OU=..".
	id string
}

// authenticate finds the caller of r: by its bearer token if it has one (a wrong token
// is refused even if a certificate is given too), else by its verified client
// certificate. The error wraps errUnauthenticated.
func (a *apiAuth) authenticate(r *http.Request) (caller, error) {
	h := r.Header.Get("Authorization")
	if c, err := r.Cookie(consoleCookie); h == "" && err == nil && c.Value != "" && strings.HasPrefix(r.URL.Path, "/ui/") {
		// The console's pages: the token a browser logged in with (console.go).
		h = "Bearer " + c.Value
	}
	if h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return caller{}, fmt.Errorf("%w: the Authorization header is not \"Bearer TOKEN\"", errUnauthenticated)
		}
		if a.tokens == nil {
			return caller{}, fmt.Errorf("%w: this API takes no tokens (it authenticates client certificates)", errUnauthenticated)
		}
		role, ok := a.tokens.Role(token)
		if !ok {
			return caller{}, fmt.Errorf("%w: unknown token", errUnauthenticated)
		}
		return caller{role: role, id: "token " + TokenDigest(token)[:len("sha256:")+8]}, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		cert := r.TLS.VerifiedChains[0][0]
		role, ok := certRole(cert)
		if !ok {
			return caller{}, fmt.Errorf("%w: the client certificate %q names no role (its subject's OU must be admin, client or read)",
				errUnauthenticated, cert.Subject.String())
		}
		return caller{role: role, id: "certificate " + cert.Subject.String()}, nil
	}
	return caller{}, fmt.Errorf("%w: no credentials (send Authorization: Bearer TOKEN%s)", errUnauthenticated, a.certHint())
}

func (a *apiAuth) certHint() string {
	if a.clientCerts {
		return ", or a client certificate"
	}
	return ""
}

// certRole maps a verified client certificate to a role: the first organizational unit
// (OU) of its subject that names one. shardhost certs create-client --role R writes
// certificates with OU=R.
func certRole(cert *x509.Certificate) (Role, bool) {
	for _, ou := range cert.Subject.OrganizationalUnit {
		if r, err := ParseRole(ou); err == nil {
			return r, true
		}
	}
	return RoleNone, false
}

// apiAuth is the API's authentication and authorization.
type apiAuth struct {
	tokens      *APITokens
	clientCerts bool // a client CA is configured
	authAll     bool
}

func (a *apiAuth) enabled() bool { return a.tokens != nil || a.clientCerts }

// authorize is the middleware that refuses a request whose caller's role is below its
// route's (routeRoles): 401 without known credentials, 403 for a role too low. A refused
// request is answered here, inside the HTTP server span, which gets the route's name and
// fails with error.type unauthenticated or forbidden. Requests for admin routes are
// logged with their caller.
func (n *Node) authorize(mux *http.ServeMux, next http.Handler) http.Handler {
	a := n.auth
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.enabled() {
			next.ServeHTTP(w, r)
			return
		}
		_, pattern := mux.Handler(r)
		need := routeRole(pattern, a.authAll)
		if pattern == "/" {
			// An entity type's HTTP route (routes.go): the client role, as an ask,
			// or none for a route deployed public.
			if m, ok := n.matchRoute(r.URL.EscapedPath()); ok {
				need, pattern = RoleClient, m.route.pattern
				if m.public {
					need = RoleNone
				}
			}
		}
		if need == RoleNone {
			next.ServeHTTP(w, r)
			return
		}
		c, err := a.authenticate(r)
		if err == nil && c.role < need {
			err = fmt.Errorf("%w: %s needs the %s role; the caller (%s) has %s", errForbidden, pattern, need, c.id, c.role)
		}
		if err != nil && errors.Is(err, errUnauthenticated) && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/ui") {
			// A console page without a known token: the browser logs in first.
			http.Redirect(w, r, "/ui/login?"+url.Values{"next": {r.URL.Path}}.Encode(), http.StatusSeeOther)
			return
		}
		if err != nil {
			// The mux has not run: give the span and the metrics the route it would have.
			r.Pattern = pattern
			status, code := http.StatusUnauthorized, "unauthenticated"
			if errors.Is(err, errForbidden) {
				status, code = http.StatusForbidden, "forbidden"
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="shardhost"`)
			}
			obs.Fail(trace.SpanFromContext(r.Context()), err, code)
			writeJSON(w, status, apiError{Error: err.Error(), Code: code})
			return
		}
		if need < RoleAdmin {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		n.log.InfoContext(r.Context(), "API admin request", "route", pattern, "path", r.URL.Path, "caller", c.id,
			"role", c.role, "status", sw.status())
	})
}

// statusWriter records the status of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
