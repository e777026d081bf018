package host

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// apiListEntities is GET /v1/entities?type=T&prefix=P&status=S&version=V&member=ADDR
// &idle_longer=D&state_larger=BYTES&failed_since=D&limit=N&cursor=C: a page of the
// entities the filters select (sharding.EntityPage), from the members' live tables and
// the state store's index; nothing is activated. D is a Go duration ("90s", "2h").
// Errors: 400 bad-request for a bad filter or a cursor of another query, 404 for an
// unknown type.
func (n *Node) apiListEntities(w http.ResponseWriter, r *http.Request) {
	q, err := n.listQuery(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	page, err := n.sharding.ListEntities(r.Context(), q)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// listQuery reads a listing's filters from r's query string.
func (n *Node) listQuery(r *http.Request) (sharding.ListQuery, error) {
	v := r.URL.Query()
	q := sharding.ListQuery{Type: v.Get("type"), Prefix: v.Get("prefix"), Status: v.Get("status"), Member: v.Get("member"), Cursor: v.Get("cursor")}
	for name := range v {
		switch name {
		case "type", "prefix", "status", "member", "cursor", "version", "idle_longer", "state_larger", "failed_since", "limit":
		default:
			return q, fmt.Errorf("%w: unknown filter %q (type, prefix, status, version, member, idle_longer, state_larger, failed_since, limit, cursor)", ErrBadRequest, name)
		}
	}
	if q.Type != "" {
		if _, known := n.catalog.get(q.Type); !known {
			return q, n.unknownType(q.Type)
		}
	}
	var err error
	dur := func(name string, d *time.Duration) {
		if s := v.Get(name); s != "" && err == nil {
			if *d, err = time.ParseDuration(s); err != nil || *d <= 0 {
				err = fmt.Errorf("%w: %s=%q is not a positive duration (such as 90s, 15m, 2h)", ErrBadRequest, name, s)
			}
		}
	}
	dur("idle_longer", &q.IdleLonger)
	dur("failed_since", &q.FailedSince)
	if s := v.Get("version"); s != "" && err == nil {
		if q.Version, err = strconv.ParseUint(s, 10, 64); err != nil || q.Version == 0 {
			err = fmt.Errorf("%w: version=%q is not a module version (1, 2, ...)", ErrBadRequest, s)
		}
	}
	if s := v.Get("state_larger"); s != "" && err == nil {
		if q.StateLarger, err = strconv.ParseInt(s, 10, 64); err != nil || q.StateLarger < 0 {
			err = fmt.Errorf("%w: state_larger=%q is not a number of bytes", ErrBadRequest, s)
		}
	}
	if s := v.Get("limit"); s != "" && err == nil {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > sharding.MaxListLimit {
			err = fmt.Errorf("%w: limit=%q is not a number from 1 to %d", ErrBadRequest, s, sharding.MaxListLimit)
		}
	}
	return q, err
}

// apiDescribeEntity is GET /v1/entities/{type}/{id}: where the entity is hosted and
// what it holds (sharding.EntityDescription), without activating it; "seen": false for
// an entity no member hosts and the store does not hold. Errors: 400 for a bad ID, 404
// for an unknown type.
func (n *Node) apiDescribeEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	d, err := n.sharding.DescribeEntity(r.Context(), typ, id)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
