// Package client is the Go client of a shardhost cluster's HTTP API: it sends messages
// to entities (Ask, Tell), asks them read-only questions (Query), deploys and removes
// entity types (Deploy, Undeploy), pauses and resumes entities (Pause, Resume), and reads the cluster (Members, Shards, Entities,
// AllEntities, Describe), and follows streams such as an entity's logs (Events). Do
// sends any other request of the API (docs/client.md lists the routes).
//
// # Connecting
//
// New takes the API addresses of one or more members, as HOST:PORT or URLs, and
// Options: WithToken (a bearer token), WithCAFile, WithClientCertificate or
// WithTLSConfig (HTTPS, mutual TLS), WithHTTPClient, WithRetry, WithPropagator and
// WithUserAgent. A Client is safe for concurrent use and starts no goroutine of its
// own: it needs no Close (CloseIdleConnections closes the connections its HTTP
// transport keeps open; Endpoints lists the members it calls).
//
// # Deadlines
//
// Every method takes a context: its deadline and cancellation end the call, retries
// included. An Ask sends the time left before the deadline as the member's ask timeout
// (WithAskTimeout sets one explicitly), so that the member answers outcome-unknown
// before the caller gives up.
//
// # Retries
//
// A call goes to the member that answered last, and on a failure that may pass, after
// a wait, to the next endpoint, at most DefaultMaxAttempts tries in all (WithRetry).
// The wait is drawn at random between 0 and an exponential ceiling (full jitter),
// DefaultBackoff doubling up to DefaultMaxBackoff, or a reply's Retry-After if longer.
// What is retried depends on whether sending the call twice is safe:
//
//   - always: a request that reached no member (a connection refused, a name not
//     found, a TLS handshake refused), and the 503 replies not-delivered and overloaded,
//     which the API sends before any entity saw the message;
//   - for idempotent calls only: any other 503 reply (unavailable, state-not-saved,
//     state-not-loaded), a 504 outcome-unknown, and a connection that broke after the
//     request was sent. Idempotent calls are the GETs (Members, Shards, Entities,
//     Describe), Query, Deploy (the same module and settings again change nothing), Ask
//     and Tell with WithIdempotencyKey, and Do calls that are GET, HEAD or marked
//     Idempotent;
//   - never: entity-paused and entity-backoff (they last longer than a retry), and any
//     other reply (an entity's error, a trap, an unknown type, bad input).
//
// An Ask or a Tell without an idempotency key is therefore not sent twice once a
// member may have acted on it: give one (WithIdempotencyKey) to make retries safe; the
// entity then handles the message once and a retry gets the first reply.
//
// # Errors
//
// An error reply of the API is an *APIError with the HTTP status, the API's error code
// (the Code constants) and its message; it matches the sentinel of its code with
// errors.Is: ErrUnknownType, ErrBadRequest, ErrEntity, ErrTrap, ErrGuestDeadline,
// ErrReplyTooLarge, ErrOutcomeUnknown, ErrNotDelivered, ErrOverloaded,
// ErrStateNotSaved, ErrStateNotLoaded, ErrActivationFailed, ErrEntityBackoff,
// ErrEntityPaused, ErrUnauthorized, ErrForbidden, ErrInternal; and the groups
// ErrNotFound (404), ErrUnavailable (503) and ErrTimeout (504). A request that no member
// answered is a *RequestError, which matches ErrUnavailable. When the context ends
// first, the error matches its error (context.DeadlineExceeded, context.Canceled).
//
// # Tracing
//
// Each request carries the caller's trace context, injected from the context with W3C
// Trace Context (traceparent, tracestate) unless WithPropagator says otherwise, so that
// the member's server span joins the caller's trace. Every reply's traceparent header
// names the request's trace (Reply.Header, Response.Header, APIError.Header).
//
// # Types
//
// The replies are decoded into DeployResult (with TypeInfo, MemberDeployment, Setting),
// UndeployResult, Member, ShardsReport (RegionReport, ShardReport), EntityPage
// (EntityRow), EntityDescription, Reply and Response; a listing is selected by an
// EntityFilter. Options are Option values; per-call options (WithIdempotencyKey,
// WithAskTimeout, WithHeader, Idempotent) are CallOption values. IdempotencyKeyHeader
// and NodeHeader name the API's headers.
package client
