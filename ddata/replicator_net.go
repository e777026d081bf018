package ddata

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/quorum"
)

// Messages between replicators.

// statusMsg carries the digests of one chunk of the sender's keys.
type statusMsg struct {
	From      NodeID            `cbor:"1,keyasint"`
	Chunk     int               `cbor:"2,keyasint"`
	TotChunks int               `cbor:"3,keyasint"`
	Digests   map[string][]byte `cbor:"4,keyasint,omitempty"`
}

// gossipMsg carries envelopes, and the keys the receiver should send back.
type gossipMsg struct {
	From     NodeID            `cbor:"1,keyasint"`
	Entries  map[string][]byte `cbor:"2,keyasint,omitempty"`
	SendBack []string          `cbor:"3,keyasint,omitempty"`
}

// deltaMsg carries accumulated deltas of the sender, numbered per key.
type deltaMsg struct {
	From    NodeID       `cbor:"1,keyasint"`
	Entries []deltaEntry `cbor:"2,keyasint"`
}

type deltaEntry struct {
	Key     string `cbor:"1,keyasint"`
	FromSeq uint64 `cbor:"2,keyasint"`
	ToSeq   uint64 `cbor:"3,keyasint"`
	Data    []byte `cbor:"4,keyasint"`
	Causal  bool   `cbor:"5,keyasint,omitempty"`
	// UsedAt is the origin's last update of the key (envelope.usedAt), so that every
	// replica's envelope ends up identical and gossip finds nothing to repair.
	UsedAt int64 `cbor:"6,keyasint,omitempty"`
}

// pruningSeenMsg tells the owner of the prunings of Removed's data that From has seen
// their markers in Keys (pruning.go).
type pruningSeenMsg struct {
	From    NodeID   `cbor:"1,keyasint"`
	Removed NodeID   `cbor:"2,keyasint"`
	Keys    []string `cbor:"3,keyasint"`
}

// writeMsg and readMsg are the requests of Update/Delete and Get with a consistency
// above local; their replies are an empty ack and readReply.
type writeMsg struct {
	Key      string `cbor:"1,keyasint"`
	Envelope []byte `cbor:"2,keyasint"`
}

type readMsg struct {
	Key string `cbor:"1,keyasint"`
}

type readReply struct {
	Found    bool   `cbor:"1,keyasint,omitempty"`
	Envelope []byte `cbor:"2,keyasint,omitempty"`
}

func (r *Replicator) encode(v any) []byte {
	b, err := encMode.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("ddata: encoding %T: %v", v, err))
	}
	r.gossipBytes.Add(uint64(len(b)))
	r.sentBytes[kindOf(v)].Add(uint64(len(b)))
	return b
}

// BytesSent returns the bytes of replicator messages this replica has sent.
func (r *Replicator) BytesSent() uint64 { return r.gossipBytes.Load() }

// run is the replicator's background work: delta propagation, gossip, notifications,
// expiry, pruning, write-behind and membership changes.
func (r *Replicator) run() {
	tick := time.NewTicker(min(r.cfg.DeltaPropagationInterval, 100*time.Millisecond))
	defer tick.Stop()
	var lastGossip, lastDelta, lastNotify, lastPrune, lastFlush time.Time
	for {
		select {
		case <-r.owner.Done():
			return
		case e := <-r.sub.C:
			if e.Kind == cluster.MemberRemoved || e.Kind == cluster.MemberDowned {
				r.mu.Lock()
				r.removed[NodeID(e.Member.UniqueAddress())] = true
				r.mu.Unlock()
			}
		case <-tick.C:
			now := r.now()
			// due reports whether every has passed since *last, and then restarts it. A
			// clock set back (a Now hook's; time.Now's monotonic reading never is)
			// restarts it too, rather than stalling the work until the clock is back
			// where it was.
			due := func(last *time.Time, every time.Duration) bool {
				if d := now.Sub(*last); d >= every || d < 0 {
					*last = now
					return true
				}
				return false
			}
			if due(&lastDelta, r.cfg.DeltaPropagationInterval) {
				r.propagateDeltas()
				r.sendSeen()
			}
			if due(&lastGossip, r.cfg.GossipInterval) {
				r.gossipRound()
			}
			if due(&lastNotify, r.cfg.NotifySubscribersInterval) {
				r.notifySubscribers()
				r.expire(now)
			}
			if due(&lastPrune, r.cfg.PruningInterval) {
				r.prune(now)
			}
			if r.cfg.WriteBehindInterval > 0 && due(&lastFlush, r.cfg.WriteBehindInterval) {
				r.mu.Lock()
				if err := r.flushLocked(); err != nil {
					r.log.Error("write-behind of durable keys failed", "err", err)
				}
				r.mu.Unlock()
			}
		}
	}
}

// propagateDeltas sends the accumulated deltas to every member.
func (r *Replicator) propagateDeltas() {
	r.mu.Lock()
	if len(r.deltas) == 0 {
		r.mu.Unlock()
		return
	}
	var entries []deltaEntry
	for key, p := range r.deltas {
		b, err := Encode(p.data)
		if err != nil {
			continue
		}
		causal := false
		if dd, ok := p.data.(DeltaReplicatedData); ok {
			causal = dd.RequiresCausalDeliveryOfDeltas()
		}
		entries = append(entries, deltaEntry{Key: key, FromSeq: p.from, ToSeq: p.to, Data: b, Causal: causal, UsedAt: r.data[key].usedAt})
	}
	r.deltas = map[string]pendingDelta{}
	r.mu.Unlock()
	targets := r.gossipTargets()
	for start := 0; start < len(entries); start += r.cfg.MaxDeltaElements {
		body := r.encodeFor(len(targets), deltaMsg{From: r.self, Entries: entries[start:min(start+r.cfg.MaxDeltaElements, len(entries))]})
		for _, m := range targets {
			r.cfg.Messenger.Tell(m.TransportAddr, topicDelta, body)
		}
	}
}

// encodeFor encodes a message sent to n members and counts its bytes n times.
func (r *Replicator) encodeFor(n int, v any) []byte {
	b := r.encode(v)
	if n > 1 {
		r.gossipBytes.Add(uint64(len(b) * (n - 1)))
		r.sentBytes[kindOf(v)].Add(uint64(len(b) * (n - 1)))
	}
	return b
}

// broadcastEntries sends envelopes to every member, in gossip messages of at most
// MaxDeltaElements entries, each encoded once (prune's steps 1 and 3).
func (r *Replicator) broadcastEntries(entries map[string][]byte) {
	targets := r.gossipTargets()
	if len(targets) == 0 {
		return
	}
	batch := map[string][]byte{}
	flush := func() {
		body := r.encodeFor(len(targets), gossipMsg{From: r.self, Entries: batch})
		for _, m := range targets {
			r.cfg.Messenger.Tell(m.TransportAddr, topicGossip, body)
		}
		batch = map[string][]byte{}
	}
	for key, b := range entries {
		batch[key] = b
		if len(batch) >= r.cfg.MaxDeltaElements {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// gossipRound sends the digests of the next chunk of keys to a random member.
func (r *Replicator) gossipRound() {
	targets := r.gossipTargets()
	if len(targets) == 0 {
		return
	}
	to := targets[r.rng.Intn(len(targets))]
	r.mu.Lock()
	tot := max(1, (len(r.data)+r.cfg.MaxDeltaElements-1)/r.cfg.MaxDeltaElements)
	chunk := r.chunk % tot
	r.chunk++
	digests := map[string][]byte{}
	for key, d := range r.digests {
		if tot == 1 || keyChunk(key, tot) == chunk {
			digests[key] = append([]byte(nil), d[:]...)
		}
	}
	r.mu.Unlock()
	r.cfg.Messenger.Tell(to.TransportAddr, topicStatus, r.encode(statusMsg{From: r.self, Chunk: chunk, TotChunks: tot, Digests: digests}))
}

func (r *Replicator) memberByNode(node NodeID) (cluster.Member, bool) {
	for _, m := range r.cfg.Membership.Members() {
		if NodeID(m.UniqueAddress()) == node {
			return m, true
		}
	}
	return cluster.Member{}, false
}

// handleStatus compares a member's digests with ours: we send what differs or it lacks,
// and ask for what differs or we lack.
func (r *Replicator) handleStatus(req *cluster.Request) {
	var st statusMsg
	if err := decMode.Unmarshal(req.Body, &st); err != nil || st.TotChunks < 1 || st.Chunk < 0 || st.Chunk >= st.TotChunks {
		r.log.DebugContext(req.Context(), "dropping a malformed gossip status", "from", req.From, "err", err)
		return
	}
	from, ok := r.memberByNode(st.From)
	if !ok {
		return
	}
	r.mu.Lock()
	var sendBack []string
	entries := map[string][]byte{}
	for key, d := range st.Digests {
		if mine, ok := r.digests[key]; !ok || string(mine[:]) != string(d) {
			sendBack = append(sendBack, key)
		}
	}
	for key, mine := range r.digests {
		if st.TotChunks > 1 && keyChunk(key, st.TotChunks) != st.Chunk {
			continue
		}
		if theirs, ok := st.Digests[key]; !ok || string(theirs) != string(mine[:]) {
			if b, err := r.data[key].encode(); err == nil {
				entries[key] = b
			}
		}
	}
	r.mu.Unlock()
	if len(entries) == 0 && len(sendBack) == 0 {
		return
	}
	r.sendGossip(from, entries, sendBack)
}

// sendGossip sends envelopes in messages of at most MaxDeltaElements entries.
func (r *Replicator) sendGossip(to cluster.Member, entries map[string][]byte, sendBack []string) {
	batch := map[string][]byte{}
	flush := func(back []string) {
		r.cfg.Messenger.Tell(to.TransportAddr, topicGossip, r.encode(gossipMsg{From: r.self, Entries: batch, SendBack: back}))
		batch = map[string][]byte{}
	}
	for key, b := range entries {
		batch[key] = b
		if len(batch) >= r.cfg.MaxDeltaElements {
			flush(nil)
		}
	}
	for len(sendBack) > r.cfg.MaxDeltaElements {
		flush(sendBack[:r.cfg.MaxDeltaElements])
		sendBack = sendBack[r.cfg.MaxDeltaElements:]
	}
	if len(batch) > 0 || len(sendBack) > 0 {
		flush(sendBack)
	}
}

func (r *Replicator) handleGossip(req *cluster.Request) {
	var g gossipMsg
	if err := decMode.Unmarshal(req.Body, &g); err != nil {
		r.log.DebugContext(req.Context(), "dropping malformed gossip", "from", req.From, "err", err)
		return
	}
	for key, b := range g.Entries {
		env, err := decodeEnvelope(b)
		if err != nil {
			r.log.WarnContext(req.Context(), "dropping a malformed entry from gossip", "key", key, "err", err)
			continue
		}
		r.mergeIncoming(key, env)
	}
	if len(g.SendBack) == 0 {
		return
	}
	from, ok := r.memberByNode(g.From)
	if !ok {
		return
	}
	entries := map[string][]byte{}
	r.mu.Lock()
	for _, key := range g.SendBack {
		if env, ok := r.data[key]; ok {
			if b, err := env.encode(); err == nil {
				entries[key] = b
			}
		}
	}
	r.mu.Unlock()
	if len(entries) > 0 {
		r.sendGossip(from, entries, nil)
	}
}

// handleDelta merges deltas in the order their origin made them: a delta that does not
// follow the last one received from that origin for the key is dropped when its type
// needs causal delivery (gossip repairs the gap), a duplicate is dropped always.
func (r *Replicator) handleDelta(req *cluster.Request) {
	var dm deltaMsg
	if err := decMode.Unmarshal(req.Body, &dm); err != nil || dm.From == "" {
		r.log.DebugContext(req.Context(), "dropping malformed deltas", "from", req.From, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.received[dm.From]
	if seen == nil {
		seen = map[string]uint64{}
		r.received[dm.From] = seen
	}
	for _, e := range dm.Entries {
		last := seen[e.Key]
		switch {
		case e.ToSeq <= last || e.FromSeq > e.ToSeq:
			continue
		case e.Causal && e.FromSeq > last+1 && last != 0:
			continue
		}
		d, err := Decode(e.Data)
		if err != nil {
			r.log.WarnContext(req.Context(), "dropping a malformed delta", "key", e.Key, "from", dm.From, "err", err)
			continue
		}
		if cur, ok := r.data[e.Key]; ok && cur.deleted {
			continue
		}
		if _, err := r.mergeLocked(e.Key, envelope{data: d, usedAt: e.UsedAt}); err == nil {
			seen[e.Key] = e.ToSeq
		}
	}
}

// handleWrite merges a replica sent for a write consistency and acknowledges once it is
// merged (and, for durable keys without write-behind, on disk). If the key is deleted
// here, the acknowledgement carries the tombstone: the writer learns of the delete.
func (r *Replicator) handleWrite(req *cluster.Request) {
	var w writeMsg
	if err := decMode.Unmarshal(req.Body, &w); err != nil {
		req.Reply(nil, fmt.Errorf("%w: write: %v", ErrMalformed, err))
		return
	}
	env, err := decodeEnvelope(w.Envelope)
	if err != nil {
		req.Reply(nil, err)
		return
	}
	r.mu.Lock()
	merged, err := r.mergeLocked(w.Key, env)
	if err == nil {
		err = r.persistLocked(w.Key, true)
	}
	r.mu.Unlock()
	if err == nil && merged.deleted && !env.deleted {
		b, _ := merged.encode()
		req.Reply(r.encode(readReply{Found: true, Envelope: b}), nil)
		return
	}
	req.Reply(nil, err)
}

func (r *Replicator) handleRead(req *cluster.Request) {
	var rm readMsg
	if err := decMode.Unmarshal(req.Body, &rm); err != nil {
		req.Reply(nil, fmt.Errorf("%w: read: %v", ErrMalformed, err))
		return
	}
	r.mu.Lock()
	env, ok := r.data[rm.Key]
	r.mu.Unlock()
	if !ok {
		req.Reply(r.encode(readReply{}), nil)
		return
	}
	b, err := env.encode()
	if err != nil {
		req.Reply(nil, err)
		return
	}
	req.Reply(r.encode(readReply{Found: true, Envelope: b}), nil)
}

// writeTo replicates env to enough members for wc: first to the members needed
// (reachable first), then, if acknowledgements lag after a fifth of the time, to the
// rest (as Akka's write aggregator does). The deadline is ctx's.
func (r *Replicator) writeTo(ctx context.Context, key string, env envelope, wc WriteConsistency) error {
	peers := r.peers()
	needed := wc.c.needed(len(peers)+1) - 1
	if needed <= 0 {
		return nil
	}
	b, err := env.encode()
	if err != nil {
		return err
	}
	body := r.encode(writeMsg{Key: key, Envelope: b})
	var deleted atomic.Bool
	ok := r.gather(ctx, peers, needed, topicWrite, body, func(reply []byte) bool {
		var rr readReply
		if len(reply) > 0 && decMode.Unmarshal(reply, &rr) == nil && rr.Found {
			if env, err := decodeEnvelope(rr.Envelope); err == nil && env.deleted {
				deleted.Store(true)
			}
		}
		return true
	})
	answered(ctx, ok+1, needed+1)
	if deleted.Load() {
		r.mergeIncoming(key, envelope{deleted: true})
		return fmt.Errorf("%w: %q (deleted on another replica)", ErrDataDeleted, key)
	}
	if ok < needed {
		return fmt.Errorf("%w: %d of %d acknowledgements for %q (%s)", ErrUpdateTimeout, ok+1, needed+1, key, wc)
	}
	return nil
}

// readFrom reads key from enough members and returns the merge of what they hold.
func (r *Replicator) readFrom(ctx context.Context, key string, peers []cluster.Member, needed int) (envelope, bool, error) {
	var mu sync.Mutex
	var merged envelope
	found := false
	body := r.encode(readMsg{Key: key})
	ok := r.gather(ctx, peers, needed, topicRead, body, func(b []byte) bool {
		var rr readReply
		if decMode.Unmarshal(b, &rr) != nil {
			return false
		}
		if !rr.Found {
			return true
		}
		env, err := decodeEnvelope(rr.Envelope)
		if err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if !found {
			merged, found = env, true
		} else if m, err := merged.merge(env); err == nil {
			merged = m
		}
		return true
	})
	answered(ctx, ok+1, needed+1)
	if ok < needed {
		return envelope{}, false, fmt.Errorf("%w: %d of %d replicas answered for %q", ErrGetFailure, ok+1, needed+1, key)
	}
	mu.Lock()
	defer mu.Unlock()
	return merged, found, nil
}

// errRejected is a reply that its accept function refused.
var errRejected = errors.New("ddata: reply rejected")

// gather sends body to peers until needed of them have answered well (accept), or ctx
// ends (default 5 s), and returns how many did. It asks the first needed peers (the
// reachable ones come first), replaces each that fails with the next, and after a
// fifth of the time asks all the rest (as Akka's read and write aggregators do). The
// wait is quorum.Await's; the requests are bounded by ctx, which ends when gather
// returns. They run on goroutines of their own, not the replicator's owner: each lives
// no longer than its request, which gather's return cancels, and Close need not wait
// for a caller's Get or Update.
func (r *Replicator) gather(ctx context.Context, peers []cluster.Member, needed int, topic string, body []byte, accept func([]byte) bool) int {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(peers)) // each peer answers once at most
	var asked atomic.Int64
	var ask func()
	ask = func() {
		i := int(asked.Add(1)) - 1
		if i >= len(peers) {
			return
		}
		m := peers[i]
		go func() {
			b, err := r.cfg.Messenger.Request(ctx, m.TransportAddr, topic, body)
			if err == nil && !accept(b) {
				err = errRejected
			}
			if err != nil {
				ask() // the next peer replaces this one
			}
			results <- err
		}()
	}
	for range min(needed, len(peers)) {
		ask()
	}
	deadline, _ := ctx.Deadline()
	askRest := time.AfterFunc(time.Until(deadline)/5, func() {
		for asked.Load() < int64(len(peers)) {
			ask()
		}
	})
	defer askRest.Stop()
	_, err := quorum.Await(ctx, results, len(peers), needed, func(err error) error { return err })
	if short, ok := errors.AsType[*quorum.ShortError](err); ok {
		return short.OK
	}
	return needed
}

// Change is a notification to a subscriber.
type Change struct {
	Key string
	// Data is the new value; nil when Deleted or Expired.
	Data    ReplicatedData
	Deleted bool
	Expired bool
}

// Subscription receives changes of the keys matching its pattern, at most once per
// notify interval per key. It never blocks the replicator: a full channel drops the
// change and counts it (the subscriber then reads the key).
type Subscription struct {
	// C delivers the changes.
	C       <-chan Change
	c       chan Change
	pattern string
	dropped atomic.Uint64
	r       *Replicator
}

// Dropped returns how many changes did not fit in C.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription (Akka's Unsubscribe); C is not closed.
func (s *Subscription) Close() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	delete(s.r.subs, s)
}

func (s *Subscription) deliver(c Change) {
	select {
	case s.c <- c:
	default:
		s.dropped.Add(1)
	}
}

// Subscribe returns a subscription to a key, or to every key with a prefix when the
// pattern ends in '*' ("counter-*"), including keys created later. The current values of
// matching keys are delivered first.
func (r *Replicator) Subscribe(pattern string, buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	c := make(chan Change, buffer)
	s := &Subscription{C: c, c: c, pattern: pattern, r: r}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, env := range r.data {
		if matches(pattern, key) {
			s.deliver(changeOf(key, env))
		}
	}
	r.subs[s] = struct{}{}
	return s
}

func changeOf(key string, env envelope) Change {
	if env.deleted {
		return Change{Key: key, Deleted: true}
	}
	return Change{Key: key, Data: env.data}
}

func (r *Replicator) notifySubscribers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changed) == 0 {
		return
	}
	for key := range r.changed {
		env, ok := r.data[key]
		c := Change{Key: key, Expired: true}
		if ok {
			c = changeOf(key, env)
		}
		for s := range r.subs {
			if matches(s.pattern, key) {
				s.deliver(c)
			}
		}
	}
	r.changed = map[string]bool{}
}

// expiryOf returns the inactivity after which key expires (0: never).
func (r *Replicator) expiryOf(key string) time.Duration {
	for _, rule := range r.cfg.Expiry {
		if matches(rule.Pattern, key) {
			return rule.After
		}
	}
	return 0
}

// expiredLocked reports whether an envelope of key arriving from elsewhere is already
// past its expiry.
func (r *Replicator) expiredLocked(key string, env envelope) bool {
	after := r.expiryOf(key)
	return after > 0 && env.usedAt > 0 && r.now().Sub(time.UnixMilli(env.usedAt)) > after
}

// expire removes keys inactive for longer than their expiry rule, leaving no tombstone:
// an expired key can be used again.
func (r *Replicator) expire(now time.Time) {
	if len(r.cfg.Expiry) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, env := range r.data {
		after := r.expiryOf(key)
		if after == 0 {
			continue
		}
		last := r.lastAccess[key]
		if used := time.UnixMilli(env.usedAt); env.usedAt > 0 && used.After(last) {
			last = used
		}
		if now.Sub(last) > after {
			delete(r.data, key)
			delete(r.digests, key)
			delete(r.lastAccess, key)
			delete(r.deltas, key)
			r.changed[key] = true // notified as Expired
			if r.cfg.Store != nil && r.isDurable(key) {
				r.dirty[key] = true
			}
		}
	}
}
