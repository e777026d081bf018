package host

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// Scheduled messages from outside (docs/sharding.md, "Scheduled messages"): POST
// /v1/tell with deliver_at (or deliver_in) keeps the message in the state store with
// its entity's shard until its due time (sharding.Sharding.Schedule); GET /v1/scheduled
// lists what waits, DELETE /v1/scheduled/{id} cancels one.

// ScheduledInfo is one scheduled message as the API shows it.
type ScheduledInfo struct {
	// ID names it, to cancel it by (DELETE /v1/scheduled/{id}).
	ID string `json:"id"`
	// Entity is "TYPE/ID".
	Entity string `json:"entity"`
	// DeliverAt is its due time, RFC 3339 in UTC with milliseconds; DeliverAtUnixMS the
	// same in Unix milliseconds.
	DeliverAt       string `json:"deliver_at"`
	DeliverAtUnixMS int64  `json:"deliver_at_unix_ms"`
	// Payload is the message (base64 in JSON); PayloadBytes its size.
	Payload      []byte `json:"payload,omitempty"`
	PayloadBytes int    `json:"payload_bytes"`
}

// ScheduledTellResult is the 202 reply of POST /v1/tell with deliver_at or deliver_in.
type ScheduledTellResult struct {
	// Status is "scheduled", or "already-scheduled" when a message with the request's
	// idempotency key waits already (unchanged: this request's payload and due time
	// are not kept).
	Status string `json:"status"`
	ScheduledInfo
	// PastDue says the due time was not after the member's clock: the message is
	// delivered at once; Note says so in words.
	PastDue bool   `json:"past_due,omitempty"`
	Note    string `json:"note,omitempty"`
}

// ScheduledList is the reply of GET /v1/scheduled: the messages waiting, earliest
// first, and whether the limit left some out.
type ScheduledList struct {
	Scheduled []ScheduledInfo `json:"scheduled"`
	More      bool            `json:"more,omitempty"`
}

// ScheduledCancelResult is the reply of DELETE /v1/scheduled/{id}.
type ScheduledCancelResult struct {
	Status    string        `json:"status"` // "cancelled"
	Scheduled ScheduledInfo `json:"scheduled"`
}

// DefaultScheduledListLimit and MaxScheduledListLimit bound GET /v1/scheduled's rows.
const (
	DefaultScheduledListLimit = 100
	MaxScheduledListLimit     = 10000
)

func scheduledInfo(m sharding.ScheduledMessage) ScheduledInfo {
	return ScheduledInfo{ID: m.ID, Entity: m.EntityType + "/" + m.EntityID,
		DeliverAt: time.UnixMilli(m.Due).UTC().Format("2006-01-02T15:04:05.000Z07:00"), DeliverAtUnixMS: m.Due,
		Payload: m.Payload, PayloadBytes: len(m.Payload)}
}

// ParseDeliverAt reads a due time: RFC 3339 (with or without fractions of a second),
// or Unix milliseconds (digits only). It returns Unix milliseconds. Errors:
// ErrBadRequest.
func ParseDeliverAt(s string) (int64, error) {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			return ms, nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%w: deliver_at=%q is neither RFC 3339 (2026-11-28T12:00:00Z) nor Unix milliseconds", ErrBadRequest, s)
	}
	if t.UnixMilli() < 0 {
		return 0, fmt.Errorf("%w: deliver_at=%q is before 1970", ErrBadRequest, s)
	}
	return t.UnixMilli(), nil
}

// scheduledDue reads a tell's deliver_at or deliver_in (a Go duration, from this
// member's clock); ok is false when it has neither (an ordinary tell). Errors:
// ErrBadRequest (both, or one malformed).
func scheduledDue(r *http.Request) (due int64, ok bool, err error) {
	q := r.URL.Query()
	at, in := q.Get("deliver_at"), q.Get("deliver_in")
	switch {
	case q.Has("deliver_at") && q.Has("deliver_in"):
		return 0, false, fmt.Errorf("%w: deliver_at and deliver_in together (give one)", ErrBadRequest)
	case q.Has("deliver_at"):
		due, err = ParseDeliverAt(at)
		return due, err == nil, err
	case q.Has("deliver_in"):
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return 0, false, fmt.Errorf("%w: deliver_in=%q is not a duration of 0 or more (90s, 3h)", ErrBadRequest, in)
		}
		return time.Now().Add(d).UnixMilli(), true, nil
	}
	return 0, false, nil
}

// apiScheduleTell is POST /v1/tell with deliver_at or deliver_in: Sharding.Schedule.
func (n *Node) apiScheduleTell(w http.ResponseWriter, r *http.Request, typ, id string, payload []byte, key string, due int64) {
	sm, replaced, err := n.sharding.Schedule(r.Context(), typ, id, due, payload, key)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	res := ScheduledTellResult{Status: "scheduled", ScheduledInfo: scheduledInfo(sm)}
	res.Payload = nil // the caller has it
	if replaced {
		res.Status = "already-scheduled"
		res.Note = "a message with this idempotency key waits already: it is kept as it was"
	} else if now := time.Now().UnixMilli(); due <= now {
		res.PastDue = true
		res.Note = fmt.Sprintf("the due time is %v in the past: the message is delivered at once",
			(time.Duration(now-due) * time.Millisecond).String())
	}
	writeJSON(w, http.StatusAccepted, res)
}

// apiScheduledList is GET /v1/scheduled[?type=T[&id=ID]][&limit=N]: the scheduled
// messages waiting for one entity, the entities of a type, or every type's, read from
// the state store (no entity is activated). Without id, every shard of the type (of
// every type, without type) is read.
func (n *Node) apiScheduledList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	typ, id := q.Get("type"), q.Get("id")
	limit := DefaultScheduledListLimit
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxScheduledListLimit {
			writeError(w, r, fmt.Errorf("%w: limit=%q (want 1 to %d)", ErrBadRequest, s, MaxScheduledListLimit), 0)
			return
		}
		limit = v
	}
	if id != "" && typ == "" {
		writeError(w, r, fmt.Errorf("%w: id without type", ErrBadRequest), 0)
		return
	}
	var ms []sharding.ScheduledMessage
	more := false
	switch {
	case id != "":
		all, err := n.sharding.ScheduledOf(r.Context(), typ, id)
		if err != nil {
			writeError(w, r, err, 0)
			return
		}
		ms, more = all[:min(limit, len(all))], len(all) > limit
	default:
		types := []string{typ}
		if typ == "" {
			types = types[:0]
			for _, t := range n.catalog.list() {
				types = append(types, t.Name)
			}
		}
		for k, t := range types {
			got, m, err := n.sharding.ScheduledOfType(r.Context(), t, limit-len(ms))
			if err != nil {
				writeError(w, r, err, 0)
				return
			}
			ms = append(ms, got...)
			if more = m || len(ms) >= limit && k < len(types)-1; len(ms) >= limit {
				break // the rest of the types are not read: more may be true for nothing
			}
		}
	}
	res := ScheduledList{Scheduled: make([]ScheduledInfo, 0, len(ms)), More: more}
	for _, m := range ms {
		res.Scheduled = append(res.Scheduled, scheduledInfo(m))
	}
	writeJSON(w, http.StatusOK, res)
}

// apiScheduledCancel is DELETE /v1/scheduled/{id}: Sharding.CancelScheduled; an ID
// that waits for nothing is 404 {"code":"not-found"}, a malformed one 400.
func (n *Node) apiScheduledCancel(w http.ResponseWriter, r *http.Request) {
	sm, err := n.sharding.CancelScheduled(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, ScheduledCancelResult{Status: "cancelled", Scheduled: scheduledInfo(sm)})
}
