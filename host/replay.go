package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/sharding"
)

// Local replay and trial upgrades (docs/cli.md, "Replay and trial upgrades"). The API
// gives out what an entity's activation starts from, read from the state store without
// activating it: its base (GET /v1/entities/{type}/{id}/base), the journal records
// after it (GET /v1/entities/{type}/{id}/journal) and the module that runs it
// (GET /v1/modules/{digest}). ReplayJournal runs them again in a runtime of its own,
// outside any node, as an activation replays a journal (journal.go): each record's
// message with its host calls answered from the record. It compares what the guest
// does with what the record says it did the first time: its outcome, its reply's
// digest, and the host functions it called, in order (the record keeps their answers,
// not their arguments). Given another module, that is a trial upgrade: the new code
// runs the entity's real history. Where a guest calls another host function than the
// record holds, the difference is noted and the rest of the message's calls run as
// outside a cluster (a tell, an ask or a distributed data call fails as unavailable;
// now and random answer from the local clock and random source), so the replay goes on
// and shows what follows.

// Limits of the replay routes.
const (
	// maxReplayBaseBytes caps an entity's saved state given out (a base with its delta
	// is two states).
	maxReplayBaseBytes = 128 << 20
	// Journal pages: records at most (default and cap), and their bytes (a page holds
	// one record at least).
	defaultJournalPage = 1000
	maxJournalPage     = 10_000
	journalPageBytes   = 16 << 20
)

// outcomeForwarded is a record's Outcome for a message the entity forwarded
// (sharding's).
const outcomeForwarded = "forwarded"

// EntityBase is what GET /v1/entities/{type}/{id}/base gives out: the entity's saved
// state as the state store holds it, and the module that runs it.
type EntityBase struct {
	Entity string `json:"entity"`
	Shard  int    `json:"shard"`
	// Seq is the last journal record the state holds: its journal goes on from Seq+1.
	// 0 when the state holds none, or there is no state.
	Seq uint64 `json:"seq"`
	// State is the saved state as the store holds it: sharding.EncodeBase's framing
	// (or none, for a state saved without a journal) around the host's encoding, a
	// base with its delta as one. Base64 in JSON; empty when the entity has none.
	State      []byte `json:"state,omitempty"`
	StateBytes int    `json:"state_bytes"`
	// StateKind is "guest" (the guest's own snapshot, which any version of its module
	// with shardhost_restore may take up), "transparent" (a copy of the instance's
	// memory, which only the module that made it can take up) or "none".
	StateKind string `json:"state_kind"`
	// Module is the digest of the module that runs the state; ModuleFrom says where it
	// comes from: "snapshot" (a transparent state's own module) or "type" (the type's
	// current version, for a guest state or none). ModuleVersion is its version of the
	// type, 0 when the catalog no longer lists it.
	Module        string `json:"module"`
	ModuleFrom    string `json:"module_from"`
	ModuleVersion uint64 `json:"module_version,omitempty"`
}

// RawRecord is a journal record as the store keeps it (sharding.JournalRecord):
// DecodeJournalEntry checks and reads it. Data is base64 in JSON.
type RawRecord struct {
	Seq  uint64 `json:"seq"`
	Data []byte `json:"data"`
}

// JournalPage is what GET /v1/entities/{type}/{id}/journal gives out: the entity's
// journal records from a sequence number, raw, and Next, the Seq to read from for the
// next page (0 when there is no more).
type JournalPage struct {
	Entity  string      `json:"entity"`
	Records []RawRecord `json:"records"`
	Next    uint64      `json:"next,omitempty"`
}

// entityBase reads entity typ/id's saved state from the state store (through the
// deltas, as an activation reads it), without activating the entity. Errors:
// sharding.ErrUnknownEntityType, ErrBadRequest (a state over maxReplayBaseBytes, an ID
// the store refuses), ErrBadSnapshot (a state that does not decode), and the store's.
func (n *Node) entityBase(ctx context.Context, typ, id string) (EntityBase, error) {
	info, ok := n.catalog.get(typ)
	if !ok {
		return EntityBase{}, n.unknownType(typ)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	target := targetOf(info, id) // a canary's stable module outside the canary
	b := EntityBase{Entity: typ + "/" + id, Shard: key.Shard, StateKind: "none", Module: target, ModuleFrom: "type",
		ModuleVersion: moduleVersionOf(info, target)}
	raw, err := newDeltaStates(n.states).Load(ctx, key)
	switch {
	case errors.Is(err, sharding.ErrNoState):
		return b, nil
	case err != nil:
		return EntityBase{}, withCode(err)
	case len(raw) > maxReplayBaseBytes:
		return EntityBase{}, fmt.Errorf("%w: the saved state of %s is %d bytes, over the cap of %d", ErrBadRequest, b.Entity,
			len(raw), maxReplayBaseBytes)
	}
	base, err := sharding.DecodeBase(raw)
	if err != nil {
		return EntityBase{}, err
	}
	b.Seq, b.State, b.StateBytes = base.Seq, raw, len(raw)
	if len(base.State) == 0 {
		return b, nil
	}
	kind, payload, _, err := decodeState(base.State)
	if err != nil {
		return EntityBase{}, err
	}
	if kind == stateGuest {
		b.StateKind = "guest"
		return b, nil
	}
	snap, _, err := n.rt.transparentSnapshot(kind, payload)
	if err != nil {
		return EntityBase{}, err
	}
	b.StateKind, b.Module, b.ModuleFrom, b.ModuleVersion = "transparent", snap.ModuleDigest, "snapshot", 0
	for _, v := range info.Versions() {
		if v.Digest == snap.ModuleDigest {
			b.ModuleVersion = v.Version
		}
	}
	return b, nil
}

// journalPage returns entity typ/id's journal records from from (1 for the first
// kept), at most limit of them (1 to maxJournalPage; 0: defaultJournalPage) and about
// journalPageBytes. Errors: as History's.
func (n *Node) journalPage(ctx context.Context, typ, id string, from uint64, limit int) (JournalPage, error) {
	switch {
	case limit == 0:
		limit = defaultJournalPage
	case limit < 0 || limit > maxJournalPage:
		return JournalPage{}, fmt.Errorf("%w: limit %d (want 1 to %d)", ErrBadRequest, limit, maxJournalPage)
	}
	info, ok := n.catalog.get(typ)
	if !ok {
		return JournalPage{}, n.unknownType(typ)
	}
	journal, ok := sharding.StateStoreAs[sharding.JournalStore](n.states)
	if !ok {
		return JournalPage{}, fmt.Errorf("%w: the state store keeps no journals", ErrBadRequest)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	recs, err := journal.ReadJournal(ctx, key, max(from, 1), limit+1)
	if err != nil {
		return JournalPage{}, withCode(err)
	}
	page := JournalPage{Entity: typ + "/" + id, Records: []RawRecord{}}
	size := 0
	for k, r := range recs {
		if k == limit || (k > 0 && size+len(r.Data) > journalPageBytes) {
			page.Next = r.Seq
			break
		}
		size += len(r.Data)
		page.Records = append(page.Records, RawRecord{Seq: r.Seq, Data: r.Data})
	}
	return page, nil
}

// moduleBytes returns the bytes of a module that a deployed type's catalog entry names
// (a current or an earlier version), from this member's module store or, when it does
// not hold it, from a member that does. Errors: ErrModuleUnavailable.
func (n *Node) moduleBytes(ctx context.Context, digest string) ([]byte, error) {
	var owner *TypeInfo
	for _, t := range n.catalog.list() {
		for _, v := range t.Versions() {
			if v.Digest == digest && owner == nil {
				owner = &t
			}
		}
	}
	if owner == nil {
		return nil, fmt.Errorf("%w: module %q is no version of a deployed type (shardhost modules lists them)", ErrModuleUnavailable, digest)
	}
	if n.modules.has(digest) {
		return n.modules.bytes(digest)
	}
	b, err := n.fetchModule(ctx, digest, n.moduleSources(*owner))
	if err != nil {
		return nil, err
	}
	if got := moduleDigest(b); got != digest {
		return nil, fmt.Errorf("%w: module %s arrived with digest %s", ErrModuleUnavailable, digest, got)
	}
	return b, nil
}

// apiBase is GET /v1/entities/{type}/{id}/base.
func (n *Node) apiBase(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	b, err := n.entityBase(r.Context(), typ, id)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// apiJournal is GET /v1/entities/{type}/{id}/journal[?from=SEQ&limit=N].
func (n *Node) apiJournal(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var from uint64
	var limit int
	var err error
	if s := q.Get("from"); s != "" {
		if from, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeError(w, r, fmt.Errorf("%w: from=%q is not a sequence number", ErrBadRequest, s), 0)
			return
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			writeError(w, r, fmt.Errorf("%w: limit=%q is not a number from 1 to %d", ErrBadRequest, s, maxJournalPage), 0)
			return
		}
	}
	page, err := n.journalPage(r.Context(), typ, id, from, limit)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// apiModule is GET /v1/modules/{digest}: the module's bytes (application/wasm).
func (n *Node) apiModule(w http.ResponseWriter, r *http.Request) {
	digest := r.PathValue("digest")
	if !validDigest(digest) {
		writeError(w, r, fmt.Errorf("%w: %q is not a module digest (64 hex digits)", ErrBadRequest, digest), 0)
		return
	}
	b, err := n.moduleBytes(r.Context(), digest)
	if err != nil {
		writeError(w, r, err, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/wasm")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// ReplayInput is what ReplayJournal replays: an entity's base, the journal records
// that follow it, and the module to run them with.
type ReplayInput struct {
	// Type and ID name the entity: its records' checksums cover them.
	Type, ID string
	// Module is the wasm module to run: the one the entity runs (EntityBase.Module), or
	// another one, for a trial upgrade.
	Module []byte
	// State is the state to start from as the store holds it (EntityBase.State);
	// empty: a new entity, whose journal starts at record 1.
	State []byte
	// Records are the journal records after the state's (EntityBase.Seq+1 on, or 1 on
	// without a state), consecutive, raw as the store keeps them (JournalPage).
	Records []RawRecord
	// From is the first record the report lists (0: every one); the replay runs the
	// ones before it too.
	From uint64
	// StopBefore, when not 0, ends the replay before that record, with what a person
	// needs to run it under a debugger (ReplayReport.Debug).
	StopBefore uint64
	// Runtime is the sandbox; its zero fields take a member's defaults (memory cap
	// 64 MiB, abi.MaxMessageSize, deadlines, call budget). Set them as the members'
	// (--memory-limit, --max-message-size) when those are not the defaults. Guest
	// output goes to Runtime.Logger at debug level (nil: nowhere).
	Runtime RuntimeConfig
}

// ReplayReport is what ReplayJournal found.
type ReplayReport struct {
	Entity string `json:"entity"`
	// Module is the digest of the module that ran.
	Module string `json:"module"`
	// Start is the record the replay started after (its base's; 0 for a new entity),
	// StartState the kind of state it started from: "guest", "transparent" or "none".
	Start      uint64 `json:"start"`
	StartState string `json:"start_state"`
	// Replayed counts the records that ran (before From too); Differ those whose
	// outcome, reply or host calls differ from their record, the first of them being
	// FirstDifference (0: none).
	Replayed        int    `json:"replayed"`
	Differ          int    `json:"differ"`
	FirstDifference uint64 `json:"first_difference,omitempty"`
	// Records are the replayed records from From on.
	Records []ReplayedRecord `json:"records"`
	// Failed is the guest failure (a trap, the deadline, the call budget) that ended
	// the replay before its last record; "" when none did. It counts as a difference:
	// a journaled message never failed so.
	Failed string `json:"failed,omitempty"`
	// FinalStateBytes is the size of the entity's state where the replay ended, as
	// FinalStateKind: "guest" (the guest's own snapshot) or "transparent" (a snapshot
	// of the instance); none after a failure.
	FinalStateBytes int    `json:"final_state_bytes"`
	FinalStateKind  string `json:"final_state_kind,omitempty"`
	// Debug is set when the replay stopped before ReplayInput.StopBefore.
	Debug *ReplayDebug `json:"-"`
}

// Diverged reports whether the replay differs from the journal anywhere.
func (r ReplayReport) Diverged() bool { return r.Differ > 0 }

// ReplayedRecord is one record as a replay ran it, beside what the journal says of it.
type ReplayedRecord struct {
	Seq    uint64 `json:"seq"`
	Kind   string `json:"kind"`
	Sender string `json:"sender,omitempty"`
	Ask    bool   `json:"ask,omitempty"`
	// PayloadBytes is the message's size, Payload its preview (as a history's).
	PayloadBytes int    `json:"payload_bytes"`
	Payload      string `json:"payload"`
	// Outcome is the replay's: "ok", an error code ("entity-error", "guest-trap", ...),
	// or "forwarded"; Reply a preview of its reply, or of the entity's error text, and
	// ReplyDigest the reply's digest (8 hex digits; "" for none).
	Outcome     string `json:"outcome"`
	ReplyBytes  int    `json:"reply_bytes"`
	Reply       string `json:"reply"`
	ReplyDigest string `json:"reply_digest,omitempty"`
	// RecordedOutcome and RecordedReplyDigest are the journal's.
	RecordedOutcome     string `json:"recorded_outcome"`
	RecordedReplyDigest string `json:"recorded_reply_digest,omitempty"`
	// Differs says how the replay differs from the record (its outcome, its reply,
	// where its host calls leave the record's); empty when it does not.
	Differs []string `json:"differs,omitempty"`
}

// ReplayDebug is where a replay stopped (ReplayInput.StopBefore): the record it did not
// run, and the entity's state then.
type ReplayDebug struct {
	// Record is the record before which the replay stopped; its Payload, Kind, Sender
	// and Ask are the message to deliver.
	Record sharding.JournalEntry
	// State is the guest's own snapshot of its state before the record
	// (shardhost_snapshot), which the SDKs' harnesses restore; HasState is false when
	// the module keeps none (its state is its memory, which a native build cannot take
	// up).
	State    []byte
	HasState bool
	// Earlier are the messages the replay ran before the record when it started from a
	// new entity (nil otherwise): delivered in order to a fresh harness, they bring a
	// module without a guest-level state to the same state.
	Earlier []sharding.JournalEntry
}

// ReplayJournal runs an entity's journal records again on its state, in a wasm runtime
// of its own outside any node, and reports each message's outcome and reply beside its
// record's, where they differ, and the state's size at the end. It changes nothing
// anywhere: every host call the record holds is answered from it. The module's
// on_activate runs first, as at an activation (its host calls are not journaled: they
// run as outside a cluster).
//
// A time-travel record (a revert, a fork) holds no message: one after the state is
// skipped, as an activation skips it; a replay from a new entity cannot go past one.
//
// Errors (nothing was replayed): ErrInvalidModule (a module that does not load or
// instantiate; the error says why), ErrBadSnapshot (a state that does not decode, or
// that the module cannot take up: a transparent snapshot of another module, a guest
// state for a module without shardhost_restore), ErrRestoreFailed (the guest refused
// its state), sharding.ErrCorruptRecord (a record that fails its checksum or does not
// decode, or records that are not consecutive from the state's), ErrBadRequest (no
// records with no state, a From past the last record, a StopBefore outside the
// records, a revert or a fork in a replay from a new entity), and the guest's failure
// of its on_activate. A guest failure during a record ends the replay there and is
// reported (ReplayReport.Failed), not returned.
func ReplayJournal(ctx context.Context, in ReplayInput) (ReplayReport, error) {
	entity := in.Type + "/" + in.ID
	report := ReplayReport{Entity: entity, StartState: "none", Records: []ReplayedRecord{}}
	var base sharding.Base
	if len(in.State) > 0 {
		var err error
		if base, err = sharding.DecodeBase(in.State); err != nil {
			return report, err
		}
	}
	report.Start = base.Seq
	entries, err := replayEntries(sharding.EntityKey{Type: in.Type, ID: in.ID}, base.Seq, in.Records)
	if err != nil {
		return report, err
	}
	fresh := len(base.State) == 0
	switch first, last := base.Seq+1, base.Seq+uint64(len(entries)); {
	case len(entries) == 0 && fresh:
		return report, fmt.Errorf("%w: %s has no saved state and no journal records: nothing to replay (it has handled no message under the journal)", ErrBadRequest, entity)
	case in.From > last:
		return report, fmt.Errorf("%w: from record %d: past the journal's last record, %d", ErrBadRequest, in.From, last)
	case in.StopBefore > 0 && len(entries) == 0:
		return report, fmt.Errorf("%w: stop before record %d: no journal record follows the base (after record %d)", ErrBadRequest, in.StopBefore, base.Seq)
	case in.StopBefore > 0 && (in.StopBefore < first || in.StopBefore > last):
		return report, fmt.Errorf("%w: stop before record %d: the replay runs records %d to %d", ErrBadRequest, in.StopBefore, first, last)
	}
	cfg := in.Runtime
	def := defaultRuntimeConfig()
	cfg.MemoryLimit = cmpOr(cfg.MemoryLimit, def.MemoryLimit)
	cfg.MessageDeadline = cmpOr(cfg.MessageDeadline, def.MessageDeadline)
	cfg.ActivationDeadline = cmpOr(cfg.ActivationDeadline, def.ActivationDeadline)
	cfg.MaxMessageSize = cmpOr(cfg.MaxMessageSize, def.MaxMessageSize)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rt, err := newWasmRuntime(ctx, cfg)
	if err != nil {
		return report, err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	mod, err := rt.Load(ctx, in.Module)
	if err != nil {
		return report, err
	}
	defer mod.Close(context.WithoutCancel(ctx))
	report.Module = mod.Digest
	inst, kind, err := replayInstance(ctx, rt, mod, in.Type, in.ID, base.State)
	if err != nil {
		return report, err
	}
	defer inst.Close(context.WithoutCancel(ctx))
	report.StartState = kind
	if err := inst.Activate(ctx); err != nil {
		return report, fmt.Errorf("%s's on_activate: %w", entity, err)
	}
	inst.trial = &trialCalls{}
	var earlier []sharding.JournalEntry
	for _, en := range entries {
		if !en.Kind.Handled() {
			if fresh && en.Kind != sharding.KindBase {
				return report, fmt.Errorf("%w: record %d is a %s, whose state the journal does not hold: a replay from a new entity cannot go past it", ErrBadRequest, en.Seq, en.Kind)
			}
			continue // a time travel's record (the base holds its state), or a base's copy
		}
		if en.Seq == in.StopBefore {
			d := &ReplayDebug{Record: en}
			state, ok, err := inst.GuestSnapshot()
			if err != nil {
				return report, fmt.Errorf("%s's state before record %d: %w", entity, en.Seq, err)
			}
			d.State, d.HasState = state, ok
			if fresh {
				d.Earlier = earlier
			}
			report.Debug = d
			break
		}
		calls, _, err := decodeEffects(en.Effects)
		if err != nil {
			return report, fmt.Errorf("%w: record %d: %w", sharding.ErrCorruptRecord, en.Seq, err)
		}
		info := sharding.MessageInfo{Sender: en.Sender, Kind: en.Kind, Tag: en.Tag, Ask: en.Ask}
		res := inst.replayMessage(en.Payload, info, calls)
		rec := compareReplay(en, res)
		report.Replayed++
		if len(rec.Differs) > 0 {
			report.Differ++
			if report.FirstDifference == 0 {
				report.FirstDifference = en.Seq
			}
		}
		if en.Seq >= in.From {
			report.Records = append(report.Records, rec)
		}
		earlier = append(earlier, en)
		if inst.Closed() {
			report.Failed = fmt.Sprintf("record %d: %v", en.Seq, res.err)
			return report, nil
		}
	}
	report.FinalStateBytes, report.FinalStateKind, err = replayStateSize(inst)
	if err != nil {
		return report, fmt.Errorf("%s's state after the replay: %w", entity, err)
	}
	return report, nil
}

// cmpOr is v, or def when v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// replayEntries checks and decodes records that follow the base after record seq.
// Errors: sharding.ErrCorruptRecord.
func replayEntries(key sharding.EntityKey, seq uint64, recs []RawRecord) ([]sharding.JournalEntry, error) {
	entries := make([]sharding.JournalEntry, 0, len(recs))
	for k, r := range recs {
		if want := seq + 1 + uint64(k); r.Seq != want {
			return nil, fmt.Errorf("%w: %s/%s: record %d where record %d should be (the records follow the base after record %d, in order)",
				sharding.ErrCorruptRecord, key.Type, key.ID, r.Seq, want, seq)
		}
		en, err := sharding.DecodeJournalEntry(key, sharding.JournalRecord{Seq: r.Seq, Data: r.Data})
		if err != nil {
			return nil, err
		}
		entries = append(entries, en)
	}
	return entries, nil
}

// replayInstance makes the instance a replay starts with: from the saved state (the
// host's encoding; none: a new instance), and says what kind of state that was.
func replayInstance(ctx context.Context, rt *wasmRuntime, mod *wasmModule, typ, id string, state []byte) (*wasmInstance, string, error) {
	if len(state) == 0 {
		inst, err := mod.Instantiate(ctx, typ, id)
		return inst, "none", err
	}
	kind, payload, _, err := decodeState(state)
	if err != nil {
		return nil, "", err
	}
	if kind == stateGuest {
		inst, err := mod.RestoreGuest(ctx, typ, id, payload)
		return inst, "guest", err
	}
	snap, _, err := rt.transparentSnapshot(kind, payload)
	if err != nil {
		return nil, "", err
	}
	if snap.ModuleDigest != mod.Digest {
		return nil, "", fmt.Errorf("%w: the state of %s/%s is a transparent snapshot (a copy of its instance's memory) made by module %.12s…, "+
			"which only that module can take up, not module %.12s…; a module that exports shardhost_snapshot and shardhost_restore "+
			"(the Go SDK's Stateful, the Rust SDK's Entity::snapshot) keeps a state another version can take up",
			ErrBadSnapshot, typ, id, snap.ModuleDigest, mod.Digest)
	}
	inst, err := mod.Restore(ctx, typ, id, snap)
	return inst, "transparent", err
}

// replayStateSize returns the size and kind of the instance's state: its guest-level
// snapshot if the guest gives one, else a transparent snapshot's.
func replayStateSize(inst *wasmInstance) (int, string, error) {
	if inst.Closed() {
		return 0, "", nil
	}
	state, ok, err := inst.GuestSnapshot()
	switch {
	case err != nil:
		return 0, "", err
	case ok:
		return len(state), "guest", nil
	}
	snap, err := inst.Snapshot()
	if err != nil {
		return 0, "", err
	}
	b, err := snap.MarshalBinary()
	if err != nil {
		return 0, "", err
	}
	return len(b), "transparent", nil
}

// trialCalls is a trial replay's account of one message's host calls (replayCall).
type trialCalls struct {
	// differs says where the message's host calls first left the record; "" while
	// they follow it.
	differs string
}

// differ notes that host call pos (from 0) is name where the record has rec.
func (t *trialCalls) differ(pos int, name string, rec []hostRecord) {
	if pos >= len(rec) {
		t.differs = fmt.Sprintf("host call %d is %s, past the record's %d", pos+1, name, len(rec))
		return
	}
	t.differs = fmt.Sprintf("host call %d is %s, the record has %s", pos+1, name, rec[pos].fn)
}

// replayedMessage is what a record's message did in a trial replay.
type replayedMessage struct {
	out       []byte
	err       error
	forwarded bool
	// calls says where its host calls left the record's ("" if they did not).
	calls string
}

// replayMessage runs a record's message as replay does, in a trial (i.trial set): the
// host calls are answered from calls while the guest makes them in order, and run as
// outside a node from the first one that differs. It returns the reply or the error as
// Receive does, and whether the guest forwarded the message.
func (i *wasmInstance) replayMessage(payload []byte, info sharding.MessageInfo, calls []hostRecord) replayedMessage {
	i.trial.differs = ""
	i.replaying, i.replayCalls, i.replayPos = true, calls, 0
	i.msg, i.forward = info, nil
	op := receiveOp(info)
	if !i.m.ops.Has(op) {
		i.replaying, i.replayCalls = false, nil
		i.msg = sharding.MessageInfo{}
		return replayedMessage{err: errNoHTTP(i.name)}
	}
	status, reply, err := i.invoke(op, payload, true, i.m.rt.cfg.MaxMessageSize)
	res := replayedMessage{forwarded: i.forward != nil, calls: i.trial.differs}
	for _, c := range calls[:i.replayPos] {
		if c.fn == abi.ImportForward && c.ret == uint64(uint32(abi.CodeOK)) {
			res.forwarded = true // answered from the record: the call set nothing
		}
	}
	if res.calls == "" && i.returned && i.replayPos != len(calls) {
		res.calls = fmt.Sprintf("made %d of the record's %d host calls", i.replayPos, len(calls))
	}
	i.replaying, i.replayCalls = false, nil
	i.disarmCallTimer()
	i.msg, i.forward, i.passivate = sharding.MessageInfo{}, nil, false
	switch {
	case err != nil:
		res.err = err
	case status == abi.StatusOK:
		res.out = reply
	case status == abi.StatusError:
		res.err = &EntityError{Message: string(reply)}
	default:
		res.err = &EntityError{Message: fmt.Sprintf("guest returned status %d", status)}
	}
	return res
}

// compareReplay sets a replayed message beside its record.
func compareReplay(en sharding.JournalEntry, res replayedMessage) ReplayedRecord {
	r := ReplayedRecord{Seq: en.Seq, Kind: en.Kind.String(), Sender: en.Sender, Ask: en.Ask, PayloadBytes: len(en.Payload),
		Payload: preview(en.Payload), RecordedOutcome: orOK(en.Outcome), RecordedReplyDigest: digestText(en.ReplyDigest)}
	outcome, digest := "", uint32(0)
	switch {
	case res.err != nil:
		outcome = sharding.ErrorCode(withCode(res.err))
		text := []byte(res.err.Error())
		var ee *EntityError
		if errors.As(res.err, &ee) {
			text = []byte(ee.Message)
		}
		r.Reply, r.ReplyBytes = preview(text), len(text)
	case res.forwarded:
		outcome = outcomeForwarded
	default:
		digest = sharding.ReplyDigest(res.out)
		r.Reply, r.ReplyBytes = preview(res.out), len(res.out)
	}
	r.Outcome, r.ReplyDigest = orOK(outcome), digestText(digest)
	switch {
	case outcome != en.Outcome:
		r.Differs = append(r.Differs, fmt.Sprintf("outcome %s, the record's %s", r.Outcome, r.RecordedOutcome))
	case digest != en.ReplyDigest:
		r.Differs = append(r.Differs, fmt.Sprintf("reply %s, the record's %s", orNone(r.ReplyDigest), orNone(r.RecordedReplyDigest)))
	}
	if res.calls != "" {
		r.Differs = append(r.Differs, "host calls: "+res.calls)
	}
	return r
}

func orOK(outcome string) string {
	if outcome == "" {
		return "ok"
	}
	return outcome
}

func orNone(digest string) string {
	if digest == "" {
		return "none"
	}
	return digest
}

// digestText renders a reply digest as 8 hex digits ("" for none).
func digestText(d uint32) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf("%08x", d)
}
