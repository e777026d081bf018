package sharding

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/cluster"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Errors of the replicated state store, beside those of StateStore.

var (
	// errStateChanged: a chunked read found a newer version of the snapshot; Load reads
	// again.
	errStateChanged = errors.New("sharding: snapshot changed during a chunked read")
	// errStateClosed: the store (or its disk) is closed.
	errStateClosed = errors.New("sharding: state store closed")
	// errStateBusy: a replica refused a request because it serves too many.
	errStateBusy = errors.New("sharding: state replica busy")
	// errStateNoChange rolls back a disk transaction that changed nothing (no fsync).
	errStateNoChange = errors.New("no change")
)

// StateFileName is the name of a ReplicatedStateStore's database file in its Dir.
const StateFileName = "state.db"

// ReplicatedStateStoreConfig configures a ReplicatedStateStore.
type ReplicatedStateStoreConfig struct {
	// Membership lists the members that hold replicas (those up or leaving) and reports
	// their changes, each of which starts a repair pass. Required.
	Membership Membership
	// Messenger carries the store's requests, under the topics "state/..."
	// (statestore_wire.go); NewReplicatedStateStore registers their handlers, so one
	// store per messenger. Required.
	Messenger Messenger
	// Dir is the directory of this member's replica data, one bbolt file StateFileName
	// ("state.db"); created with mode 0o700 if absent. One store per directory: a second
	// one fails to open within 1 s. Required.
	Dir string
	// Replicas is K: how many members hold each shard's data, the first K members of the
	// shard's priority order (PriorityAllocationStrategy over member addresses, Type set
	// to the entity type). Writes and reads wait for a majority, K/2+1. With fewer than
	// K members up, every member up is a replica. Default 3; more costs a write per
	// extra replica, fewer loses data when fewer members fail.
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
	// ErrStateTooLarge, here and by replicas. Default 64 MiB (the default guest memory
	// limit).
	MaxStateSize int
	// ChunkSize caps the snapshot bytes one message carries, in bytes: larger snapshots
	// travel in chunks, each a request of its own. Keep it well under the transport's
	// MaxFrameSize (8 MiB by default) minus the headers and IDs of a message. Default
	// 4 MiB.
	ChunkSize int
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultReplicatedStateStoreConfig returns the defaults: 3 replicas, 3 s per request,
// repair every 10 s, snapshots up to 64 MiB in 4 MiB chunks. Membership, Messenger and
// Dir are to be set.
func DefaultReplicatedStateStoreConfig() ReplicatedStateStoreConfig {
	return ReplicatedStateStoreConfig{
		Replicas:       3,
		RequestTimeout: 3 * time.Second,
		RepairInterval: 10 * time.Second,
		MaxStateSize:   64 << 20,
		ChunkSize:      4 << 20,
	}
}

// DefaultLocalReplicatedStateStoreConfig is a fast profile for one machine and tests:
// 1 s per request, repair every second.
func DefaultLocalReplicatedStateStoreConfig() ReplicatedStateStoreConfig {
	c := DefaultReplicatedStateStoreConfig()
	c.RequestTimeout = time.Second
	c.RepairInterval = time.Second
	return c
}

// Validate reports a configuration that cannot work.
func (c ReplicatedStateStoreConfig) Validate() error {
	switch {
	case c.Membership == nil || c.Messenger == nil:
		return errors.New("sharding: state store: Membership and Messenger are required")
	case c.Dir == "":
		return errors.New("sharding: state store: Dir is required")
	case c.Replicas < 1 || c.Replicas > 64:
		return fmt.Errorf("sharding: state store: Replicas %d out of range [1, 64]", c.Replicas)
	case c.RequestTimeout <= 0 || c.RepairInterval <= 0:
		return errors.New("sharding: state store: RequestTimeout and RepairInterval must be positive")
	case c.MaxStateSize <= 0 || c.ChunkSize <= 0:
		return errors.New("sharding: state store: MaxStateSize and ChunkSize must be positive")
	case c.ChunkSize < 1<<10:
		return fmt.Errorf("sharding: state store: ChunkSize %d under 1 KiB", c.ChunkSize)
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

// ReplicatedStateStore is the StateStore of DESIGN.md: each shard's data (snapshots and
// remembered entity IDs) on the first K members of the shard's priority order, on disk
// (bbolt, fsynced before a replica acknowledges), a majority of K acknowledging a write
// and answering a read.
//
// Versions. Every record (an entity's snapshot, or its remember/forget mark) carries a
// version (epoch, seq): the writer's allocation epoch for the shard, then seq, the
// writer's hybrid clock (Unix nanoseconds, strictly increasing within a process; it
// only orders writes of one epoch, which come from the shard's one owner, and a
// restart of that owner moves it forward). A replica keeps the newest version of each
// record; readers take the newest of a majority, so a write acknowledged by a majority
// is seen by every later read of a majority of the same replica set. A forget is a
// versioned tombstone: a replica that missed it cannot bring the entity back.
//
// Fencing. Each replica keeps the newest epoch it has seen per shard and refuses a
// Save or Remember with an older epoch (ErrStaleEpoch, also across members: the code
// travels in the reply). Since acknowledged writes reach a majority, a writer whose
// allocation is stale meets at least one replica that refuses it once the new owner
// has written.
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
// Limits. A write that failed (ErrStoreUnavailable, or ErrStaleEpoch from some
// replicas while others had accepted it) may remain on a minority of replicas; a later
// read sees it if it is the entity's newest version, and repair then spreads it, as in
// other quorum stores. While a replica set changes (a member joins and ranks among a
// shard's first K), a read's majority may hold none of the data until a repair pass
// (started by the membership change) has copied it: the host should serve once the
// cluster has formed. Tombstones (forget marks) are kept for good.
//
// A ReplicatedStateStore is safe for concurrent use.
type ReplicatedStateStore struct {
	cfg  ReplicatedStateStoreConfig
	log  *slog.Logger
	disk *stateDisk
	now  func() time.Time
	seq  atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	wg      sync.WaitGroup // goroutines of the store, and calls that use the disk
	staging map[stateStagingKey]*stateStaged
	staged  int // bytes reserved by staging

	serving     chan struct{} // a semaphore: peer requests served at once
	repairMu    sync.Mutex    // one repair pass at a time
	readRepairs chan stateRepairJob
	sub         *cluster.Subscription

	readRepairsDropped atomic.Uint64
}

var _ StateStore = (*ReplicatedStateStore)(nil)

// NewReplicatedStateStore opens (or creates) the data in cfg.Dir, registers the store's
// handlers on cfg.Messenger and starts its repair loop. Create it before the member
// joins the cluster, so that peers find its handlers. Close releases it.
func NewReplicatedStateStore(cfg ReplicatedStateStoreConfig) (*ReplicatedStateStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	disk, err := openStateDisk(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &ReplicatedStateStore{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "sharding.statestore"),
		disk:        disk,
		now:         time.Now,
		staging:     map[stateStagingKey]*stateStaged{},
		serving:     make(chan struct{}, stateMaxServing),
		readRepairs: make(chan stateRepairJob, stateRepairQueue),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.register(); err != nil {
		s.closed = true
		s.cancel()
		_ = disk.close()
		return nil, err
	}
	s.sub = cfg.Membership.Subscribe(64)
	s.spawn(s.repairLoop)
	s.spawn(s.readRepairLoop)
	return s, nil
}

// register registers the handlers; Messenger.Handle panics on a topic already taken.
func (s *ReplicatedStateStore) register() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sharding: state store: registering handlers: %v", v)
		}
	}()
	m := s.cfg.Messenger
	m.Handle(topicStateWrite, s.handler(s.serveWrite))
	m.Handle(topicStateChunk, s.handler(s.serveChunk))
	m.Handle(topicStateRead, s.handler(s.serveRead))
	m.Handle(topicStateRemembered, s.handler(s.serveRemembered))
	m.Handle(topicStateSummary, s.handler(s.serveSummary))
	m.Handle(topicStateDiff, s.handler(s.serveDiff))
	return nil
}

// Close stops the repair loop, waits for the requests under way (its own, bounded by
// RequestTimeout, are cancelled) and closes the disk. Later calls fail with
// ErrStoreUnavailable; peers' requests are answered as failed. Idempotent. The
// messenger and membership are the caller's to close.
func (s *ReplicatedStateStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.sub.Close()
	s.wg.Wait()
	s.mu.Lock()
	s.staging, s.staged = map[stateStagingKey]*stateStaged{}, 0
	s.mu.Unlock()
	return s.disk.close()
}

// spawn runs fn on a goroutine that Close waits for; false if the store is closed.
func (s *ReplicatedStateStore) spawn(fn func()) bool {
	if !s.enter() {
		return false
	}
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// enter registers a call that uses the disk (Close waits for it: call s.wg.Done
// after); false if the store is closed.
func (s *ReplicatedStateStore) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

func closedError() error { return fmt.Errorf("%w: %w", ErrStoreUnavailable, errStateClosed) }

// nextSeq returns the writer's next sequence number: Unix nanoseconds, or one more than
// the last if the clock has not moved past it.
func (s *ReplicatedStateStore) nextSeq() uint64 {
	now := uint64(max(s.now().UnixNano(), 0))
	for {
		last := s.seq.Load()
		next := max(now, last+1)
		if s.seq.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Save implements StateStore: the snapshot goes to the shard's K replicas and Save
// returns once a majority stored it on disk. Errors: ErrStaleEpoch (a replica has a
// newer epoch for the shard), ErrStoreUnavailable (fewer than a majority acknowledged
// within RequestTimeout or ctx: the write may have landed on some replicas, and may
// then reappear by repair), ErrStateTooLarge (over MaxStateSize), ErrInvalidStateKey.
// state is copied; the caller may reuse it.
func (s *ReplicatedStateStore) Save(ctx context.Context, key EntityKey, epoch uint64, state []byte) error {
	if err := checkStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if len(state) > s.cfg.MaxStateSize {
		return fmt.Errorf("%w: %d bytes, the cap is %d", ErrStateTooLarge, len(state), s.cfg.MaxStateSize)
	}
	data := bytes.Clone(state)
	if data == nil {
		data = []byte{}
	}
	rec := stateRecord{Kind: stateKindSnapshot, ID: key.ID, Epoch: epoch, Seq: s.nextSeq(), Data: data}
	if err := s.write(ctx, key.Type, key.Shard, epoch, rec); err != nil {
		return fmt.Errorf("sharding: save state of %s/%d/%q at epoch %d: %w", key.Type, key.Shard, key.ID, epoch, err)
	}
	return nil
}

// Remember implements StateStore: a versioned remember (or forget) mark for the entity,
// written as Save writes. Errors: ErrStaleEpoch, ErrStoreUnavailable,
// ErrInvalidStateKey.
func (s *ReplicatedStateStore) Remember(ctx context.Context, key EntityKey, epoch uint64, remember bool) error {
	if err := checkStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	rec := stateRecord{Kind: stateKindRemember, ID: key.ID, Epoch: epoch, Seq: s.nextSeq(), Remember: remember}
	if err := s.write(ctx, key.Type, key.Shard, epoch, rec); err != nil {
		return fmt.Errorf("sharding: remember %s/%d/%q (%v) at epoch %d: %w", key.Type, key.Shard, key.ID, remember, epoch, err)
	}
	return nil
}

// write sends one fenced record to the shard's replicas and waits for a majority.
func (s *ReplicatedStateStore) write(ctx context.Context, typ string, shard int, epoch uint64, rec stateRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(typ, shard)
	if err != nil {
		return err
	}
	need := len(reps)/2 + 1
	req := &stateWriteReq{Type: typ, Shard: shard, Epoch: epoch, Fence: true, Records: []stateRecord{rec}}
	results := make(chan error, len(reps))
	rctx := withTraceOf(s.ctx, ctx)
	for _, r := range reps {
		if !s.spawn(func() { results <- s.writeTo(rctx, r, req) }) {
			results <- closedError()
		}
	}
	acks, fails := 0, 0
	defer func() { RecordReplicas(ctx, len(reps), acks) }()
	var errs []error
	for acks < need {
		select {
		case err := <-results:
			switch {
			case err == nil:
				acks++
			case errors.Is(err, ErrStaleEpoch), errors.Is(err, ErrStateTooLarge):
				return err
			default:
				fails++
				errs = append(errs, err)
				if fails > len(reps)-need {
					return fmt.Errorf("%w: %d of %d replicas acknowledged, %d needed (the write may have landed on some): %w",
						ErrStoreUnavailable, acks, len(reps), need, errors.Join(errs...))
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("%w: %d of %d replicas acknowledged, %d needed, when %v (the write may still land on some)",
				ErrStoreUnavailable, acks, len(reps), need, ctx.Err())
		}
	}
	return nil
}

// stateReadAnswer is one replica's answer to a snapshot read.
type stateReadAnswer struct {
	rep   stateReplica
	found bool
	ver   stateVersion
	size  int
	data  []byte // the whole snapshot from the local disk, its first chunk from a peer
	err   error
}

// Load implements StateStore: it asks the shard's K replicas for the snapshot and
// returns the newest version among the first majority to answer; replicas that
// answered an older version or none get the newest afterwards (best effort). Errors:
// ErrNoState (none of the majority has a snapshot), ErrStoreUnavailable (fewer than a
// majority answered within RequestTimeout or ctx), ErrInvalidStateKey. The result is
// the caller's.
func (s *ReplicatedStateStore) Load(ctx context.Context, key EntityKey) ([]byte, error) {
	if err := checkStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		data, err := s.load(ctx, key)
		switch {
		case err == nil:
			return data, nil
		case errors.Is(err, ErrNoState):
			return nil, ErrNoState
		case errors.Is(err, errStateChanged) && attempt < 3:
			continue
		default:
			return nil, fmt.Errorf("sharding: load state of %s/%d/%q: %w", key.Type, key.Shard, key.ID, err)
		}
	}
}

func (s *ReplicatedStateStore) load(ctx context.Context, key EntityKey) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(key.Type, key.Shard)
	if err != nil {
		return nil, err
	}
	results := make(chan stateReadAnswer, len(reps))
	rctx := withTraceOf(s.ctx, ctx)
	for _, r := range reps {
		if !s.spawn(func() { results <- s.readFrom(rctx, r, key) }) {
			results <- stateReadAnswer{rep: r, err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, err
	}
	best := newestAnswer(answers)
	if best == nil {
		// None of the majority has a snapshot. One that reached fewer replicas is still
		// the entity's state: after members left one by one, the last of them may hold
		// the only copy until repair spreads it. Ask the other reachable replicas before
		// concluding there is none.
		answers = append(answers, stragglers(reps, answers, results, ctx.Done())...)
		best = newestAnswer(answers)
	}
	RecordReplicas(ctx, len(reps), answeredOK(answers))
	var data []byte
	if best != nil {
		if data, err = s.fetchRest(s.ctx, key, best); err != nil {
			return nil, err
		}
	}
	pending := len(reps) - len(answers)
	for i := range answers {
		answers[i].data = nil // the repair reads afresh: keep no snapshot alive meanwhile
	}
	s.spawn(func() { s.finishLoad(key, answers, pending, results) })
	if best == nil {
		return nil, ErrNoState
	}
	return data, nil
}

// replicaAnswer is one replica's answer to a read (stateReadAnswer,
// stateRememberedAnswer).
type replicaAnswer interface {
	replica() stateReplica
	failure() error
}

func (a stateReadAnswer) replica() stateReplica       { return a.rep }
func (a stateReadAnswer) failure() error              { return a.err }
func (a stateRememberedAnswer) replica() stateReplica { return a.rep }
func (a stateRememberedAnswer) failure() error        { return a.err }

// awaitMajority collects answers from results until a majority of reps succeeded. It
// fails with ErrStoreUnavailable once a majority can no longer succeed, or when ctx
// ends first.
func awaitMajority[A replicaAnswer](ctx context.Context, reps []stateReplica, results <-chan A) ([]A, error) {
	need := len(reps)/2 + 1
	var answers []A
	ok, fails := 0, 0
	var errs []error
	for ok < need {
		select {
		case a := <-results:
			answers = append(answers, a)
			if a.failure() == nil {
				ok++
				continue
			}
			fails++
			errs = append(errs, a.failure())
			if fails > len(reps)-need {
				return nil, fmt.Errorf("%w: %d of %d replicas answered, %d needed: %w",
					ErrStoreUnavailable, ok, len(reps), need, errors.Join(errs...))
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %d of %d replicas answered, %d needed, when %v",
				ErrStoreUnavailable, ok, len(reps), need, ctx.Err())
		}
	}
	return answers, nil
}

// stragglers waits for the answers of the reachable replicas that have not answered yet
// (each answers or fails within RequestTimeout), until done; it returns them.
// Unreachable replicas are not waited for.
func stragglers[A replicaAnswer](reps []stateReplica, answered []A, results <-chan A, done <-chan struct{}) []A {
	seen := map[string]bool{}
	for _, a := range answered {
		seen[a.replica().addr] = true
	}
	missing := 0
	for _, r := range reps {
		if !seen[r.addr] && r.reachable {
			missing++
		}
	}
	var out []A
	for missing > 0 {
		select {
		case a := <-results:
			out = append(out, a)
			if a.replica().reachable {
				missing--
			}
		case <-done:
			return out
		}
	}
	return out
}

// answeredOK counts the answers without failure.
func answeredOK[A replicaAnswer](answers []A) int {
	n := 0
	for _, a := range answers {
		if a.failure() == nil {
			n++
		}
	}
	return n
}

// newestAnswer returns the answer with the newest snapshot, or nil if none found one.
func newestAnswer(answers []stateReadAnswer) *stateReadAnswer {
	var best *stateReadAnswer
	for i := range answers {
		a := &answers[i]
		if a.err == nil && a.found && (best == nil || best.ver.less(a.ver)) {
			best = a
		}
	}
	return best
}

// finishLoad waits for the replicas that had not answered when Load returned (each
// answers or fails within RequestTimeout), then queues a read repair for those that
// hold an older snapshot or none.
func (s *ReplicatedStateStore) finishLoad(key EntityKey, answers []stateReadAnswer, pending int, results <-chan stateReadAnswer) {
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

// Remembered implements StateStore: the union of the remember marks of a majority of
// the shard's replicas, the newest version of each entity's mark winning, so a forget
// (a tombstone) wins over an older remember that a replica still holds. Replicas that
// lack a newer mark get it afterwards (best effort). Errors: ErrStoreUnavailable,
// ErrInvalidStateKey.
func (s *ReplicatedStateStore) Remembered(ctx context.Context, typ string, shard int) ([]string, error) {
	if err := checkStateKey(typ, shard, "", false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(typ, shard)
	if err != nil {
		return nil, err
	}
	results := make(chan stateRememberedAnswer, len(reps))
	for _, r := range reps {
		if !s.spawn(func() {
			recs, err := s.rememberedFrom(s.ctx, r, typ, shard)
			results <- stateRememberedAnswer{rep: r, records: recs, err: err}
		}) {
			results <- stateRememberedAnswer{rep: r, err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, fmt.Errorf("sharding: remembered entities of %s/%d: %w", typ, shard, err)
	}
	// A remember mark that reached fewer replicas still counts (see load): the union
	// takes every reachable replica's marks.
	answers = append(answers, stragglers(reps, answers, results, ctx.Done())...)
	RecordReplicas(ctx, len(reps), answeredOK(answers))
	merged := mergeRemembered(answers)
	out := []string{}
	for id, r := range merged {
		if r.Remember {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	pending := len(reps) - len(answers)
	s.spawn(func() { s.finishRemembered(typ, shard, answers, pending, results) })
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

// finishRemembered waits for the late replicas, then queues, for each replica that
// answered, the marks it lacks or holds older.
func (s *ReplicatedStateStore) finishRemembered(typ string, shard int, answers []stateRememberedAnswer, pending int, results <-chan stateRememberedAnswer) {
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

// Repair runs one anti-entropy pass now (see ReplicatedStateStore) and returns when it
// is done: nil if every stored shard was in sync with, or sent to, every current
// replica; else an error wrapping ErrStoreUnavailable that counts the shards left out
// of sync (a later pass retries them). Passes do not overlap.
func (s *ReplicatedStateStore) Repair(ctx context.Context) error {
	if !s.enter() {
		return closedError()
	}
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	return s.repairPass(ctx)
}

// ReadRepairsDropped returns how many read repairs did not fit in the queue (repair
// passes make up for them).
func (s *ReplicatedStateStore) ReadRepairsDropped() uint64 { return s.readRepairsDropped.Load() }

// stateReplica is one member holding a replica of a shard.
type stateReplica struct {
	addr      string // the member's address: its identity in the ranking
	transport string // where its messenger listens
	local     bool   // this member
	reachable bool
}

// replicaSet returns the shard's replicas: the first K members, by the shard's
// priority order, among those up or leaving.
func (s *ReplicatedStateStore) replicaSet(typ string, shard int) ([]stateReplica, error) {
	self := s.cfg.Membership.Self().Address
	members := map[string]cluster.Member{}
	var addrs []string
	for _, m := range s.cfg.Membership.Members() {
		if m.Status != cluster.StatusUp && m.Status != cluster.StatusLeaving {
			continue
		}
		if _, dup := members[m.Address]; dup {
			continue
		}
		members[m.Address] = m
		addrs = append(addrs, m.Address)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no member is up", ErrStoreUnavailable)
	}
	order := PriorityAllocationStrategy{Type: typ}.Order(shard, addrs)
	k := min(s.cfg.Replicas, len(order))
	out := make([]stateReplica, k)
	for i, a := range order[:k] {
		m := members[a]
		out[i] = stateReplica{addr: a, transport: m.TransportAddr, local: a == self, reachable: m.Reachable}
	}
	return out, nil
}

// stateStatus is a reply with a code.
type stateStatus interface{ status() (uint8, string) }

func (r *stateReply) status() (uint8, string)           { return r.Code, r.Msg }
func (r *stateReadReply) status() (uint8, string)       { return r.Code, r.Msg }
func (r *stateRememberedReply) status() (uint8, string) { return r.Code, r.Msg }
func (r *stateSummaryReply) status() (uint8, string)    { return r.Code, r.Msg }
func (r *stateDiffReply) status() (uint8, string)       { return r.Code, r.Msg }

// call sends a request to a peer replica, waits at most RequestTimeout (or parent) for
// the reply, and turns a reply's code into an error.
func (s *ReplicatedStateStore) call(parent context.Context, r stateReplica, topic string, req any, resp stateStatus) error {
	if r.transport == "" {
		return fmt.Errorf("%w: replica %s has no transport address", ErrStoreUnavailable, r.addr)
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.RequestTimeout)
	defer cancel()
	body, err := s.cfg.Messenger.Request(ctx, r.transport, topic, encodeState(req))
	if err != nil {
		return fmt.Errorf("%w: replica %s: %v", ErrStoreUnavailable, r.addr, err)
	}
	if err := decodeState(body, resp); err != nil {
		return fmt.Errorf("%w: replica %s: bad reply: %v", ErrStoreUnavailable, r.addr, err)
	}
	code, msg := resp.status()
	return stateCodeError(code, msg, r.addr)
}

// stateCodeError maps a reply code back to the error it stands for.
func stateCodeError(code uint8, msg, peer string) error {
	var sentinel error
	switch code {
	case stateCodeOK:
		return nil
	case stateCodeStale:
		sentinel = ErrStaleEpoch
	case stateCodeTooLarge:
		sentinel = ErrStateTooLarge
	case stateCodeBad:
		sentinel = ErrMalformedMessage
	case stateCodeChanged:
		sentinel = errStateChanged
	default: // busy, failure, unknown codes
		sentinel = ErrStoreUnavailable
	}
	return fmt.Errorf("replica %s: %s: %w", peer, msg, sentinel)
}

// stateErrorCode is the reply code of an error.
func stateErrorCode(err error) uint8 {
	switch {
	case err == nil:
		return stateCodeOK
	case errors.Is(err, ErrStaleEpoch):
		return stateCodeStale
	case errors.Is(err, ErrStateTooLarge):
		return stateCodeTooLarge
	case errors.Is(err, ErrMalformedMessage), errors.Is(err, ErrInvalidStateKey):
		return stateCodeBad
	case errors.Is(err, errStateChanged):
		return stateCodeChanged
	case errors.Is(err, errStateBusy):
		return stateCodeBusy
	default:
		return stateCodeFailure
	}
}

// stateFail is the reply body of a failed request, whatever its topic.
func stateFail(err error) []byte {
	return encodeState(&stateReply{Code: stateErrorCode(err), Msg: err.Error()})
}

// writeTo applies a write on one replica: on the local disk, or by a request (after
// staging, in chunks, the snapshots over ChunkSize).
func (s *ReplicatedStateStore) writeTo(ctx context.Context, r stateReplica, req *stateWriteReq) error {
	if r.local {
		_, err := s.disk.applyWrite(req)
		return err
	}
	out := req
	for i := range req.Records {
		if len(req.Records[i].Data) <= s.cfg.ChunkSize {
			continue
		}
		if out == req {
			cp := *req
			cp.Records = slices.Clone(req.Records)
			out = &cp
		}
		xfer, err := s.sendChunks(ctx, r, req.Records[i].Data)
		if err != nil {
			return err
		}
		out.Records[i].Data, out.Records[i].Xfer = nil, xfer
	}
	var reply stateReply
	return s.call(ctx, r, topicStateWrite, out, &reply)
}

// sendChunks stages data on a peer replica, ChunkSize bytes a request, and returns the
// transfer's ID.
func (s *ReplicatedStateStore) sendChunks(ctx context.Context, r stateReplica, data []byte) (uint64, error) {
	xfer := rand.Uint64()
	for xfer == 0 {
		xfer = rand.Uint64()
	}
	for off := 0; off < len(data); off += s.cfg.ChunkSize {
		end := min(off+s.cfg.ChunkSize, len(data))
		var reply stateReply
		if err := s.call(ctx, r, topicStateChunk, &stateChunkReq{Xfer: xfer, Total: len(data), Offset: off, Data: data[off:end]}, &reply); err != nil {
			return 0, err
		}
	}
	return xfer, nil
}

// readFrom reads a snapshot's version and bytes (all of them locally, the first chunk
// from a peer).
func (s *ReplicatedStateStore) readFrom(ctx context.Context, r stateReplica, key EntityKey) stateReadAnswer {
	a := stateReadAnswer{rep: r}
	if r.local {
		var rec stateRecord
		rec, a.found, a.err = s.disk.record(stateShardPrefix(key.Type, key.Shard), stateKindSnapshot, key.ID)
		a.ver, a.size, a.data = rec.version(), len(rec.Data), rec.Data
		return a
	}
	var reply stateReadReply
	if a.err = s.call(ctx, r, topicStateRead, &stateReadReq{Type: key.Type, Shard: key.Shard, ID: key.ID}, &reply); a.err != nil {
		return a
	}
	if reply.Found && (reply.Size < len(reply.Data) || reply.Size > s.cfg.MaxStateSize) {
		a.err = fmt.Errorf("%w: replica %s: bad read reply: %d of %d bytes", ErrStoreUnavailable, r.addr, len(reply.Data), reply.Size)
		return a
	}
	a.found, a.ver, a.size, a.data = reply.Found, stateVersion{reply.Epoch, reply.Seq}, reply.Size, reply.Data
	return a
}

// fetchRest completes a snapshot whose first chunk came from a peer, chunk by chunk,
// from the same peer; errStateChanged if the peer's version changed meanwhile.
func (s *ReplicatedStateStore) fetchRest(ctx context.Context, key EntityKey, a *stateReadAnswer) ([]byte, error) {
	data := a.data
	if data == nil {
		data = []byte{}
	}
	if len(data) >= a.size {
		return data, nil
	}
	data = append(make([]byte, 0, a.size), data...)
	for len(data) < a.size {
		var reply stateReadReply
		req := &stateReadReq{Type: key.Type, Shard: key.Shard, ID: key.ID, Offset: len(data), Epoch: a.ver.Epoch, Seq: a.ver.Seq}
		if err := s.call(ctx, a.rep, topicStateRead, req, &reply); err != nil {
			return nil, err
		}
		if !reply.Found || (stateVersion{reply.Epoch, reply.Seq}) != a.ver || reply.Size != a.size {
			return nil, fmt.Errorf("replica %s: %w", a.rep.addr, errStateChanged)
		}
		if len(reply.Data) == 0 || len(reply.Data) > a.size-len(data) {
			return nil, fmt.Errorf("%w: replica %s: bad read reply: %d bytes at offset %d of %d",
				ErrStoreUnavailable, a.rep.addr, len(reply.Data), len(data), a.size)
		}
		data = append(data, reply.Data...)
	}
	return data, nil
}

// rememberedFrom reads a shard's remember marks (tombstones included) from one replica:
// the local disk, or a peer page by page.
func (s *ReplicatedStateStore) rememberedFrom(ctx context.Context, r stateReplica, typ string, shard int) ([]stateRecord, error) {
	prefix := stateShardPrefix(typ, shard)
	if r.local {
		recs, _, err := s.disk.rememberedPage(prefix, "", int(^uint(0)>>1), int(^uint(0)>>1))
		return recs, err
	}
	var out []stateRecord
	after := ""
	for {
		var reply stateRememberedReply
		if err := s.call(ctx, r, topicStateRemembered, &stateRememberedReq{Type: typ, Shard: shard, After: after}, &reply); err != nil {
			return nil, err
		}
		for _, rec := range reply.Records {
			// IDs must ascend: a peer cannot make us loop.
			if rec.Kind != stateKindRemember || rec.ID <= after || len(rec.ID) > stateMaxIDLen {
				return nil, fmt.Errorf("%w: replica %s: bad remembered page (record %q after %q)", ErrStoreUnavailable, r.addr, rec.ID, after)
			}
			after = rec.ID
			out = append(out, stateRecord{Kind: stateKindRemember, ID: rec.ID, Epoch: rec.Epoch, Seq: rec.Seq, Remember: rec.Remember})
		}
		if !reply.More {
			return out, nil
		}
		if len(reply.Records) == 0 {
			return nil, fmt.Errorf("%w: replica %s: bad remembered page (more, but empty)", ErrStoreUnavailable, r.addr)
		}
	}
}

// stateServe serves one request from a peer and returns the reply body. It runs on a
// goroutine of its own (not the transport's) and may use the disk.
type stateServe func(from string, body []byte) []byte

// handler adapts a stateServe to the messenger: at most stateMaxServing requests are
// served at once (more are answered busy), each on a goroutine the store owns; a panic
// becomes a failure reply.
func (s *ReplicatedStateStore) handler(serve stateServe) cluster.Handler {
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
		if !s.spawn(func() {
			defer func() { <-s.serving }()
			defer func() {
				if v := recover(); v != nil {
					s.log.Error("state store handler panicked", "topic", r.Topic, "from", r.From, "panic", v)
					r.Reply(stateFail(fmt.Errorf("%w: handler failed", ErrStoreUnavailable)), nil)
				}
			}()
			r.Reply(serve(r.From, r.Body), nil)
		}) {
			<-s.serving
			r.Reply(stateFail(closedError()), nil)
		}
	}
}

// checkWrite validates a write request from a peer.
func (s *ReplicatedStateStore) checkWrite(req *stateWriteReq) error {
	if err := checkStateKey(req.Type, req.Shard, "", false); err != nil {
		return err
	}
	if len(req.Records) == 0 {
		return fmt.Errorf("%w: write without records", ErrMalformedMessage)
	}
	for i := range req.Records {
		r := &req.Records[i]
		if err := checkStateKey(req.Type, req.Shard, r.ID, true); err != nil {
			return err
		}
		switch r.Kind {
		case stateKindSnapshot:
			if len(r.Data) > s.cfg.MaxStateSize {
				return fmt.Errorf("%w: %d bytes, the cap is %d", ErrStateTooLarge, len(r.Data), s.cfg.MaxStateSize)
			}
			if r.Xfer != 0 && len(r.Data) > 0 {
				return fmt.Errorf("%w: record %q has data and a transfer", ErrMalformedMessage, r.ID)
			}
		case stateKindRemember:
			if len(r.Data) > 0 || r.Xfer != 0 {
				return fmt.Errorf("%w: remember record %q with data", ErrMalformedMessage, r.ID)
			}
		default:
			return fmt.Errorf("%w: record kind %d", ErrMalformedMessage, r.Kind)
		}
	}
	return nil
}

func (s *ReplicatedStateStore) serveWrite(from string, body []byte) []byte {
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
		return encodeState(&stateReply{Code: stateErrorCode(err), Msg: err.Error(), Epoch: epoch})
	}
	return encodeState(&stateReply{Epoch: epoch})
}

func (s *ReplicatedStateStore) serveChunk(from string, body []byte) []byte {
	var req stateChunkReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	switch {
	case req.Xfer == 0 || req.Offset < 0 || req.Total <= 0 || len(req.Data) == 0:
		return stateFail(fmt.Errorf("%w: chunk of transfer %x: offset %d, %d of %d bytes", ErrMalformedMessage, req.Xfer, req.Offset, len(req.Data), req.Total))
	case req.Total > s.cfg.MaxStateSize:
		return stateFail(fmt.Errorf("%w: %d bytes, the cap is %d", ErrStateTooLarge, req.Total, s.cfg.MaxStateSize))
	case req.Offset > req.Total-len(req.Data):
		return stateFail(fmt.Errorf("%w: chunk of transfer %x past its end", ErrMalformedMessage, req.Xfer))
	}
	if err := s.stage(from, &req); err != nil {
		return stateFail(err)
	}
	return encodeState(&stateReply{})
}

func (s *ReplicatedStateStore) serveRead(from string, body []byte) []byte {
	var req stateReadReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := checkStateKey(req.Type, req.Shard, req.ID, true); err != nil {
		return stateFail(err)
	}
	if req.Offset < 0 {
		return stateFail(fmt.Errorf("%w: read at offset %d", ErrMalformedMessage, req.Offset))
	}
	ver, size, data, found, err := s.disk.read(stateShardPrefix(req.Type, req.Shard), req.ID, req.Offset, s.cfg.ChunkSize)
	switch {
	case err != nil:
		return stateFail(err)
	case req.Offset > 0 && (!found || ver != stateVersion{req.Epoch, req.Seq}):
		return stateFail(errStateChanged)
	case found && req.Offset > size:
		return stateFail(fmt.Errorf("%w: read at offset %d of %d bytes", ErrMalformedMessage, req.Offset, size))
	}
	return encodeState(&stateReadReply{Found: found, Epoch: ver.Epoch, Seq: ver.Seq, Size: size, Data: data})
}

func (s *ReplicatedStateStore) serveRemembered(from string, body []byte) []byte {
	var req stateRememberedReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := checkStateKey(req.Type, req.Shard, req.After, false); err != nil {
		return stateFail(err)
	}
	recs, more, err := s.disk.rememberedPage(stateShardPrefix(req.Type, req.Shard), req.After, s.cfg.ChunkSize, stateMaxPageRecords)
	if err != nil {
		return stateFail(err)
	}
	return encodeState(&stateRememberedReply{Records: recs, More: more})
}

func (s *ReplicatedStateStore) serveSummary(from string, body []byte) []byte {
	var req stateSummaryReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := checkStateKey(req.Type, req.Shard, "", false); err != nil {
		return stateFail(err)
	}
	if req.Count < 0 || len(req.Hash) != sha256.Size {
		return stateFail(fmt.Errorf("%w: summary of %d records with a %d-byte hash", ErrMalformedMessage, req.Count, len(req.Hash)))
	}
	prefix := stateShardPrefix(req.Type, req.Shard)
	if _, err := s.disk.raiseEpoch(prefix, req.Epoch); err != nil {
		return stateFail(err)
	}
	sum, err := s.disk.summary(prefix, false)
	if err != nil {
		return stateFail(err)
	}
	return encodeState(&stateSummaryReply{Epoch: sum.epoch, Same: sum.count == req.Count && bytes.Equal(sum.hash, req.Hash)})
}

func (s *ReplicatedStateStore) serveDiff(from string, body []byte) []byte {
	var req stateDiffReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	if err := checkStateKey(req.Type, req.Shard, "", false); err != nil {
		return stateFail(err)
	}
	for i := range req.Records {
		r := &req.Records[i]
		if err := checkStateKey(req.Type, req.Shard, r.ID, true); err != nil {
			return stateFail(err)
		}
		if (r.Kind != stateKindSnapshot && r.Kind != stateKindRemember) || len(r.Data) > 0 || r.Xfer != 0 {
			return stateFail(fmt.Errorf("%w: diff entry %q of kind %d", ErrMalformedMessage, r.ID, r.Kind))
		}
	}
	need, err := s.disk.needs(stateShardPrefix(req.Type, req.Shard), req.Records)
	if err != nil {
		return stateFail(err)
	}
	return encodeState(&stateDiffReply{Need: need})
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
func (s *ReplicatedStateStore) stagingLimit() int {
	return min(s.cfg.MaxStateSize, int(^uint(0)>>2)) * 2
}

// stagingTTL is how long a transfer may wait for its next chunk or its write.
func (s *ReplicatedStateStore) stagingTTL() time.Duration { return 4 * s.cfg.RequestTimeout }

// stage appends a chunk to its transfer, starting it at offset 0. Errors: a chunk out
// of order or a total that changed (the transfer is dropped), staging full (busy).
func (s *ReplicatedStateStore) stage(from string, req *stateChunkReq) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedError()
	}
	now := s.now()
	s.sweepStagingLocked(now)
	k := stateStagingKey{from, req.Xfer}
	t := s.staging[k]
	if t == nil {
		if req.Offset != 0 {
			return fmt.Errorf("%w: chunk at %d of transfer %x, which has not started", ErrMalformedMessage, req.Offset, req.Xfer)
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
		return fmt.Errorf("%w: chunk at %d of %d bytes, transfer %x has %d of %d", ErrMalformedMessage, req.Offset, req.Total, req.Xfer, len(t.buf), t.total)
	}
	t.buf = append(t.buf, req.Data...)
	t.touched = now
	return nil
}

// takeStaged returns a complete transfer's bytes and forgets it.
func (s *ReplicatedStateStore) takeStaged(from string, xfer uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := stateStagingKey{from, xfer}
	t := s.staging[k]
	if t == nil || len(t.buf) != t.total {
		if t != nil {
			s.dropStagedLocked(k, t)
		}
		return nil, fmt.Errorf("%w: transfer %x unknown, expired or incomplete", ErrMalformedMessage, xfer)
	}
	s.dropStagedLocked(k, t)
	return t.buf, nil
}

func (s *ReplicatedStateStore) dropStagedLocked(k stateStagingKey, t *stateStaged) {
	delete(s.staging, k)
	s.staged -= t.total
}

func (s *ReplicatedStateStore) sweepStagingLocked(now time.Time) {
	for k, t := range s.staging {
		if now.Sub(t.touched) > s.stagingTTL() {
			s.dropStagedLocked(k, t)
		}
	}
}

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
func (s *ReplicatedStateStore) queueRepair(job stateRepairJob) {
	select {
	case s.readRepairs <- job:
	default:
		s.readRepairsDropped.Add(1)
	}
}

func (s *ReplicatedStateStore) readRepairLoop() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case job := <-s.readRepairs:
			s.runRepair(job)
		}
	}
}

// runRepair writes a read repair's records (unfenced: versions decide) to its targets.
func (s *ReplicatedStateStore) runRepair(job stateRepairJob) {
	recs := job.records
	if job.pull != nil {
		key := EntityKey{Type: job.typ, Shard: job.shard, ID: job.pull.id}
		a := s.readFrom(s.ctx, job.pull.from, key)
		if a.err != nil || !a.found || a.ver.less(job.pull.ver) {
			s.log.Debug("read repair: source no longer has the snapshot", "key", key, "err", a.err)
			return
		}
		data, err := s.fetchRest(s.ctx, key, &a)
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
		if err := s.writeTo(s.ctx, t, req); err != nil {
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
func (s *ReplicatedStateStore) repairLoop() {
	t := time.NewTicker(s.cfg.RepairInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case e := <-s.sub.C:
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
		s.repairMu.Lock()
		err := s.repairPass(s.ctx)
		s.repairMu.Unlock()
		if err != nil && s.ctx.Err() == nil {
			s.log.Debug("state repair pass incomplete", "err", err)
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
func (s *ReplicatedStateStore) repairPass(ctx context.Context) error {
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
	if !s.closed {
		s.sweepStagingLocked(s.now())
	}
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: repair pass: %w", ErrStoreUnavailable, err)
	}
	if unsynced > 0 {
		return fmt.Errorf("%w: repair pass: %d of %d shards not in sync with all their replicas: %w",
			ErrStoreUnavailable, unsynced, len(shards), firstErr)
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
func (s *ReplicatedStateStore) repairShard(ctx context.Context, sh stateShardRef, pass *stateRepairPass) error {
	reps, err := s.replicaSet(sh.typ, sh.shard)
	if err != nil {
		return err
	}
	prefix := stateShardPrefix(sh.typ, sh.shard)
	sum, err := s.disk.summary(prefix, true)
	if err != nil {
		return err
	}
	isReplica, synced := false, 0
	var errs []error
	for _, r := range reps {
		switch {
		case r.local:
			isReplica = true
		case !r.reachable:
			errs = append(errs, fmt.Errorf("%w: replica %s is unreachable", ErrStoreUnavailable, r.addr))
		case pass.hasFailed(r.addr):
			errs = append(errs, fmt.Errorf("%w: replica %s failed earlier in this pass", ErrStoreUnavailable, r.addr))
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
func (s *ReplicatedStateStore) syncShard(ctx context.Context, r stateReplica, sh stateShardRef, prefix []byte, sum *stateSummary) error {
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
	entries := sum.entries
	for len(entries) > 0 {
		n, size := 0, 0
		for n < len(entries) && n < stateMaxPageRecords && (n == 0 || size+len(entries[n].ID)+32 <= s.cfg.ChunkSize) {
			size += len(entries[n].ID) + 32
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
				return fmt.Errorf("%w: replica %s: bad diff reply", ErrStoreUnavailable, r.addr)
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
func (s *ReplicatedStateStore) pushRecords(ctx context.Context, r stateReplica, sh stateShardRef, prefix []byte, epoch uint64, page []stateRecord, need []int) error {
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
		rec, found, err := s.disk.record(prefix, page[i].Kind, page[i].ID)
		if err != nil {
			return err
		}
		if !found {
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

// stateDisk is a member's replica data: a bbolt file (layout in statestore_wire.go).
// One goroutine writes: it commits the writes waiting in its queue together, in one
// transaction and one fsync (group commit), and acknowledges each after the fsync.
// Reads run beside it, each in a read transaction. Safe for concurrent use.
type stateDisk struct {
	path string
	db   *bolt.DB
	ops  chan *stateDiskOp
	stop chan struct{}
	done chan struct{}
	once sync.Once
	err  error
}

// stateDiskOp is a write waiting for the writer. fn may run twice (after a failed
// batch, each op is retried alone) and reports whether it changed anything.
type stateDiskOp struct {
	fn   func(eb, rb *bolt.Bucket) (changed bool, err error)
	size int
	done chan error
}

const (
	stateDiskQueue      = 256
	stateDiskBatchOps   = 256
	stateDiskBatchBytes = 16 << 20
)

// openStateDisk opens (or creates) the data file in dir, creating dir with mode 0o700
// and the file with mode 0o600. Errors wrap ErrStoreUnavailable: the directory cannot be
// made, another store holds the file (its lock is not taken within 1 s), the file is
// not a valid bbolt file.
func openStateDisk(dir string) (*stateDisk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: state store: create directory: %w", ErrStoreUnavailable, err)
	}
	path := filepath.Join(dir, StateFileName)
	_, statErr := os.Stat(path)
	var db *bolt.DB
	err := guardState(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
		return err
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		err = fmt.Errorf("directory %s is in use by another store: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: state store: open %s: %w", ErrStoreUnavailable, path, err)
	}
	err = guardState(func() error {
		return db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{stateBucketEpochs, stateBucketRecords} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err == nil && errors.Is(statErr, os.ErrNotExist) {
		err = syncStateDir(dir) // bbolt fsyncs the new file, not the entry naming it
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: state store: open %s: %w", ErrStoreUnavailable, path, err)
	}
	d := &stateDisk{path: path, db: db, ops: make(chan *stateDiskOp, stateDiskQueue),
		stop: make(chan struct{}), done: make(chan struct{})}
	go d.run()
	return d, nil
}

func syncStateDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// guardState runs fn, turning a panic of bbolt (its reaction to some corrupt pages) or a
// memory fault into an error.
func guardState(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt database: panic: %v", r)
		}
	}()
	return fn()
}

// close stops the writer (writes still queued fail) and closes the file. Idempotent.
func (d *stateDisk) close() error {
	d.once.Do(func() {
		close(d.stop)
		<-d.done
		if err := d.db.Close(); err != nil {
			d.err = fmt.Errorf("%w: state store %s: close: %w", ErrStoreUnavailable, d.path, err)
		}
	})
	return d.err
}

func (d *stateDisk) run() {
	defer close(d.done)
	for {
		var first *stateDiskOp
		select {
		case first = <-d.ops:
		case <-d.stop:
			return
		}
		batch, size := []*stateDiskOp{first}, first.size
	fill:
		for len(batch) < stateDiskBatchOps && size < stateDiskBatchBytes {
			select {
			case op := <-d.ops:
				batch = append(batch, op)
				size += op.size
			default:
				break fill
			}
		}
		err := d.commit(batch)
		if err != nil && len(batch) > 1 {
			for _, op := range batch { // one op's failure must not fail the others
				op.done <- d.commit([]*stateDiskOp{op})
			}
			continue
		}
		for _, op := range batch {
			op.done <- err
		}
	}
}

// commit runs the ops in one transaction, committed (and fsynced) unless none changed
// anything.
func (d *stateDisk) commit(batch []*stateDiskOp) error {
	err := guardState(func() error {
		return d.db.Update(func(tx *bolt.Tx) error {
			eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
			if eb == nil || rb == nil {
				return errors.New("buckets missing")
			}
			changed := false
			for _, op := range batch {
				c, err := op.fn(eb, rb)
				if err != nil {
					return err
				}
				changed = changed || c
			}
			if !changed {
				return errStateNoChange
			}
			return nil
		})
	})
	if errors.Is(err, errStateNoChange) {
		return nil
	}
	return err
}

// update runs fn in a write transaction (shared with other writes) and returns once it
// is on disk.
func (d *stateDisk) update(size int, fn func(eb, rb *bolt.Bucket) (bool, error)) error {
	op := &stateDiskOp{fn: fn, size: size, done: make(chan error, 1)}
	select {
	case d.ops <- op:
	case <-d.stop:
		return errStateClosed
	}
	select {
	case err := <-op.done:
		return err
	case <-d.done:
		select {
		case err := <-op.done:
			return err
		default:
			return errStateClosed
		}
	}
}

// view runs fn in a read transaction. Errors wrap ErrStoreUnavailable.
func (d *stateDisk) view(fn func(eb, rb *bolt.Bucket) error) error {
	err := guardState(func() error {
		return d.db.View(func(tx *bolt.Tx) error {
			eb, rb := tx.Bucket(stateBucketEpochs), tx.Bucket(stateBucketRecords)
			if eb == nil || rb == nil {
				return errors.New("buckets missing")
			}
			return fn(eb, rb)
		})
	})
	if err != nil {
		return fmt.Errorf("%w: state store %s: read: %w", ErrStoreUnavailable, d.path, err)
	}
	return nil
}

// stateEpochOf returns the epoch stored for a shard, and whether there is an entry.
func stateEpochOf(eb *bolt.Bucket, prefix []byte) (uint64, bool) {
	v := eb.Get(prefix)
	if v == nil {
		return 0, false
	}
	if len(v) != 8 {
		return 0, true
	}
	return binary.BigEndian.Uint64(v), true
}

// applyWrite applies a write request (see stateWriteReq) and returns the shard's epoch
// after it. Errors: ErrStaleEpoch (a fenced write older than the shard's epoch: nothing
// written), ErrStoreUnavailable (the disk failed).
func (d *stateDisk) applyWrite(req *stateWriteReq) (uint64, error) {
	prefix := stateShardPrefix(req.Type, req.Shard)
	size := 0
	for i := range req.Records {
		size += len(req.Records[i].ID) + len(req.Records[i].Data)
	}
	var epoch uint64
	var stale bool
	err := d.update(size, func(eb, rb *bolt.Bucket) (bool, error) {
		cur, has := stateEpochOf(eb, prefix)
		if req.Fence && req.Epoch < cur {
			epoch, stale = cur, true
			return false, nil
		}
		epoch, stale = max(cur, req.Epoch), false
		changed := false
		if !has || epoch != cur {
			if err := eb.Put(prefix, binary.BigEndian.AppendUint64(nil, epoch)); err != nil {
				return false, err
			}
			changed = true
		}
		for i := range req.Records {
			r := &req.Records[i]
			k := stateRecordKey(prefix, r.Kind, r.ID)
			if old := rb.Get(k); old != nil {
				if ov, _, _, ok := decodeStateValue(old); ok && !ov.less(r.version()) {
					continue // the replica's is as new or newer
				}
			}
			if err := rb.Put(k, encodeStateValue(r)); err != nil {
				return false, err
			}
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: write: %w", ErrStoreUnavailable, d.path, err)
	}
	if stale {
		return epoch, fmt.Errorf("%w: epoch %d is older than the replica's %d for %s/%d", ErrStaleEpoch, req.Epoch, epoch, req.Type, req.Shard)
	}
	return epoch, nil
}

// raiseEpoch makes the shard's epoch at least epoch (creating its entry) and returns
// it; it writes only if that changes something.
func (d *stateDisk) raiseEpoch(prefix []byte, epoch uint64) (uint64, error) {
	var cur uint64
	var has bool
	if err := d.view(func(eb, rb *bolt.Bucket) error {
		cur, has = stateEpochOf(eb, prefix)
		return nil
	}); err != nil {
		return 0, err
	}
	if has && cur >= epoch {
		return cur, nil
	}
	err := d.update(8, func(eb, rb *bolt.Bucket) (bool, error) {
		c, has := stateEpochOf(eb, prefix)
		if has && c >= epoch {
			cur = c
			return false, nil
		}
		cur = max(c, epoch)
		return true, eb.Put(prefix, binary.BigEndian.AppendUint64(nil, cur))
	})
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: write: %w", ErrStoreUnavailable, d.path, err)
	}
	return cur, nil
}

// record returns a record with its data (a copy).
func (d *stateDisk) record(prefix []byte, kind uint8, id string) (stateRecord, bool, error) {
	var rec stateRecord
	var found bool
	err := d.view(func(eb, rb *bolt.Bucket) error {
		ver, remember, data, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, kind, id)))
		if ok {
			found = true
			rec = stateRecord{Kind: kind, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Remember: remember,
				Data: append([]byte{}, data...)}
		}
		return nil
	})
	return rec, found, err
}

// read returns a snapshot's version and size and a copy of at most max bytes of it
// from off (none if off is past its end).
func (d *stateDisk) read(prefix []byte, id string, off, maxBytes int) (ver stateVersion, size int, data []byte, found bool, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		v, _, all, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, stateKindSnapshot, id)))
		if !ok {
			return nil
		}
		ver, size, found = v, len(all), true
		if off <= len(all) {
			data = append([]byte{}, all[off:off+min(maxBytes, len(all)-off)]...)
		}
		return nil
	})
	return
}

// rememberedPage returns the remember marks of a shard whose IDs sort after after, in
// ID order, stopping before limit records or budget bytes (at least one record);
// more: some are left.
func (d *stateDisk) rememberedPage(prefix []byte, after string, budget, limit int) (recs []stateRecord, more bool, err error) {
	kp := append(bytes.Clone(prefix), stateKindRemember)
	start := append(bytes.Clone(kp), after...)
	err = d.view(func(eb, rb *bolt.Bucket) error {
		recs, more = nil, false
		size := 0
		c := rb.Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, kp); k, v = c.Next() {
			id := string(k[len(kp):])
			if id == after {
				continue
			}
			ver, remember, _, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			if len(recs) > 0 && (len(recs) >= limit || size+len(id)+32 > budget) {
				more = true
				return nil
			}
			recs = append(recs, stateRecord{Kind: stateKindRemember, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Remember: remember})
			size += len(id) + 32
		}
		return nil
	})
	return recs, more, err
}

// stateSummary digests a shard's records on one member: its epoch, its record count,
// and a SHA-256 over (kind, ID, epoch, seq) of each record in key order, which two
// members holding the same versions compute alike. entries lists the versions.
type stateSummary struct {
	epoch   uint64
	count   int
	hash    []byte
	entries []stateRecord
}

// summary digests a shard's records, listing their versions if withEntries.
func (d *stateDisk) summary(prefix []byte, withEntries bool) (stateSummary, error) {
	var sum stateSummary
	err := d.view(func(eb, rb *bolt.Bucket) error {
		sum = stateSummary{}
		sum.epoch, _ = stateEpochOf(eb, prefix)
		h := sha256.New()
		var buf []byte
		c := rb.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			kind, id, ok := splitStateRecordKey(prefix, k)
			if !ok {
				continue
			}
			ver, _, _, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			buf = append(buf[:0], kind)
			buf = binary.AppendUvarint(buf, uint64(len(id)))
			buf = append(buf, id...)
			buf = binary.BigEndian.AppendUint64(buf, ver.Epoch)
			buf = binary.BigEndian.AppendUint64(buf, ver.Seq)
			h.Write(buf)
			sum.count++
			if withEntries {
				sum.entries = append(sum.entries, stateRecord{Kind: kind, ID: id, Epoch: ver.Epoch, Seq: ver.Seq})
			}
		}
		sum.hash = h.Sum(nil)
		return nil
	})
	return sum, err
}

// needs returns the indexes of the records this member lacks or holds older.
func (d *stateDisk) needs(prefix []byte, recs []stateRecord) ([]int, error) {
	var need []int
	err := d.view(func(eb, rb *bolt.Bucket) error {
		need = nil
		for i := range recs {
			ver, _, _, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, recs[i].Kind, recs[i].ID)))
			if !ok || ver.less(recs[i].version()) {
				need = append(need, i)
			}
		}
		return nil
	})
	return need, err
}

// shards lists the shards this member stores (those with an epoch entry).
func (d *stateDisk) shards() ([]stateShardRef, error) {
	var out []stateShardRef
	err := d.view(func(eb, rb *bolt.Bucket) error {
		out = nil
		return eb.ForEach(func(k, v []byte) error {
			if typ, shard, ok := parseStateShardPrefix(k); ok {
				out = append(out, stateShardRef{typ, shard})
			}
			return nil
		})
	})
	return out, err
}

// dropSynced deletes the listed records that still have the listed versions, and the
// shard's epoch entry if no record of it is left. It returns how many it deleted.
func (d *stateDisk) dropSynced(prefix []byte, entries []stateRecord) (int, error) {
	dropped := 0
	err := d.update(0, func(eb, rb *bolt.Bucket) (bool, error) {
		dropped = 0
		for i := range entries {
			k := stateRecordKey(prefix, entries[i].Kind, entries[i].ID)
			v := rb.Get(k)
			if v == nil {
				continue
			}
			if ver, _, _, ok := decodeStateValue(v); ok && ver != entries[i].version() {
				continue // written since the replicas acknowledged
			}
			if err := rb.Delete(k); err != nil {
				return false, err
			}
			dropped++
		}
		if k, _ := rb.Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			return dropped > 0, nil
		}
		if eb.Get(prefix) == nil {
			return dropped > 0, nil
		}
		return true, eb.Delete(prefix)
	})
	if err != nil {
		return 0, fmt.Errorf("%w: state store %s: drop: %w", ErrStoreUnavailable, d.path, err)
	}
	return dropped, nil
}
