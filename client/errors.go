package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error codes of the API: the "code" of an error reply ({"error": TEXT, "code": CODE}),
// stable names for the kinds of failure a caller can tell apart. APIError.Code holds one;
// the sentinel errors below match them with errors.Is.
const (
	CodeEntityError      = "entity-error"        // 422: the entity refused the message
	CodeGuestTrap        = "guest-trap"          // 500: the guest trapped; the message failed
	CodeGuestDeadline    = "guest-deadline"      // 504: the guest ran past its per-message deadline
	CodeReplyTooLarge    = "reply-too-large"     // 502: the entity's reply was over the cap
	CodeUnknownType      = "unknown-entity-type" // 404: no such entity type is deployed
	CodeBadRequest       = "bad-request"         // 400 (413 for a size cap, 404 for no such route)
	CodeOverloaded       = "overloaded"          // 503: a buffer, mailbox or the API's request limit was full
	CodeNotDelivered     = "not-delivered"       // 503: the message never reached its entity: safe to send again
	CodeOutcomeUnknown   = "outcome-unknown"     // 504: the message may have been handled, no answer came
	CodeUnavailable      = "unavailable"         // 503: the member is stopping
	CodeStateNotSaved    = "state-not-saved"     // 503: handled, but its checkpoint failed
	CodeStateNotLoaded   = "state-not-loaded"    // 503: the entity's saved state could not be read
	CodeActivationFailed = "activation-failed"   // 500: the entity could not be created
	CodeEntityBackoff    = "entity-backoff"      // 503: the entity keeps failing and rests
	CodeEntityPaused     = "entity-paused"       // 503: the entity paused on a message that kept failing
	CodeUnauthenticated  = "unauthenticated"     // 401: no known credentials
	CodeForbidden        = "forbidden"           // 403: the credentials' role is too low
	CodeNotFound         = "not-found"           // 404: a distributed data key that does not exist
	CodeInternal         = "internal"            // 500: anything else
)

// Sentinel errors, matched with errors.Is against what the Client's methods return. An
// error reply of the API is an *APIError, which matches the sentinel of its code, and
// the groups ErrNotFound (404), ErrUnavailable (503) and ErrTimeout (504) by its HTTP
// status. A request that reached no member is a *RequestError, which matches
// ErrUnavailable.
var (
	// ErrUnknownType: no entity type of that name is deployed (unknown-entity-type).
	ErrUnknownType = errors.New("client: unknown entity type")
	// ErrNotFound: a 404 reply: an unknown entity type, a distributed data key or a
	// member that does not exist, a route the API does not have.
	ErrNotFound = errors.New("client: not found")
	// ErrBadRequest: the API refused the request's input (bad-request): an empty entity
	// ID, a payload over the size cap, a bad setting or filter.
	ErrBadRequest = errors.New("client: bad request")
	// ErrEntity: the entity refused the message; the error's text is the entity's
	// (entity-error, 422).
	ErrEntity = errors.New("client: the entity refused the message")
	// ErrTrap: the guest trapped while handling the message (guest-trap).
	ErrTrap = errors.New("client: the guest trapped")
	// ErrGuestDeadline: the guest ran past its per-message deadline (guest-deadline,
	// 504); it matches ErrTimeout too.
	ErrGuestDeadline = errors.New("client: the guest ran past its deadline")
	// ErrReplyTooLarge: the entity's reply was over the cap (reply-too-large).
	ErrReplyTooLarge = errors.New("client: reply too large")
	// ErrTimeout: a 504 reply: no answer came in time (outcome-unknown, guest-deadline).
	// The message may have been handled: send it again only with an idempotency key.
	// A deadline of the caller's context that passes gives context.DeadlineExceeded.
	ErrTimeout = errors.New("client: timeout")
	// ErrOutcomeUnknown: the message may or may not have been handled
	// (outcome-unknown, 504); it matches ErrTimeout too.
	ErrOutcomeUnknown = errors.New("client: outcome unknown")
	// ErrUnavailable: a 503 reply (any of its codes), or a request that reached no
	// member (*RequestError).
	ErrUnavailable = errors.New("client: unavailable")
	// ErrNotDelivered: the message never reached its entity (not-delivered, 503):
	// sending it again is safe.
	ErrNotDelivered = errors.New("client: message not delivered")
	// ErrOverloaded: a buffer, a mailbox or the API's limit of requests in progress was
	// full (overloaded, 503).
	ErrOverloaded = errors.New("client: overloaded")
	// ErrStateNotSaved: the message was handled but its checkpoint failed
	// (state-not-saved, 503).
	ErrStateNotSaved = errors.New("client: state not saved")
	// ErrStateNotLoaded: the entity's saved state could not be read (state-not-loaded,
	// 503).
	ErrStateNotLoaded = errors.New("client: state not loaded")
	// ErrActivationFailed: the entity could not be created (activation-failed).
	ErrActivationFailed = errors.New("client: activation failed")
	// ErrEntityBackoff: the entity keeps failing and rests (entity-backoff, 503).
	ErrEntityBackoff = errors.New("client: entity backing off")
	// ErrEntityPaused: the entity paused on a message that kept failing; an operator
	// resumes or skips it (entity-paused, 503).
	ErrEntityPaused = errors.New("client: entity paused")
	// ErrUnauthorized: the API knows no credentials of the request (unauthenticated,
	// 401): give a token (WithToken) or a client certificate.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrForbidden: the credentials' role is too low for the route (forbidden, 403).
	ErrForbidden = errors.New("client: forbidden")
	// ErrInternal: any other failure of the member (internal, 500).
	ErrInternal = errors.New("client: internal error")
)

// codeErrors maps each code to its sentinel.
var codeErrors = map[string]error{
	CodeUnknownType:      ErrUnknownType,
	CodeBadRequest:       ErrBadRequest,
	CodeEntityError:      ErrEntity,
	CodeGuestTrap:        ErrTrap,
	CodeGuestDeadline:    ErrGuestDeadline,
	CodeReplyTooLarge:    ErrReplyTooLarge,
	CodeOutcomeUnknown:   ErrOutcomeUnknown,
	CodeNotDelivered:     ErrNotDelivered,
	CodeOverloaded:       ErrOverloaded,
	CodeUnavailable:      ErrUnavailable,
	CodeStateNotSaved:    ErrStateNotSaved,
	CodeStateNotLoaded:   ErrStateNotLoaded,
	CodeActivationFailed: ErrActivationFailed,
	CodeEntityBackoff:    ErrEntityBackoff,
	CodeEntityPaused:     ErrEntityPaused,
	CodeUnauthenticated:  ErrUnauthorized,
	CodeForbidden:        ErrForbidden,
	CodeNotFound:         ErrNotFound,
	CodeInternal:         ErrInternal,
}

// APIError is an error reply of the API: its HTTP status, its code (one of the Code
// constants; "" when the reply had none, as from a proxy) and its message. It matches
// the sentinel of its code with errors.Is, and ErrNotFound, ErrUnavailable or ErrTimeout
// by status (404, 503, 504), ErrUnauthorized and ErrForbidden by status (401, 403).
type APIError struct {
	// Status is the HTTP status code (4xx or 5xx).
	Status int
	// Code is the API's error code, "" when the reply carried none.
	Code string
	// Message is the API's error text, or the reply's body when it was not the API's
	// error object.
	Message string
	// Endpoint is the base URL of the member that answered.
	Endpoint string
	// Header holds the reply's headers (traceparent, Retry-After, Shardhost-Node).
	Header http.Header
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return e.Message
	}
	return fmt.Sprintf("shardhost API replied %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is reports whether target is the sentinel of e's code or of its status's group.
func (e *APIError) Is(target error) bool {
	if s, ok := codeErrors[e.Code]; ok && s == target {
		return true
	}
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrTimeout:
		return e.Status == http.StatusGatewayTimeout
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	}
	return false
}

// RequestError is a request that got no answer from a member: the connection was
// refused, broke, or its TLS handshake failed. Sent says some of the request was
// written, so the member may have acted on it (a connection refused, a name not found
// or a TLS handshake refused sent nothing). It matches ErrUnavailable.
type RequestError struct {
	// Endpoint is the base URL of the member tried last.
	Endpoint string
	// Sent: the request's headers were written to the connection.
	Sent bool
	// Err is the transport's error.
	Err error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("shardhost API at %s: %v", e.Endpoint, e.Err)
}

func (e *RequestError) Unwrap() error { return e.Err }

// Is makes a RequestError match ErrUnavailable.
func (e *RequestError) Is(target error) bool { return target == ErrUnavailable }

// decodeError turns an error reply into an *APIError.
func decodeError(endpoint string, status int, header http.Header, body []byte, code, msg string) *APIError {
	if code == "" && msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	return &APIError{Status: status, Code: code, Message: msg, Endpoint: endpoint, Header: header}
}
