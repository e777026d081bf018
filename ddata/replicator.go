package ddata

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/owner"
)

// Errors of the replicator (Akka's reply kinds, as errors).
var (
	// ErrNotFound: no replica asked has the key (Akka's NotFound).
	ErrNotFound = errors.New("ddata: not found")
	// ErrDataDeleted: the key was deleted; it cannot be used again (Akka's DataDeleted).
	ErrDataDeleted = errors.New("ddata: data deleted")
	// ErrGetFailure: not enough replicas answered in time (Akka's GetFailure).
	ErrGetFailure = errors.New("ddata: read consistency not reached in time")
	// ErrUpdateTimeout: not enough replicas acknowledged in time. The update is applied
	// locally and may have reached others; gossip spreads it (Akka's UpdateTimeout).
	ErrUpdateTimeout = errors.New("ddata: write consistency not reached in time; the update may still be replicated")
	// ErrModifyFailure: the modify function failed; nothing changed (Akka's ModifyFailure).
	ErrModifyFailure = errors.New("ddata: modify function failed")
	// ErrReplicatorClosed: the replicator has stopped.
	ErrReplicatorClosed = errors.New("ddata: replicator closed")
	// ErrBadKey: a key must be 1 to MaxKeyLength bytes of UTF-8.
	ErrBadKey = errors.New("ddata: bad key")
)

// MaxKeyLength is the longest key, in bytes.
const MaxKeyLength = 1024

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLength || !utf8.ValidString(key) {
		return fmt.Errorf("%w: %q (want 1 to %d bytes of UTF-8)", ErrBadKey, truncate(key, 40), MaxKeyLength)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Topics of replicator messages between members.
const (
	topicStatus = "ddata/status"
	topicGossip = "ddata/gossip"
	topicDelta  = "ddata/delta"
	topicWrite  = "ddata/write"
	topicRead   = "ddata/read"
	// topicPruning carries pruningSeenMsg: a replica tells the owner of prunings which
	// of their markers it has seen.
	topicPruning = "ddata/pruning-seen"
)

// Membership is what the replicator needs of membership; *cluster.Membership has it.
type Membership interface {
	Self() cluster.Member
	View() cluster.View
	Members() []cluster.Member
	Subscribe(buffer int) *cluster.Subscription
}

// Messenger is what the replicator needs of node-to-node messaging; *cluster.Messenger
// has it.
type Messenger interface {
	Handle(topic string, h cluster.Handler)
	Tell(addr, topic string, body []byte) error
	Request(ctx context.Context, addr, topic string, body []byte) ([]byte, error)
}

// ExpiryRule removes a key after a period without Get, Update or Delete.
type ExpiryRule struct {
	// Pattern is a key, or a prefix ending in '*' ("cache-*"; "*" for every key).
	Pattern string
	After   time.Duration
}

// ReplicatorConfig configures a Replicator.
type ReplicatorConfig struct {
	Membership Membership
	Messenger  Messenger
	// Store keeps durable keys on disk; nil keeps nothing. With Store, DurableKeys lists
	// the keys (or prefixes ending in '*') that are durable.
	Store       DurableStore
	DurableKeys []string
	// WriteBehindInterval batches durable writes: 0 writes each update to disk before
	// Update returns; more writes every interval (faster, may lose the last interval).
	WriteBehindInterval time.Duration
	// GossipInterval is how often a replica sends digests of a chunk of its keys to a
	// random member (anti-entropy). Default 2 s.
	GossipInterval time.Duration
	// DeltaPropagationInterval is how often accumulated deltas are sent. Default 200 ms.
	DeltaPropagationInterval time.Duration
	// DeltaEnabled turns delta propagation on (default); off, changes travel by gossip.
	DeltaEnabled bool
	// NotifySubscribersInterval is how often subscribers hear of changes. Default 500 ms.
	NotifySubscribersInterval time.Duration
	// MaxDeltaElements is the number of keys per gossip chunk and per message. Default 500.
	MaxDeltaElements int
	// PruningInterval is how often data of removed members is pruned. Default 30 s.
	PruningInterval time.Duration
	// MaxPruningDissemination is how long a performed pruning marker is kept. Default 300 s.
	MaxPruningDissemination time.Duration
	// Expiry removes keys after inactivity (first matching rule wins).
	Expiry []ExpiryRule
	// Now is the clock of the replicator's rounds (delta propagation, gossip,
	// notifications, pruning, write-behind; a clock set back restarts them rather than
	// stalling them), of when keys were last used (expiry, sent with the data as wall
	// time) and of pruning markers; default time.Now. The rounds' ticker and the
	// timeouts of reads and writes follow real time. Tests give a simulated clock.
	Now func() time.Time
	// Logger receives the replicator's logs. Nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider makes a span for each Get, Update and Delete called in a traced
	// context ("ddata get", ...: key, CRDT type, consistency, replicas answered,
	// outcome). Nil: none.
	TracerProvider trace.TracerProvider
	// MeterProvider records the replicator's metrics (operations by consistency and
	// outcome with their duration, keys, bytes sent by message kind). Nil: none.
	MeterProvider metric.MeterProvider
}

// DefaultReplicatorConfig returns the defaults described on ReplicatorConfig.
func DefaultReplicatorConfig() ReplicatorConfig {
	return ReplicatorConfig{
		GossipInterval:            2 * time.Second,
		DeltaPropagationInterval:  200 * time.Millisecond,
		DeltaEnabled:              true,
		NotifySubscribersInterval: 500 * time.Millisecond,
		MaxDeltaElements:          500,
		PruningInterval:           30 * time.Second,
		MaxPruningDissemination:   300 * time.Second,
	}
}

// Validate reports a configuration that cannot work.
func (c ReplicatorConfig) Validate() error {
	switch {
	case c.Membership == nil || c.Messenger == nil:
		return errors.New("ddata: Membership and Messenger are required")
	case c.GossipInterval <= 0 || c.DeltaPropagationInterval <= 0 || c.NotifySubscribersInterval <= 0 ||
		c.PruningInterval <= 0 || c.MaxPruningDissemination <= 0 || c.WriteBehindInterval < 0:
		return errors.New("ddata: intervals must be positive")
	case c.MaxDeltaElements < 1:
		return errors.New("ddata: MaxDeltaElements must be at least 1")
	case len(c.DurableKeys) > 0 && c.Store == nil:
		return errors.New("ddata: durable keys need a store")
	}
	for _, r := range c.Expiry {
		if r.After <= 0 || r.Pattern == "" {
			return fmt.Errorf("ddata: bad expiry rule %+v", r)
		}
	}
	return nil
}

// matches reports whether key matches pattern: equal, or with the prefix of a pattern
// ending in '*'.
func matches(pattern, key string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(key, p)
	}
	return pattern == key
}

// pendingDelta is the accumulated delta of one key not yet propagated.
type pendingDelta struct {
	data     ReplicatedData
	from, to uint64 // sequence numbers of this node's deltas for the key
}

// Replicator is a member's replica of the cluster's distributed data (Akka's
// Replicator): keys mapped to CRDT values, replicated by delta propagation and by gossip
// of digests, read and written with per-call consistency levels. It is safe for
// concurrent use.
type Replicator struct {
	cfg  ReplicatorConfig
	log  *slog.Logger
	self NodeID
	now  func() time.Time
	rng  *rand.Rand

	mu         sync.Mutex
	data       map[string]envelope
	digests    map[string][32]byte
	lastAccess map[string]time.Time
	deltas     map[string]pendingDelta
	seq        map[string]uint64            // own delta sequence per key
	received   map[NodeID]map[string]uint64 // last delta sequence seen per origin and key
	changed    map[string]bool              // keys to notify subscribers of
	subs       map[*Subscription]struct{}
	removed    map[NodeID]bool // removed members whose data is being pruned

	// seenFor holds, per owner of a pruning and removed member, the keys whose markers
	// this replica has seen and not yet told the owner of (sendSeen).
	seenFor map[NodeID]map[NodeID][]string
	// seenBy holds, per key and removed member, the members that told this replica
	// they have seen its marker (handlePruningSeen), for the next prune.
	seenBy map[string]map[NodeID][]NodeID

	dirty       map[string]bool // durable keys not yet written (write-behind)
	chunk       int
	gossipBytes atomic.Uint64 // bytes of ddata messages sent, for benchmarks
	sentBytes   [numMsgKinds]atomic.Uint64
	tel         replicatorTelemetry

	owner     *owner.Group // runs run; Close closes it and waits
	closeOnce sync.Once
	sub       *cluster.Subscription
}

// NewReplicator starts a replicator: it loads the durable keys, registers its message
// handlers and starts its background work. Close stops it.
func NewReplicator(cfg ReplicatorConfig) (*Replicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	self := cfg.Membership.Self()
	r := &Replicator{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "ddata.replicator"),
		self:       NodeID(self.UniqueAddress()),
		now:        cfg.Now,
		rng:        rand.New(rand.NewSource(int64(self.UID))),
		data:       map[string]envelope{},
		digests:    map[string][32]byte{},
		lastAccess: map[string]time.Time{},
		deltas:     map[string]pendingDelta{},
		seq:        map[string]uint64{},
		received:   map[NodeID]map[string]uint64{},
		changed:    map[string]bool{},
		subs:       map[*Subscription]struct{}{},
		removed:    map[NodeID]bool{},
		seenFor:    map[NodeID]map[NodeID][]string{},
		seenBy:     map[string]map[NodeID][]NodeID{},
		dirty:      map[string]bool{},
		owner:      owner.New(),
	}
	if cfg.Store != nil {
		if err := r.load(); err != nil {
			return nil, err
		}
	}
	r.instrument()
	cfg.Messenger.Handle(topicStatus, r.handleStatus)
	cfg.Messenger.Handle(topicGossip, r.handleGossip)
	cfg.Messenger.Handle(topicDelta, r.handleDelta)
	cfg.Messenger.Handle(topicWrite, r.handleWrite)
	cfg.Messenger.Handle(topicRead, r.handleRead)
	cfg.Messenger.Handle(topicPruning, r.handlePruningSeen)
	r.sub = cfg.Membership.Subscribe(256)
	r.owner.Go(r.run)
	return r, nil
}

// SelfNodeID is this replica's node ID, the one its updates are recorded under.
func (r *Replicator) SelfNodeID() NodeID { return r.self }

// load reads the durable store into memory.
func (r *Replicator) load() error {
	entries, err := r.cfg.Store.Load()
	if err != nil {
		return fmt.Errorf("%w: loading durable keys: %v", ErrStoreFailure, err)
	}
	for key, b := range entries {
		env, err := decodeEnvelope(b)
		if err != nil {
			r.log.Error("skipping a durable key that does not decode", "key", key, "err", err)
			continue
		}
		r.setLocked(key, env)
		r.lastAccess[key] = r.now()
	}
	if len(entries) > 0 {
		r.log.Info("durable keys loaded", "keys", len(entries))
	}
	return nil
}

// Close stops the replicator, writing pending durable keys. Idempotent.
func (r *Replicator) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.owner.Close()
		r.owner.Wait()
		r.sub.Close()
		r.mu.Lock()
		err = r.flushLocked()
		r.mu.Unlock()
	})
	return err
}

func (r *Replicator) closed() bool {
	select {
	case <-r.owner.Done():
		return true
	default:
		return false
	}
}

// setLocked stores an envelope and its digest; r.mu is held.
func (r *Replicator) setLocked(key string, env envelope) {
	r.data[key] = env
	if d, err := env.digest(); err == nil {
		r.digests[key] = d
	}
}

func (r *Replicator) isDurable(key string) bool {
	for _, p := range r.cfg.DurableKeys {
		if matches(p, key) {
			return true
		}
	}
	return false
}

// persistLocked writes a durable key: at once (before the caller replies) without
// write-behind, else later. r.mu is held.
func (r *Replicator) persistLocked(key string, sync bool) error {
	if r.cfg.Store == nil || !r.isDurable(key) {
		return nil
	}
	if !sync || r.cfg.WriteBehindInterval > 0 {
		r.dirty[key] = true
		return nil
	}
	b, err := r.data[key].encode()
	if err != nil {
		return err
	}
	if err := r.cfg.Store.Store(map[string][]byte{key: b}); err != nil {
		return fmt.Errorf("%w: %v", ErrStoreFailure, err)
	}
	return nil
}

func (r *Replicator) flushLocked() error {
	if r.cfg.Store == nil || len(r.dirty) == 0 {
		return nil
	}
	batch := map[string][]byte{}
	for key := range r.dirty {
		if env, ok := r.data[key]; ok {
			if b, err := env.encode(); err == nil {
				batch[key] = b
			}
		} else {
			batch[key] = nil
		}
	}
	if err := r.cfg.Store.Store(batch); err != nil {
		return fmt.Errorf("%w: %v", ErrStoreFailure, err)
	}
	r.dirty = map[string]bool{}
	return nil
}

// Get reads key with the given consistency until ctx ends. Errors: ErrNotFound,
// ErrDataDeleted, ErrGetFailure (not enough replicas answered; never for ReadLocal),
// ErrReplicatorClosed.
func (r *Replicator) Get(ctx context.Context, key string, rc ReadConsistency) (d ReplicatedData, err error) {
	ctx, done := r.tel.start(ctx, opGet, key, rc.c, "")
	defer func() { done(d, err) }()
	return r.get(ctx, key, rc)
}

func (r *Replicator) get(ctx context.Context, key string, rc ReadConsistency) (ReplicatedData, error) {
	if r.closed() {
		return nil, ErrReplicatorClosed
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.lastAccess[key] = r.now()
	local, ok := r.data[key]
	r.mu.Unlock()
	// A local read asks nobody: the members are not even listed (O(members) a read).
	var peers []cluster.Member
	needed := 1
	if rc.c.level != levelLocal {
		peers = r.peers()
		needed = rc.c.needed(len(peers) + 1)
	}
	if needed > 1 {
		merged, found, err := r.readFrom(ctx, key, peers, needed-1)
		if err != nil {
			return nil, err
		}
		if found {
			// Read repair: what the others had is merged in here too.
			env, err := r.mergeIncoming(key, merged)
			if err != nil {
				return nil, err
			}
			local, ok = env, true
		}
	}
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	case local.deleted:
		return nil, fmt.Errorf("%w: %q", ErrDataDeleted, key)
	}
	return local.data, nil
}

// Update applies modify to key's value (initial if the key is new) and replicates the
// result with the given write consistency. modify returns the new value and its delta
// (nil: the whole value is the delta); it runs under the replicator's lock and must be
// pure. The new local value is returned, and is what later local reads see. Errors:
// ErrDataDeleted, ErrModifyFailure (wrapping modify's error), ErrTypeMismatch (the new
// value is of another type than the key's), ErrStoreFailure, ErrUpdateTimeout (the
// update stands locally and may spread), ErrReplicatorClosed.
func (r *Replicator) Update(ctx context.Context, key string, initial ReplicatedData, wc WriteConsistency,
	modify func(ReplicatedData) (ReplicatedData, ReplicatedData, error)) (d ReplicatedData, err error) {
	var typ DataType
	if initial != nil {
		typ = initial.Type()
	}
	ctx, done := r.tel.start(ctx, opUpdate, key, wc.c, typ)
	defer func() { done(d, err) }()
	return r.update(ctx, key, initial, wc, modify)
}

func (r *Replicator) update(ctx context.Context, key string, initial ReplicatedData, wc WriteConsistency,
	modify func(ReplicatedData) (ReplicatedData, ReplicatedData, error)) (ReplicatedData, error) {
	if r.closed() {
		return nil, ErrReplicatorClosed
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	r.mu.Lock()
	cur, exists := r.data[key]
	if cur.deleted {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrDataDeleted, key)
	}
	value := cur.data
	if !exists || value == nil {
		value = initial
	}
	if value == nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %q has no value and no initial value was given", ErrModifyFailure, key)
	}
	next, delta, err := modify(value)
	if err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrModifyFailure, err)
	}
	if next == nil || next.Type() != value.Type() {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: key %q holds %s, the update makes %v", ErrTypeMismatch, key, value.Type(), typeOf(next))
	}
	env := envelope{data: next, pruning: cur.pruning, usedAt: r.now().UnixMilli()}
	r.setLocked(key, env)
	r.lastAccess[key] = r.now()
	r.changed[key] = true
	if delta == nil {
		delta = next
	}
	r.addDeltaLocked(key, delta)
	storeErr := r.persistLocked(key, true)
	r.mu.Unlock()
	if storeErr != nil {
		return next, storeErr
	}
	if err := r.writeTo(ctx, key, env, wc); err != nil {
		return next, err
	}
	return next, nil
}

func typeOf(d ReplicatedData) any {
	if d == nil {
		return "nil"
	}
	return d.Type()
}

// Delete deletes key with the given write consistency: later Get, Update and Delete of
// it fail with ErrDataDeleted everywhere, and subscribers are told. A deleted key
// cannot be used again. Errors as for Update.
func (r *Replicator) Delete(ctx context.Context, key string, wc WriteConsistency) (err error) {
	ctx, done := r.tel.start(ctx, opDelete, key, wc.c, "")
	defer func() { done(nil, err) }()
	return r.delete(ctx, key, wc)
}

func (r *Replicator) delete(ctx context.Context, key string, wc WriteConsistency) error {
	if r.closed() {
		return ErrReplicatorClosed
	}
	if err := checkKey(key); err != nil {
		return err
	}
	r.mu.Lock()
	cur, ok := r.data[key]
	if ok && cur.deleted {
		r.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrDataDeleted, key)
	}
	env := envelope{deleted: true, pruning: cur.pruning, usedAt: r.now().UnixMilli()}
	r.setLocked(key, env)
	r.lastAccess[key] = r.now()
	r.changed[key] = true
	delete(r.deltas, key)
	storeErr := r.persistLocked(key, true)
	r.mu.Unlock()
	if storeErr != nil {
		return storeErr
	}
	return r.writeTo(ctx, key, env, wc)
}

// Keys returns the keys this replica holds (deleted ones included), sorted.
func (r *Replicator) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.data))
	for k := range r.data {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// addDeltaLocked accumulates a delta for propagation. r.mu is held.
func (r *Replicator) addDeltaLocked(key string, delta ReplicatedData) {
	if !r.cfg.DeltaEnabled {
		return
	}
	r.seq[key]++
	p, ok := r.deltas[key]
	if !ok {
		r.deltas[key] = pendingDelta{data: delta, from: r.seq[key], to: r.seq[key]}
		return
	}
	merged, err := p.data.Merge(delta)
	if err != nil {
		// The key changed type (it cannot: Update refuses); propagate the new one alone.
		r.deltas[key] = pendingDelta{data: delta, from: r.seq[key], to: r.seq[key]}
		return
	}
	r.deltas[key] = pendingDelta{data: merged, from: p.from, to: r.seq[key]}
}

// mergeIncoming merges an envelope from another replica into key. The local value is
// kept when the types differ (the error says so).
func (r *Replicator) mergeIncoming(key string, in envelope) (envelope, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mergeLocked(key, in)
}

func (r *Replicator) mergeLocked(key string, in envelope) (envelope, error) {
	if err := checkKey(key); err != nil {
		return envelope{}, err
	}
	cur, ok := r.data[key]
	if !ok && r.expiredLocked(key, in) {
		return cur, nil // expired here; an old copy does not bring it back
	}
	merged := in
	if ok {
		var err error
		merged, err = cur.merge(in)
		if err != nil {
			r.log.Warn("ignoring a replica of another type", "key", key, "err", err)
			return cur, err
		}
	}
	merged = r.addSeenLocked(key, merged)
	old := r.digests[key]
	r.setLocked(key, merged)
	if r.digests[key] != old || !ok {
		r.changed[key] = true
		r.persistLocked(key, false)
	}
	if !ok {
		r.lastAccess[key] = r.now()
	}
	return merged, nil
}

// peers returns the other members data is replicated to: up and leaving members, and
// joining ones (they receive data early but do not count for consistency), sorted with
// reachable members first.
func (r *Replicator) peers() []cluster.Member {
	var out []cluster.Member
	self := r.cfg.Membership.Self()
	for _, m := range r.cfg.Membership.Members() {
		if m.UID == self.UID || (m.Status != cluster.StatusUp && m.Status != cluster.StatusLeaving) {
			continue
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Reachable && !out[j].Reachable })
	return out
}

// gossipTargets are the members gossip and deltas go to: peers and joining members.
func (r *Replicator) gossipTargets() []cluster.Member {
	var out []cluster.Member
	self := r.cfg.Membership.Self()
	for _, m := range r.cfg.Membership.Members() {
		if m.UID == self.UID || !m.Reachable {
			continue
		}
		switch m.Status {
		case cluster.StatusUp, cluster.StatusLeaving, cluster.StatusJoining:
			out = append(out, m)
		}
	}
	return out
}

func keyChunk(key string, chunks int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(chunks))
}
