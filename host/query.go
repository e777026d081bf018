package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/sharding"
)

// Read-only queries (abi/SPEC.md, "Queries"; docs/cli.md, "query"). A query runs the
// guest's shardhost_query export on a throwaway instance made from the entity's saved
// state: its last base, then the journal records after it, replayed with their
// recorded host calls (as `shardhost replay` runs them), so under the journal (the
// default checkpoint policy) the instance holds the state after the last message the
// entity answered. The entity itself is never touched: not activated, not asked, its
// mailbox not waited on, its stored state not written. An entity that is active under
// another checkpoint policy (passivation, every:N) is queried on its last saved state,
// which may be behind its memory: the live instance belongs to the entity's goroutine
// and is not safe to read from another.
//
// The throwaway instance has no node services: inside the query, host functions that
// would change anything fail with abi.CodeReadOnly (readOnlyGuard), and the reads that
// reach outside the entity (distributed data get) fail with CodeUnavailable.

// queryReads are the host functions a query may call: they read the instance or write
// only to the host's log and traces.
var queryReads = map[string]bool{
	abi.ImportReply: true, abi.ImportEntityID: true, abi.ImportEntityType: true, abi.ImportLog: true,
	abi.ImportResult: true, abi.ImportSender: true, abi.ImportDDataGet: true,
	abi.ImportNow: true, abi.ImportRandom: true, abi.ImportTraceEvent: true,
}

// readOnlyGuard wraps host function name so that, inside shardhost_query, a function
// not in queryReads does nothing: one with an i32 result returns abi.CodeReadOnly with
// a text (the result), one without traps.
func readOnlyGuard(name string, f api.GoModuleFunc, results []api.ValueType) api.GoModuleFunc {
	if queryReads[name] {
		return f
	}
	coded := len(results) == 1 && results[0] == api.ValueTypeI32
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		inst := instanceFrom(ctx)
		if inst == nil || inst.phase != phaseQuery {
			f(ctx, mod, stack)
			return
		}
		inst.charge()
		msg := fmt.Sprintf("%s would change something, and a query changes nothing (abi/SPEC.md, \"Queries\")", name)
		if !coded {
			panic(errors.New("host: read-only: " + msg))
		}
		inst.result = append(inst.result[:0], msg...)
		stack[0] = uint64(uint32(abi.CodeReadOnly))
	}
}

// HasQuery reports whether the module exports shardhost_query (abi/SPEC.md).
func (m *wasmModule) HasQuery() bool { return m.ops.Has(wasmbin.OpQuery) }

// query runs the guest's shardhost_query with payload on this instance and returns its
// reply. Errors: ErrInstanceClosed; an *EntityError with the guest's text when it
// answered StatusError (or another status); errNoQuery's ErrBadRequest for
// StatusNoQuery; ErrReplyTooLarge; a *GuestError for a trap
// or the deadline (the instance is then closed).
func (i *wasmInstance) query(ctx context.Context, payload []byte) ([]byte, error) {
	if i.closed {
		return nil, ErrInstanceClosed
	}
	i.msgCtx = ctx
	defer func() { i.msgCtx = nil }()
	status, reply, err := i.invoke(wasmbin.OpQuery, payload, true, i.m.rt.cfg.MaxMessageSize)
	switch {
	case err != nil:
		return nil, err
	case status == abi.StatusOK:
		return reply, nil
	case status == abi.StatusError:
		return nil, &EntityError{Message: string(reply)}
	case status == abi.StatusNoQuery:
		return nil, errNoQuery(i.entityType, i.m.Digest)
	}
	return nil, &EntityError{Message: fmt.Sprintf("%s returned status %d", abi.ExportQuery, status)}
}

// errNoQuery says how to give a module a query export.
func errNoQuery(typ, digest string) error {
	return fmt.Errorf("%w: the entities of type %s (module %.12s…) answer no query: the module does not export %s, "+
		"or its entity has no query method; to add one: "+
		"Go SDK: give the entity a method Query(ctx *sdk.Context, payload []byte) ([]byte, error) (sdk.Querier); "+
		"Rust SDK: implement Entity::query; by hand: export %s(ptr i32, len i32) -> i32 (abi/SPEC.md, \"Queries\"); "+
		"then upgrade the type", ErrBadRequest, typ, digest, abi.ExportQuery, abi.ExportQuery)
}

// Query answers payload with entity typ/id's shardhost_query export, run on a
// throwaway instance made from the entity's saved state (its base and the journal
// records after it; no state: a new instance), on this member, whichever member hosts
// the entity. It never activates the entity, waits for its mailbox or changes its
// state. The reply is the guest's, at most the member's max message size.
//
// Errors: sharding.ErrUnknownEntityType; ErrBadRequest when the module has no query
// export (the error says how to add one) or the state is over the replay cap; an
// *EntityError when the guest refused the query; a *GuestError for a trap or the
// deadline; ErrBadSnapshot, sharding.ErrCorruptRecord for a saved state or a journal
// record that does not decode; the state store's and module store's errors.
func (n *Node) Query(ctx context.Context, typ, id string, payload []byte) ([]byte, error) {
	if err := checkEntityID(id); err != nil {
		return nil, err
	}
	info, ok := n.catalog.get(typ)
	if !ok {
		return nil, n.unknownType(typ)
	}
	if len(payload) > n.cfg.Runtime.MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrMessageTooLarge, len(payload), n.cfg.Runtime.MaxMessageSize)
	}
	mod, err := n.modules.get(ctx, info.Digest, n.moduleSources(info))
	if err != nil {
		return nil, withCode(err)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	raw, err := newDeltaStates(n.states).Load(ctx, key)
	switch {
	case errors.Is(err, sharding.ErrNoState):
		raw = nil
	case err != nil:
		return nil, withCode(err)
	case len(raw) > maxReplayBaseBytes:
		return nil, fmt.Errorf("%w: the saved state of %s/%s is %d bytes, over the cap of %d", ErrBadRequest, typ, id,
			len(raw), maxReplayBaseBytes)
	}
	var base sharding.Base
	if len(raw) > 0 {
		if base, err = sharding.DecodeBase(raw); err != nil {
			return nil, err
		}
	}
	var entries []sharding.JournalEntry
	if journal, ok := sharding.StateStoreAs[sharding.JournalStore](n.states); ok {
		recs, err := journal.ReadJournal(ctx, key, base.Seq+1, 0)
		if err != nil {
			return nil, withCode(err)
		}
		raws := make([]RawRecord, len(recs))
		for k, r := range recs {
			raws[k] = RawRecord{Seq: r.Seq, Data: r.Data}
		}
		if entries, err = replayEntries(key, base.Seq, raws); err != nil {
			return nil, err
		}
	}
	inst, err := n.queryInstance(ctx, info, mod, typ, id, base.State)
	if err != nil {
		return nil, err
	}
	defer inst.Close(context.WithoutCancel(ctx))
	if !inst.m.HasQuery() {
		return nil, errNoQuery(typ, inst.m.Digest)
	}
	if err := inst.Activate(ctx); err != nil {
		return nil, fmt.Errorf("%s/%s's on_activate, on the query's instance: %w", typ, id, err)
	}
	inst.trial = &trialCalls{} // host calls past the record run as outside a node
	for _, en := range entries {
		if !en.Kind.Handled() {
			continue // a time travel's record (the base holds its state), or a base's copy
		}
		calls, _, err := decodeEffects(en.Effects)
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", sharding.ErrCorruptRecord, en.Seq, err)
		}
		res := inst.replayMessage(en.Payload, sharding.MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask}, calls)
		if inst.Closed() {
			return nil, fmt.Errorf("%s/%s: rebuilding its state for the query, journal record %d failed: %w", typ, id, en.Seq, res.err)
		}
	}
	inst.trial = nil
	return inst.query(ctx, payload)
}

// queryInstance makes the instance a query runs on, with no node services: a new one
// for no state, else one restored from state (the host's encoding), on the module its
// transparent snapshot was made by (which the member fetches if need be).
func (n *Node) queryInstance(ctx context.Context, info TypeInfo, mod *wasmModule, typ, id string, state []byte) (*wasmInstance, error) {
	if len(state) == 0 {
		if !mod.HasQuery() {
			return nil, errNoQuery(typ, mod.Digest)
		}
		inst, err := mod.Instantiate(ctx, typ, id)
		return inst, withCode(err)
	}
	kind, payload, _, err := decodeState(state)
	if err != nil {
		return nil, err
	}
	if kind == stateGuest {
		if !mod.HasQuery() {
			return nil, errNoQuery(typ, mod.Digest)
		}
		inst, err := mod.RestoreGuest(ctx, typ, id, payload)
		return inst, withCode(err)
	}
	snap, _, err := n.rt.transparentSnapshot(kind, payload)
	if err != nil {
		return nil, err
	}
	if snap.ModuleDigest != mod.Digest {
		if mod, err = n.modules.get(ctx, snap.ModuleDigest, n.moduleSources(info)); err != nil {
			return nil, withCode(err)
		}
	}
	if !mod.HasQuery() {
		return nil, errNoQuery(typ, mod.Digest)
	}
	inst, err := mod.Restore(ctx, typ, id, snap)
	return inst, withCode(err)
}

// apiQuery is POST /v1/query?type=T&id=ID: the body is the query's payload, the reply
// the guest's answer (application/octet-stream). 400 for a module without a query
// export, 404 for an unknown type, 422 (as an ask's) when the guest refused.
func (n *Node) apiQuery(w http.ResponseWriter, r *http.Request) {
	typ, id, payload, err := n.entityRequest(r)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	reply, err := n.Query(r.Context(), typ, id, payload)
	if err != nil {
		writeError(w, r, withCode(err), 0)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(reply)
}
