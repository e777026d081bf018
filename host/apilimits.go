package host

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// Limits of the management API against hostile or careless callers (docs/security.md).

const (
	// maxEntityIDLength caps an entity ID given to the API, in bytes of UTF-8. Akka's
	// sharding caps entity IDs too: they end up in every envelope, in the state store's
	// keys and in remembered-entity sets.
	maxEntityIDLength = 512
	// maxQueryLength caps the query string of a request, in bytes (URL-encoded).
	maxQueryLength = 4096
)

// errTooManyRequests: the API is serving APIConfig.MaxConcurrentRequests requests
// already (HTTP 503 with Retry-After).
var errTooManyRequests = errors.New("host: too many requests in progress")

// APIConfig secures and bounds the management API. DefaultAPIConfig gives the limits;
// authentication is off until Tokens or a client CA in TLS is set.
type APIConfig struct {
	// Tokens, if set, are the bearer tokens callers must send (Authorization: Bearer
	// TOKEN), each with a role (LoadAPITokens).
	Tokens *APITokens
	// TLS, if set, serves the API over HTTPS with this configuration (its Certificates
	// or GetCertificate). If its ClientCAs is set, a client certificate signed by one of
	// them authenticates its caller, whose role is the certificate subject's OU (admin,
	// client or read); ClientAuth should then be tls.VerifyClientCertIfGiven so that
	// token callers need no certificate.
	TLS *tls.Config
	// AuthAll requires a role (read) for /alive, /ready, /metrics, /v1/health and
	// /v1/openapi.json too, which are otherwise open so that orchestrators, scrapers and
	// client generators need no credentials.
	AuthAll bool
	// MaxConcurrentRequests caps the requests being handled at once (the probes and
	// /metrics not counted); past it a request is answered 503 with Retry-After: 1 at
	// once. Each request in progress holds its body (up to the message or module cap)
	// and a goroutine. Default 512.
	MaxConcurrentRequests int
	// ReadHeaderTimeout bounds reading a request's headers (slowloris). Default 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included: a deploy of a module
	// of MaxModuleSize bytes must arrive within it. Default 1 min.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. Default 2 min.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request line and headers, in bytes (431 past it).
	// Default 64 KiB.
	MaxHeaderBytes int
}

// DefaultAPIConfig returns the API's default limits, with authentication off.
func DefaultAPIConfig() APIConfig {
	return APIConfig{
		MaxConcurrentRequests: 512,
		ReadHeaderTimeout:     10 * time.Second,
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		MaxHeaderBytes:        64 << 10,
	}
}

// Validate reports limits that cannot work.
func (c APIConfig) Validate() error {
	if c.MaxConcurrentRequests <= 0 || c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.IdleTimeout <= 0 || c.MaxHeaderBytes <= 0 {
		return errors.New("host: the API's request cap, timeouts and header cap must be positive")
	}
	return nil
}

// AuthEnabled reports whether the API asks callers who they are.
func (c APIConfig) AuthEnabled() bool {
	return c.Tokens != nil || (c.TLS != nil && c.TLS.ClientCAs != nil)
}

// limit is the middleware that refuses what the API will not take whatever the route:
// a query over maxQueryLength (414) and, past MaxConcurrentRequests requests in
// progress, any request but the probes and /metrics (503, Retry-After: 1). Refusals are
// answered inside the request's span.
func (n *Node) limit(next http.Handler) http.Handler {
	slots := make(chan struct{}, n.cfg.API.MaxConcurrentRequests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.RawQuery) > maxQueryLength {
			refuse(w, r, http.StatusRequestURITooLong, sharding.CodeBadRequest,
				fmt.Errorf("%w: the query has %d bytes, over the cap of %d", ErrBadRequest, len(r.URL.RawQuery), maxQueryLength))
			return
		}
		switch r.URL.Path {
		case "/alive", "/ready", "/metrics", "/v1/health":
			next.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			w.Header().Set("Retry-After", "1")
			refuse(w, r, http.StatusServiceUnavailable, sharding.CodeOverloaded,
				fmt.Errorf("%w: %d (retry later)", errTooManyRequests, cap(slots)))
			return
		}
		defer func() { <-slots }()
		next.ServeHTTP(w, r)
	})
}

// refuse answers a request the API will not handle, and fails its span.
func refuse(w http.ResponseWriter, r *http.Request, status int, code string, err error) {
	obs.Fail(trace.SpanFromContext(r.Context()), err, code)
	writeJSON(w, status, apiError{Error: err.Error(), Code: code})
}

// checkEntityID refuses an empty entity ID, one over maxEntityIDLength bytes, or one
// that is not UTF-8. The error wraps ErrBadRequest.
func checkEntityID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %v", ErrBadRequest, sharding.ErrEmptyEntityID)
	case len(id) > maxEntityIDLength:
		return fmt.Errorf("%w: the entity ID has %d bytes, over the cap of %d", ErrBadRequest, len(id), maxEntityIDLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: the entity ID is not UTF-8", ErrBadRequest)
	}
	return nil
}
