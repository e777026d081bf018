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
// A store starts with an empty ring: it admits the live members but itself (so that a
// member that joins, or comes back without knowing what happened meanwhile, reads
// through the others until its first round), and learns from each round's answers the
// retained members the others remember.

package sharding

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/quorum"
)

// stateRing is the store's ring: the admitted members (see above) and the live set of
// the last repair pass that completed.
type stateRing struct {
	mu       sync.Mutex
	admitted map[string]bool // nil until the first view with this member up
	synced   string          // ringKey of the live set of the last complete repair pass
}

// stateRingView is one look at the ring: the members in the view by address, the live
// ones and the admitted ones (each sorted).
type stateRingView struct {
	self     string
	members  map[string]cluster.Member
	live     []string
	admitted []string
}

// live reports whether a member is up or leaving: it holds replicas and serves them.
func liveStatus(s cluster.MemberStatus) bool {
	return s == cluster.StatusUp || s == cluster.StatusLeaving
}

// ringView reads the membership and the ring. The first time the view lists this member
// up, the ring starts: every live member is admitted but this one (unless it is alone),
// and members in the view that are down or exiting are retained.
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
		r.admitted = map[string]bool{}
		for a, m := range v.members {
			if (liveStatus(m.Status) && a != v.self) || m.Status == cluster.StatusDown || m.Status == cluster.StatusExiting {
				r.admitted[a] = true
			}
		}
		if len(v.live) == 1 {
			r.admitted[v.self] = true // alone: the first member of a cluster
		}
	}
	for a := range r.admitted {
		v.admitted = append(v.admitted, a)
	}
	sort.Strings(v.admitted)
	return v
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
func retainedCount(v stateRingView) int {
	n := 0
	for _, a := range v.admitted {
		if !slices.Contains(v.live, a) {
			n++
		}
	}
	return n
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
// is admitted. It returns whether the ring changed. Retained members the others
// remember and this member did not know are retained here too, whatever the outcome.
func (s *ReplicatedStateStore) handoverRound(ctx context.Context) (bool, error) {
	v := s.ringView()
	s.ring.mu.Lock()
	started := s.ring.admitted != nil
	s.ring.mu.Unlock()
	if !started || slices.Equal(v.admitted, v.live) {
		return false, nil
	}
	key := ringKey(v.live)
	if retained, limit := retainedCount(v), s.handoverLimit(v); retained > limit {
		return false, fmt.Errorf("%w: %d members retained (%s not up), more than %d: a shard may have lost a majority of its replicas; waiting for them to return",
			ErrStoreUnavailable, retained, ringKey(v.admitted), limit)
	}
	if !s.syncedFor(key) {
		return false, fmt.Errorf("%w: this member's repair pass is not complete with members %s", ErrStoreUnavailable, key)
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
			err := s.call(ctx, p, topicStateHandover, &stateHandoverReq{Live: v.live}, &reply)
			answers <- answer{p.addr, reply, err}
		}) {
			answers <- answer{p.addr, stateHandoverReply{}, closedError()}
		}
	}
	var short []string
	learned := map[string]bool{}
	for range peers {
		a := <-answers
		for _, r := range a.reply.Admitted {
			if !slices.Contains(v.live, r) && !slices.Contains(v.admitted, r) {
				learned[r] = true
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
	if len(learned) > 0 {
		for r := range learned {
			s.ring.admitted[r] = true
		}
		s.log.Info("state store: retaining members the others remember", "members", fmt.Sprint(slices.Sorted(maps.Keys(learned))))
		return true, nil
	}
	if len(short) > 0 {
		return false, fmt.Errorf("%w: handover to members %s: %s", ErrStoreUnavailable, key, strings.Join(short, "; "))
	}
	now := map[string]bool{}
	for _, a := range v.live {
		now[a] = true
	}
	if ringKey(slices.Sorted(maps.Keys(s.ring.admitted))) != ringKey(v.admitted) {
		return false, nil // changed meanwhile
	}
	s.ring.admitted = now
	s.log.Info("state store: replicas handed over; ranking over the members up", "members", key, "was", ringKey(v.admitted))
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
	reply := &stateHandoverReply{Live: v.live, Admitted: v.admitted}
	if ringKey(req.Live) != key {
		return encodeState(reply)
	}
	if !s.syncedFor(key) && s.repairMu.TryLock() {
		_ = s.repairPass(s.owner.Context())
		s.repairMu.Unlock()
	}
	reply.Synced = s.syncedFor(key)
	return encodeState(reply)
}
