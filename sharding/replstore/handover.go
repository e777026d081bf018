// The handover rounds of the Store's ring (ring.go).
//
// A change of the ring ends with a handover round (handoverRound), which a member runs
// after its repair passes while its admitted and live sets differ: it asks every live
// member whether it sees the same live set and whether its last complete repair pass,
// made with that live set, sent every shard it stores to the live members of the
// shard's new set; when all say yes, it admits the live set (retained members are
// forgotten, joining ones admitted). Every acknowledged write was on a majority of its
// old set, hence on a live member when at most a minority of any old set is gone (the
// round runs only while fewer members are retained than a majority of a shard's old
// set), so it is then on every live replica of the new set: a majority of the new set
// alone serves. A member in the joint state and one that has admitted the live set
// agree, since the joint state needs a majority of the new set too. Members exchange
// their rings in each round (ring.go: generations).
//
// A leaving member is live (it answers, and its repair passes send what it holds) but
// not up: the new set ranks over the members up alone, and a round admits them, so
// that the ring lets go of a leaving member while it can still hand its replicas over.
// Its leave hook (AwaitHandover) holds it until then. Members that leave together (a
// StatefulSet scaled from 5 to 3 deletes two pods at once) are thus never retained,
// though more of them go than a round allows retained; only when every live member is
// leaving (a whole cluster stopping) does the ring keep them, to rank over them again
// when they come back.

package replstore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// ringChanging reports whether the ring is not settled (the admitted members differ
// from the live ones, or a live one's data directory from the one admitted) and a
// handover round may end it (few enough members retained: handoverLimit).
func (s *Store) ringChanging() bool {
	v := s.ringView()
	s.ring.mu.Lock()
	started := s.ring.admitted != nil
	s.ring.mu.Unlock()
	return started && (!v.settled() || s.verifyPending()) && retainedCount(v) <= s.handoverLimit(v)
}

// verifyPending reports whether a handover round should run to learn the live members'
// store IDs (stateRing.verify).
func (s *Store) verifyPending() bool {
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	return s.ring.verify
}

// handoverLimit is how many retained members a handover round allows: fewer than a
// majority of a shard's old set (min(K, admitted members)), so that every write such a
// majority acknowledged is still on a live member. One of 3 replicas, 2 of 5, 1 of 2.
func (s *Store) handoverLimit(v stateRingView) int {
	return majority(min(s.cfg.Replicas, max(len(v.admitted), 1))) - 1
}

// standingLocked is this member's ring's standing for handover replies: ringConfirmed,
// or, unconfirmed, ringFresh on a new data directory (newFile) and ringUnconfirmed on
// one that was in a cluster before. The caller holds ring.mu.
func (s *Store) standingLocked() uint8 {
	switch {
	case !s.ring.unconfirmed:
		return ringConfirmed
	case s.newFile():
		return ringFresh
	}
	return ringUnconfirmed
}

// markSynced records that a repair pass completed (every stored shard in sync with the
// live replicas of its configurations) with the live set key.
func (s *Store) markSynced(key string) {
	s.ring.mu.Lock()
	s.ring.synced = key
	s.ring.mu.Unlock()
}

// syncedFor reports whether the last complete repair pass had the live set key.
func (s *Store) syncedFor(key string) bool {
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
func (s *Store) handoverRound(ctx context.Context) (bool, error) {
	v := s.ringView()
	s.ring.mu.Lock()
	started := s.ring.admitted != nil
	verify := s.ring.verify
	s.ring.verify = false
	s.ring.mu.Unlock()
	if !started || (v.settled() && !verify) {
		return false, nil
	}
	key := v.liveKey()
	// blocked: the live set cannot be admitted now. The others are asked all the same,
	// for their rings (a newer generation, members they retain): a member restored
	// with a ring that the others have since moved past learns it so.
	var blocked error
	if retained, limit := retainedCount(v), s.handoverLimit(v); retained > limit {
		blocked = fmt.Errorf("%w: %d members retained (%s not up; %s up on a new data directory), more than %d: a shard may have lost a majority of its replicas; waiting for them to return (or for an operator to forget them: ForgetMember)",
			sharding.ErrStoreUnavailable, retained, ringKey(retainedMembers(v)), ringKey(v.replaced), limit)
	} else if !s.syncedFor(key) {
		blocked = fmt.Errorf("%w: this member's repair pass is not complete with members %s", sharding.ErrStoreUnavailable, key)
	}
	type answer struct {
		addr  string
		reply stateHandoverReply
		err   error
	}
	var peers []stateReplica
	for _, a := range v.live {
		if a != v.self {
			peers = append(peers, v.replica(a, v.stores[a]))
		}
	}
	answers := make(chan answer, len(peers))
	for _, p := range peers {
		if !s.owner.Go(func() {
			var reply stateHandoverReply
			err := s.call(ctx, p, topicStateHandover, &stateHandoverReq{Live: v.live, Key: key, RingOnly: blocked != nil}, &reply)
			answers <- answer{p.addr, reply, err}
		}) {
			answers <- answer{p.addr, stateHandoverReply{}, closedError()}
		}
	}
	var short []string
	learned := map[string]string{}
	var newer *stateHandoverReply // the answer of the newest generation, if newer than ours
	// Whether a member asked has a confirmed ring (of this generation: sameGen), and
	// whether all are unconfirmed on new directories.
	confirmed, sameGen, allFresh := false, false, true
	for range peers {
		a := <-answers
		if a.err == nil {
			confirmed = confirmed || a.reply.Standing == ringConfirmed
			sameGen = sameGen || a.reply.Standing == ringConfirmed && a.reply.Gen == v.gen
			allFresh = allFresh && a.reply.Standing == ringFresh
		}
		switch {
		case a.err != nil:
		case a.reply.Gen > v.gen:
			if newer == nil || a.reply.Gen > newer.Gen {
				newer = &a.reply
			}
		case a.reply.Gen == v.gen:
			maps.Copy(learned, sameGenLearned(v, a.reply))
		}
		switch {
		case a.err != nil:
			short = append(short, fmt.Sprintf("%s: %v", a.addr, a.err))
		case a.reply.Key != key && (a.reply.Key != "" || ringKey(a.reply.Live) != ringKey(v.live)):
			short = append(short, fmt.Sprintf("%s sees members %s up", a.addr, cmp.Or(a.reply.Key, ringKey(a.reply.Live))))
		case !a.reply.Synced:
			short = append(short, fmt.Sprintf("%s: repair pass not complete", a.addr))
		}
	}
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	if s.ring.gen != v.gen || !maps.Equal(s.ring.admitted, v.ids) {
		return false, nil // changed meanwhile
	}
	if newer != nil {
		s.ring.admitted = map[string]string{}
		for i, a := range newer.Admitted {
			s.ring.admitted[a] = ""
			if i < len(newer.Stores) {
				s.ring.admitted[a] = newer.Stores[i]
			}
		}
		s.ring.gen = newer.Gen
		s.ring.unconfirmed = newer.Standing != ringConfirmed
		s.saveRingLocked()
		lvl := slog.LevelInfo
		if ringKey(newer.Admitted) == ringKey(v.admitted) {
			lvl = slog.LevelDebug // the same members: only the generation moves
		}
		s.log.Log(ctx, lvl, "state store: taking the ring of a newer generation", "gen", newer.Gen, "members", ringKey(newer.Admitted), "was", ringKey(v.admitted))
		return true, nil
	}
	if len(learned) > 0 {
		maps.Copy(s.ring.admitted, learned)
		s.ring.unconfirmed = s.ring.unconfirmed && !sameGen
		s.saveRingLocked()
		s.log.Info("state store: taking members and store IDs the others' rings hold", "members", fmt.Sprint(learned))
		return true, nil
	}
	if blocked != nil {
		return false, blocked
	}
	if len(short) > 0 {
		return false, fmt.Errorf("%w: handover to members %s: %s", sharding.ErrStoreUnavailable, key, strings.Join(short, "; "))
	}
	if standing := s.standingLocked(); standing != ringConfirmed && !confirmed && (standing != ringFresh || !allFresh) {
		// A ring started from a view, among members none of which has a confirmed ring,
		// and one of them at least on a data directory that was in a cluster before:
		// the cluster's ring, and its data, may be on members not up (fault seed 82074:
		// two members that had never saved a ring came back first after a whole cluster
		// was downed, admitted each other and served their entities as new).
		return false, fmt.Errorf("%w: no member up (%s) has a confirmed ring, and a data directory among them was in a cluster before: waiting for a member of that cluster",
			sharding.ErrStoreUnavailable, key)
	}
	now := map[string]string{}
	for _, a := range v.up {
		// Every live member answered with the same key: all known. The leaving ones
		// synced what they hold to the members up: the ring lets go of them now, so that
		// members leaving together (a scale-down) are not retained once gone.
		now[a] = v.stores[a]
	}
	s.ring.admitted = now
	s.ring.gen++
	s.ring.unconfirmed = false
	s.saveRingLocked()
	s.log.Info("state store: replicas handed over; ranking over the members up", "members", key, "was", ringKey(v.admitted), "gen", s.ring.gen)
	return true, nil
}

// serveHandover answers a handover round: this member's live and admitted sets, and
// whether its last complete repair pass had the live set asked about (if not, and it
// sees that live set, it runs a pass first).
func (s *Store) serveHandover(from string, body []byte) []byte {
	var req stateHandoverReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	v := s.ringView()
	key := v.liveKey()
	s.ring.mu.Lock()
	standing := s.standingLocked()
	s.ring.mu.Unlock()
	reply := &stateHandoverReply{Live: v.live, Admitted: v.admitted, Stores: storesOf(v.admitted, v.ids), Gen: v.gen, Key: key, Standing: standing}
	if req.Key != key && (req.Key != "" || ringKey(req.Live) != ringKey(v.live)) {
		if req.Key != "" && ringKey(req.Live) == ringKey(v.live) {
			// The same members up, other store IDs: one of us has not heard from a
			// member since its data directory changed. Ask them all.
			s.ring.mu.Lock()
			s.ring.verify = true
			s.ring.mu.Unlock()
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
		return s.encodeReply(reply)
	}
	if !req.RingOnly && !s.syncedFor(key) && s.repairMu.TryLock() {
		_ = s.repairPass(s.owner.Context())
		s.repairMu.Unlock()
	}
	reply.Synced = s.syncedFor(key)
	return s.encodeReply(reply)
}

// sameGenLearned returns what this member's ring (v) takes from the ring of a member
// of the same generation (reply): rings of one generation grow, never shrink, so the
// members retained there that are not here (not live), this member if it is admitted
// there with its own data directory, and store IDs: where this ring has none, and
// where the two differ and this ring's is the one the member answers with now (the
// other ring admitted it with an earlier directory, which this ring must then count as
// lost too).
func sameGenLearned(v stateRingView, reply stateHandoverReply) map[string]string {
	out := map[string]string{}
	for i, r := range reply.Admitted {
		id := ""
		if i < len(reply.Stores) {
			id = reply.Stores[i]
		}
		mine, ok := v.ids[r]
		switch {
		case r == v.self:
			if id == v.stores[r] && mine != id {
				out[r] = id
			}
		case !ok:
			if !slices.Contains(v.live, r) {
				out[r] = id
			}
		case id != "" && id != mine && (mine == "" || mine == v.stores[r]):
			out[r] = id
		}
	}
	return out
}

// AwaitHandover is a leave hook (cluster.LeaveHook; register it after the hooks that
// still write state, such as sharding's handoff): it returns once this member's ring
// no longer admits it, that is once a handover round has admitted the members up
// without it (every live member's repair pass having sent what it holds to them), so
// that it is not retained once gone. It returns nil at once if the ring never started,
// or if no member is up but leaving ones (a cluster stopping whole keeps its ring).
// It checks again each time a repair pass may have moved the ring, at most every
// RequestTimeout/4.
//
// Errors: sharding.ErrStoreUnavailable if more admitted members are gone than a round
// allows (none can run: the member leaves retained, as a crashed one would), or if ctx
// ends or the store closes first, naming what the last round lacked.
func (s *Store) AwaitHandover(ctx context.Context) error {
	if !s.owner.Enter() {
		return closedError()
	}
	defer s.owner.Leave()
	tick := time.NewTicker(max(s.cfg.RequestTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		v := s.ringView()
		_, admitted := v.ids[v.self]
		if !v.started || !admitted || slices.Equal(v.up, v.live) {
			return nil
		}
		if retained, limit := retainedCount(v), s.handoverLimit(v); retained > limit {
			return fmt.Errorf("%w: leaving with %d members retained (%s), more than %d: no handover round can run; this member stays in the ring until it returns or an operator forgets it",
				sharding.ErrStoreUnavailable, retained, ringKey(retainedMembers(v)), limit)
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: leaving before a handover round let go of this member (members %s; admitted %s): %w",
				sharding.ErrStoreUnavailable, v.liveKey(), ringKey(v.admitted), ctx.Err())
		case <-s.owner.Done():
			return closedError()
		case <-tick.C:
		}
	}
}
