// The Store's ring: the members it ranks a shard's replicas over, and how a change of
// the members up changes them without losing an acknowledged write. This file holds
// the ring and its views, pure but for starting and saving the ring; handover.go the
// rounds that end a change, forget.go an operator's ForgetMember.
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
// (sharding.ErrStoreUnavailable) until those members return with their data, rather
// than served from replicas that may hold none of its last writes.
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
// stopped, with nothing); without this member, even alone (it may have missed writes
// while gone, so it reads through the others until a handover round shows its ring
// current: a member of the same generation that admits it with its store ID, below;
// and alone, a ring of two that the other member shrank to itself while this one was
// gone must not shrink to this one). A ring is saved with the members up that it has
// not admitted yet as well: a ring of this member alone that members had joined
// restores as a ring of them, as they may have gone on without it (their handover
// round left it out once it was downed) while it was gone; one that no member joined
// restores empty, and alone this member admits itself again (a cluster of one
// restarting). A store with nothing saved starts with the live
// members, itself among them with no store ID (so that a member that joins, or comes
// back without its data, reads through the others until its first round: its own old
// replica counts as gone), and learns the rest from each round's answers; alone, it
// admits itself only on a new directory (the first member of a new cluster), not on
// one that was in a cluster before though its ring never started. A directory is new
// when its store opens it if it has taken no part in a cluster: made by this process,
// or by one that never saw another member nor answered one's request (a first seed
// whose join failed opens it twice, cmd/shardhost); the file keeps a mark until its member
// first sees another member or answers a request (stateDisk.noteInCluster). A ring
// started from a view (no ring saved: on a directory that was in a cluster, the member
// was in it but not long enough to save a ring; or, on a new one, it joined members
// up) is unconfirmed, and saved so: its handover rounds admit the live set only if a
// member asked has a confirmed ring (one restored, one that founded a cluster alone on
// a new directory, or one that took or learned a confirmed ring), which confirms it,
// or if every member is unconfirmed on a new directory (a new cluster whose members
// started together).
// Members that never saved a ring, back first after a whole cluster was downed, would
// otherwise admit each other and serve their entities as new (fault seed 82074). So
// after a whole cluster restarts,
// the first member up, alone,
// still ranks over the members it retained and serves none of their shards until they
// return, or until an operator forgets them (forget.go). A member restarted at another
// address, and without a name (below), does not restore its ring (the saved ring names its old address as a member
// of its own, which now looks gone): it starts as a new directory would.
//
// Names. Rings name members by memberKey: a member's stable name (cluster.Member.Name,
// shardhost start --member-name) if it has one, else its address. A named member
// restarted at another address with its directory restores its ring and answers with
// its store ID: the replica it was. (The membership downs its old incarnation when it
// joins.)
//
// Store IDs. A member restarted under its name or at its address on
// an empty directory (its disk lost) would otherwise count as the replica it was: a
// write acknowledged by it and one other replica, then held by that other alone, would
// be missed by a read whose majority is the wiped member and a third replica that
// missed the write. So each state file has a store ID (16 random hex digits, made with
// the file), every reply carries its replier's, and the ring admits each member with
// the store ID it answered with. A live member answering with another store ID than
// the one it was admitted with is replaced: its old replica counts as gone (retained),
// its new one as joining, until a handover round admits it with its new ID; a request
// that expected the old ID fails for that replica. A store with no saved ring admits
// this member's own address with no store ID (its address may have held replicas that
// are now lost), so it reads through the others too. Members admitted before their
// store ID was known (a ring started from a view, or saved by an older version) take
// it from a handover round, which runs until every live member's ID is known and
// agreed: the live set a repair pass syncs with, and a round admits, includes the
// store IDs (stateRingView.liveKey). A member asked in a round that sees the same
// members with other store IDs asks every member in its own next round.

package replstore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/quorum"
	"github.com/shardhost/shardhost/sharding"
)

// stateRing is the store's ring: the admitted members (see above) with the store IDs
// they were admitted with, their generation, the live set of the last repair pass that
// completed, and the store ID each member last answered with.
type stateRing struct {
	mu sync.Mutex
	// admitted maps each admitted member's address to the store ID (stateDisk.storeID)
	// of the data directory it was admitted with: "" if not known (a ring started from
	// a view, or saved before rings kept store IDs). Nil until the first view with this
	// member up.
	admitted map[string]string
	gen      uint64
	synced   string            // liveKey of the last complete repair pass
	restored *stateRingRecord  // read from disk when the store opened; the ring starts from it
	stores   map[string]string // address → the store ID its last answer carried (noteStore)
	// verify: a member asked in a handover round sees the same members up with other
	// store IDs; this member's next round asks every live member (learning their store
	// IDs from their answers) even if its ring seems settled.
	verify bool
	// joining are the live members the ring has not admitted, as last saved (sorted):
	// the ring is saved again when they change (noteJoiningLocked).
	joining []string
	// unconfirmed: the ring was started from a view (no ring saved, and not the first
	// member of a new cluster) and has met no confirmed ring since; saved with the ring.
	// A handover round of an unconfirmed ring admits the live set only if a member
	// asked has a confirmed ring, or if every member is on a new data directory (a new
	// cluster whose members started together); see the file comment.
	unconfirmed bool
	// view is the last view built once the ring started (ringView), nil before.
	view *ringViewCache
}

// stateRingView is one look at the ring: the members in the view by address, the live
// ones and the admitted ones (each sorted), the store IDs the admitted ones were
// admitted with (ids) and those the live ones answer with (stores, this member's own
// included; "" if not known yet), and the live members whose data directory is not
// the one they were admitted with (replaced, sorted).
type stateRingView struct {
	self    string
	members map[string]cluster.Member
	live    []string
	// up are the live members that are up, not leaving (sorted): the members a shard's
	// new configuration ranks over, so that a member that leaves hands its replicas
	// over while it still answers (the live set when every live member is leaving: a
	// whole cluster stopping keeps its ring).
	up       []string
	admitted []string
	ids      map[string]string
	stores   map[string]string
	replaced []string
	gen      uint64
	started  bool // the ring has started (this member was up in a view); else the ranking is the view's guess
}

// liveKey is the live set with each member's store ID ("addr=store,...", a leaving
// member's marked "addr=store/leaving" while others are up): a repair pass is complete
// for it, and a handover round admits it, only if every live member sees the same
// members with the same data directories, leaving the same.
func (v stateRingView) liveKey() string {
	var b strings.Builder
	for i, a := range v.live {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a)
		b.WriteByte('=')
		b.WriteString(v.stores[a])
		if len(v.up) < len(v.live) && !slices.Contains(v.up, a) {
			b.WriteString("/leaving")
		}
	}
	return b.String()
}

// memberKey is what the ring names member m by: its stable name (cluster.Member.Name)
// if it has one, so that a member restarted at another address with its data directory
// is the replica it was; else its address.
func memberKey(m cluster.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return m.Address
}

// mayDropReplicas reports whether a member may drop a shard it does not rank for: only
// by a ring that started and is settled. Before this member is up its ranking is the
// view's guess, and while the ring changes the members up may rank shards apart; two
// members that each took the other for a shard's replica then each dropped their copy
// after the other acknowledged it, and the shard's last acknowledged write was gone
// (fault seeds 74059 and 74065, members downed and restarted over and over on a
// loaded machine).
func (v stateRingView) mayDropReplicas() bool { return v.started && v.settled() }

// isReplaced reports whether member a is up on a data directory other than the one the
// ring admitted it with.
func (v stateRingView) isReplaced(a string) bool { return slices.Contains(v.replaced, a) }

// settled reports whether the ring needs no handover round: it admits the members up
// (v.up: the live ones but those leaving), each with the data directory it answers from
// (as far as known).
func (v stateRingView) settled() bool {
	if !slices.Equal(v.admitted, v.up) || len(v.replaced) > 0 {
		return false
	}
	for _, a := range v.up {
		if v.ids[a] == "" && v.stores[a] != "" {
			return false // admitted before its store ID was known: a round binds it
		}
	}
	return true
}

// live reports whether a member is up or leaving: it holds replicas and serves them.
func liveStatus(s cluster.MemberStatus) bool {
	return s == cluster.StatusUp || s == cluster.StatusLeaving
}

// ringView reads the membership and the ring. The first time the view lists this member
// up, the ring starts (see the file comment) and is saved.
//
// Every state request reads a view, and building one (a map of the members, the live
// ones sorted, two maps of store IDs cloned) cost 3-7 µs of an entity's activation: a
// view built once the ring started is kept (stateRing.view) and returned again while
// everything it was built from is the same, compared by value (ringViewCache.current),
// so that no change of the membership or the ring can be missed. Its maps and slices
// are shared by the callers: they read them and never change them.
func (s *Store) ringView() stateRingView {
	self := memberKey(s.cfg.Membership.Self())
	members := s.cfg.Membership.Members()
	own := s.storeID()
	r := &s.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.view; c != nil && c.current(self, own, members, r) {
		s.noteJoiningLocked(c.view.up) // as a build does (a no-op: nothing changed)
		return c.view
	}
	v := s.buildRingViewLocked(self, own, members)
	r.view = nil
	if v.started {
		// A copy: a Membership may return a list it changes in place.
		r.view = &ringViewCache{self: self, own: own, members: slices.Clone(members), view: v}
	}
	return v
}

// ringViewCache is a view with what it was built from: this member's address and store
// ID, the members as Membership.Members listed them, and (in the view itself) the
// ring's generation, admitted members with their store IDs, and the store IDs the live
// members answered with.
type ringViewCache struct {
	self, own string
	members   []cluster.Member
	view      stateRingView
}

// current reports whether building the view now, from self, own, members and the ring
// r (whose mu the caller holds), would give c.view: every input is the same. It
// compares the values, not a version a change must remember to bump.
func (c *ringViewCache) current(self, own string, members []cluster.Member, r *stateRing) bool {
	if c.self != self || c.own != own || r.admitted == nil || c.view.gen != r.gen ||
		!slices.EqualFunc(c.members, members, sameMember) || !maps.Equal(c.view.ids, r.admitted) {
		return false
	}
	for _, a := range c.view.live { // the same members: the same live ones
		if a != self && c.view.stores[a] != r.stores[a] {
			return false
		}
	}
	return true
}

// sameMember reports whether a and b are the same in every field.
func sameMember(a, b cluster.Member) bool {
	return a.Address == b.Address && a.Name == b.Name && a.UID == b.UID && a.TransportAddr == b.TransportAddr &&
		a.APIAddr == b.APIAddr && slices.Equal(a.Roles, b.Roles) && a.Status == b.Status &&
		a.UpNumber == b.UpNumber && a.Reachable == b.Reachable && a.Leader == b.Leader
}

// buildRingViewLocked builds the view of members and the ring, starting the ring the
// first time members list this member up. The caller holds ring.mu.
func (s *Store) buildRingViewLocked(self, own string, members []cluster.Member) stateRingView {
	v := stateRingView{self: self, members: map[string]cluster.Member{}}
	for _, m := range members {
		k := memberKey(m)
		old, dup := v.members[k]
		if dup && (liveStatus(old.Status) || !liveStatus(m.Status)) {
			continue // two incarnations (of an address, or of a name): keep the live one
		}
		v.members[k] = m
	}
	var leaving bool
	for a, m := range v.members {
		if liveStatus(m.Status) {
			v.live = append(v.live, a)
			if m.Status == cluster.StatusUp {
				v.up = append(v.up, a)
			} else {
				leaving = true
			}
		}
	}
	sort.Strings(v.live)
	sort.Strings(v.up)
	if len(v.up) == 0 || !leaving {
		// Every live member leaving (a cluster stopping whole keeps its ring), or none
		// (the same list: one to compare and share).
		v.up = v.live
	}
	r := &s.ring
	v.stores = map[string]string{v.self: own}
	for _, a := range v.live {
		if a != v.self {
			v.stores[a] = r.stores[a]
		}
	}
	if r.admitted == nil {
		me, ok := v.members[v.self]
		if !ok || !liveStatus(me.Status) {
			v.admitted = v.up // not in the cluster yet: rank as the members up do
			v.ids = map[string]string{}
			return v
		}
		s.startRingLocked(v)
	}
	v.started = true
	s.noteJoiningLocked(v.up)
	v.ids = maps.Clone(r.admitted)
	v.admitted = slices.Sorted(maps.Keys(r.admitted))
	v.markReplaced()
	v.gen = r.gen
	return v
}

// noteJoiningLocked saves the ring when the members up it has not admitted (joining,
// besides this member; up is sorted) differ from those saved with it. A ring that admits only this
// member (the first member of a new cluster) and that members joined is saved with
// them, so that if this member stops before a handover round admits them, it does not
// take itself for the whole cluster when it comes back first, alone: the members that
// joined may have admitted a ring without it since, and served writes it never saw
// (fault seed 2227, -max-side=2). The caller holds ring.mu.
func (s *Store) noteJoiningLocked(live []string) {
	r := &s.ring
	self := memberKey(s.cfg.Membership.Self())
	n := 0
	for _, a := range live {
		if _, ok := r.admitted[a]; !ok && a != self {
			if n >= len(r.joining) || r.joining[n] != a {
				n = -1
				break
			}
			n++
		}
	}
	if n == len(r.joining) {
		return
	}
	r.joining = r.joining[:0:0]
	for _, a := range live {
		if _, ok := r.admitted[a]; !ok && a != self {
			r.joining = append(r.joining, a)
		}
	}
	s.saveRingLocked()
}

// markReplaced sets v.replaced from v.ids and v.stores: the live members admitted with
// another store ID than they answer with (this member: than its own).
func (v *stateRingView) markReplaced() {
	v.replaced = nil
	for _, a := range v.live {
		id, ok := v.ids[a]
		switch {
		case !ok:
		case a == v.self && id != v.stores[a]:
			// This member's directory is new (or not yet confirmed as the one admitted
			// here): what this address held before may be lost.
			v.replaced = append(v.replaced, a)
		case a != v.self && id != "" && v.stores[a] != "" && id != v.stores[a]:
			v.replaced = append(v.replaced, a)
		}
	}
}

// startRingLocked starts the ring from the view v, which lists this member up, and
// saves it: the ring restored from disk (if saved at this member's address) without
// this member; or without a saved ring, the members up with this one's address
// admitted with no store ID (what a member at this address held before this directory
// was made is lost: its replicas count as gone), or this member with its own if it is
// alone on a new directory (the first member of a new cluster); and
// in both cases the members down or exiting.
// The caller holds ring.mu.
func (s *Store) startRingLocked(v stateRingView) {
	r := &s.ring
	rec := r.restored
	saved := rec
	r.restored = nil
	if rec != nil && rec.Self != v.self {
		s.log.Warn("state store: this member's saved ring is of another address; starting a new one (an operator may have to forget the old address: see ForgetMember)",
			"saved", rec.Self, "self", v.self, "members", ringKey(rec.Admitted))
		rec = nil
	}
	r.admitted = map[string]string{}
	alone := len(v.live) == 1
	// Unconfirmed: no ring saved (on a directory that was in a cluster, the member was
	// in it, but not long enough to save one), or one saved unconfirmed. A
	// ring saved at another address is not restored, but its member was in the cluster.
	r.unconfirmed = saved == nil || saved.Unconfirmed
	switch {
	case rec != nil:
		r.gen = rec.Gen
		for i, a := range rec.Admitted {
			r.admitted[a] = rec.store(i)
		}
		// Alone too: a ring of two, {a, b}, that b shrank to {b} (a downed; every
		// write b acknowledged since is on b alone) must not become {a} when a comes
		// back alone from its older ring (fault seed 75005).
		delete(r.admitted, v.self)
		if len(r.admitted) == 0 {
			// A ring of this member alone: the first member of a cluster, or what is left
			// of one. Members that had joined it when it stopped may have gone on without
			// it (a handover round of theirs left it out once it was downed): it waits
			// for them (fault seed 2227). Without any, it is the whole cluster.
			for _, a := range rec.Joining {
				if a != v.self {
					r.admitted[a] = ""
				}
			}
		}
	case alone && s.newFile():
		r.admitted[v.self] = s.storeID() // the first member of a new cluster
		r.unconfirmed = false
	default:
		// Joining members, or alone on a directory made before that has no ring: the
		// member was in a cluster before its ring started, and alone it must not take
		// itself for the whole cluster (fault seed 75012).
		r.admitted[v.self] = ""
		if alone {
			s.log.Warn("state store: alone, on a data directory that was in a cluster before but has no ring saved: it waits for the members it was in a cluster with (their rings admit it)")
		}
	}
	for a, m := range v.members {
		// Without a saved ring, the members up are the best guess at the ring; with one,
		// a member up that it lacks may hold nothing yet (it joined while the cluster
		// was stopped): it is joining until a round shows a ring that admits it.
		if _, ok := r.admitted[a]; ok {
			continue
		}
		if (rec == nil && liveStatus(m.Status) && a != v.self) || m.Status == cluster.StatusDown || m.Status == cluster.StatusExiting {
			r.admitted[a] = ""
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
func (s *Store) saveRingLocked() {
	if s.disk == nil {
		return
	}
	rec := s.ring.recordLocked(memberKey(s.cfg.Membership.Self()))
	if err := s.disk.saveRing(rec); err != nil && !errors.Is(err, errStateClosed) {
		s.log.Error("state store: saving the ring failed; a restart may not find it", "err", err)
	}
}

// recordLocked returns the ring as saved (the caller holds mu).
func (r *stateRing) recordLocked(self string) *stateRingRecord {
	rec := &stateRingRecord{Gen: r.gen, Self: self, Admitted: slices.Sorted(maps.Keys(r.admitted)), Unconfirmed: r.unconfirmed}
	rec.Stores = storesOf(rec.Admitted, r.admitted)
	for _, a := range r.joining {
		if _, ok := r.admitted[a]; !ok {
			rec.Joining = append(rec.Joining, a)
		}
	}
	return rec
}

// storesOf returns the store IDs of addrs in ids, in the same order; nil if none is
// known.
func storesOf(addrs []string, ids map[string]string) []string {
	out := make([]string, len(addrs))
	known := false
	for i, a := range addrs {
		out[i] = ids[a]
		known = known || out[i] != ""
	}
	if !known {
		return nil
	}
	return out
}

// store returns the store ID Admitted[i] was admitted with ("" if not known).
func (rec *stateRingRecord) store(i int) string {
	if i < len(rec.Stores) {
		return rec.Stores[i]
	}
	return ""
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

// replica returns member a as a replica, whose answers must carry store ID store ("":
// any). A retained member (not up) is not asked: it counts as failed at once.
func (v stateRingView) replica(a, store string) stateReplica {
	m, ok := v.members[a]
	r := stateReplica{addr: a, local: a == v.self, store: store}
	if ok && liveStatus(m.Status) {
		r.transport, r.reachable = m.TransportAddr, m.Reachable
	} else {
		r.retained = true
	}
	return r
}

// lostReplica is the replica a replaced member held before its data directory was
// new: gone, like a retained member's.
func (v stateRingView) lostReplica(a string) stateReplica {
	return stateReplica{addr: a, retained: true, store: v.ids[a]}
}

// replicaSet returns the shard's replicas: the first K admitted members of the shard's
// priority order (old) and the first K members up (new: v.up, the live ones but those
// leaving); one set when they agree.
func (s *Store) replicaSet(typ string, shard int) (stateReplicas, error) {
	return s.replicaSetIn(s.ringView(), typ, shard)
}

func (s *Store) replicaSetIn(v stateRingView, typ string, shard int) (stateReplicas, error) {
	if len(v.live) == 0 {
		return stateReplicas{}, fmt.Errorf("%w: no member is up", sharding.ErrStoreUnavailable)
	}
	strategy := sharding.PriorityAllocationStrategy{Type: typ}
	top := func(addrs []string) []string { return strategy.Top(shard, addrs, s.cfg.Replicas) }
	newSet := top(v.up)
	oldSet := newSet
	if len(v.admitted) > 0 {
		oldSet = top(v.admitted)
	}
	var rs stateReplicas
	if slices.Equal(oldSet, newSet) && !slices.ContainsFunc(oldSet, v.isReplaced) {
		rs.sizes = []int{len(newSet)}
		for _, a := range newSet {
			r := v.replica(a, v.ids[a])
			r.in = 1
			rs.reps = append(rs.reps, r)
		}
		return rs, nil
	}
	// A replaced member is two replicas: the one it held (old, lost) and the one it
	// holds now (new, joining). While the ring has no more members than K, every
	// admitted member holds every shard, each write reached a majority of them all, so
	// a majority of the others still meets it: the lost replicas are left out of the old
	// configuration rather than counted as failed (a ring of two with one member wiped,
	// or starting on a new directory, needs the other alone, not both).
	if len(v.admitted) <= s.cfg.Replicas && len(v.replaced) > 0 {
		kept := slices.DeleteFunc(slices.Clone(oldSet), v.isReplaced)
		if len(kept) > 0 {
			oldSet = kept
		}
	}
	rs.sizes = []int{len(oldSet), len(newSet)}
	idx := map[string]int{}
	for _, a := range oldSet {
		r := v.lostReplica(a)
		if !v.isReplaced(a) {
			r = v.replica(a, v.ids[a])
			idx[a] = len(rs.reps)
		}
		r.in = 1
		rs.reps = append(rs.reps, r)
	}
	for _, a := range newSet {
		if j, ok := idx[a]; ok {
			rs.reps[j].in |= 2
			continue
		}
		r := v.replica(a, v.stores[a])
		r.in = 2
		rs.reps = append(rs.reps, r)
	}
	return rs, nil
}

// retainedCount counts the admitted replicas that are gone: the admitted members that
// are not live, and those replaced (their data directory new).
func retainedCount(v stateRingView) int { return len(retainedMembers(v)) + len(v.replaced) }

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

// Ring is one look at a Store's ring (ring.go).
type Ring struct {
	Gen      uint64   // the ring's generation
	Admitted []string // the members it ranks shards' old replica sets over, sorted
	Live     []string // the members up or leaving, sorted
	Retained []string // admitted and not live: gone members it waits for, sorted
	// Replaced are the live members up on a data directory other than the one the ring
	// admitted them with (a disk lost): the replicas they held count as gone, and their
	// new ones as joining, until a handover round admits them. Sorted.
	Replaced []string
	// Settled: the ring admits the live members with the data directories they have;
	// requests need one majority, not one of each of two configurations.
	Settled bool
}

// Ring returns the store's ring as this member sees it now.
func (s *Store) Ring() Ring {
	v := s.ringView()
	// Copies: the view's slices are shared with other readers (ringView).
	return Ring{Gen: v.gen, Admitted: slices.Clone(v.admitted), Live: slices.Clone(v.live), Retained: retainedMembers(v), Replaced: slices.Clone(v.replaced), Settled: v.settled()}
}
