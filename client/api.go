package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// entityQuery is the query string naming an entity: type=T&id=ID (the ID is any
// UTF-8 text).
func entityQuery(typ, id string) string {
	return "type=" + url.QueryEscape(typ) + "&id=" + url.QueryEscape(id)
}

// Ask sends payload to the entity typ/id and returns its reply (POST /v1/ask). The
// member waits for the reply at most the WithAskTimeout option, else the time left
// before ctx's deadline (a little less, so that the member's outcome-unknown arrives
// before the context ends), else its default. Retried on 503 and broken connections
// only WithIdempotencyKey (see "Retries"); not-delivered and overloaded replies are
// always retried. Errors: ErrUnknownType, ErrEntity (the entity's own error), ErrTrap,
// ErrGuestDeadline, ErrOutcomeUnknown (ErrTimeout), ErrNotDelivered, ErrEntityPaused,
// ErrBadRequest ... (*APIError), *RequestError, the context's error.
func (c *Client) Ask(ctx context.Context, typ, id string, payload []byte, opts ...CallOption) ([]byte, error) {
	r, err := c.AskReply(ctx, typ, id, payload, opts...)
	if err != nil {
		return nil, err
	}
	return r.Payload, nil
}

// Reply is an entity's answer to an ask.
type Reply struct {
	// Payload is the entity's reply, as it gave it.
	Payload []byte
	// Node is the gossip address of the member that hosts the entity.
	Node string
	// Header holds the reply's headers (traceparent names the request's trace).
	Header http.Header
}

// AskReply is Ask, returning the reply with the member that hosts the entity.
func (c *Client) AskReply(ctx context.Context, typ, id string, payload []byte, opts ...CallOption) (*Reply, error) {
	cl := newCall(opts)
	path := "/v1/ask?" + entityQuery(typ, id)
	timeout := cl.timeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		left -= min(100*time.Millisecond, left/10)
		if timeout <= 0 || left < timeout {
			timeout = left
		}
	}
	if timeout > 0 {
		path += "&timeout=" + url.QueryEscape(timeout.String())
	}
	r, err := c.do(ctx, http.MethodPost, path, nonNil(payload), cl)
	if err != nil {
		return nil, err
	}
	return &Reply{Payload: r.Body, Node: r.Header.Get(NodeHeader), Header: r.Header}, nil
}

// Tell sends payload to the entity typ/id without waiting for it to be handled (POST
// /v1/tell): nil means a member accepted it (202). Retried as Ask is. Errors: as Ask's,
// for what fails before the message is queued.
func (c *Client) Tell(ctx context.Context, typ, id string, payload []byte, opts ...CallOption) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/tell?"+entityQuery(typ, id), nonNil(payload), newCall(opts))
	return err
}

// Query asks the entity typ/id a read-only question (POST /v1/query): the module's
// query handler runs on a throwaway copy of the entity's saved state, which nothing it
// does changes; the entity is not activated. Idempotent, so retried (see "Retries").
// Errors: ErrBadRequest (a module without a query handler), ErrUnknownType, ErrEntity,
// ErrTrap, ... (*APIError), *RequestError, the context's error.
func (c *Client) Query(ctx context.Context, typ, id string, payload []byte, opts ...CallOption) ([]byte, error) {
	cl := newCall(opts)
	cl.idempotent = true
	r, err := c.do(ctx, http.MethodPost, "/v1/query?"+entityQuery(typ, id), nonNil(payload), cl)
	if err != nil {
		return nil, err
	}
	return r.Body, nil
}

// Deploy makes module (a WebAssembly entity module, abi/SPEC.md) the entity type typ
// in the whole cluster (POST /v1/types/{typ}), with the settings given as the API's
// query parameters (nil: the defaults, or on a redeploy the type's current ones):
// shards, role, allocation, checkpoint, history, passivate_after, max_active,
// passivation_strategy, max_retries, idempotency_retention, log_lines, state_ttl,
// remember_entities, egress, egress_timeout, egress_max_response, egress_rate,
// reset_settings, canary, canary_ids, ... (docs/cli.md, "deploy"). Deploying the same
// module with the same settings again changes nothing (DeployResult.Unchanged), so a
// deploy is retried. Errors: ErrBadRequest (an invalid module or setting; 413 for a
// module over the cap), *APIError, *RequestError, the context's error.
func (c *Client) Deploy(ctx context.Context, typ string, module []byte, settings url.Values) (*DeployResult, error) {
	path := "/v1/types/" + url.PathEscape(typ)
	if len(settings) > 0 {
		path += "?" + settings.Encode()
	}
	r, err := c.do(ctx, http.MethodPost, path, nonNil(module), &call{idempotent: true})
	if err != nil {
		return nil, err
	}
	var res DeployResult
	return &res, decode(r, &res)
}

// Undeploy removes the entity type typ from the cluster (DELETE /v1/types/{typ}): its
// entities are passivated and its messages then fail with ErrUnknownType; with
// deleteState its saved state is deleted too. Not retried once sent (a second undeploy
// fails with ErrUnknownType). Errors: ErrUnknownType, ErrBadRequest (a state store that
// cannot delete), *APIError, *RequestError, the context's error.
func (c *Client) Undeploy(ctx context.Context, typ string, deleteState bool) (*UndeployResult, error) {
	path := "/v1/types/" + url.PathEscape(typ) + "?delete_state=" + strconv.FormatBool(deleteState)
	r, err := c.do(ctx, http.MethodDelete, path, nil, &call{})
	if err != nil {
		return nil, err
	}
	var res UndeployResult
	return &res, decode(r, &res)
}

// Pause pauses entity typ/id at the operator's request (POST
// /v1/entities/{typ}/{id}/pause; the admin role): asks to it then fail with
// ErrEntityPaused and tells queue, up to its mailbox's size, until Resume. paused is
// false when it was already paused. Not retried once sent. Errors: ErrUnknownType,
// ErrBadRequest (a bad ID), ErrForbidden, *APIError, *RequestError, the context's
// error.
func (c *Client) Pause(ctx context.Context, typ, id string) (paused bool, err error) {
	status, err := c.entityAction(ctx, typ, id, "pause")
	return status == "paused", err
}

// Resume resumes entity typ/id if it is paused (POST /v1/entities/{typ}/{id}/resume;
// the admin role): paused on a message that kept failing, that message is tried again;
// paused by Pause, what queued is handled. resumed is false when it was not paused.
// Not retried once sent. Errors: as Pause's.
func (c *Client) Resume(ctx context.Context, typ, id string) (resumed bool, err error) {
	status, err := c.entityAction(ctx, typ, id, "resume")
	return status == "resumed", err
}

// entityAction posts an action on an entity and returns the status of its reply,
// {"entity":"T/ID","status":S}.
func (c *Client) entityAction(ctx context.Context, typ, id, action string) (string, error) {
	path := "/v1/entities/" + url.PathEscape(typ) + "/" + url.PathEscape(id) + "/" + action
	r, err := c.do(ctx, http.MethodPost, path, nil, &call{})
	if err != nil {
		return "", err
	}
	var res struct {
		Status string `json:"status"`
	}
	return res.Status, decode(r, &res)
}

// Members returns the cluster's members as the member that answers sees them (GET
// /v1/members).
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var ms []Member
	return ms, c.getJSON(ctx, "/v1/members", &ms)
}

// Shards returns, for each member, the shards it hosts and their active entities (GET
// /v1/shards).
func (c *Client) Shards(ctx context.Context) (*ShardsReport, error) {
	var rep ShardsReport
	return &rep, c.getJSON(ctx, "/v1/shards", &rep)
}

// EntityFilter selects the entities of a listing (GET /v1/entities); the zero value
// lists them all. Every field set must hold.
type EntityFilter struct {
	Type   string // entity type
	Prefix string // the ID starts with it
	// Status: active, passivated or paused.
	Status string
	// Version: the module version the entity runs (0: any).
	Version uint64
	// Member: the gossip address (host:port) of the member that hosts it.
	Member string
	// IdleLonger: no message for longer than this.
	IdleLonger time.Duration
	// StateLarger: saved state over this many bytes.
	StateLarger int64
	// FailedSince: a message failed within this long.
	FailedSince time.Duration
	// Limit: rows in a page, 1 to 10,000 (0: the API's default, 100).
	Limit int
	// Cursor: EntityPage.Next of the previous page ("" for the first).
	Cursor string
}

func (f EntityFilter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("type", f.Type)
	set("prefix", f.Prefix)
	set("status", f.Status)
	set("member", f.Member)
	set("cursor", f.Cursor)
	if f.Version > 0 {
		q.Set("version", strconv.FormatUint(f.Version, 10))
	}
	if f.IdleLonger > 0 {
		q.Set("idle_longer", f.IdleLonger.String())
	}
	if f.StateLarger > 0 {
		q.Set("state_larger", strconv.FormatInt(f.StateLarger, 10))
	}
	if f.FailedSince > 0 {
		q.Set("failed_since", f.FailedSince.String())
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Entities returns one page of the entities f selects (GET /v1/entities), from the
// members' live tables and the state store's index; nothing is activated. The next
// page is f with Cursor set to the page's Next. Errors: ErrUnknownType, ErrBadRequest
// (a bad filter, a cursor of another listing), *APIError, *RequestError, the context's
// error.
func (c *Client) Entities(ctx context.Context, f EntityFilter) (*EntityPage, error) {
	path := "/v1/entities"
	if q := f.query(); len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page EntityPage
	return &page, c.getJSON(ctx, path, &page)
}

// AllEntities iterates over every entity f selects, page after page (f.Cursor is
// where it starts). A failure is yielded once, with a zero row, and ends the
// iteration.
func (c *Client) AllEntities(ctx context.Context, f EntityFilter) iter.Seq2[EntityRow, error] {
	return func(yield func(EntityRow, error) bool) {
		for {
			page, err := c.Entities(ctx, f)
			if err != nil {
				yield(EntityRow{}, err)
				return
			}
			for _, r := range page.Rows {
				if !yield(r, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			f.Cursor = page.Next
		}
	}
}

// Describe tells where the entity typ/id is hosted and what it holds (GET
// /v1/entities/{typ}/{id}), without activating it; Seen is false for an entity no
// member hosts and the store does not hold. Errors: ErrUnknownType, ErrBadRequest,
// *APIError, *RequestError, the context's error.
func (c *Client) Describe(ctx context.Context, typ, id string) (*EntityDescription, error) {
	var d EntityDescription
	return &d, c.getJSON(ctx, "/v1/entities/"+url.PathEscape(typ)+"/"+url.PathEscape(id), &d)
}

func newCall(opts []CallOption) *call {
	var cl call
	for _, o := range opts {
		o(&cl)
	}
	return &cl
}

// nonNil makes an empty payload a body of zero bytes (an empty message is a message).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
