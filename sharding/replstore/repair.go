// The Store's repairs: read repair (a read that found replicas behind
// sends them the newest version, best effort, through a bounded queue) and
// anti-entropy (a pass over the shards this member stores, every RepairInterval and on
// membership changes, that brings their current replicas up to what it holds).

package replstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

// finishLoad waits for the replicas that had not answered when Load returned (each
// answers or fails within RequestTimeout), then queues a read repair for those that
// hold an older snapshot or none.
func (s *Store) finishLoad(key sharding.EntityKey, answers []stateReadAnswer, pending int, results <-chan stateReadAnswer) {
	for ; pending > 0; pending-- {
		answers = append(answers, <-results)
	}
	best := newestAnswer(answers)
	if best == nil {
		return
	}
	var stale []stateReplica
	for _, a := range answers {
		if a.err == nil && (!a.found || a.ver.less(best.ver)) {
			stale = append(stale, a.rep)
		}
	}
	if len(stale) > 0 {
		s.queueRepair(stateRepairJob{typ: key.Type, shard: key.Shard, targets: stale,
			pull: &statePull{id: key.ID, from: best.rep, ver: best.ver}})
	}
}

// finishRemembered waits for the late replicas, then queues, for each replica that
// answered, the marks it lacks or holds older.
func (s *Store) finishRemembered(typ string, shard int, answers []stateRememberedAnswer, pending int, results <-chan stateRememberedAnswer) {
	for ; pending > 0; pending-- {
		answers = append(answers, <-results)
	}
	merged := mergeRemembered(answers)
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		have := make(map[string]stateVersion, len(a.records))
		for _, r := range a.records {
			have[r.ID] = r.version()
		}
		var missing []stateRecord
		for id, r := range merged {
			if v, ok := have[id]; !ok || v.less(r.version()) {
				missing = append(missing, r)
			}
		}
		for len(missing) > 0 {
			n := min(len(missing), stateMaxWriteRecords)
			s.queueRepair(stateRepairJob{typ: typ, shard: shard, targets: []stateReplica{a.rep}, records: missing[:n]})
			missing = missing[n:]
		}
	}
}

// Repair runs one anti-entropy pass now (see Store) and returns when it is done: nil if
// every stored shard was in sync with, or sent to, every current replica; else an error
// wrapping sharding.ErrStoreUnavailable that counts the shards left out of sync (a
// later pass retries them). Passes do not overlap.
func (s *Store) Repair(ctx context.Context) error {
	if !s.owner.Enter() {
		return closedError()
	}
	defer s.owner.Leave()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.owner.Context(), cancel)()
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	return s.repairPass(ctx)
}

// ReadRepairsDropped returns how many read repairs did not fit in their queue since the
// store opened (a bounded queue drops rather than blocks a read). Each anti-entropy pass
// makes up for them and logs how many it follows, at warn level.
func (s *Store) ReadRepairsDropped() uint64 { return s.readRepairsDropped.Load() }

// statePull names a snapshot version to read from a replica for a read repair.
type statePull struct {
	id   string
	from stateReplica
	ver  stateVersion
}

// stateRepairJob is a read repair: records to write to targets, or (pull) a snapshot to
// read from a replica and write to targets.
type stateRepairJob struct {
	typ     string
	shard   int
	targets []stateReplica
	records []stateRecord
	pull    *statePull
}

// queueRepair queues a read repair, or drops it (counted) if the queue is full.
func (s *Store) queueRepair(job stateRepairJob) {
	select {
	case s.readRepairs <- job:
	default:
		s.readRepairsDropped.Add(1)
	}
}

func (s *Store) readRepairLoop() {
	for {
		select {
		case <-s.owner.Done():
			return
		case job := <-s.readRepairs:
			s.runRepair(job)
		}
	}
}

// runRepair writes a read repair's records (unfenced: versions decide) to its targets.
func (s *Store) runRepair(job stateRepairJob) {
	recs := job.records
	if job.pull != nil {
		key := sharding.EntityKey{Type: job.typ, Shard: job.shard, ID: job.pull.id}
		a := s.readFrom(s.owner.Context(), job.pull.from, key)
		if a.err != nil || !a.found || a.ver.less(job.pull.ver) {
			s.log.Debug("read repair: source no longer has the snapshot", "key", key, "err", a.err)
			return
		}
		data, err := s.fetchRest(s.owner.Context(), key, &a)
		if err != nil {
			s.log.Debug("read repair: reading the snapshot failed", "key", key, "err", err)
			return
		}
		recs = []stateRecord{{Kind: stateKindSnapshot, ID: key.ID, Epoch: a.ver.Epoch, Seq: a.ver.Seq, Data: data}}
	}
	var epoch uint64
	for _, r := range recs {
		epoch = max(epoch, r.Epoch)
	}
	req := &stateWriteReq{Type: job.typ, Shard: job.shard, Epoch: epoch, Records: recs}
	for _, t := range job.targets {
		if err := s.writeTo(s.owner.Context(), t, req); err != nil {
			s.log.Debug("read repair failed", "type", job.typ, "shard", job.shard, "replica", t.addr, "err", err)
		}
	}
}

// stateRepairEvent reports whether a membership event changes replica sets.
func stateRepairEvent(k cluster.EventKind) bool {
	switch k {
	case cluster.MemberUp, cluster.MemberLeft, cluster.MemberExited, cluster.MemberDowned, cluster.MemberRemoved:
		return true
	}
	return false
}

// repairLoop runs a repair pass every RepairInterval and after membership changes
// (a burst of events makes one pass).
func (s *Store) repairLoop() {
	t := time.NewTicker(s.cfg.RepairInterval)
	defer t.Stop()
	var dropped uint64 // read repairs dropped before the last pass
	// retry fires while the ring changes and its handover round can succeed: a pass and
	// a round again after RequestTimeout rather than RepairInterval.
	var retry <-chan time.Time
	for {
		select {
		case <-s.owner.Done():
			return
		case <-t.C:
		case <-retry:
		case <-s.kick:
		case e := <-s.sub.C:
			s.noteOthers()
			if !stateRepairEvent(e.Kind) {
				continue
			}
		drain:
			for {
				select {
				case <-s.sub.C:
				default:
					break drain
				}
			}
		}
		s.noteOthers()
		if n := s.ReadRepairsDropped(); n > dropped {
			s.log.Warn("read repairs dropped, the queue being full; this repair pass makes up for them",
				"dropped", n-dropped, "queue", stateRepairQueue)
			dropped = n
		}
		s.repairMu.Lock()
		err := s.repairPass(s.owner.Context())
		s.repairMu.Unlock()
		if err != nil && s.owner.Context().Err() == nil {
			s.log.Debug("state repair pass incomplete", "err", err)
		}
		if err == nil || s.verifyPending() {
			if _, err := s.handoverRound(s.owner.Context()); err != nil && s.owner.Context().Err() == nil {
				s.log.Debug("state store handover round incomplete", "err", err)
			}
		}
		retry = nil
		if s.ringChanging() {
			retry = time.After(s.cfg.RequestTimeout)
		}
	}
}

// stateRepairPass remembers, for one pass, the replicas that failed: the pass skips
// them for its other shards.
type stateRepairPass struct {
	mu     sync.Mutex
	failed map[string]bool
}

func (p *stateRepairPass) fail(addr string) {
	p.mu.Lock()
	p.failed[addr] = true
	p.mu.Unlock()
}

func (p *stateRepairPass) hasFailed(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[addr]
}

// repairPass syncs every shard this member stores with the shard's current replicas,
// a few shards at a time. The caller holds repairMu.
func (s *Store) repairPass(ctx context.Context) error {
	live := s.ringView().liveKey()
	shards, err := s.disk.shards()
	if err != nil {
		return err
	}
	pass := &stateRepairPass{failed: map[string]bool{}}
	sem := make(chan struct{}, stateRepairParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	unsynced := 0
	var firstErr error
	for _, sh := range shards {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.repairShard(ctx, sh, pass); err != nil {
				mu.Lock()
				unsynced++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	if !s.owner.Closed() {
		s.sweepStagingLocked(s.now())
	}
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: repair pass: %w", sharding.ErrStoreUnavailable, err)
	}
	if unsynced > 0 {
		return fmt.Errorf("%w: repair pass: %d of %d shards not in sync with all their replicas: %w",
			sharding.ErrStoreUnavailable, unsynced, len(shards), firstErr)
	}
	if s.ringView().liveKey() == live {
		s.markSynced(live)
	}
	return nil
}

// stateShardRef names a shard this member stores.
type stateShardRef struct {
	typ   string
	shard int
}

// repairShard syncs one shard with its current replicas, and drops it here if this
// member is not one of them and all of them acknowledged holding what it had.
func (s *Store) repairShard(ctx context.Context, sh stateShardRef, pass *stateRepairPass) error {
	v := s.ringView()
	reps, err := s.replicaSetIn(v, sh.typ, sh.shard)
	if err != nil {
		return err
	}
	prefix := stateShardPrefix(sh.typ, sh.shard)
	// The versions are listed now when this member may drop its copy after the sync
	// (those acknowledged are the ones it drops), else only for a replica whose digest
	// differs (syncShard): journals make shards of many records, in sync most passes.
	local := slices.ContainsFunc(reps.reps, func(r stateReplica) bool { return r.local })
	sum, err := s.disk.summary(prefix, !local)
	if err != nil {
		return err
	}
	isReplica, synced := false, 0
	var errs []error
	for _, r := range reps.reps {
		switch {
		case r.local:
			isReplica = true
		case r.retained:
			// Gone: nothing to send it. Its shards are handed over by the handover
			// round (ring.go), or it returns with its data.
		case !r.reachable:
			errs = append(errs, fmt.Errorf("%w: replica %s is unreachable", sharding.ErrStoreUnavailable, r.addr))
		case pass.hasFailed(r.addr):
			errs = append(errs, fmt.Errorf("%w: replica %s failed earlier in this pass", sharding.ErrStoreUnavailable, r.addr))
		default:
			if err := s.syncShard(ctx, r, sh, prefix, &sum); err != nil {
				pass.fail(r.addr)
				errs = append(errs, err)
				continue
			}
			synced++
		}
	}
	if isReplica || len(errs) > 0 {
		if len(errs) > 0 {
			return fmt.Errorf("shard %s/%d: %w", sh.typ, sh.shard, errors.Join(errs...))
		}
		return nil
	}
	if !v.mayDropReplicas() {
		return nil // kept until the ring has settled (mayDropReplicas)
	}
	n, err := s.disk.dropSynced(prefix, sum.entries)
	if err != nil {
		return err
	}
	s.log.Info("dropped the replica of a shard this member no longer replicates", "type", sh.typ, "shard", sh.shard,
		"records", n, "replicas", synced)
	return nil
}

// syncShard brings one replica up to what this member holds of a shard: a summary
// exchange (which also carries the shard's epoch both ways), then, unless the replica
// holds exactly the same versions, pages of versions and the records it needs.
func (s *Store) syncShard(ctx context.Context, r stateReplica, sh stateShardRef, prefix []byte, sum *stateSummary) error {
	var sr stateSummaryReply
	req := &stateSummaryReq{Type: sh.typ, Shard: sh.shard, Epoch: sum.epoch, Count: sum.count, Hash: sum.hash}
	if err := s.call(ctx, r, topicStateSummary, req, &sr); err != nil {
		return err
	}
	if sr.Epoch > sum.epoch {
		epoch, err := s.disk.raiseEpoch(prefix, sr.Epoch)
		if err != nil {
			return err
		}
		sum.epoch = epoch
	}
	if sr.Same {
		return nil
	}
	if sum.entries == nil {
		listed, err := s.disk.summary(prefix, true)
		if err != nil {
			return err
		}
		sum.entries = listed.entries
	}
	entries := sum.entries
	for len(entries) > 0 {
		n, size := 0, 0
		for n < len(entries) && n < stateMaxPageRecords && (n == 0 || size+entries[n].listedSize() <= s.cfg.ChunkSize) {
			size += entries[n].listedSize()
			n++
		}
		page := entries[:n]
		entries = entries[n:]
		var dr stateDiffReply
		if err := s.call(ctx, r, topicStateDiff, &stateDiffReq{Type: sh.typ, Shard: sh.shard, Records: page}, &dr); err != nil {
			return err
		}
		for i, idx := range dr.Need {
			if idx < 0 || idx >= len(page) || (i > 0 && idx <= dr.Need[i-1]) {
				return fmt.Errorf("%w: replica %s: bad diff reply", sharding.ErrStoreUnavailable, r.addr)
			}
		}
		if err := s.pushRecords(ctx, r, sh, prefix, sum.epoch, page, dr.Need); err != nil {
			return err
		}
	}
	return nil
}

// pushRecords sends a replica the records it needs, as they are on disk now, in writes
// of at most ChunkSize bytes (a larger snapshot alone, in chunks).
func (s *Store) pushRecords(ctx context.Context, r stateReplica, sh stateShardRef, prefix []byte, epoch uint64, page []stateRecord, need []int) error {
	var batch []stateRecord
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		e := epoch
		for _, rec := range batch {
			e = max(e, rec.Epoch)
		}
		err := s.writeTo(ctx, r, &stateWriteReq{Type: sh.typ, Shard: sh.shard, Epoch: e, Records: batch})
		batch, size = nil, 0
		return err
	}
	for _, i := range need {
		rec, found, err := s.disk.recordOf(prefix, &page[i])
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		if rec.Kind == stateKindJournal && verifyStateJournal(sh.typ, sh.shard, &rec) != nil {
			// A corrupt copy is never sent (the replica would refuse the whole write); a
			// read of the journal repairs it from another replica.
			s.log.Warn("state store: a journal record on this member's disk fails its checksum; not sent to a replica",
				"type", sh.typ, "shard", sh.shard, "id", rec.ID, "seq", rec.JSeq)
			continue
		}
		sz := len(rec.ID) + len(rec.Data) + 64
		if len(batch) > 0 && (size+sz > s.cfg.ChunkSize || len(batch) >= stateMaxWriteRecords) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, rec)
		size += sz
	}
	return flush()
}

// noteOthers records on disk, once, that the state file takes part in a cluster when
// the membership lists another member (stateDisk.noteInCluster): a member that joined
// others, even one downed before it was up or asked anything, does not found a cluster
// of its own from this directory later (fault seed 82074). A failed write is logged
// and tried again at the next event or pass.
func (s *Store) noteOthers() {
	if s.disk == nil || s.disk.inCluster.Load() {
		return
	}
	self := s.cfg.Membership.Self().Address
	for _, m := range s.cfg.Membership.Members() {
		if m.Address != self {
			if err := s.disk.noteInCluster(); err != nil {
				s.log.Warn("state store: noting the data directory in a cluster failed", "err", err)
			}
			return
		}
	}
}
