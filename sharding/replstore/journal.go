// The Store's journals (sharding.JournalStore): an append and a truncation are fenced
// writes, of journal records and of a floor, to the shard's replicas; a read is a
// majority read of pages of the entity's journal, merged newest version per record,
// whose records are made durable (read repair) before they are returned.

package replstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardhost/shardhost/internal/quorum"
	"github.com/shardhost/shardhost/sharding"
)

var _ sharding.JournalStore = (*Store)(nil)

// journalRecordCap is the largest journal record the store takes, in bytes: one
// message carries at least one whole record (ChunkSize), and no record is larger than
// a snapshot may be (MaxStateSize).
func (s *Store) journalRecordCap() int { return min(s.cfg.ChunkSize, s.cfg.MaxStateSize) }

// AppendJournal implements sharding.JournalStore: the records, versioned (epoch, and
// the writer's sequence number), go to the shard's K replicas in a fenced write, as
// Save's snapshot does, and AppendJournal returns once a majority wrote them and
// fsynced (each replica's writer commits the writes waiting for it together: one fsync
// for the appends of many entities). An append of more than ChunkSize bytes travels in
// several writes, in order. Each replica checks every record
// (sharding.VerifyJournalRecord) before it writes any, keeps the newest version of each
// record, and drops those below the entity's floor. Errors: sharding.ErrStaleEpoch,
// sharding.ErrStoreUnavailable (fewer than a majority acknowledged: the records may be
// on some replicas, and a later read may then return them, having made them durable),
// sharding.ErrStateTooLarge (a record over ChunkSize or MaxStateSize),
// sharding.ErrCorruptRecord, sharding.ErrInvalidStateKey. recs are copied; the caller
// may reuse them.
func (s *Store) AppendJournal(ctx context.Context, key sharding.EntityKey, epoch uint64, recs []sharding.JournalRecord) error {
	if err := sharding.CheckJournalAppend(key, recs); err != nil {
		return err
	}
	total := 0
	for _, r := range recs {
		if len(r.Data) > s.journalRecordCap() {
			return fmt.Errorf("%w: journal record %d of %s/%d/%q: %d bytes, the cap is %d", sharding.ErrStateTooLarge,
				r.Seq, key.Type, key.Shard, key.ID, len(r.Data), s.journalRecordCap())
		}
		total += len(r.Data)
	}
	// One copy of the records' bytes: replicas that answer after the majority still
	// read them.
	buf := make([]byte, 0, total)
	seq := s.nextSeq()
	out := make([]stateRecord, len(recs))
	for i, r := range recs {
		start := len(buf)
		buf = append(buf, r.Data...)
		out[i] = stateRecord{Kind: stateKindJournal, ID: key.ID, JSeq: r.Seq, Epoch: epoch, Seq: seq, Data: buf[start:len(buf):len(buf)]}
	}
	for len(out) > 0 {
		n := s.writeBatchLen(out)
		if err := s.write(ctx, key.Type, key.Shard, epoch, out[:n]); err != nil {
			return fmt.Errorf("replstore: append records %d..%d to the journal of %s/%d/%q at epoch %d: %w",
				out[0].JSeq, out[n-1].JSeq, key.Type, key.Shard, key.ID, epoch, err)
		}
		out = out[n:]
	}
	return nil
}

// writeBatchLen returns how many of recs (at least one) one write carries: at most
// stateMaxWriteRecords, and ChunkSize bytes of data.
func (s *Store) writeBatchLen(recs []stateRecord) int {
	n, size := 0, 0
	for n < len(recs) && n < stateMaxWriteRecords && (n == 0 || size+len(recs[n].Data) <= s.cfg.ChunkSize) {
		size += len(recs[n].Data)
		n++
	}
	return n
}

// TruncateJournal implements sharding.JournalStore: a fenced write of the entity's
// journal floor to the shard's replicas, acknowledged by a majority; each replica keeps
// the highest floor it is sent and deletes the records below it, and from then on drops
// the records below it that it is sent (by appends of a former owner, or by repair from
// a replica that missed the truncation). before 0 or 1 drops nothing: the write fences
// the shard alone. Errors: sharding.ErrStaleEpoch, sharding.ErrStoreUnavailable,
// sharding.ErrInvalidStateKey.
func (s *Store) TruncateJournal(ctx context.Context, key sharding.EntityKey, epoch uint64, before uint64) error {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	var recs []stateRecord
	if before > 1 {
		recs = []stateRecord{{Kind: stateKindFloor, ID: key.ID, Floor: before, Epoch: epoch, Seq: s.nextSeq()}}
	}
	if err := s.write(ctx, key.Type, key.Shard, epoch, recs); err != nil {
		return fmt.Errorf("replstore: truncate the journal of %s/%d/%q before %d at epoch %d: %w", key.Type, key.Shard, key.ID, before, epoch, err)
	}
	return nil
}

// ReadJournal implements sharding.JournalStore. It reads the entity's journal from the
// shard's replicas a page at a time (about ChunkSize bytes), each page from a majority,
// and merges their answers: the newest version of each record, none below the highest
// floor. A replica checks every copy it reads (sharding.VerifyJournalRecord) and
// reports those that fail rather than return them, as the reader does with what it
// receives; a record whose newest version has no intact copy among the majority is
// asked of the other reachable replicas. A record that fewer than a majority hold at
// its newest version is written to the replicas (unfenced: versions decide) and
// returned once a majority acknowledged it (read repair); replicas that answered
// without it, with an older version or with a corrupt copy, and those that answer
// late, get it afterwards, best effort. Errors: sharding.ErrStaleEpoch (ctx carries a
// read epoch older than a replica's for the shard, as Load), sharding.ErrCorruptRecord
// (no replica that answered holds an intact copy of a record's newest version),
// sharding.ErrStoreUnavailable (fewer than a majority answered, or acknowledged the
// read repair, within RequestTimeout or ctx), sharding.ErrInvalidStateKey. The records
// are the caller's. limit 0 or less reads them all.
func (s *Store) ReadJournal(ctx context.Context, key sharding.EntityKey, from uint64, limit int) ([]sharding.JournalRecord, error) {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	limit = max(limit, 0) // as the in-memory store: below 0 is no limit
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replstore: read the journal of %s/%d/%q: %w: %w", key.Type, key.Shard, key.ID, sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(key.Type, key.Shard)
	if err != nil {
		return nil, fmt.Errorf("replstore: read the journal of %s/%d/%q: %w", key.Type, key.Shard, key.ID, err)
	}
	var out []sharding.JournalRecord
	var floor uint64
	cursor := max(from, 1)
	for {
		want := 0
		if limit > 0 {
			want = limit - len(out)
		}
		page, err := s.journalRound(ctx, key, reps, cursor, want)
		if err != nil {
			return nil, fmt.Errorf("replstore: read the journal of %s/%d/%q from %d: %w", key.Type, key.Shard, key.ID, cursor, err)
		}
		if page.floor > floor {
			// A floor higher than an earlier page's (a truncation meanwhile): what lies
			// below it is gone.
			floor = page.floor
			out = slices.DeleteFunc(out, func(r sharding.JournalRecord) bool { return r.Seq < floor })
		}
		for _, r := range page.records {
			out = append(out, sharding.JournalRecord{Seq: r.JSeq, Data: r.Data})
		}
		if !page.more || (limit > 0 && len(out) >= limit) {
			break
		}
		cursor = page.through + 1
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// stateJournalAnswer is one replica's answer to a journal page read.
type stateJournalAnswer struct {
	rep  stateReplica
	page stateJournalPage
	err  error
}

func (a stateJournalAnswer) replica() stateReplica { return a.rep }

func (a stateJournalAnswer) failure() error { return a.err }

// stateJournalRound is the merged answer of one page read: the records, newest version
// each, at or above the floor, in JSeq order; more: the page stops at through.
type stateJournalRound struct {
	records []stateRecord
	floor   uint64
	more    bool
	through uint64
}

// journalRound reads the page of key's journal from from (at most limit records; 0:
// no limit) from a majority of reps, merges it, and makes its records durable (see
// ReadJournal).
func (s *Store) journalRound(ctx context.Context, key sharding.EntityKey, reps stateReplicas, from uint64, limit int) (stateJournalRound, error) {
	results := make(chan stateJournalAnswer, len(reps.reps))
	rctx := withTraceOf(s.owner.Context(), ctx)
	local := -1
	for k, r := range reps.reps {
		if r.local {
			local = k
			continue
		}
		if !s.owner.Go(func() { results <- s.journalFrom(rctx, r, key, from, limit) }) {
			results <- stateJournalAnswer{rep: r, err: closedError()}
		}
	}
	if local >= 0 {
		// This member's copy is read here, as load reads it.
		if s.owner.Enter() {
			results <- s.journalFrom(rctx, reps.reps[local], key, from, limit)
			s.owner.Leave()
		} else {
			results <- stateJournalAnswer{rep: reps.reps[local], err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return stateJournalRound{}, err
	}
	if epoch, ok := sharding.ReadEpoch(ctx); ok {
		for _, a := range answers {
			if a.err == nil && a.page.shard > epoch {
				return stateJournalRound{}, fmt.Errorf("%w: read at epoch %d, and %s/%d is at %d",
					sharding.ErrStaleEpoch, epoch, key.Type, key.Shard, a.page.shard)
			}
		}
	}
	m := mergeJournal(answers, from)
	if m.lost != 0 {
		// A record's newest version has no intact copy among the majority: another
		// replica may hold one.
		answers = append(answers, stragglers(reps.reps, answers, results, ctx.Done())...)
		m = mergeJournal(answers, from)
		if m.lost != 0 {
			recordReplicas(ctx, len(reps.reps), answeredOK(answers))
			return stateJournalRound{}, fmt.Errorf("%w: %s/%d/%q #%d: no intact copy of its newest version on the %d replicas that answered",
				sharding.ErrCorruptRecord, key.Type, key.Shard, key.ID, m.lost, answeredOK(answers))
		}
	}
	recordReplicas(ctx, len(reps.reps), answeredOK(answers))
	round := stateJournalRound{records: m.records, more: m.more, through: m.through}
	if m.floor != nil {
		round.floor = m.floor.Floor
	}
	// Read repair, first what fewer than a majority hold: written to a majority before
	// it is returned.
	// What a majority holds already goes, later, to the replicas that lack it (behind).
	groups := reps.groups()
	var weak []stateRecord
	behind := stateJournalMerge{floor: m.floor, gone: m.gone}
	for i := range m.records {
		r := &m.records[i]
		if heldByQuorum(groups, answers, func(p *stateJournalPage) bool { return p.holds(r) }) {
			behind.records = append(behind.records, *r)
		} else {
			weak = append(weak, *r)
		}
	}
	if m.floor != nil && !heldByQuorum(groups, answers, func(p *stateJournalPage) bool { return p.floor != nil && p.floor.Floor >= m.floor.Floor }) {
		weak = append(weak, *m.floor)
		behind.floor = nil
	}
	if len(weak) > 0 {
		weak = cloneRecords(weak)
		for len(weak) > 0 {
			n := s.writeBatchLen(weak)
			if err := s.send(ctx, &stateWriteReq{Type: key.Type, Shard: key.Shard, Epoch: maxEpoch(weak[:n]), Records: weak[:n]}); err != nil {
				return stateJournalRound{}, fmt.Errorf("read repair of records a minority held: %w", err)
			}
			weak = weak[n:]
		}
	}
	// Then the replicas behind on what a majority holds, best effort: those that
	// answered now (the records are copied before the caller gets them), and those yet
	// to answer once they have, from a copy.
	for _, a := range answers {
		if a.err == nil {
			s.queueJournalRepair(key, a.rep, behind.lacking(&a.page))
		}
	}
	if pending := len(reps.reps) - len(answers); pending > 0 && (len(behind.records) > 0 || behind.floor != nil || behind.gone != nil) {
		behind.records = cloneRecords(behind.records)
		s.owner.Go(func() { s.finishJournal(key, behind, pending, results) })
	}
	return round, nil
}

// queueJournalRepair queues writes of the records (copied) to a replica that lacks them.
func (s *Store) queueJournalRepair(key sharding.EntityKey, rep stateReplica, missing []stateRecord) {
	for len(missing) > 0 {
		n := s.writeBatchLen(missing)
		s.queueRepair(stateRepairJob{typ: key.Type, shard: key.Shard, targets: []stateReplica{rep}, records: cloneRecords(missing[:n])})
		missing = missing[n:]
	}
}

// heldByQuorum reports whether the answers whose page holds (holds(page)) make a
// majority of each configuration.
func heldByQuorum(groups []quorum.Group, answers []stateJournalAnswer, holds func(*stateJournalPage) bool) bool {
	for g, gr := range groups {
		n := 0
		for i := range answers {
			a := &answers[i]
			if a.err == nil && a.rep.in&(1<<g) != 0 && holds(&a.page) {
				n++
			}
		}
		if n < gr.Need {
			return false
		}
	}
	return true
}

// finishJournal waits for the replicas that had not answered a page read (each answers
// or fails within RequestTimeout), then queues, for each, the records of the merged
// page (and the floor) it lacks, holds older or holds corrupt.
func (s *Store) finishJournal(key sharding.EntityKey, m stateJournalMerge, pending int, results <-chan stateJournalAnswer) {
	for ; pending > 0; pending-- {
		if a := <-results; a.err == nil {
			s.queueJournalRepair(key, a.rep, m.lacking(&a.page))
		}
	}
}

// stateJournalMerge is the merge of replicas' pages of a journal (mergeJournal).
type stateJournalMerge struct {
	records []stateRecord // the newest version of each record in range, intact
	floor   *stateRecord  // the highest floor
	gone    *stateRecord  // the newest tombstone (stateKindGone): older records are gone
	more    bool
	through uint64 // with more: the last JSeq in range
	lost    uint64 // a JSeq whose newest version no answer holds intact (0: none)
}

// mergeJournal merges the pages of the answers that succeeded: the range is from
// through the lowest last JSeq of the pages that stop early; in it, each record's
// newest version (an intact copy; lost names a record whose newest version only
// corrupt copies hold), at or above the highest floor.
func mergeJournal(answers []stateJournalAnswer, from uint64) stateJournalMerge {
	var m stateJournalMerge
	var gone stateVersion
	for i := range answers {
		if g := answers[i].page.gone; answers[i].err == nil && g != nil && (m.gone == nil || m.gone.version().less(g.version())) {
			m.gone, gone = g, g.version()
		}
	}
	// dead reports whether r is older than the newest tombstone: an answer of a replica
	// that missed the entity's deletion.
	dead := func(r *stateRecord) bool { return m.gone != nil && r.version().less(gone) }
	for i := range answers {
		p := &answers[i].page
		if answers[i].err != nil {
			continue
		}
		if p.more && (!m.more || p.through < m.through) {
			m.more, m.through = true, p.through
		}
		if p.floor != nil && !dead(p.floor) && (m.floor == nil || p.floor.newer(m.floor)) {
			m.floor = p.floor
		}
	}
	low := from
	if m.floor != nil {
		low = max(low, m.floor.Floor)
	}
	inRange := func(jseq uint64) bool { return jseq >= low && (!m.more || jseq <= m.through) }
	best := map[uint64]*stateRecord{}
	newest := map[uint64]stateVersion{}
	for i := range answers {
		p := &answers[i].page
		if answers[i].err != nil {
			continue
		}
		for j := range p.records {
			r := &p.records[j]
			if !inRange(r.JSeq) || dead(r) {
				continue
			}
			if b := best[r.JSeq]; b == nil || r.newer(b) {
				best[r.JSeq] = r
			}
			if v, ok := newest[r.JSeq]; !ok || v.less(r.version()) {
				newest[r.JSeq] = r.version()
			}
		}
		for j := range p.corrupt {
			r := &p.corrupt[j]
			if !inRange(r.JSeq) || dead(r) {
				continue
			}
			if v, ok := newest[r.JSeq]; !ok || v.less(r.version()) {
				newest[r.JSeq] = r.version()
			}
		}
	}
	for jseq, v := range newest {
		b := best[jseq]
		if b == nil || b.version().less(v) {
			if m.lost == 0 || jseq < m.lost {
				m.lost = jseq
			}
			continue
		}
		m.records = append(m.records, *b)
	}
	slices.SortFunc(m.records, func(a, b stateRecord) int { return cmp.Compare(a.JSeq, b.JSeq) })
	return m
}

// holds reports whether the page holds an intact copy of r at r's version.
func (p *stateJournalPage) holds(r *stateRecord) bool {
	i, ok := slices.BinarySearchFunc(p.records, r.JSeq, func(e stateRecord, jseq uint64) int { return cmp.Compare(e.JSeq, jseq) })
	return ok && p.records[i].sameAs(r)
}

// covers reports whether the page's range includes jseq.
func (p *stateJournalPage) covers(jseq uint64) bool { return !p.more || jseq <= p.through }

// lacking returns the merged records the page covers and does not hold at their
// version (absent, older, or corrupt there), and the merged floor if the page's is
// lower.
func (m *stateJournalMerge) lacking(p *stateJournalPage) []stateRecord {
	var out []stateRecord
	for i := range m.records {
		r := &m.records[i]
		if p.covers(r.JSeq) && !p.holds(r) {
			out = append(out, *r)
		}
	}
	if m.floor != nil && (p.floor == nil || p.floor.Floor < m.floor.Floor) {
		out = append(out, *m.floor)
	}
	if m.gone != nil && (p.gone == nil || p.gone.version().less(m.gone.version())) {
		out = append(out, *m.gone)
	}
	return out
}

// cloneRecords copies records and their data, for a write that may outlive the
// caller's use of them.
func cloneRecords(recs []stateRecord) []stateRecord {
	out := slices.Clone(recs)
	for i := range out {
		out[i].Data = bytes.Clone(out[i].Data)
	}
	return out
}

// maxEpoch is the newest epoch of the records: an unfenced write raises the shard's
// epoch on its replicas to it.
func maxEpoch(recs []stateRecord) uint64 {
	var e uint64
	for i := range recs {
		e = max(e, recs[i].Epoch)
	}
	return e
}

// journalFrom reads a page of key's journal from one replica: the local disk, or a
// peer, whose answer is checked (the order and range of its records, their sizes) and
// whose records are verified again: a copy that fails counts as corrupt.
func (s *Store) journalFrom(ctx context.Context, r stateReplica, key sharding.EntityKey, from uint64, limit int) stateJournalAnswer {
	a := stateJournalAnswer{rep: r}
	if r.local {
		a.page, a.err = s.disk.journalPage(key, from, limit, s.cfg.ChunkSize)
		return a
	}
	var reply stateJournalReply
	if a.err = s.call(ctx, r, topicStateJournal, &stateJournalReq{Type: key.Type, Shard: key.Shard, ID: key.ID, From: from, Limit: limit}, &reply); a.err != nil {
		return a
	}
	bad := func(what string, args ...any) stateJournalAnswer {
		a.err = fmt.Errorf("%w: replica %s: bad journal page: %s", sharding.ErrStoreUnavailable, r.addr, fmt.Sprintf(what, args...))
		return a
	}
	p := stateJournalPage{floor: reply.Floor, gone: reply.Gone, more: reply.More, through: reply.Through, shard: reply.Shard}
	if p.floor != nil && (p.floor.Kind != stateKindFloor || p.floor.ID != key.ID || p.floor.Floor == 0) {
		return bad("floor %+v", *p.floor)
	}
	if p.gone != nil && (p.gone.Kind != stateKindGone || p.gone.ID != key.ID || len(p.gone.Data) > 0) {
		return bad("tombstone %+v", *p.gone)
	}
	if p.more && p.through < from {
		return bad("more after %d, from %d", p.through, from)
	}
	// Records and corrupt copies each ascend from from, within the page's range.
	check := func(recs []stateRecord) error {
		for i := range recs {
			rec := &recs[i]
			if rec.Kind != stateKindJournal || rec.ID != key.ID || rec.JSeq < from || !p.covers(rec.JSeq) ||
				(i > 0 && rec.JSeq <= recs[i-1].JSeq) || len(rec.Data) > s.cfg.MaxStateSize {
				return fmt.Errorf("record #%d of kind %d, %d bytes", rec.JSeq, rec.Kind, len(rec.Data))
			}
		}
		return nil
	}
	if err := errors.Join(check(reply.Records), check(reply.Corrupt)); err != nil {
		return bad("%v", err)
	}
	p.corrupt = reply.Corrupt
	for _, rec := range reply.Records {
		if verifyStateJournal(key.Type, key.Shard, &rec) != nil {
			rec.Data = nil
			p.corrupt = append(p.corrupt, rec)
			continue
		}
		p.records = append(p.records, rec)
	}
	a.page = p
	return a
}
