package host

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/sharding"
)

// An entity's history: the records of its journal (docs/design.md, "The journal"),
// read from the state store without activating the entity.

// HistoryRecord is one record of an entity's journal as `shardhost history` and
// GET /v1/entities/{type}/{id}/history show it.
type HistoryRecord struct {
	Seq uint64 `json:"seq"`
	// Time is when the message was handled (RFC 3339, UTC, to the millisecond).
	Time time.Time `json:"time"`
	// Kind is message, timer or changed (Sender: the sending entity, the timer or the
	// key), or revert or fork (the record of a time travel; Preview says what it did).
	Kind   string `json:"kind"`
	Sender string `json:"sender,omitempty"`
	Ask    bool   `json:"ask,omitempty"`
	// PayloadBytes is the message's size, Preview its first bytes as text (at most
	// historyPreview runes, non-printable bytes as \xNN).
	PayloadBytes int    `json:"payload_bytes"`
	Preview      string `json:"preview"`
	// Outcome is "ok", an entity error's code, or "forwarded".
	Outcome string `json:"outcome"`
	// EffectsBytes is the size of what the record keeps of the message's host calls'
	// answers, which a replay gives again.
	EffectsBytes int `json:"effects_bytes,omitempty"`
	// ReplyDigest is the reply's FNV-1a 32 digest, as 8 hex digits ("" for none).
	ReplyDigest    string `json:"reply_digest,omitempty"`
	TraceID        string `json:"trace_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// HistoryPage is a page of an entity's history: its records, and Next, the Seq to read
// from for the next page (0 when there is no more).
type HistoryPage struct {
	Entity  string          `json:"entity"`
	Records []HistoryRecord `json:"records"`
	Next    uint64          `json:"next,omitempty"`
}

// Limits of a history read.
const (
	historyPreview      = 64
	defaultHistoryLimit = 100
	maxHistoryLimit     = 10_000
)

// History returns the records of entity typ/id's journal from since (1 for the first
// kept), at most limit of them (1 to 10,000; 0: 100). It reads the state store, whatever
// member hosts the entity, and activates nothing. Errors: ErrBadRequest (a limit out
// of range, an entity ID the store refuses), sharding.ErrUnknownEntityType, and the
// store's (ErrStoreUnavailable, ErrCorruptRecord). A store that keeps no journals
// fails with ErrBadRequest.
func (n *Node) History(ctx context.Context, typ, id string, since uint64, limit int) (HistoryPage, error) {
	switch {
	case limit == 0:
		limit = defaultHistoryLimit
	case limit < 0 || limit > maxHistoryLimit:
		return HistoryPage{}, fmt.Errorf("%w: limit %d (want 1 to %d)", ErrBadRequest, limit, maxHistoryLimit)
	}
	info, ok := n.catalog.get(typ)
	if !ok {
		return HistoryPage{}, n.unknownType(typ)
	}
	journal, ok := sharding.StateStoreAs[sharding.JournalStore](n.states)
	if !ok {
		return HistoryPage{}, fmt.Errorf("%w: the state store keeps no journals", ErrBadRequest)
	}
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	recs, err := journal.ReadJournal(ctx, key, max(since, 1), limit+1)
	if err != nil {
		return HistoryPage{}, withCode(err)
	}
	page := HistoryPage{Entity: typ + "/" + id, Records: []HistoryRecord{}}
	if len(recs) > limit {
		page.Next = recs[limit].Seq
		recs = recs[:limit]
	}
	for _, r := range recs {
		e, err := sharding.DecodeJournalEntry(key, r)
		if err != nil {
			return HistoryPage{}, err
		}
		page.Records = append(page.Records, historyRecord(e))
	}
	return page, nil
}

func historyRecord(e sharding.JournalEntry) HistoryRecord {
	h := HistoryRecord{Seq: e.Seq, Time: e.Time.UTC(), Kind: e.Kind.String(), Sender: e.Sender, Ask: e.Ask,
		PayloadBytes: len(e.Payload), Preview: preview(e.Payload), Outcome: e.Outcome, EffectsBytes: len(e.Effects),
		IdempotencyKey: e.IdempotencyKey}
	if h.Outcome == "" {
		h.Outcome = "ok"
	}
	if e.ReplyDigest != 0 {
		h.ReplyDigest = fmt.Sprintf("%08x", e.ReplyDigest)
	}
	if e.TraceID != ([16]byte{}) {
		h.TraceID = hex.EncodeToString(e.TraceID[:])
	}
	return h
}

// preview renders the first historyPreview runes of a payload as text: printable UTF-8
// as it is, other bytes as \xNN, "…" after a cut.
func preview(b []byte) string {
	out := make([]byte, 0, historyPreview+8)
	for n := 0; len(b) > 0; n++ {
		if n == historyPreview {
			return string(out) + "…"
		}
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			out = fmt.Appendf(out, `\x%02x`, b[0])
			b = b[1:]
			continue
		}
		out = utf8.AppendRune(out, r)
		b = b[size:]
	}
	return string(out)
}

// apiHistory is GET /v1/entities/{type}/{id}/history[?since=SEQ&limit=N].
func (n *Node) apiHistory(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var since uint64
	var limit int
	var err error
	if s := q.Get("since"); s != "" {
		if since, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeError(w, r, fmt.Errorf("%w: since=%q is not a sequence number", ErrBadRequest, s), 0)
			return
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			writeError(w, r, fmt.Errorf("%w: limit=%q is not a number from 1 to %d", ErrBadRequest, s, maxHistoryLimit), 0)
			return
		}
	}
	page, err := n.History(r.Context(), typ, id, since, limit)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// TimeTravelResult is the reply of a revert or a fork: the entity and its record of it.
type TimeTravelResult struct {
	Entity string `json:"entity"`
	// Record is the sequence number of the time travel's own record in the entity's
	// journal.
	Record uint64 `json:"record"`
}

// apiRevert is POST /v1/entities/{type}/{id}/revert?to=SEQ (or messages=N): the
// entity's state becomes what it was after record SEQ (before its last N records).
func (n *Node) apiRevert(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	to, messages := q.Get("to"), q.Get("messages")
	if (to == "") == (messages == "") {
		writeError(w, r, fmt.Errorf("%w: give to=SEQ or messages=N, one of them", ErrBadRequest), 0)
		return
	}
	v, err := strconv.ParseUint(to+messages, 10, 64)
	if err != nil {
		writeError(w, r, fmt.Errorf("%w: %q is not a number", ErrBadRequest, to+messages), 0)
		return
	}
	var rec uint64
	if to != "" {
		rec, err = n.sharding.Revert(r.Context(), typ, id, v)
	} else {
		rec, err = n.sharding.RevertMessages(r.Context(), typ, id, v)
	}
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, TimeTravelResult{Entity: typ + "/" + id, Record: rec})
}

// apiFork is POST /v1/entities/{type}/{id}/fork?new=ID[&at=SEQ]: entity type/ID starts
// from {id}'s state after record SEQ (its last by default).
func (n *Node) apiFork(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	newID := q.Get("new")
	if err := checkEntityID(newID); err != nil {
		writeError(w, r, fmt.Errorf("%w (new=)", err), 0)
		return
	}
	var at uint64
	if s := q.Get("at"); s != "" {
		var err error
		if at, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeError(w, r, fmt.Errorf("%w: at=%q is not a sequence number", ErrBadRequest, s), 0)
			return
		}
	}
	if err := n.sharding.Fork(r.Context(), typ, id, newID, at); err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, TimeTravelResult{Entity: typ + "/" + newID, Record: 1})
}

// entityPath reads and checks the {type} and {id} of an entity's route; a bad one is
// answered.
func (n *Node) entityPath(w http.ResponseWriter, r *http.Request) (typ, id string, ok bool) {
	typ, id = r.PathValue("type"), r.PathValue("id")
	if err := ValidateTypeName(typ); err != nil {
		writeError(w, r, err, 0)
		return "", "", false
	}
	if err := checkEntityID(id); err != nil {
		writeError(w, r, err, 0)
		return "", "", false
	}
	if _, known := n.catalog.get(typ); !known {
		writeError(w, r, n.unknownType(typ), 0)
		return "", "", false
	}
	return typ, id, true
}

// apiPause is POST /v1/entities/{type}/{id}/pause: the operator pauses the entity
// (sharding.Sharding.Pause) until a resume; {"entity":E,"status":"paused"|"already-paused"}.
func (n *Node) apiPause(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	done, err := n.sharding.Pause(r.Context(), typ, id)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	status := sharding.PauseDone
	if !done {
		status = sharding.PauseAlready
	}
	writeJSON(w, http.StatusOK, map[string]string{"entity": typ + "/" + id, "status": status})
}

// apiResume is POST /v1/entities/{type}/{id}/resume (and /skip): a paused entity tries
// its failing message again (or drops it, a dead letter) and goes on;
// {"entity":E,"status":"resumed"|"skipped"|"not-paused"}.
func (n *Node) apiResume(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	var done bool
	var err error
	status := sharding.ResumeDone
	if strings.HasSuffix(r.URL.Path, "/skip") {
		status = sharding.SkipDone
		done, err = n.sharding.Skip(r.Context(), typ, id)
	} else {
		done, err = n.sharding.Resume(r.Context(), typ, id)
	}
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	if !done {
		status = sharding.ResumeNotPaused
	}
	writeJSON(w, http.StatusOK, map[string]string{"entity": typ + "/" + id, "status": status})
}
