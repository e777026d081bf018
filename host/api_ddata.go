package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/obs"
)

// Distributed data through the management API:
//
//	GET    /v1/ddata/keys                                  → {"keys":[{"key":K,"type":T,"deleted":bool}]}
//	GET    /v1/ddata/keys/{key}[?consistency=C]            → {"key":K,"type":T,"value":V}
//	POST   /v1/ddata/keys/{key}?type=T[&consistency=C]     body: an operation ("incr 5") → the same
//	DELETE /v1/ddata/keys/{key}[?consistency=C]            → {"key":K,"deleted":true}
//
// C is local (the default), majority, majority+K, all or a number of replicas
// (ddata.ParseReadConsistency); operations are ddata.ParseOp's. V is the value as JSON:
// a counter as a number, a set as a sorted array, a map as an object, a register as its
// value, a flag as a boolean.

// DDataEntry is a key of the replicator in API replies.
type DDataEntry struct {
	Key     string `json:"key"`
	Type    string `json:"type,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
	Value   any    `json:"value,omitempty"`
}

func (n *Node) ddataRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/ddata/keys", n.apiDDataKeys)
	mux.HandleFunc("GET /v1/ddata/keys/{key...}", n.apiDDataGet)
	mux.HandleFunc("POST /v1/ddata/keys/{key...}", n.apiDDataUpdate)
	mux.HandleFunc("DELETE /v1/ddata/keys/{key...}", n.apiDDataDelete)
}

// ddataStatus maps replicator errors to HTTP statuses and codes.
func ddataStatus(err error) (int, string) {
	switch {
	case errors.Is(err, ddata.ErrNotFound):
		return http.StatusNotFound, "not-found"
	case errors.Is(err, ddata.ErrDataDeleted):
		return http.StatusGone, "data-deleted"
	case errors.Is(err, ddata.ErrBadOp), errors.Is(err, ddata.ErrUnknownType), errors.Is(err, ErrBadRequest), errors.Is(err, ddata.ErrBadKey):
		return http.StatusBadRequest, "bad-request"
	case errors.Is(err, ddata.ErrTypeMismatch):
		return http.StatusConflict, "type-mismatch"
	case errors.Is(err, ddata.ErrModifyFailure):
		return http.StatusUnprocessableEntity, "modify-failure"
	case errors.Is(err, ddata.ErrGetFailure), errors.Is(err, ddata.ErrUpdateTimeout):
		return http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, ddata.ErrReplicatorClosed):
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal"
}

func writeDDataError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := ddataStatus(err)
	obs.Fail(trace.SpanFromContext(r.Context()), err, code)
	writeJSON(w, status, apiError{Error: err.Error(), Code: code})
}

// ddataTimeout bounds replicator calls from the API.
const ddataTimeout = 5 * time.Second

func (n *Node) apiDDataKeys(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Keys []DDataEntry `json:"keys"`
	}{Keys: n.ddataEntries(r.Context(), false)})
}

func (n *Node) apiDDataGet(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	rc, err := ddata.ParseReadConsistency(orDefault(r.URL.Query().Get("consistency"), "local"))
	if err != nil {
		writeDDataError(w, r, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ddataTimeout)
	defer cancel()
	d, err := n.replicator.Get(ctx, key, rc)
	if err != nil {
		writeDDataError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DDataEntry{Key: key, Type: string(d.Type()), Value: d.Value()})
}

func (n *Node) apiDDataUpdate(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	q := r.URL.Query()
	wc, err := ddata.ParseWriteConsistency(orDefault(q.Get("consistency"), "local"))
	if err != nil {
		writeDDataError(w, r, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	text, err := readBody(r, 64<<10, ErrBadRequest)
	if err != nil {
		writeDDataError(w, r, err)
		return
	}
	typ := ddata.DataType(q.Get("type"))
	op, err := ddata.ParseOp(typ, string(text))
	if err != nil {
		writeDDataError(w, r, err)
		return
	}
	initial, _ := ddata.Empty(typ)
	ctx, cancel := context.WithTimeout(r.Context(), ddataTimeout)
	defer cancel()
	d, err := n.replicator.Update(ctx, key, initial, wc, op.Modify(n.replicator.SelfNodeID(), nil))
	if err != nil {
		writeDDataError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DDataEntry{Key: key, Type: string(d.Type()), Value: d.Value()})
}

func (n *Node) apiDDataDelete(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	wc, err := ddata.ParseWriteConsistency(orDefault(r.URL.Query().Get("consistency"), "local"))
	if err != nil {
		writeDDataError(w, r, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ddataTimeout)
	defer cancel()
	if err := n.replicator.Delete(ctx, key, wc); err != nil {
		writeDDataError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DDataEntry{Key: key, Deleted: true})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
