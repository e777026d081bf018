// Listing and describing entities without activating any: the regions' live tables
// (what each member hosts, with the counters its entities keep) merged with the state
// store's index of saved entities (StateLister).

package sharding

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
)

// ErrInvalidListQuery: a listing's filter or cursor is not valid (a bad status, a
// negative size, a cursor from another query). The error says which and why.
var ErrInvalidListQuery = errors.New("sharding: invalid entity listing")

// Statuses of an entity in a listing (EntityRow.Status, ListQuery.Status).
const (
	// StatusActive: it has an instance on a member.
	StatusActive = "active"
	// StatusPassivated: it has no instance; the state store holds its state, or the
	// member that last hosted it still knows it.
	StatusPassivated = "passivated"
	// StatusPaused: it is paused on a message that kept failing (shardhost resume,
	// skip).
	StatusPaused = "paused"
)

// Page sizes of a listing, in rows.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
)

// ListQuery selects entities. Zero fields select everything.
type ListQuery struct {
	// Type is the entity type; "" lists every type.
	Type string
	// Prefix keeps the IDs that begin with it.
	Prefix string
	// Status keeps the entities of one status: StatusActive, StatusPassivated or
	// StatusPaused.
	Status string
	// Version keeps the active entities running this version of their type's module.
	Version uint64
	// Member keeps the entities hosted by this member (its address, host:port).
	Member string
	// IdleLonger keeps the entities whose last message ended longer ago than this (a
	// passivated one counts from its state's save when the store knows it).
	IdleLonger time.Duration
	// StateLarger keeps the entities whose last saved or loaded state is larger than
	// this, in bytes.
	StateLarger int64
	// FailedSince keeps the entities a message failed in within this long (what the
	// hosting member saw since it activated them).
	FailedSince time.Duration
	// Limit is the most rows a page looks at per source (each member's live table,
	// the store's index), 1 to MaxListLimit; 0 means DefaultListLimit. A page has at
	// most Limit rows; with filters it may have fewer, even none, and still a Next.
	Limit int
	// Cursor is EntityPage.Next of the previous page of the same query; "" starts.
	Cursor string
}

// Validate reports, wrapping ErrInvalidListQuery, a filter with a bad value.
func (q ListQuery) Validate() error {
	switch {
	case q.Status != "" && q.Status != StatusActive && q.Status != StatusPassivated && q.Status != StatusPaused:
		return fmt.Errorf("%w: status %q: want active, passivated or paused", ErrInvalidListQuery, q.Status)
	case q.IdleLonger < 0:
		return fmt.Errorf("%w: idle-longer %v is negative", ErrInvalidListQuery, q.IdleLonger)
	case q.FailedSince < 0:
		return fmt.Errorf("%w: failed-since %v is negative", ErrInvalidListQuery, q.FailedSince)
	case q.StateLarger < 0:
		return fmt.Errorf("%w: state-larger %d is negative", ErrInvalidListQuery, q.StateLarger)
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalidListQuery, q.Limit, MaxListLimit)
	case len(q.Type) > MaxStateTypeLen || len(q.Prefix) > MaxStateIDLen:
		return fmt.Errorf("%w: type or prefix too long", ErrInvalidListQuery)
	}
	return nil
}

// fingerprint sums the query's filters, which a cursor carries: a cursor read with
// other filters is refused.
func (q ListQuery) fingerprint() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%q %q %q %d %q %d %d %d", q.Type, q.Prefix, q.Status, q.Version, q.Member, q.IdleLonger, q.StateLarger, q.FailedSince)
	return h.Sum64()
}

// EntityRow is one entity in a listing. Times are zero when unknown; the counters are
// what its hosting member saw since it activated it (0 for a passivated entity whose
// member forgot it).
type EntityRow struct {
	Type   string `cbor:"1,keyasint" json:"type"`
	ID     string `cbor:"2,keyasint" json:"id"`
	Shard  int    `cbor:"3,keyasint" json:"shard"`
	Status string `cbor:"4,keyasint" json:"status"`
	// Member hosts it (active or paused), or last hosted it.
	Member        string `cbor:"5,keyasint,omitempty" json:"member,omitempty"`
	ModuleVersion uint64 `cbor:"6,keyasint,omitempty" json:"module_version,omitempty"`
	// ActivatedAt is when its current (or last) instance started.
	ActivatedAt time.Time `cbor:"7,keyasint,omitempty" json:"activated_at,omitzero"`
	// LastMessage is when its last message ended.
	LastMessage     time.Time `cbor:"8,keyasint,omitempty" json:"last_message,omitzero"`
	MessagesHandled uint64    `cbor:"9,keyasint,omitempty" json:"messages_handled"`
	MessagesFailed  uint64    `cbor:"10,keyasint,omitempty" json:"messages_failed"`
	// StateBytes is the size of its last saved or loaded state, in bytes.
	StateBytes int64 `cbor:"11,keyasint,omitempty" json:"state_bytes"`
	// MemoryBytes is its instance's linear memory, in bytes (0 without an instance).
	MemoryBytes int64 `cbor:"12,keyasint,omitempty" json:"memory_bytes"`
	// LastError is the error of its last failed message, LastFailure when it failed.
	LastError   string    `cbor:"13,keyasint,omitempty" json:"last_error,omitempty"`
	LastFailure time.Time `cbor:"14,keyasint,omitempty" json:"last_failure,omitzero"`
	// Timers and Subscriptions count its timers and distributed data subscriptions
	// (what an EntityInspector reports).
	Timers        int `cbor:"15,keyasint,omitempty" json:"timers"`
	Subscriptions int `cbor:"16,keyasint,omitempty" json:"subscriptions"`
	// Queued is the messages waiting in its mailbox.
	Queued int `cbor:"17,keyasint,omitempty" json:"queued"`
	// Stored says the state store holds its state.
	Stored bool `cbor:"18,keyasint,omitempty" json:"stored"`
	// JournalRecords is the length of its journal: the records the store holds when
	// it counts them, else the records since its last base as its member knows them.
	JournalRecords int `cbor:"19,keyasint,omitempty" json:"journal_records"`
}

func (r *EntityRow) key() listKey { return listKey{r.Type, r.Shard, r.ID} }

// EntityPage is one page of a listing.
type EntityPage struct {
	Rows []EntityRow `json:"entities"`
	// Next is the cursor of the next page; "" when this is the last.
	Next string `json:"next,omitempty"`
	// Errors name the members that did not answer: their active entities are missing.
	Errors []string `json:"errors,omitempty"`
}

// EntityFacts is what an entity tells inspection about itself (EntityInspector).
type EntityFacts struct {
	// ModuleVersion is the version of its type's module the instance runs (0 unknown).
	ModuleVersion uint64
	// MemoryBytes is the instance's memory, in bytes.
	MemoryBytes uint64
	// Timers and Subscriptions count its timers and subscriptions.
	Timers, Subscriptions int
}

// EntityInspector is an Entity that reports facts about itself to listings. Inspect
// is called by the goroutine that handles the entity's messages, after its activation
// and after each message, never while it handles one: it must be cheap and must not
// block.
type EntityInspector interface {
	Entity
	Inspect() EntityFacts
}

// entityStats are an entity's counters for listings. The goroutine that drains the
// mailbox writes them; anyone reads them.
type entityStats struct {
	activatedAt, lastMessage atomic.Int64 // unix nanoseconds; 0 never
	handled, failed          atomic.Uint64
	stateBytes, memoryBytes  atomic.Int64
	journal                  atomic.Int64 // records since the last base
	version                  atomic.Uint64
	timers, subs             atomic.Int32
	lastFailure              atomic.Pointer[entityFailure]
}

type entityFailure struct {
	at  time.Time
	err string
}

func (st *entityStats) activated(e *entity, now time.Time) {
	st.activatedAt.Store(now.UnixNano())
	st.inspect(e)
}

// handledOne counts a message that ended at now with err.
func (st *entityStats) handledOne(e *entity, now time.Time, err error) {
	st.lastMessage.Store(now.UnixNano())
	if err != nil {
		st.failed.Add(1)
		st.lastFailure.Store(&entityFailure{at: now, err: err.Error()})
	} else {
		st.handled.Add(1)
	}
	st.inspect(e)
}

func (st *entityStats) inspect(e *entity) {
	if e.journaled {
		st.journal.Store(int64(e.seq - e.baseSeq))
	}
	if e.inspector == nil || e.inst == nil {
		st.memoryBytes.Store(0)
		return
	}
	f := e.inspector.Inspect()
	st.memoryBytes.Store(int64(f.MemoryBytes))
	st.version.Store(f.ModuleVersion)
	st.timers.Store(int32(f.Timers))
	st.subs.Store(int32(f.Subscriptions))
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// row returns the entity's row; self is this member.
func (e *entity) row(self string) EntityRow {
	e.mu.Lock()
	live, paused, queued := e.live, e.poison != nil, e.queued()
	e.mu.Unlock()
	st := &e.stats
	r := EntityRow{Type: e.r.settings.Name, ID: e.id, Shard: e.shard, Member: self, Status: StatusPassivated,
		ModuleVersion: st.version.Load(), ActivatedAt: unixTime(st.activatedAt.Load()), LastMessage: unixTime(st.lastMessage.Load()),
		MessagesHandled: st.handled.Load(), MessagesFailed: st.failed.Load(), StateBytes: st.stateBytes.Load(),
		Timers: int(st.timers.Load()), Subscriptions: int(st.subs.Load()), Queued: queued, JournalRecords: int(st.journal.Load())}
	switch {
	case paused:
		r.Status = StatusPaused
	case live:
		r.Status = StatusActive
	}
	if live {
		r.MemoryBytes = st.memoryBytes.Load()
	}
	if f := st.lastFailure.Load(); f != nil {
		r.LastError, r.LastFailure = f.err, f.at
	}
	return r
}

// listKey orders a listing: by type, shard, then ID.
type listKey struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	ID    string `cbor:"3,keyasint"`
}

func (k listKey) compare(o listKey) int {
	if c := strings.Compare(k.Type, o.Type); c != 0 {
		return c
	}
	if k.Shard != o.Shard {
		if k.Shard < o.Shard {
			return -1
		}
		return 1
	}
	return strings.Compare(k.ID, o.ID)
}

// listCursor is a page's cursor: the query it belongs to and the last key read.
type listCursor struct {
	Query uint64  `cbor:"1,keyasint"`
	After listKey `cbor:"2,keyasint"`
}

func encodeCursor(c listCursor) string {
	return base64.RawURLEncoding.EncodeToString(encode(c))
}

func decodeCursor(q ListQuery) (listCursor, bool, error) {
	if q.Cursor == "" {
		return listCursor{}, false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	var c listCursor
	if err == nil {
		err = decode(b, &c)
	}
	if err != nil {
		return listCursor{}, false, fmt.Errorf("%w: the cursor is not one a listing gave", ErrInvalidListQuery)
	}
	if c.Query != q.fingerprint() {
		return listCursor{}, false, fmt.Errorf("%w: the cursor belongs to another query (other filters or type): start again without it", ErrInvalidListQuery)
	}
	return c, true, nil
}

// listRequest asks a member for its live rows after a key.
type listRequest struct {
	Type     string  `cbor:"1,keyasint,omitempty"`
	Prefix   string  `cbor:"2,keyasint,omitempty"`
	After    listKey `cbor:"3,keyasint"`
	HasAfter bool    `cbor:"4,keyasint,omitempty"`
	Limit    int     `cbor:"5,keyasint"`
	// ID, when set, asks for that one entity (Describe).
	ID string `cbor:"6,keyasint,omitempty"`
}

// listReply is a member's live rows, in order, and whether it had more.
type listReply struct {
	Rows []EntityRow `cbor:"1,keyasint"`
	More bool        `cbor:"2,keyasint,omitempty"`
}

// liveRows returns this member's entities of req after req.After, in order, at most
// req.Limit, and whether there are more. It holds each region's lock while it walks
// that region's shards: one sort of a shard's IDs at a time, no copy of the table.
func (s *Sharding) liveRows(req listRequest) listReply {
	regions := s.allRegions()
	slices.SortFunc(regions, func(a, b *shardRegion) int { return strings.Compare(a.settings.Name, b.settings.Name) })
	var out listReply
	for _, r := range regions {
		typ := r.settings.Name
		if req.Type != "" && typ != req.Type || req.HasAfter && typ < req.After.Type {
			continue
		}
		if r.liveRowsInto(&out, req, s.self) {
			out.More = true
			return out
		}
	}
	return out
}

// liveRowsInto appends the region's rows of req to out; it reports true, and stops,
// when out is full and a row was left.
func (r *shardRegion) liveRowsInto(out *listReply, req listRequest, self string) bool {
	typ := r.settings.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	var shards []*shard
	r.eachHostedLocked(func(sh *shard) {
		if req.HasAfter && typ == req.After.Type && sh.id < req.After.Shard {
			return
		}
		shards = append(shards, sh)
	})
	slices.SortFunc(shards, func(a, b *shard) int { return a.id - b.id })
	var ids []string
	for _, sh := range shards {
		if req.ID != "" {
			if e, ok := sh.entities[req.ID]; ok {
				out.Rows = append(out.Rows, e.row(self))
			}
			continue
		}
		ids = ids[:0]
		for id := range sh.entities {
			if !strings.HasPrefix(id, req.Prefix) {
				continue
			}
			if req.HasAfter && typ == req.After.Type && sh.id == req.After.Shard && id <= req.After.ID {
				continue
			}
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if len(out.Rows) == req.Limit {
				return true
			}
			out.Rows = append(out.Rows, sh.entities[id].row(self))
		}
	}
	return false
}

func (s *Sharding) handleListEntities(req *cluster.Request) {
	var lr listRequest
	if err := decode(req.Body, &lr); err != nil {
		req.Reply(nil, fmt.Errorf("%w: %v", ErrMalformedMessage, err))
		return
	}
	req.Reply(encode(s.liveRows(lr)), nil)
}

// askLiveRows sends req to every member (this one answers itself) and returns their
// answers, and the members that did not answer.
func (s *Sharding) askLiveRows(ctx context.Context, req listRequest) ([]listReply, []string) {
	members := s.cfg.Membership.Members()
	replies := make([]listReply, len(members))
	errs := make([]error, len(members))
	payload := encode(req)
	var wg sync.WaitGroup
	for i, m := range members {
		if m.Address == s.self {
			replies[i] = s.liveRows(req)
			continue
		}
		wg.Add(1)
		go func() { // no owner: it lives one request, which the call waits for
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			defer cancel()
			b, err := s.cfg.Messenger.Request(rctx, m.TransportAddr, topicListEntities, payload)
			if err == nil {
				err = decode(b, &replies[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("entities of %s: %w", m.Address, err)
			}
		}()
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	return replies, failed
}

// ListEntities returns a page of the entities q selects, in order of type, shard and
// ID, from every member's live table and the state store's index (when the store is a
// StateLister). It activates no entity and loads no state. Errors:
// ErrInvalidListQuery (a filter or the cursor), the store's listing errors. Members
// that do not answer are named in the page's Errors, not failed.
func (s *Sharding) ListEntities(ctx context.Context, q ListQuery) (EntityPage, error) {
	if err := q.Validate(); err != nil {
		return EntityPage{}, err
	}
	cur, hasAfter, err := decodeCursor(q)
	if err != nil {
		return EntityPage{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	req := listRequest{Type: q.Type, Prefix: q.Prefix, After: cur.After, HasAfter: hasAfter, Limit: limit}
	// The live rows are read whatever the status asked: a stored entity that a member
	// hosts is not passivated.
	replies, failed := s.askLiveRows(ctx, req)
	var stored []StoredEntity
	var storedMore bool
	if lister, ok := StateStoreAs[StateLister](s.cfg.States); ok && q.Status != StatusActive && q.Status != StatusPaused {
		var after *EntityKey
		if hasAfter {
			after = &EntityKey{Type: cur.After.Type, Shard: cur.After.Shard, ID: cur.After.ID}
		}
		if stored, storedMore, err = s.listStored(ctx, lister, q, after, limit); err != nil {
			return EntityPage{}, fmt.Errorf("entities: the state store's index: %w", err)
		}
	}
	page := mergeListing(q, limit, replies, stored, storedMore, s.cfg.Now())
	page.Errors = failed
	return page, nil
}

// mergeListing merges the members' live rows and the store's rows into a page of q:
// at most limit rows, up to the last key every source has read all its rows to, the
// live row where both have one, filtered.
func mergeListing(q ListQuery, limit int, replies []listReply, stored []StoredEntity, storedMore bool, now time.Time) EntityPage {
	page := EntityPage{Rows: []EntityRow{}}
	// bound is the last key every source has given all its rows up to: past it, a
	// truncated source may hold rows not read yet.
	var bound *listKey
	narrow := func(k listKey) {
		if bound == nil || k.compare(*bound) < 0 {
			bound = &k
		}
	}
	n := 0
	for _, r := range replies {
		n += len(r.Rows)
		if r.More && len(r.Rows) > 0 {
			narrow(r.Rows[len(r.Rows)-1].key())
		}
	}
	if storedMore && len(stored) > 0 {
		narrow(storedKey(stored[len(stored)-1]))
	}
	live := make([]EntityRow, 0, n)
	for _, r := range replies {
		live = append(live, r.Rows...)
	}
	slices.SortFunc(live, func(a, b EntityRow) int { return a.key().compare(b.key()) })
	var last *listKey
	i, j, read := 0, 0, 0
	for i < len(live) || j < len(stored) {
		if read == limit {
			// Full: the rest comes from the next page.
			narrow(*last)
			break
		}
		read++
		var r EntityRow
		switch {
		case j == len(stored) || i < len(live) && live[i].key().compare(storedKey(stored[j])) < 0:
			r = live[i]
			i++
		case i == len(live) || storedKey(stored[j]).compare(live[i].key()) < 0:
			r = stored[j].row()
			j++
		default: // both: the live row, which the store knows too
			r = live[i]
			r.Stored = true
			if r.StateBytes == 0 {
				r.StateBytes = stored[j].Bytes
			}
			i, j = i+1, j+1
		}
		k := r.key()
		if bound != nil && k.compare(*bound) > 0 {
			break
		}
		last = &k
		if q.matches(&r, now) {
			page.Rows = append(page.Rows, r)
		}
	}
	if bound != nil && last != nil {
		page.Next = encodeCursor(listCursor{Query: q.fingerprint(), After: *last})
	}
	return page
}

// listStored reads at most limit entities of q from the store's index after after:
// of q.Type, or of every type this member has a region of (a deployed type), type by
// type in order.
func (s *Sharding) listStored(ctx context.Context, lister StateLister, q ListQuery, after *EntityKey, limit int) ([]StoredEntity, bool, error) {
	types := []string{q.Type}
	if q.Type == "" {
		types = types[:0]
		for _, r := range s.allRegions() {
			types = append(types, r.settings.Name)
		}
		slices.Sort(types)
	}
	var out []StoredEntity
	for i, typ := range types {
		if after != nil && typ < after.Type {
			continue
		}
		sq := StateListing{Type: typ, Prefix: q.Prefix, Limit: limit - len(out), Shards: s.typeShards(ctx, typ)}
		if after != nil && typ == after.Type {
			sq.After = after
		}
		got, more, err := lister.ListStates(ctx, sq)
		if err != nil {
			return nil, false, err
		}
		out = append(out, got...)
		if more || len(out) == limit && i+1 < len(types) {
			return out, true, nil
		}
	}
	return out, false, nil
}

// typeShards returns typ's number of shards, or 0 when the type is not known.
func (s *Sharding) typeShards(ctx context.Context, typ string) int {
	if r := s.region(typ); r != nil {
		return r.settings.NumberOfShards
	}
	st, err := s.cfg.Types.EntityType(ctx, typ)
	if err != nil {
		return 0
	}
	return st.NumberOfShards
}

func storedKey(e StoredEntity) listKey { return listKey{e.Key.Type, e.Key.Shard, e.Key.ID} }

// row is the listing's row of a stored entity no member hosts.
func (e StoredEntity) row() EntityRow {
	return EntityRow{Type: e.Key.Type, ID: e.Key.ID, Shard: e.Key.Shard, Status: StatusPassivated, StateBytes: e.Bytes,
		LastMessage: e.SavedAt, Stored: true}
}

// matches reports whether the row passes q's filters.
func (q ListQuery) matches(r *EntityRow, now time.Time) bool {
	switch {
	case q.Status != "" && r.Status != q.Status,
		q.Version != 0 && (r.Status == StatusPassivated || r.ModuleVersion != q.Version),
		q.Member != "" && (r.Status == StatusPassivated || r.Member != q.Member),
		q.StateLarger > 0 && r.StateBytes <= q.StateLarger,
		q.IdleLonger > 0 && (r.LastMessage.IsZero() || now.Sub(r.LastMessage) <= q.IdleLonger),
		q.FailedSince > 0 && (r.LastFailure.IsZero() || now.Sub(r.LastFailure) > q.FailedSince):
		return false
	}
	return true
}

// EntityDescription is what describe tells of one entity.
type EntityDescription struct {
	EntityRow
	// Seen is false when no member hosts the entity and the store holds nothing of it.
	Seen bool `json:"seen"`
}

// DescribeEntity tells where typ/id is hosted and what it holds: from its hosting
// member's live table, and the store's index. It activates nothing. An entity neither
// hosted nor stored has Seen false ("never seen"). Errors: ErrEmptyEntityID, the
// store's errors; members that do not answer are ignored when another hosts it.
func (s *Sharding) DescribeEntity(ctx context.Context, typ, id string) (EntityDescription, error) {
	if typ == "" || id == "" {
		return EntityDescription{}, fmt.Errorf("%w: describe needs TYPE/ID", ErrEmptyEntityID)
	}
	replies, failed := s.askLiveRows(ctx, listRequest{Type: typ, ID: id, Limit: 1})
	var d EntityDescription
	for _, r := range replies {
		for _, row := range r.Rows {
			// A shard's copy being handed off and its new home may both answer:
			// the one with an instance wins.
			if !d.Seen || d.Status == StatusPassivated && row.Status != StatusPassivated {
				d.EntityRow, d.Seen = row, true
			}
		}
	}
	if !d.Seen {
		d.EntityRow = EntityRow{Type: typ, ID: id}
	}
	shards := s.typeShards(ctx, typ)
	if shards > 0 {
		d.Shard = abi.ShardID(id, shards)
	}
	if lister, ok := StateStoreAs[StateLister](s.cfg.States); ok && shards > 0 {
		if st, err := lister.StatOne(ctx, EntityKey{Type: typ, Shard: d.Shard, ID: id}); err == nil {
			d.Seen, d.Stored, d.Shard = true, true, st.Key.Shard
			if d.StateBytes == 0 {
				d.StateBytes = st.Bytes
			}
			if d.LastMessage.IsZero() {
				d.LastMessage = st.SavedAt
			}
			if d.Status == "" {
				d.Status = StatusPassivated
			}
			if st.JournalRecords > 0 {
				d.JournalRecords = st.JournalRecords
			}
		} else if !errors.Is(err, ErrNoState) {
			return EntityDescription{}, fmt.Errorf("describe %s/%s: the state store: %w", typ, id, err)
		}
	}
	if !d.Seen && len(failed) > 0 {
		return EntityDescription{}, fmt.Errorf("describe %s/%s: not found on the members that answered: %s", typ, id, strings.Join(failed, "; "))
	}
	return d, nil
}

// StateListing selects saved entities from a StateLister.
type StateListing struct {
	// Type is the entity type; "" every type.
	Type string
	// Prefix keeps the IDs that begin with it.
	Prefix string
	// After, when set, keeps the entities after it, in order of type, shard, ID.
	After *EntityKey
	// Limit is the most entities returned, at least 1.
	Limit int
	// Shards is Type's number of shards: a store that keeps shards apart (the
	// replicated one) visits shards 0 to Shards-1, and needs it; others ignore it.
	Shards int
}

// StoredEntity is one saved entity in a store's index.
type StoredEntity struct {
	Key EntityKey
	// Bytes is the size of its snapshot, in bytes (0 when it has only a journal).
	Bytes int64
	// SavedAt is when it was last written: its snapshot saved or, in the stores that
	// date them (the in-memory and the replicated ones), a journal record appended; zero
	// when the store does not keep it. The state TTL (TypeSettings.StateTTL) reads it.
	SavedAt time.Time
	// JournalRecords is the number of its journal records (StatOne only).
	JournalRecords int
}

// StateLister is a StateStore that lists the entities it holds state of from its
// index, without loading a state: listings and describe (shardhost entities, shardhost
// entity). The platform's own records (IDs beginning with PlatformIDPrefix: the host's
// deltas, reminders kept as records, outbox marks) are not entities and are left out.
type StateLister interface {
	StateStore
	// ListStates returns at most q.Limit entities that have a snapshot or journal
	// records, in order of type, shard and ID, after q.After, and whether there are
	// more. Errors: ErrStoreUnavailable, ErrInvalidStateKey.
	ListStates(ctx context.Context, q StateListing) ([]StoredEntity, bool, error)
	// StatOne returns what the store holds of the entity, with its journal's length
	// when the store counts it, or ErrNoState. Errors: ErrNoState,
	// ErrStoreUnavailable, ErrInvalidStateKey.
	StatOne(ctx context.Context, key EntityKey) (StoredEntity, error)
}

var _ StateLister = (*MemoryStateStore)(nil)

// ListStates implements StateLister: a scan of the whole store (for tests).
func (m *MemoryStateStore) ListStates(ctx context.Context, q StateListing) ([]StoredEntity, bool, error) {
	if q.Limit < 1 {
		return nil, false, fmt.Errorf("%w: listing limit %d", ErrInvalidStateKey, q.Limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[EntityKey]*StoredEntity{}
	add := func(k EntityKey) *StoredEntity {
		if q.Type != "" && k.Type != q.Type || !strings.HasPrefix(k.ID, q.Prefix) || strings.HasPrefix(k.ID, PlatformIDPrefix) {
			return nil
		}
		if q.After != nil && (listKey{k.Type, k.Shard, k.ID}).compare(listKey{q.After.Type, q.After.Shard, q.After.ID}) <= 0 {
			return nil
		}
		e := seen[k]
		if e == nil {
			e = &StoredEntity{Key: k}
			seen[k] = e
		}
		return e
	}
	for k, st := range m.state {
		if e := add(k); e != nil {
			e.Bytes, e.SavedAt = int64(len(st)), m.savedAt[k]
		}
	}
	for k, j := range m.journals {
		if len(j.records) > 0 {
			if e := add(k); e != nil {
				e.SavedAt = m.savedAt[k]
			}
		}
	}
	out := make([]StoredEntity, 0, len(seen))
	for _, e := range seen {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b StoredEntity) int { return storedKey(a).compare(storedKey(b)) })
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// StatOne implements StateLister.
func (m *MemoryStateStore) StatOne(ctx context.Context, key EntityKey) (StoredEntity, error) {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return StoredEntity{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.state[key]
	e := StoredEntity{Key: key, Bytes: int64(len(st)), SavedAt: m.savedAt[key]}
	if j := m.journals[key]; j != nil && len(j.records) > 0 {
		ok, e.JournalRecords = true, len(j.records)
	}
	if !ok {
		return StoredEntity{}, fmt.Errorf("%w: %s/%d/%s", ErrNoState, key.Type, key.Shard, key.ID)
	}
	return e, nil
}
