package replstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/internal/quorum"
	"github.com/shardhost/shardhost/sharding"
)

// Errors of the replicated state store, beside those of sharding.StateStore.
var (
	// ErrMemberNotGone: Store.ForgetMember of a member that is this one or is up,
	// joining or leaving.
	ErrMemberNotGone = errors.New("replstore: the member is not gone")
	// errStateChanged: a chunked read found a newer version of the snapshot; Load reads
	// again.
	errStateChanged = errors.New("replstore: snapshot changed during a chunked read")
	// errStateClosed: the store (or its disk) is closed.
	errStateClosed = errors.New("replstore: state store closed")
	// errStateBusy: a replica refused a request because it serves too many.
	errStateBusy = errors.New("replstore: state replica busy")
)

// FileName is the name of a Store's database file in its Dir.
const FileName = "state.db"

// Config configures a Store.
type Config struct {
	// Membership lists the members that hold replicas (those up or leaving) and reports
	// their changes, each of which starts a repair pass. Required.
	Membership sharding.Membership
	// Messenger carries the store's requests, under the topics "state/..."
	// (wire.go); New registers their handlers, so one
	// store per messenger. Required.
	Messenger sharding.Messenger
	// Dir is the directory of this member's replica data, one bbolt file FileName
	// ("state.db"); created with mode 0o700 if absent. One store per directory: a second
	// one fails to open within 1 s. Required.
	Dir string
	// Replicas is K: how many members hold each shard's data, the first K members of
	// the shard's priority order (sharding.PriorityAllocationStrategy over member
	// addresses, Type set to the entity type). Writes and reads wait for a majority,
	// K/2+1. With fewer than K members up, every member up is a replica. Default 3;
	// more costs a write per extra replica, fewer loses data when fewer members fail.
	Replicas int
	// RequestTimeout bounds each request to one replica (a chunk of a large snapshot is
	// one request). A Save, Load or Remembered waits at most this long for a majority
	// unless its context ends first. Default 3 s: long enough for an fsync on a busy
	// disk; shorter fails over faster from a crashed replica.
	RequestTimeout time.Duration
	// RepairInterval is the time between anti-entropy passes, in which this member
	// sends each shard it stores to the shard's current replicas that lack some of it,
	// and drops shards it no longer replicates once they hold them. Membership changes
	// (members up, leaving, exiting, down, removed) also start a pass. Default 10 s.
	// Each pass reads every stored record's version: shorter re-replicates sooner after
	// a missed write, at that cost.
	RepairInterval time.Duration
	// MaxStateSize caps one snapshot, in bytes; larger ones are refused with
	// sharding.ErrStateTooLarge, here and by replicas. Default 64 MiB (the default
	// guest memory limit).
	MaxStateSize int
	// ChunkSize caps the snapshot bytes one message carries, in bytes: larger snapshots
	// travel in chunks, each a request of its own. Keep it well under the transport's
	// MaxFrameSize (8 MiB by default) minus the headers and IDs of a message. Default
	// 4 MiB.
	ChunkSize int
	// Logger receives the store's logs. Nil: slog.Default().
	Logger *slog.Logger
	// Now is the source of the writer's hybrid clock (the seq of a record's version);
	// nil is time.Now. Tests move it to skew one member's clock.
	Now func() time.Time
}

// DefaultConfig returns the defaults: 3 replicas, 3 s per request,
// repair every 10 s, snapshots up to 64 MiB in 4 MiB chunks. Membership, Messenger and
// Dir are to be set.
func DefaultConfig() Config {
	return Config{
		Replicas:       3,
		RequestTimeout: 3 * time.Second,
		RepairInterval: 10 * time.Second,
		MaxStateSize:   64 << 20,
		ChunkSize:      4 << 20,
	}
}

// DefaultLocalConfig is a fast profile for one machine and tests:
// 1 s per request, repair every second.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.RequestTimeout = time.Second
	c.RepairInterval = time.Second
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Membership == nil || c.Messenger == nil:
		return errors.New("replstore: state store: Membership and Messenger are required")
	case c.Dir == "":
		return errors.New("replstore: state store: Dir is required")
	case c.Replicas < 1 || c.Replicas > 64:
		return fmt.Errorf("replstore: state store: Replicas %d out of range [1, 64]", c.Replicas)
	case c.RequestTimeout <= 0 || c.RepairInterval <= 0:
		return errors.New("replstore: state store: RequestTimeout and RepairInterval must be positive")
	case c.MaxStateSize <= 0 || c.ChunkSize <= 0:
		return errors.New("replstore: state store: MaxStateSize and ChunkSize must be positive")
	case c.ChunkSize < 1<<10:
		return fmt.Errorf("replstore: state store: ChunkSize %d under 1 KiB", c.ChunkSize)
	}
	return nil
}

// Bounds of the store's work.
const (
	// stateMaxServing caps the peer requests a member serves at once; over it, requests
	// are answered busy (the requester counts the replica as failed).
	stateMaxServing = 64
	// stateRepairQueue caps the read repairs waiting; over it they are dropped (and
	// counted): anti-entropy repairs later.
	stateRepairQueue = 256
	// stateRepairParallel caps the shards one repair pass syncs at once.
	stateRepairParallel = 4
	// stateMaxWriteRecords caps the records of one repair write.
	stateMaxWriteRecords = 1024
	// stateMaxPageRecords caps the records of one listing or diff page.
	stateMaxPageRecords = 4096
)

// Store is the entity state store of docs/design.md: each shard's data
// (snapshots, remembered entity IDs and entity journals) on the first K members of the
// shard's priority order, on disk (bbolt, fsynced before a replica acknowledges), a
// majority of K acknowledging a write and answering a read.
//
// Versions. Every record (an entity's snapshot, its remember/forget mark, a record of
// its journal, or its journal's truncation floor) carries a version (epoch, seq): the
// writer's allocation epoch for the shard, then seq, the writer's hybrid clock (Unix
// nanoseconds, strictly increasing within a process; it
// only orders writes of one epoch, which come from the shard's one owner, and a
// restart of that owner moves it forward). A replica keeps the newest version of each
// record; readers take the newest of a majority, so a write acknowledged by a majority
// is seen by every later read of a majority of the same replica set. A forget is a
// versioned tombstone: a replica that missed it cannot bring the entity back, nor can
// one that missed a truncation bring back the journal records below its floor (floors
// only rise: the highest wins). Journal records carry a CRC-32C
// (sharding.VerifyJournalRecord), checked by each replica before it writes one and
// after it reads one: a corrupt copy is never returned, and a read repairs it from an
// intact one.
//
// Fencing. Each replica keeps the newest epoch it has seen per shard and refuses a Save
// or Remember with an older epoch (sharding.ErrStaleEpoch, also across members: the
// code travels in the reply). Since acknowledged writes reach a majority, a writer
// whose allocation is stale meets at least one replica that refuses it once the new
// owner has fenced the shard. The new owner does so before it reads any of the shard's
// state (FenceShard, a write of its epoch alone to a majority, once per shard and
// epoch: sharding's region.fenceShard): a former owner that has not yet learnt of the
// move (cut off, or paused) may still have a Save acknowledged until then, but not
// after, so the new owner's reads see every write acknowledged to the former owner, and
// none of its later ones is acknowledged only to be overwritten. Were the new owner's
// first write its fence, a stale Save acknowledged between its first read and that
// write would be lost.
//
// Ranking identity. Replicas are ranked by member address (the gossip address, the
// same strings the shard coordinator ranks regions by), so the member that the
// priority strategy picks to take a failed shard over is usually one of its replicas
// already. Members should keep their address across restarts (a fixed --bind) and
// their directory; a member restarted on another address ranks elsewhere, and
// anti-entropy then moves the data it holds to the shards' new replicas, but reads
// may miss that data until it has.
//
// Repair. Every RepairInterval and on membership changes, each member walks the shards
// it stores; for each it sends a digest (record count and a hash of record versions)
// to each reachable current replica; on a mismatch, lists of record versions, and the
// records the replica lacks or holds older. When this member is not a replica of the
// shard and every current replica has acknowledged holding the records it had, it
// deletes those records (those not written meanwhile). Reads repair too: replicas that
// answered an older version or nothing are sent the newest, best effort.
//
// Limits. A write that failed (sharding.ErrStoreUnavailable, or sharding.ErrStaleEpoch
// from some replicas while others had accepted it) may remain on a minority of
// replicas; a later read sees it if it is the entity's newest version, and repair then
// spreads it, as in other quorum stores. Tombstones (forget marks, and an entity's
// deletion: DeleteEntity) are kept for good.
//
// Membership changes. Replicas are ranked over a ring (ring.go) that keeps members gone
// (down, left, removed) until a handover round has confirmed that every member up sent
// what it stores to the shards' new replicas; meanwhile a request needs a majority of a
// shard's old replicas and of its new ones (joint consensus), so a read after a change
// meets every write acknowledged before it. The price is availability: a handover round
// runs only while fewer members are gone than a majority of K (one of three), so when
// more are (two of a shard's three replicas downed together), their shards fail with
// sharding.ErrStoreUnavailable until they return with their data directories, or until
// an operator forgets them (ForgetMember), accepting the loss of the writes only they
// held. The ring is saved in the member's state file and restored when the store opens,
// so a cluster restarted whole still waits for the members it retained. A member that
// starts with no saved ring learns the members the others retain from its first
// handover round; until then it ranks over the members up. A member that returns at its
// address without its data (a new disk) has a new store ID: the replicas it held count
// as gone, and its new ones as joining, until a handover round has given it its shards
// (Raft's rule for a server that lost its disk: it is a new server).
//
// A Store is safe for concurrent use.
type Store struct {
	cfg  Config
	log  *slog.Logger
	disk *stateDisk
	now  func() time.Time
	seq  atomic.Uint64

	// owner owns the store's goroutines and the calls that use the disk (Enter); its
	// context is cancelled by Close.
	owner *owner.Group

	mu      sync.Mutex
	staging map[stateStagingKey]*stateStaged
	staged  int // bytes reserved by staging

	serving     chan struct{} // a semaphore: peer requests served at once
	repairMu    sync.Mutex    // one repair pass at a time
	readRepairs chan stateRepairJob
	sub         *cluster.Subscription
	ring        stateRing
	kick        chan struct{} // a repair pass and a handover round now (ForgetMember)

	readRepairsDropped atomic.Uint64

	pipesMu sync.Mutex
	pipes   map[statePipeKey]*statePipe // coalesce.go

	fired firedRecords // advance.go
}

var _ sharding.StateStore = (*Store)(nil)

// New opens (or creates) the data in cfg.Dir, registers the store's
// handlers on cfg.Messenger and starts its repair loop. Create it before the member
// joins the cluster, so that peers find its handlers. Close releases it.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	disk, err := openStateDisk(cfg.Dir)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "sharding.statestore")
	disk.log = log
	if err := disk.wal.preallocErr; err != nil {
		log.Warn("state store: the write-ahead log could not be preallocated; its appends grow the file instead, each fdatasync writing its size too",
			"dir", cfg.Dir, "bytes", walPrealloc, "err", err)
	}
	restored, err := disk.loadRing()
	if err != nil {
		_ = disk.close()
		return nil, err
	}
	s := &Store{
		cfg:         cfg,
		log:         log,
		disk:        disk,
		now:         cfg.Now,
		owner:       owner.New(),
		staging:     map[stateStagingKey]*stateStaged{},
		serving:     make(chan struct{}, stateMaxServing),
		readRepairs: make(chan stateRepairJob, stateRepairQueue),
		kick:        make(chan struct{}, 1),
		pipes:       map[statePipeKey]*statePipe{},
	}
	s.fired.m = map[firedKey]*firedRecord{}
	s.ring.restored = restored
	if err := s.register(); err != nil {
		s.owner.Close()
		_ = disk.close()
		return nil, err
	}
	s.sub = cfg.Membership.Subscribe(64)
	s.owner.Go(s.repairLoop)
	s.owner.Go(s.readRepairLoop)
	return s, nil
}

// register registers the handlers; Messenger.Handle panics on a topic already taken.
func (s *Store) register() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("replstore: state store: registering handlers: %v", v)
		}
	}()
	m := s.cfg.Messenger
	m.Handle(topicStateWrite, s.handler(s.serveWrite))
	m.Handle(topicStateChunk, s.handler(s.serveChunk))
	m.Handle(topicStateRead, s.handler(s.serveRead))
	m.Handle(topicStateRemembered, s.handler(s.serveRemembered))
	m.Handle(topicStateSummary, s.handler(s.serveSummary))
	m.Handle(topicStateDiff, s.handler(s.serveDiff))
	m.Handle(topicStateDeleteType, s.handler(s.serveDeleteType))
	m.Handle(topicStateHandover, s.handler(s.serveHandover))
	m.Handle(topicStateForget, s.handler(s.serveForget))
	m.Handle(topicStateJournal, s.handler(s.serveJournal))
	m.Handle(topicStateWrites, s.writesHandler())
	return nil
}

var _ sharding.TypeStateDeleter = (*Store)(nil)

// DeleteType implements sharding.TypeStateDeleter: DeleteTypeAt, marked now.
func (s *Store) DeleteType(ctx context.Context, typ string) error {
	return s.DeleteTypeAt(ctx, typ, s.nextSeq())
}

// DeleteTypeAt deletes every record of the entity type typ on every member (each
// deletes what its disk holds, whatever the shard), and marks the type deleted up to at
// (a Seq: Unix nanoseconds) or the newest record it deleted: a repair or anti-entropy
// copy of a record not newer than the mark, from a member that has not deleted yet, is
// dropped, so a deleted record does not come back. Writers' later records are newer:
// each member's sequence moves past the mark. A member that does not answer keeps its
// copies until ForgetType runs there (shardhost's catalog does it when the member
// learns of the deletion). Errors: sharding.ErrStoreUnavailable naming the members that
// did not delete, sharding.ErrInvalidStateKey.
func (s *Store) DeleteTypeAt(ctx context.Context, typ string, at uint64) error {
	if err := sharding.CheckStateKey(typ, 0, "", false); err != nil {
		return err
	}
	self := s.cfg.Membership.Self().Address
	var reps []stateReplica
	for _, m := range s.cfg.Membership.Members() {
		reps = append(reps, stateReplica{addr: m.Address, transport: m.TransportAddr, local: m.Address == self, reachable: m.Reachable})
	}
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Add(1)
		run := func() {
			defer wg.Done()
			if r.local {
				errs[i] = s.ForgetType(typ, at)
				return
			}
			errs[i] = s.call(ctx, r, topicStateDeleteType, &stateDeleteTypeReq{Type: typ, At: at}, &stateReply{})
		}
		if !s.owner.Go(run) {
			errs[i] = closedError()
			wg.Done()
		}
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", reps[i].addr, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: state of %s deleted on %d of %d members; not on %s", sharding.ErrStoreUnavailable, typ,
			len(reps)-len(failed), len(reps), strings.Join(failed, "; "))
	}
	return nil
}

// ForgetType is DeleteTypeAt on this member alone: its disk's records of typ are
// deleted and the type marked deleted up to at, and its writer's sequence moves past
// the mark. Idempotent. Errors: sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey.
func (s *Store) ForgetType(typ string, at uint64) error {
	if err := sharding.CheckStateKey(typ, 0, "", false); err != nil {
		return err
	}
	if !s.owner.Enter() {
		return closedError()
	}
	defer s.owner.Leave()
	s.fired.forgetType(typ)
	defer s.fired.forgetType(typ)
	mark, deleted, err := s.disk.deleteType(typ, at)
	if err != nil {
		return err
	}
	for {
		last := s.seq.Load()
		if last >= mark || s.seq.CompareAndSwap(last, mark) {
			break
		}
	}
	if deleted > 0 {
		s.log.Info("entity type's state deleted", "type", typ, "records", deleted)
	}
	return nil
}

var _ sharding.EntityStateDeleter = (*Store)(nil)

// DeleteEntity implements sharding.EntityStateDeleter: a fenced write, as Save's, of
// the entity's tombstone (stateKindGone) and a forget mark, both at one new version.
// Each replica that applies the tombstone deletes the entity's snapshot, remember mark,
// journal records and journal floor older than it, and drops older copies that arrive
// later (a repair or anti-entropy copy from a replica that missed the delete, a write
// of an older epoch that it did not refuse). Readers take the newest tombstone of the
// majority that answers and leave out what is older, so a replica that missed the
// delete brings nothing back; read repair and anti-entropy bring it the tombstone.
// Records written later (newer versions) start the entity anew: its journal from
// record 1. The tombstone is kept for good, as forget marks are (a few dozen bytes per
// entity deleted). Reminders are not state records here; they stay. Errors:
// sharding.ErrStaleEpoch (nothing deleted on the replica that refused; others may
// have applied it, as with any write refused by some), sharding.ErrStoreUnavailable
// (fewer than a majority acknowledged: the delete may have landed on some, and
// spreads by repair if it is the entity's newest write), sharding.ErrInvalidStateKey.
func (s *Store) DeleteEntity(ctx context.Context, key sharding.EntityKey, epoch uint64) error {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	seq := s.nextSeq()
	recs := []stateRecord{
		{Kind: stateKindGone, ID: key.ID, Epoch: epoch, Seq: seq},
		{Kind: stateKindRemember, ID: key.ID, Epoch: epoch, Seq: seq},
	}
	if err := s.write(ctx, key.Type, key.Shard, epoch, recs); err != nil {
		return fmt.Errorf("replstore: delete the state of %s/%d/%q at epoch %d: %w", key.Type, key.Shard, key.ID, epoch, err)
	}
	return nil
}

// Close stops the repair loop, waits for the requests under way (its own, bounded by
// RequestTimeout, are cancelled) and closes the disk. Later calls fail with
// sharding.ErrStoreUnavailable; peers' requests are answered as failed. Idempotent. The
// messenger and membership are the caller's to close.
func (s *Store) Close() error {
	if !s.owner.Close() {
		return nil
	}
	s.sub.Close()
	s.owner.Wait()
	s.mu.Lock()
	s.staging, s.staged = map[stateStagingKey]*stateStaged{}, 0
	s.mu.Unlock()
	return s.disk.close()
}

func closedError() error { return fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, errStateClosed) }

// nextSeq returns the writer's next sequence number: Unix nanoseconds, or one more than
// the last if the clock has not moved past it.
func (s *Store) nextSeq() uint64 {
	now := uint64(max(s.now().UnixNano(), 0))
	for {
		last := s.seq.Load()
		next := max(now, last+1)
		if s.seq.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Save implements sharding.StateStore: the snapshot goes to the shard's K replicas and
// Save returns once a majority stored it on disk. Errors: sharding.ErrStaleEpoch (a
// replica has a newer epoch for the shard), sharding.ErrStoreUnavailable (fewer than a
// majority acknowledged within RequestTimeout or ctx: the write may have landed on some
// replicas, and may then reappear by repair), sharding.ErrStateTooLarge (over
// MaxStateSize), sharding.ErrInvalidStateKey. state is copied; the caller may reuse it.
func (s *Store) Save(ctx context.Context, key sharding.EntityKey, epoch uint64, state []byte) error {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if len(state) > s.cfg.MaxStateSize {
		return fmt.Errorf("%w: %d bytes, the cap is %d", sharding.ErrStateTooLarge, len(state), s.cfg.MaxStateSize)
	}
	data := bytes.Clone(state)
	if data == nil {
		data = []byte{}
	}
	rec := stateRecord{Kind: stateKindSnapshot, ID: key.ID, Epoch: epoch, Seq: s.nextSeq(), Data: data}
	if err := s.write(ctx, key.Type, key.Shard, epoch, []stateRecord{rec}); err != nil {
		return fmt.Errorf("replstore: save state of %s/%d/%q at epoch %d: %w", key.Type, key.Shard, key.ID, epoch, err)
	}
	return nil
}

// Remember implements sharding.StateStore: a versioned remember (or forget) mark for
// the entity, written as Save writes. Errors: sharding.ErrStaleEpoch,
// sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey.
func (s *Store) Remember(ctx context.Context, key sharding.EntityKey, epoch uint64, remember bool) error {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	rec := stateRecord{Kind: stateKindRemember, ID: key.ID, Epoch: epoch, Seq: s.nextSeq(), Remember: remember}
	if err := s.write(ctx, key.Type, key.Shard, epoch, []stateRecord{rec}); err != nil {
		return fmt.Errorf("replstore: remember %s/%d/%q (%v) at epoch %d: %w", key.Type, key.Shard, key.ID, remember, epoch, err)
	}
	return nil
}

var _ sharding.ShardFencer = (*Store)(nil)

// FenceShard implements sharding.ShardFencer: a fenced write without records to the
// shard's replicas, acknowledged by a majority (of the old and of the new replica set
// while the ring changes, as every write), each replica raising its epoch for the shard
// to epoch on disk. A Save with an older epoch then meets at least one refusing replica
// in any majority, and a read of a majority meets every write acknowledged before.
// Errors: sharding.ErrStaleEpoch (a replica has a newer epoch),
// sharding.ErrStoreUnavailable (fewer than a majority acknowledged within
// RequestTimeout or ctx), sharding.ErrInvalidStateKey.
func (s *Store) FenceShard(ctx context.Context, typ string, shard int, epoch uint64) error {
	if err := sharding.CheckStateKey(typ, shard, "", false); err != nil {
		return err
	}
	if err := s.write(ctx, typ, shard, epoch, nil); err != nil {
		return fmt.Errorf("replstore: fence %s/%d at epoch %d: %w", typ, shard, epoch, err)
	}
	return nil
}

// write sends fenced records (none: a fence alone) to the shard's replicas and waits
// for a majority.
func (s *Store) write(ctx context.Context, typ string, shard int, epoch uint64, recs []stateRecord) error {
	return s.send(ctx, &stateWriteReq{Type: typ, Shard: shard, Epoch: epoch, Fence: true, Records: recs})
}

// send sends a write request to the shard's replicas and waits for a majority. The
// request's records must not change until every replica has answered, which may be
// after send returns.
func (s *Store) send(ctx context.Context, req *stateWriteReq) error {
	// The reminder records it writes are read anew by AdvanceReminders: once from here
	// (a due read that starts while it is under way sees its outcome, or not, as a
	// read does), and once it is done.
	s.fired.forget(req)
	defer s.fired.forget(req)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(req.Type, req.Shard)
	if err != nil {
		return err
	}
	type ack struct {
		in  uint64
		err error
	}
	results := make(chan ack, len(reps.reps))
	var rctx context.Context // made for the writes that need a goroutine alone
	for _, r := range reps.reps {
		if s.writeNow(r, req, func(err error) { results <- ack{r.in, err} }) {
			continue
		}
		if rctx == nil {
			rctx = withTraceOf(s.owner.Context(), ctx)
		}
		if !s.owner.Go(func() { results <- ack{r.in, s.writeTo(rctx, r, req)} }) {
			results <- ack{r.in, closedError()}
		}
	}
	answers, err := quorum.AwaitJoint(ctx, results, len(reps.reps), reps.groups(), func(a ack) uint64 { return a.in }, func(a ack) error {
		if errors.Is(a.err, sharding.ErrStaleEpoch) || errors.Is(a.err, sharding.ErrStateTooLarge) {
			return quorum.Fatal(a.err) // no other replica's acknowledgement makes up for it
		}
		return a.err
	})
	acks := 0
	for _, a := range answers {
		if a.err == nil {
			acks++
		}
	}
	recordReplicas(ctx, len(reps.reps), acks)
	if short, ok := errors.AsType[*quorum.ShortError](err); ok {
		if short.Cause != nil {
			return fmt.Errorf("%w: replicas: %w (the write may still land on some)", sharding.ErrStoreUnavailable, short)
		}
		return fmt.Errorf("%w: replicas: %w (the write may have landed on some)", sharding.ErrStoreUnavailable, short)
	}
	return err
}

// stateReadAnswer is one replica's answer to a snapshot read.
type stateReadAnswer struct {
	rep   stateReplica
	found bool
	ver   stateVersion
	size  int
	data  []byte       // the whole snapshot from the local disk, its first chunk from a peer
	shard uint64       // the replica's epoch of the shard
	gone  stateVersion // the version of the entity's tombstone (zero: none)
	err   error
}

// Load implements sharding.StateStore: it asks the shard's K replicas for the snapshot
// and returns the newest version among the first majority to answer; replicas that
// answered an older version or none get the newest afterwards (best effort). Errors:
// sharding.ErrNoState (none of the majority has a snapshot),
// sharding.ErrStoreUnavailable (fewer than a majority answered within RequestTimeout or
// ctx), sharding.ErrStaleEpoch (ctx carries a read epoch, sharding.WithReadEpoch, older
// than a replica of the majority has for the shard: as a fence or write is acknowledged
// by a majority, a newer owner's is seen), sharding.ErrInvalidStateKey. The result is
// the caller's.
func (s *Store) Load(ctx context.Context, key sharding.EntityKey) ([]byte, error) {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		data, err := s.load(ctx, key)
		switch {
		case err == nil:
			return data, nil
		case errors.Is(err, sharding.ErrNoState):
			return nil, sharding.ErrNoState
		case errors.Is(err, errStateChanged) && attempt < 3:
			continue
		default:
			return nil, fmt.Errorf("replstore: load state of %s/%d/%q: %w", key.Type, key.Shard, key.ID, err)
		}
	}
}

func (s *Store) load(ctx context.Context, key sharding.EntityKey) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(key.Type, key.Shard)
	if err != nil {
		return nil, err
	}
	results := make(chan stateReadAnswer, len(reps.reps))
	rctx := withTraceOf(s.owner.Context(), ctx)
	// The peers are asked on goroutines; this member's own copy, a read of its disk, is
	// read here meanwhile, sparing an activation a goroutine's start and hand-off.
	local := -1
	for k, r := range reps.reps {
		if r.local {
			local = k
			continue
		}
		if !s.owner.Go(func() { results <- s.readFrom(rctx, r, key) }) {
			results <- stateReadAnswer{rep: r, err: closedError()}
		}
	}
	if local >= 0 {
		if s.owner.Enter() {
			results <- s.readFrom(rctx, reps.reps[local], key)
			s.owner.Leave()
		} else {
			results <- stateReadAnswer{rep: reps.reps[local], err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, err
	}
	if epoch, ok := sharding.ReadEpoch(ctx); ok {
		for _, a := range answers {
			if a.err == nil && a.shard > epoch {
				// results is buffered: no one waits.
				return nil, fmt.Errorf("%w: read at epoch %d, and %s/%d is at %d",
					sharding.ErrStaleEpoch, epoch, key.Type, key.Shard, a.shard)
			}
		}
	}
	best := newestAnswer(answers)
	if best == nil {
		// None of the majority has a snapshot. One that reached fewer replicas is still
		// the entity's state: after members left one by one, the last of them may hold
		// the only copy until repair spreads it. Ask the other reachable replicas before
		// concluding there is none.
		answers = append(answers, stragglers(reps.reps, answers, results, ctx.Done())...)
		best = newestAnswer(answers)
	}
	recordReplicas(ctx, len(reps.reps), answeredOK(answers))
	var data []byte
	if best != nil {
		if data, err = s.fetchRest(s.owner.Context(), key, best); err != nil {
			return nil, err
		}
	}
	pending := len(reps.reps) - len(answers)
	for i := range answers {
		answers[i].data = nil // the repair reads afresh: keep no snapshot alive meanwhile
	}
	if pending > 0 || best != nil {
		// With every replica's answer in and no snapshot anywhere, there is nothing to
		// wait for or repair.
		s.owner.Go(func() { s.finishLoad(key, answers, pending, results) })
	}
	if best == nil {
		return nil, sharding.ErrNoState
	}
	return data, nil
}

// newestAnswer returns the answer with the newest snapshot, or nil if none found one
// newer than the newest tombstone (stateKindGone) any answer has.
func newestAnswer(answers []stateReadAnswer) *stateReadAnswer {
	var best *stateReadAnswer
	var gone stateVersion
	for i := range answers {
		a := &answers[i]
		if a.err != nil {
			continue
		}
		if gone.less(a.gone) {
			gone = a.gone
		}
		if a.found && (best == nil || best.ver.less(a.ver)) {
			best = a
		}
	}
	if best != nil && !gone.less(best.ver) {
		return nil // the entity was deleted since: a replica that missed it answered
	}
	return best
}

// Remembered implements sharding.StateStore: the union of the remember marks of a
// majority of the shard's replicas, the newest version of each entity's mark winning,
// so a forget (a tombstone) wins over an older remember that a replica still holds.
// Replicas that lack a newer mark get it afterwards (best effort). Errors:
// sharding.ErrStoreUnavailable, sharding.ErrInvalidStateKey.
func (s *Store) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	if err := sharding.CheckStateKey(typ, shard, "", false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(typ, shard)
	if err != nil {
		return nil, err
	}
	results := make(chan stateRememberedAnswer, len(reps.reps))
	for _, r := range reps.reps {
		if !s.owner.Go(func() {
			recs, err := s.rememberedFrom(s.owner.Context(), r, typ, shard)
			results <- stateRememberedAnswer{rep: r, records: recs, err: err}
		}) {
			results <- stateRememberedAnswer{rep: r, err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, fmt.Errorf("replstore: remembered entities of %s/%d: %w", typ, shard, err)
	}
	// A remember mark that reached fewer replicas still counts (see load): the union
	// takes every reachable replica's marks.
	answers = append(answers, stragglers(reps.reps, answers, results, ctx.Done())...)
	recordReplicas(ctx, len(reps.reps), answeredOK(answers))
	merged := mergeRemembered(answers)
	out := []string{}
	for id, r := range merged {
		if r.Remember {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	pending := len(reps.reps) - len(answers)
	s.owner.Go(func() { s.finishRemembered(typ, shard, answers, pending, results) })
	return out, nil
}

type stateRememberedAnswer struct {
	rep     stateReplica
	records []stateRecord
	err     error
}

// mergeRemembered returns the newest mark of each entity among the answers.
func mergeRemembered(answers []stateRememberedAnswer) map[string]stateRecord {
	merged := map[string]stateRecord{}
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		for _, r := range a.records {
			if cur, ok := merged[r.ID]; !ok || cur.version().less(r.version()) {
				merged[r.ID] = r
			}
		}
	}
	return merged
}
