// The ReplicatedStateStore's ring: the members it ranks a shard's replicas over, and
// how a change of the members up changes them without losing an acknowledged write.
//
// A write is acknowledged by a majority of the shard's replica set; a later read must
// meet that majority. When the members up change (a member is downed, leaves or
// crashes; one joins or comes back), the first K members up of a shard's order change
// too, and a majority of the new set may hold none of the writes acknowledged by the
// old one. The store therefore ranks over two sets of members:
//
//   - admitted: the members whose replicas are known to hold the shards they rank
//     for. A member that goes away (down, exiting, removed) stays admitted (it is
//     retained); a member that comes up is not admitted yet (it is joining).
//   - live: the members up or leaving now.
//
// A shard's old configuration is the first K admitted members of its order, its new one
// the first K live members. When they are the same (the steady state), a request needs
// a majority of that set, as before. When they differ, a request needs a majority of
// each (Raft's joint consensus, section 6 of the Raft paper; Cassandra streams a range
// to its new replicas before they serve it for the same reason): a retained member does
// not answer, so when a majority of a shard's old set is gone (a partition cut off two
// of its three replicas and the majority downed them), the shard is unavailable
// (ErrStoreUnavailable) until those members return with their data, rather than served
// from replicas that may hold none of its last writes.
//
// The change ends with a handover round (handoverRound), which a member runs after its
// repair passes while its admitted and live sets differ: it asks every live member
// whether it sees the same live set and whether its last complete repair pass, made
// with that live set, sent every shard it stores to the live members of the shard's
// new set; when all say yes, it admits the live set (retained members are forgotten,
// joining ones admitted). Every acknowledged write was on a majority of its old set,
// hence on a live member when at most a minority of any old set is gone (the round
// runs only while fewer members are retained than a majority of a shard's old set), so
// it is then on every live
// replica of the new set: a majority of the new set alone serves. A member in the
// joint state and one that has admitted the live set agree, since the joint state
// needs a majority of the new set too.
//
// The ring is kept on disk. Raft keeps a cluster's configuration in its log, so a
// server that restarts resumes with the latest configuration it had (committed or not)
// and one that fell behind takes a newer one from the leader; a configuration known
// only in memory would be forgotten by a cluster that restarts whole, and a member
// that restarted first, alone, would rank a shard over members that hold none of its
// last writes (the members retained, two of its three replicas, are the ones that
// hold them). Here every change of the admitted set is written to the member's state
// file (bucket "ring", fsynced) before it is used, with a generation: a number that
// grows by one with each change that drops members (a handover round's admission, an
// operator's ForgetMember), as a Raft configuration entry's log index orders
// configurations. Members exchange their ring in each handover round, and a member
// that meets a newer generation takes that ring whole (it missed a handover or a
// forget while it was gone); at the same generation it adds the members the other
// retains that it did not know (as a ring only grows within a generation).
// A member that never learns of a newer generation keeps its older,
// larger ring: it only ever waits for more members than it needs.
//
// A store opens with the ring it saved. Its first view with this member up starts
// the ring: the saved members and those the view shows down or exiting (not the
// members up that the saved ring lacks: they may have joined while the cluster was
// stopped, with nothing); without this member unless it is alone (it may
// have missed writes while gone, so it reads through the others until a handover
// round shows its ring current: a member of the same generation that admits it). A
// store with nothing saved (a new directory) starts as the ring always started: the
// live members but itself (so that a member that joins, or comes back without its
// data, reads through the others until its first round), and learns the rest from each
// round's answers. So after a whole cluster restarts, the first member up, alone,
// still ranks over the members it retained and serves none of their shards until they
// return, or until an operator forgets them (below). A member restarted at another
// address does not restore its ring (the saved ring names its old address as a member
// of its own, which now looks gone): it starts as a new directory would.
//
// An operator forgets a member gone for good (ForgetMember, `shardhost state
// forget-member`): every live member drops it from its ring (a new generation), and a
// handover round may then admit the live set; the writes that only the forgotten
// member (and other gone ones) held are lost, which the operator accepts. A member
// up, joining or leaving cannot be forgotten. Members that missed the request take the
// newer generation from the next handover round.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/quorum"
)

// stateRing is the store's ring: the admitted members (see above), their generation,
// and the live set of the last repair pass that completed.
type stateRing struct {
	mu       sync.Mutex
	admitted map[string]bool // nil until the first view with this member up
	gen      uint64
	synced   string           // ringKey of the live set of the last complete repair pass
	restored *stateRingRecord // read from disk when the store opened; the ring starts from it
}

// stateRingView is one look at the ring: the members in the view by address, the live
// ones and the admitted ones (each sorted).
type stateRingView struct {
	self     string
	members  map[string]cluster.Member
	live     []string
	admitted []string
	gen      uint64
}

// live reports whether a member is up or leaving: it holds replicas and serves them.
func liveStatus(s cluster.MemberStatus) bool {
	return s == cluster.StatusUp || s == cluster.StatusLeaving
}

// ringView reads the membership and the ring. The first time the view lists this member
// up, the ring starts (see the file comment) and is saved.
func (s *ReplicatedStateStore) ringView() stateRingView {
	v := stateRingView{self: s.cfg.Membership.Self().Address, members: map[string]cluster.Member{}}
	for _, m := range s.cfg.Membership.Members() {
		old, dup := v.members[m.Address]
		if dup && (liveStatus(old.Status) || !liveStatus(m.Status)) {
			continue // two incarnations: keep the live one
		}
		v.members[m.Address] = m
	}
	for a, m := range v.members {
		if liveStatus(m.Status) {
			v.live = append(v.live, a)
		}
	}
	sort.Strings(v.live)
	r := &s.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.admitted == nil {
		self, ok := v.members[v.self]
		if !ok || !liveStatus(self.Status) {
			v.admitted = v.live // not in the cluster yet: rank as the members up do
			return v
		}
		s.startRingLocked(v)
	}
	for a := range r.admitted {
		v.admitted = append(v.admitted, a)
	}
	sort.Strings(v.admitted)
	v.gen = r.gen
	return v
}

// startRingLocked starts the ring from the view v, which lists this member up, and
// saves it: the ring restored from disk (if saved at this member's address) without
// this member unless it is alone, or without a saved ring the members up but this one
// (this one if alone); and in both cases the members down or exiting.
// The caller holds ring.mu.
func (s *ReplicatedStateStore) startRingLocked(v stateRingView) {
	r := &s.ring
	rec := r.restored
	r.restored = nil
	if rec != nil && rec.Self != v.self {
		s.log.Warn("state store: this member's saved ring is of another address; starting a new one (an operator may have to forget the old address: see ForgetMember)",
			"saved", rec.Self, "self", v.self, "members", ringKey(rec.Admitted))
		rec = nil
	}
	r.admitted = map[string]bool{}
	alone := len(v.live) == 1
	if rec != nil {
		r.gen = rec.Gen
		for _, a := range rec.Admitted {
			r.admitted[a] = true
		}
		if !alone {
			delete(r.admitted, v.self)
		}
	} else if alone {
		r.admitted[v.self] = true // the first member of a cluster
	}
	for a, m := range v.members {
		// Without a saved ring, the members up are the best guess at the ring; with one,
		// a member up that it lacks may hold nothing yet (it joined while the cluster
		// was stopped): it is joining until a round shows a ring that admits it.
		if (rec == nil && liveStatus(m.Status) && a != v.self) || m.Status == cluster.StatusDown || m.Status == cluster.StatusExiting {
			r.admitted[a] = true
		}
	}
	if rec != nil {
		s.log.Info("state store: ring restored", "gen", r.gen, "members", ringKey(slices.Sorted(maps.Keys(r.admitted))), "saved", ringKey(rec.Admitted))
	}
	s.saveRingLocked()
}

// saveRingLocked writes the ring to disk (the caller holds ring.mu). A failure is
// logged: the ring in memory stays in force, and a restart finds the ring saved
// before (older, hence larger or of a lower generation the others correct).
func (s *ReplicatedStateStore) saveRingLocked() {
	if s.disk == nil {
		return
	}
	rec := &stateRingRecord{Gen: s.ring.gen, Self: s.cfg.Membership.Self().Address, Admitted: slices.Sorted(maps.Keys(s.ring.admitted))}
	if err := s.disk.saveRing(rec); err != nil && !errors.Is(err, errStateClosed) {
		s.log.Error("state store: saving the ring failed; a restart may not find it", "err", err)
	}
}

// ringKey is a set of addresses as one string (sorted, comma-separated).
func ringKey(addrs []string) string { return strings.Join(addrs, ",") }

// stateReplicas is a request's replicas: the union of the shard's old and new
// configurations, and the size of each (a single configuration in the steady state).
type stateReplicas struct {
	reps  []stateReplica
	sizes []int // per configuration; stateReplica.in names them
}

// groups returns the quorum of each configuration: a majority.
func (rs stateReplicas) groups() []quorum.Group {
	out := make([]quorum.Group, len(rs.sizes))
	for i, n := range rs.sizes {
		out[i] = quorum.Group{Size: n, Need: majority(n)}
	}
	return out
}

// joint reports whether the request needs two configurations.
func (rs stateReplicas) joint() bool { return len(rs.sizes) > 1 }

// replica returns member a as a replica. A retained member (not up) is not asked: it
// counts as failed at once.
func (v stateRingView) replica(a string) stateReplica {
	m, ok := v.members[a]
	r := stateReplica{addr: a, local: a == v.self}
	if ok && liveStatus(m.Status) {
		r.transport, r.reachable = m.TransportAddr, m.Reachable
	} else {
		r.retained = true
	}
	return r
}

// replicaSet returns the shard's replicas: the first K admitted members of the shard's
// priority order (old) and the first K live ones (new); one set when they agree.
func (s *ReplicatedStateStore) replicaSet(typ string, shard int) (stateReplicas, error) {
	return s.replicaSetIn(s.ringView(), typ, shard)
}

func (s *ReplicatedStateStore) replicaSetIn(v stateRingView, typ string, shard int) (stateReplicas, error) {
	if len(v.live) == 0 {
		return stateReplicas{}, fmt.Errorf("%w: no member is up", ErrStoreUnavailable)
	}
	strategy := PriorityAllocationStrategy{Type: typ}
	top := func(addrs []string) []string {
		order := strategy.Order(shard, addrs)
		return order[:min(s.cfg.Replicas, len(order))]
	}
	newSet := top(v.live)
	oldSet := newSet
	if len(v.admitted) > 0 {
		oldSet = top(v.admitted)
	}
	var rs stateReplicas
	if slices.Equal(oldSet, newSet) {
		rs.sizes = []int{len(newSet)}
		for _, a := range newSet {
			r := v.replica(a)
			r.in = 1
			rs.reps = append(rs.reps, r)
		}
		return rs, nil
	}
	rs.sizes = []int{len(oldSet), len(newSet)}
	idx := map[string]int{}
	for i, set := range [][]string{oldSet, newSet} {
		for _, a := range set {
			j, ok := idx[a]
			if !ok {
				j = len(rs.reps)
				idx[a] = j
				rs.reps = append(rs.reps, v.replica(a))
			}
			rs.reps[j].in |= 1 << i
		}
	}
	return rs, nil
}

// ringChanging reports whether the admitted members differ from the live ones and a
// handover round may end it (few enough members retained: handoverLimit).
func (s *ReplicatedStateStore) ringChanging() bool {
	v := s.ringView()
	s.ring.mu.Lock()
	started := s.ring.admitted != nil
	s.ring.mu.Unlock()
	return started && !slices.Equal(v.admitted, v.live) && retainedCount(v) <= s.handoverLimit(v)
}

// handoverLimit is how many retained members a handover round allows: fewer than a
// majority of a shard's old set (min(K, admitted members)), so that every write such a
// majority acknowledged is still on a live member. One of 3 replicas, 2 of 5, 1 of 2.
func (s *ReplicatedStateStore) handoverLimit(v stateRingView) int {
	return majority(min(s.cfg.Replicas, max(len(v.admitted), 1))) - 1
}

// retainedCount counts the admitted members that are not live.
func retainedCount(v stateRingView) int { return len(retainedMembers(v)) }

// retainedMembers returns the admitted members that are not live, sorted.
func retainedMembers(v stateRingView) []string {
	var out []string
	for _, a := range v.admitted {
		if !slices.Contains(v.live, a) {
			out = append(out, a)
		}
	}
	return out
}

// markSynced records that a repair pass completed (every stored shard in sync with the
// live replicas of its configurations) with the live set key.
func (s *ReplicatedStateStore) markSynced(key string) {
	s.ring.mu.Lock()
	s.ring.synced = key
	s.ring.mu.Unlock()
}

// syncedFor reports whether the last complete repair pass had the live set key.
func (s *ReplicatedStateStore) syncedFor(key string) bool {
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	return s.ring.synced == key
}

// handoverRound tries to end a change of the ring (see the file comment): if the
// admitted members differ from the live ones, at most handoverLimit admitted members are
// gone, this member's last repair pass was complete with the live set, and every other
// live member answers that it sees the same live set and synced with it, the live set
// is admitted (a new generation). It returns whether the ring changed. Whatever the
// outcome, a ring of a newer generation among the answers replaces this member's, and
// else the members retained by those of the same generation are retained here too.
func (s *ReplicatedStateStore) handoverRound(ctx context.Context) (bool, error) {
	v := s.ringView()
	s.ring.mu.Lock()
	started := s.ring.admitted != nil
	s.ring.mu.Unlock()
	if !started || slices.Equal(v.admitted, v.live) {
		return false, nil
	}
	key := ringKey(v.live)
	// blocked: the live set cannot be admitted now. The others are asked all the same,
	// for their rings (a newer generation, members they retain): a member restored
	// with a ring that the others have since moved past learns it so.
	var blocked error
	if retained, limit := retainedCount(v), s.handoverLimit(v); retained > limit {
		blocked = fmt.Errorf("%w: %d members retained (%s not up), more than %d: a shard may have lost a majority of its replicas; waiting for them to return (or for an operator to forget them: ForgetMember)",
			ErrStoreUnavailable, retained, ringKey(retainedMembers(v)), limit)
	} else if !s.syncedFor(key) {
		blocked = fmt.Errorf("%w: this member's repair pass is not complete with members %s", ErrStoreUnavailable, key)
	}
	type answer struct {
		addr  string
		reply stateHandoverReply
		err   error
	}
	var peers []stateReplica
	for _, a := range v.live {
		if a != v.self {
			peers = append(peers, v.replica(a))
		}
	}
	answers := make(chan answer, len(peers))
	for _, p := range peers {
		if !s.owner.Go(func() {
			var reply stateHandoverReply
			err := s.call(ctx, p, topicStateHandover, &stateHandoverReq{Live: v.live, RingOnly: blocked != nil}, &reply)
			answers <- answer{p.addr, reply, err}
		}) {
			answers <- answer{p.addr, stateHandoverReply{}, closedError()}
		}
	}
	var short []string
	learned := map[string]bool{}
	var newer *stateHandoverReply // the answer of the newest generation, if newer than ours
	for range peers {
		a := <-answers
		switch {
		case a.err != nil:
		case a.reply.Gen > v.gen:
			if newer == nil || a.reply.Gen > newer.Gen {
				newer = &a.reply
			}
		case a.reply.Gen == v.gen:
			// Members of the same generation retain more, never fewer: add those
			// retained there, and this member if it is admitted there.
			for _, r := range a.reply.Admitted {
				if (!slices.Contains(v.live, r) || r == v.self) && !slices.Contains(v.admitted, r) {
					learned[r] = true
				}
			}
		}
		switch {
		case a.err != nil:
			short = append(short, fmt.Sprintf("%s: %v", a.addr, a.err))
		case ringKey(a.reply.Live) != key:
			short = append(short, fmt.Sprintf("%s sees members %s up", a.addr, ringKey(a.reply.Live)))
		case !a.reply.Synced:
			short = append(short, fmt.Sprintf("%s: repair pass not complete", a.addr))
		}
	}
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	if s.ring.gen != v.gen || ringKey(slices.Sorted(maps.Keys(s.ring.admitted))) != ringKey(v.admitted) {
		return false, nil // changed meanwhile
	}
	if newer != nil {
		s.ring.admitted = map[string]bool{}
		for _, a := range newer.Admitted {
			s.ring.admitted[a] = true
		}
		s.ring.gen = newer.Gen
		s.saveRingLocked()
		lvl := slog.LevelInfo
		if ringKey(newer.Admitted) == ringKey(v.admitted) {
			lvl = slog.LevelDebug // the same members: only the generation moves
		}
		s.log.Log(ctx, lvl, "state store: taking the ring of a newer generation", "gen", newer.Gen, "members", ringKey(newer.Admitted), "was", ringKey(v.admitted))
		return true, nil
	}
	if len(learned) > 0 {
		for r := range learned {
			s.ring.admitted[r] = true
		}
		s.saveRingLocked()
		s.log.Info("state store: retaining members the others remember", "members", fmt.Sprint(slices.Sorted(maps.Keys(learned))))
		return true, nil
	}
	if blocked != nil {
		return false, blocked
	}
	if len(short) > 0 {
		return false, fmt.Errorf("%w: handover to members %s: %s", ErrStoreUnavailable, key, strings.Join(short, "; "))
	}
	now := map[string]bool{}
	for _, a := range v.live {
		now[a] = true
	}
	s.ring.admitted = now
	s.ring.gen++
	s.saveRingLocked()
	s.log.Info("state store: replicas handed over; ranking over the members up", "members", key, "was", ringKey(v.admitted), "gen", s.ring.gen)
	return true, nil
}

// serveHandover answers a handover round: this member's live and admitted sets, and
// whether its last complete repair pass had the live set asked about (if not, and it
// sees that live set, it runs a pass first).
func (s *ReplicatedStateStore) serveHandover(from string, body []byte) []byte {
	var req stateHandoverReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	v := s.ringView()
	key := ringKey(v.live)
	reply := &stateHandoverReply{Live: v.live, Admitted: v.admitted, Gen: v.gen}
	if ringKey(req.Live) != key {
		return encodeState(reply)
	}
	if !req.RingOnly && !s.syncedFor(key) && s.repairMu.TryLock() {
		_ = s.repairPass(s.owner.Context())
		s.repairMu.Unlock()
	}
	reply.Synced = s.syncedFor(key)
	return encodeState(reply)
}

// StateRing is one look at a ReplicatedStateStore's ring (statestore_ring.go).
type StateRing struct {
	Gen      uint64   // the ring's generation
	Admitted []string // the members it ranks shards' old replica sets over, sorted
	Live     []string // the members up or leaving, sorted
	Retained []string // admitted and not live: gone members it waits for, sorted
}

// Ring returns the store's ring as this member sees it now.
func (s *ReplicatedStateStore) Ring() StateRing {
	v := s.ringView()
	return StateRing{Gen: v.gen, Admitted: v.admitted, Live: v.live, Retained: retainedMembers(v)}
}

// ForgetMember makes every live member stop retaining the member at addr (its gossip
// address, as the membership lists it): an operator's way out when a member is gone
// for good with its data (see the file comment). Each live member drops addr from its
// ring, a new generation, saved; a handover round then admits the members up once few
// enough are retained, and the shards addr held are served from the replicas up,
// without the writes that only addr and other gone members held. That loss is what
// the operator accepts. It returns the members that were retaining addr. Members that
// do not answer take the new generation from a later handover round.
//
// Errors: ErrMemberNotGone (addr is this member, or is up, joining or leaving: down
// it first), ErrStoreUnavailable naming the live members that did not forget it.
func (s *ReplicatedStateStore) ForgetMember(ctx context.Context, addr string) ([]string, error) {
	if !s.owner.Enter() {
		return nil, closedError()
	}
	defer s.owner.Leave()
	if err := s.forgettable(addr); err != nil {
		return nil, err
	}
	v := s.ringView()
	type answer struct {
		addr     string
		retained bool
		err      error
	}
	answers := make(chan answer, len(v.live))
	for _, a := range v.live {
		r := v.replica(a)
		run := func() {
			if r.local {
				retained, err := s.forgetLocal(addr)
				answers <- answer{a, retained, err}
				return
			}
			var reply stateForgetReply
			err := s.call(ctx, r, topicStateForget, &stateForgetReq{Addr: addr}, &reply)
			answers <- answer{a, reply.Retained, err}
		}
		if !s.owner.Go(run) {
			answers <- answer{a, false, closedError()}
		}
	}
	var retainedBy, failed []string
	for range v.live {
		a := <-answers
		switch {
		case a.err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", a.addr, a.err))
		case a.retained:
			retainedBy = append(retainedBy, a.addr)
		}
	}
	sort.Strings(retainedBy)
	if len(failed) > 0 {
		sort.Strings(failed)
		return retainedBy, fmt.Errorf("%w: member %s forgotten by %d of %d members up; not by %s (they take the new ring from a later handover round)",
			ErrStoreUnavailable, addr, len(v.live)-len(failed), len(v.live), strings.Join(failed, "; "))
	}
	return retainedBy, nil
}

// forgettable reports whether addr may be forgotten: not this member, and every
// incarnation of addr the membership lists is gone (down, exiting, removed).
func (s *ReplicatedStateStore) forgettable(addr string) error {
	if addr == "" {
		return fmt.Errorf("%w: no member address", ErrMemberNotGone)
	}
	if addr == s.cfg.Membership.Self().Address {
		return fmt.Errorf("%w: %s is this member", ErrMemberNotGone, addr)
	}
	for _, m := range s.cfg.Membership.Members() {
		if m.Address == addr && m.Status != cluster.StatusDown && m.Status != cluster.StatusExiting && m.Status != cluster.StatusRemoved {
			return fmt.Errorf("%w: %s is %v; only a member gone for good can be forgotten (down it first)", ErrMemberNotGone, addr, m.Status)
		}
	}
	return nil
}

// forgetLocal drops addr from this member's ring (a new generation, saved) if addr may
// be forgotten here; it reports whether this member retained addr.
func (s *ReplicatedStateStore) forgetLocal(addr string) (bool, error) {
	if err := s.forgettable(addr); err != nil {
		return false, err
	}
	s.ringView() // starts the ring if this member is up
	r := &s.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.admitted != nil && r.admitted[addr]:
		delete(r.admitted, addr)
	case r.admitted == nil && r.restored != nil && slices.Contains(r.restored.Admitted, addr):
		// Not started yet (this member is not up): the ring it will start from.
		r.restored.Admitted = slices.DeleteFunc(slices.Clone(r.restored.Admitted), func(a string) bool { return a == addr })
		r.restored.Gen++
		if s.disk != nil {
			if err := s.disk.saveRing(r.restored); err != nil {
				return false, err
			}
		}
		s.log.Warn("state store: an operator forgot a retained member; writes that only it (and other gone members) held are lost",
			"member", addr, "gen", r.restored.Gen)
		return true, nil
	default:
		return false, nil
	}
	r.gen++
	s.saveRingLocked()
	s.log.Warn("state store: an operator forgot a retained member; writes that only it (and other gone members) held are lost",
		"member", addr, "gen", r.gen, "members", ringKey(slices.Sorted(maps.Keys(r.admitted))))
	select {
	case s.kick <- struct{}{}: // a repair pass and a handover round now
	default:
	}
	return true, nil
}

// serveForget answers state/forget: ForgetMember on this member alone.
func (s *ReplicatedStateStore) serveForget(from string, body []byte) []byte {
	var req stateForgetReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	retained, err := s.forgetLocal(req.Addr)
	if err != nil {
		return stateFail(err)
	}
	return encodeState(&stateForgetReply{Retained: retained})
}
