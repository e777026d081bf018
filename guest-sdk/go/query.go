package shardhost

// Querier is implemented by an entity that answers read-only queries (abi/SPEC.md,
// "Queries"; shardhost query TYPE/ID PAYLOAD, POST /v1/query). The host calls Query on
// a throwaway copy of the entity made from its saved state, never on the entity that
// handles messages: whatever Query changes is dropped, it never waits behind the
// entity's messages, and it never activates the entity. Inside Query, the Context's
// calls that would change anything (Tell, Ask, Forward, distributed data updates,
// deletes and subscriptions, timers, Passivate) fail with ErrReadOnly (CodeReadOnly)
// or do nothing; Log, Now, Random and DDataGet work (DDataGet fails with
// ErrUnavailable on the host: the copy has no node services). The returned bytes are
// the reply; an error is the query's error text.
//
// A module whose entity does not implement Querier still exports shardhost_query:
// it answers that the entity has none, and the host says how to add one.
type Querier interface {
	Query(ctx *Context, payload []byte) ([]byte, error)
}

// statusNoQuery, from shardhost_query: the entity does not implement Querier.
const statusNoQuery int32 = 2

// query hands payload to the entity's Querier (creating the entity first if no
// restore did) and returns the reply and the export's status.
func (d *dispatcher) query(payload []byte) (reply []byte, status int32) {
	if d.entity == nil {
		if err := d.create(); err != nil {
			return []byte(err.Error()), statusError
		}
	}
	q, ok := d.entity.(Querier)
	if !ok {
		return nil, statusNoQuery
	}
	d.ctx.h = d.h
	d.ctx.begin(phaseQuery)
	defer d.end()
	out, err := q.Query(&d.ctx, payload)
	d.err = err
	if err != nil {
		return []byte(err.Error()), statusError
	}
	return out, statusOK
}

// ErrNoQuerier is the Harness's error for a query of an entity that does not
// implement Querier (the host answers such a query with a 400 that says how to add it).
var ErrNoQuerier = errorString("shardhost: the entity does not implement Querier (Query(ctx *Context, payload []byte) ([]byte, error))")

type errorString string

func (e errorString) Error() string { return string(e) }

// Query asks the entity a read-only question as the host does (Querier): on a copy made
// from the entity's Snapshot when it is a Snapshotter (a fresh entity when none exists
// yet), through a Context whose changing calls fail with ErrReadOnly. An entity that is
// not a Snapshotter is queried in place, since the harness cannot copy its memory as
// the host does: a Query that changes its own fields changes them here, not on the host.
// Errors: ErrNoQuerier; an *EntityError with the entity's error; those of Snapshot and
// Restore for the copy.
func (h *Harness) Query(payload []byte) ([]byte, error) {
	defer h.useFactory()()
	d := &dispatcher{h: readOnlyHost{h}}
	state, ok, err := h.d.snapshot()
	switch {
	case err != nil:
		return nil, err
	case ok:
		if err := d.restore(state); err != nil {
			return nil, err
		}
	case h.d.entity == nil && h.pending != nil:
		if err := d.restore(append([]byte(nil), h.pending...)); err != nil {
			return nil, err
		}
	default:
		d.entity = h.d.entity
	}
	h.calls = 0
	out, status := d.query(append([]byte(nil), payload...))
	switch status {
	case statusNoQuery:
		return nil, ErrNoQuerier
	case statusError:
		return nil, &EntityError{Text: string(out), Err: d.err}
	}
	return out, nil
}

// readOnlyHost is the harness's host inside a query: the calls that would change
// anything fail with CodeReadOnly, as the host's do.
type readOnlyHost struct{ *Harness }

var readOnlyText = []byte("a query changes nothing")

func (r readOnlyHost) passivate() { r.call() }
func (r readOnlyHost) tell(string, string, []byte) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) ask(string, string, []byte, int32) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) tellKey(string, string, []byte, string) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) askKey(string, string, []byte, string, int32) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) forward(string, string) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) ddataUpdate(string, string, string, string, int32) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) ddataDelete(string, string, int32) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) ddataSubscribe(string) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) ddataUnsubscribe(string) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) timerStart(string, []byte, int64, int64) (Code, []byte) {
	r.call()
	return CodeReadOnly, readOnlyText
}
func (r readOnlyHost) timerCancel(string) bool {
	r.call()
	return false
}
