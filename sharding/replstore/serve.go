// The Store's side of a replica: the handlers of the "state/..." topics
// (wire.go), which serve peers' writes, chunks, reads, listings, summaries
// and diffs from the disk, and the staging of snapshots that arrive in chunks.

package replstore

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

// stateServe serves one request from a peer and returns the reply body. It runs on a
// goroutine of its own (not the transport's) and may use the disk.
type stateServe func(from string, body []byte) []byte

// handler adapts a stateServe to the messenger: at most stateMaxServing requests are
// served at once (more are answered busy), each on a goroutine the store owns; a panic
// becomes a failure reply.
func (s *Store) handler(serve stateServe) cluster.Handler {
	return func(r *cluster.Request) {
		if r.OneWay() {
			s.log.Debug("one-way message on a state store topic; dropped", "topic", r.Topic, "from", r.From)
			return
		}
		select {
		case s.serving <- struct{}{}:
		default:
			r.Reply(stateFail(fmt.Errorf("%w: %d requests in progress", errStateBusy, stateMaxServing)), nil)
			return
		}
		if !s.owner.Go(func() {
			defer func() { <-s.serving }()
			defer func() {
				if v := recover(); v != nil {
					s.log.Error("state store handler panicked", "topic", r.Topic, "from", r.From, "panic", v)
					r.Reply(stateFail(fmt.Errorf("%w: handler failed", sharding.ErrStoreUnavailable)), nil)
				}
			}()
			if s.disk != nil {
				if err := s.disk.noteInCluster(); err != nil {
					r.Reply(stateFail(err), nil)
					return
				}
			}
			r.Reply(serve(r.From, r.Body), nil)
		}) {
			<-s.serving
			r.Reply(stateFail(closedError()), nil)
		}
	}
}

// checkWrite validates a write request from a peer.
func (s *Store) checkWrite(req *stateWriteReq) error {
	if err := sharding.CheckStateKey(req.Type, req.Shard, "", false); err != nil {
		return err
	}
	if len(req.Records) == 0 && !req.Fence {
		return fmt.Errorf("%w: unfenced write without records", sharding.ErrMalformedMessage)
	}
	for i := range req.Records {
		r := &req.Records[i]
		if err := sharding.CheckStateKey(req.Type, req.Shard, r.ID, true); err != nil {
			return err
		}
		if r.Kind != stateKindJournal && r.JSeq != 0 || r.Kind != stateKindFloor && r.Floor != 0 {
			return fmt.Errorf("%w: record %q of kind %d with a journal sequence number or floor", sharding.ErrMalformedMessage, r.ID, r.Kind)
		}
		switch r.Kind {
		case stateKindJournal:
			if r.JSeq == 0 || r.Remember || r.Xfer != 0 {
				return fmt.Errorf("%w: journal record %q #%d", sharding.ErrMalformedMessage, r.ID, r.JSeq)
			}
			if len(r.Data) > s.journalRecordCap() {
				return fmt.Errorf("%w: journal record of %d bytes, the cap is %d", sharding.ErrStateTooLarge, len(r.Data), s.journalRecordCap())
			}
			// Its checksum is checked by the disk's write (stateDisk.applyWrite).
		case stateKindFloor:
			if r.Floor == 0 || r.Remember || len(r.Data) > 0 || r.Xfer != 0 {
				return fmt.Errorf("%w: journal floor %q of %d", sharding.ErrMalformedMessage, r.ID, r.Floor)
			}
		case stateKindSnapshot:
			if len(r.Data) > s.cfg.MaxStateSize {
				return fmt.Errorf("%w: %d bytes, the cap is %d", sharding.ErrStateTooLarge, len(r.Data), s.cfg.MaxStateSize)
			}
			if r.Xfer != 0 && len(r.Data) > 0 {
				return fmt.Errorf("%w: record %q has data and a transfer", sharding.ErrMalformedMessage, r.ID)
			}
		case stateKindRemember:
			if len(r.Data) > 0 || r.Xfer != 0 {
				return fmt.Errorf("%w: remember record %q with data", sharding.ErrMalformedMessage, r.ID)
			}
		case stateKindGone:
			if len(r.Data) > 0 || r.Xfer != 0 || r.Remember {
				return fmt.Errorf("%w: tombstone %q with data", sharding.ErrMalformedMessage, r.ID)
			}
		default:
			return fmt.Errorf("%w: record kind %d", sharding.ErrMalformedMessage, r.Kind)
		}
	}
	return nil
}

func (s *Store) serveWrite(from string, body []byte) []byte {
	var req stateWriteReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := s.checkWrite(&req); err != nil {
		return stateFail(err)
	}
	for i := range req.Records {
		if rec := &req.Records[i]; rec.Xfer != 0 {
			data, err := s.takeStaged(from, rec.Xfer)
			if err != nil {
				return stateFail(err)
			}
			rec.Data, rec.Xfer = data, 0
		}
	}
	epoch, err := s.disk.applyWrite(&req)
	if err != nil {
		return s.encodeReply(&stateReply{Code: stateErrorCode(err), Msg: err.Error(), Epoch: epoch})
	}
	return s.encodeReply(&stateReply{Epoch: epoch})
}

func (s *Store) serveWrites(from string, body []byte) []byte {
	var req stateWritesReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	out := make(chan []byte, 1)
	s.serveWritesAsync(&req, func(b []byte) { out <- b })
	return <-out
}

// writesHandler serves state/writes requests without a goroutine of their own: on
// the transport's reader goroutine, it decodes a request, checks its writes and queues
// them to the disk's writer, whose commit calls back; the last write's callback
// replies. A request comes to the goroutine of handler (as other topics do) before
// this member's file is noted in a cluster (noteInCluster writes). At most
// stateMaxServing requests are served at once, with those of handler.
func (s *Store) writesHandler() cluster.Handler {
	slow := s.handler(s.serveWrites)
	return func(r *cluster.Request) {
		if r.OneWay() || s.disk == nil || !s.disk.inCluster.Load() {
			slow(r)
			return
		}
		select {
		case s.serving <- struct{}{}:
		default:
			r.Reply(stateFail(fmt.Errorf("%w: %d requests in progress", errStateBusy, stateMaxServing)), nil)
			return
		}
		reply := func(b []byte) {
			<-s.serving
			r.Reply(b, nil)
		}
		var req stateWritesReq
		if err := decodeState(r.Body, &req); err != nil {
			reply(stateFail(err))
			return
		}
		s.serveWritesAsync(&req, reply)
	}
}

// serveWritesAsync serves a state/writes request: each write is checked and queued to
// the disk's writer (they share its transaction and fsync), and reply gets the encoded
// stateWritesReply once every one is on disk or refused, from the goroutine of the
// last (the writer's, the caller's, or one that queues the writes for which the
// writer's queue had no room). reply must not block.
func (s *Store) serveWritesAsync(req *stateWritesReq, reply func([]byte)) {
	if len(req.Writes) == 0 {
		reply(stateFail(fmt.Errorf("%w: no writes", sharding.ErrMalformedMessage)))
		return
	}
	results := make([]stateReply, len(req.Writes))
	var left atomic.Int64
	left.Store(int64(len(req.Writes)) + 1) // and the queueing's own
	finish := func() {
		if left.Add(-1) == 0 {
			reply(s.encodeReply(&stateWritesReply{Results: results}))
		}
	}
	outcome := func(i int) func(uint64, error) {
		return func(epoch uint64, err error) {
			results[i] = stateReply{Epoch: epoch}
			if err != nil {
				results[i].Code, results[i].Msg = stateErrorCode(err), err.Error()
			}
			finish()
		}
	}
	var later []int // those for which the writer's queue had no room, and after
	for i := range req.Writes {
		w := &req.Writes[i]
		err := s.checkWrite(w)
		if err == nil && slices.ContainsFunc(w.Records, func(r stateRecord) bool { return r.Xfer != 0 }) {
			err = fmt.Errorf("%w: chunked data in a coalesced write", sharding.ErrMalformedMessage)
		}
		switch {
		case err != nil:
			outcome(i)(0, err)
		case len(later) > 0 || !s.disk.tryWrite(w, outcome(i)):
			later = append(later, i)
		}
	}
	if len(later) > 0 && !s.owner.Go(func() {
		// Submitted one after the other, then awaited: they share a transaction.
		started := make([]*stateWrite, len(later))
		for k, i := range later {
			started[k] = s.disk.startWrite(&req.Writes[i])
		}
		for k, i := range later {
			outcome(i)(started[k].wait())
		}
	}) {
		for _, i := range later {
			outcome(i)(0, closedError())
		}
	}
	finish()
}

func (s *Store) serveDeleteType(from string, body []byte) []byte {
	var req stateDeleteTypeReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := s.ForgetType(req.Type, req.At); err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateReply{})
}

func (s *Store) serveChunk(from string, body []byte) []byte {
	var req stateChunkReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	switch {
	case req.Xfer == 0 || req.Offset < 0 || req.Total <= 0 || len(req.Data) == 0:
		return stateFail(fmt.Errorf("%w: chunk of transfer %x: offset %d, %d of %d bytes", sharding.ErrMalformedMessage, req.Xfer, req.Offset, len(req.Data), req.Total))
	case req.Total > s.cfg.MaxStateSize:
		return stateFail(fmt.Errorf("%w: %d bytes, the cap is %d", sharding.ErrStateTooLarge, req.Total, s.cfg.MaxStateSize))
	case req.Offset > req.Total-len(req.Data):
		return stateFail(fmt.Errorf("%w: chunk of transfer %x past its end", sharding.ErrMalformedMessage, req.Xfer))
	}
	if err := s.stage(from, &req); err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateReply{})
}

func (s *Store) serveRead(from string, body []byte) []byte {
	var req stateReadReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := sharding.CheckStateKey(req.Type, req.Shard, req.ID, true); err != nil {
		return stateFail(err)
	}
	if req.Offset < 0 {
		return stateFail(fmt.Errorf("%w: read at offset %d", sharding.ErrMalformedMessage, req.Offset))
	}
	ver, size, data, found, shardEpoch, gone, err := s.disk.readGone(stateShardPrefix(req.Type, req.Shard), req.ID, req.Offset, s.cfg.ChunkSize)
	switch {
	case err != nil:
		return stateFail(err)
	case req.Offset > 0 && (!found || ver != stateVersion{req.Epoch, req.Seq}):
		return stateFail(errStateChanged)
	case found && req.Offset > size:
		return stateFail(fmt.Errorf("%w: read at offset %d of %d bytes", sharding.ErrMalformedMessage, req.Offset, size))
	}
	return s.encodeReply(&stateReadReply{Found: found, Epoch: ver.Epoch, Seq: ver.Seq, Size: size, Data: data, Shard: shardEpoch,
		GoneEpoch: gone.Epoch, GoneSeq: gone.Seq})
}

func (s *Store) serveRemembered(from string, body []byte) []byte {
	var req stateRememberedReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := sharding.CheckStateKey(req.Type, req.Shard, req.After, false); err != nil {
		return stateFail(err)
	}
	if len(req.Prefix) > sharding.MaxStateIDLen {
		return stateFail(fmt.Errorf("%w: entity ID prefix of %d bytes", sharding.ErrInvalidStateKey, len(req.Prefix)))
	}
	if req.Due {
		if req.Limit < 1 || req.Limit > stateMaxListLen {
			return stateFail(fmt.Errorf("%w: due page with limit %d", sharding.ErrMalformedMessage, req.Limit))
		}
		entries, next, epoch, err := s.disk.duePage(stateShardPrefix(req.Type, req.Shard), req.Before, req.Limit)
		if err != nil {
			return stateFail(err)
		}
		return s.encodeReply(&stateRememberedReply{Due: entries, Next: next, Shard: epoch})
	}
	page := s.disk.rememberedPage
	if req.Entities {
		page = func(prefix []byte, after string, budget, limit int) ([]stateRecord, bool, error) {
			return s.disk.entitiesPage(prefix, after, req.Prefix, budget, limit)
		}
	}
	recs, more, err := page(stateShardPrefix(req.Type, req.Shard), req.After, s.cfg.ChunkSize, stateMaxPageRecords)
	if err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateRememberedReply{Records: recs, More: more})
}

func (s *Store) serveJournal(from string, body []byte) []byte {
	var req stateJournalReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := sharding.CheckStateKey(req.Type, req.Shard, req.ID, true); err != nil {
		return stateFail(err)
	}
	if req.Limit < 0 {
		return stateFail(fmt.Errorf("%w: journal read with limit %d", sharding.ErrMalformedMessage, req.Limit))
	}
	p, err := s.disk.journalPage(sharding.EntityKey{Type: req.Type, Shard: req.Shard, ID: req.ID}, req.From, req.Limit, s.cfg.ChunkSize)
	if err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateJournalReply{Records: p.records, Corrupt: p.corrupt, Floor: p.floor, Gone: p.gone, More: p.more, Through: p.through, Shard: p.shard})
}

func (s *Store) serveSummary(from string, body []byte) []byte {
	var req stateSummaryReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := sharding.CheckStateKey(req.Type, req.Shard, "", false); err != nil {
		return stateFail(err)
	}
	if req.Count < 0 || len(req.Hash) != sha256.Size {
		return stateFail(fmt.Errorf("%w: summary of %d records with a %d-byte hash", sharding.ErrMalformedMessage, req.Count, len(req.Hash)))
	}
	prefix := stateShardPrefix(req.Type, req.Shard)
	if _, err := s.disk.raiseEpoch(prefix, req.Epoch); err != nil {
		return stateFail(err)
	}
	sum, err := s.disk.summary(prefix, false)
	if err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateSummaryReply{Epoch: sum.epoch, Same: sum.count == req.Count && bytes.Equal(sum.hash, req.Hash)})
}

func (s *Store) serveDiff(from string, body []byte) []byte {
	var req stateDiffReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := sharding.CheckStateKey(req.Type, req.Shard, "", false); err != nil {
		return stateFail(err)
	}
	for i := range req.Records {
		r := &req.Records[i]
		if err := sharding.CheckStateKey(req.Type, req.Shard, r.ID, true); err != nil {
			return stateFail(err)
		}
		if r.Kind < stateKindSnapshot || r.Kind > stateKindGone || len(r.Data) > 0 || r.Xfer != 0 ||
			(r.Kind == stateKindJournal) != (r.JSeq != 0) || (r.Kind == stateKindFloor) != (r.Floor != 0) {
			return stateFail(fmt.Errorf("%w: diff entry %q of kind %d", sharding.ErrMalformedMessage, r.ID, r.Kind))
		}
	}
	need, err := s.disk.needs(req.Type, req.Shard, req.Records)
	if err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateDiffReply{Need: need})
}

// stateStagingKey names a chunked transfer: its sender's transport address and ID.
type stateStagingKey struct {
	from string
	xfer uint64
}

// stateStaged is a snapshot arriving in chunks.
type stateStaged struct {
	buf     []byte
	total   int
	touched time.Time
}

// stagingLimit caps the bytes staged at once: two maximal snapshots.
func (s *Store) stagingLimit() int {
	return min(s.cfg.MaxStateSize, int(^uint(0)>>2)) * 2
}

// stagingTTL is how long a transfer may wait for its next chunk or its write.
func (s *Store) stagingTTL() time.Duration { return 4 * s.cfg.RequestTimeout }

// stage appends a chunk to its transfer, starting it at offset 0. Errors: a chunk out
// of order or a total that changed (the transfer is dropped), staging full (busy).
func (s *Store) stage(from string, req *stateChunkReq) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner.Closed() {
		return closedError()
	}
	now := s.now()
	s.sweepStagingLocked(now)
	k := stateStagingKey{from, req.Xfer}
	t := s.staging[k]
	if t == nil {
		if req.Offset != 0 {
			return fmt.Errorf("%w: chunk at %d of transfer %x, which has not started", sharding.ErrMalformedMessage, req.Offset, req.Xfer)
		}
		if s.staged+req.Total > s.stagingLimit() {
			return fmt.Errorf("%w: %d bytes staged, no room for %d more", errStateBusy, s.staged, req.Total)
		}
		t = &stateStaged{buf: make([]byte, 0, req.Total), total: req.Total}
		s.staging[k] = t
		s.staged += req.Total
	}
	if req.Total != t.total || req.Offset != len(t.buf) {
		s.dropStagedLocked(k, t)
		return fmt.Errorf("%w: chunk at %d of %d bytes, transfer %x has %d of %d", sharding.ErrMalformedMessage, req.Offset, req.Total, req.Xfer, len(t.buf), t.total)
	}
	t.buf = append(t.buf, req.Data...)
	t.touched = now
	return nil
}

// takeStaged returns a complete transfer's bytes and forgets it.
func (s *Store) takeStaged(from string, xfer uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := stateStagingKey{from, xfer}
	t := s.staging[k]
	if t == nil || len(t.buf) != t.total {
		if t != nil {
			s.dropStagedLocked(k, t)
		}
		return nil, fmt.Errorf("%w: transfer %x unknown, expired or incomplete", sharding.ErrMalformedMessage, xfer)
	}
	s.dropStagedLocked(k, t)
	return t.buf, nil
}

func (s *Store) dropStagedLocked(k stateStagingKey, t *stateStaged) {
	delete(s.staging, k)
	s.staged -= t.total
}

func (s *Store) sweepStagingLocked(now time.Time) {
	for k, t := range s.staging {
		if now.Sub(t.touched) > s.stagingTTL() {
			s.dropStagedLocked(k, t)
		}
	}
}
