// Following membership: regions forget homes at members that left or were downed, and
// the coordinator keeps a downed member's allocations for DownRemovalMargin.

package sharding

import (
	"slices"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// followMembership keeps regions and the coordinator in step with membership.
func (s *Sharding) followMembership() {
	tick := time.NewTicker(s.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.owner.Done():
			return
		case e := <-s.sub.C:
			s.onMemberEvent(e)
		case <-tick.C:
			s.reconcile()
			s.passivateIdle()
		}
	}
}

// onMemberEvent follows one membership event (followMembership).
func (s *Sharding) onMemberEvent(e cluster.MemberEvent) {
	switch e.Kind {
	case cluster.MemberUp:
		s.downedMu.Lock()
		delete(s.downed, e.Member.Address) // a new incarnation at the address
		delete(s.downedOlder, e.Member.Address)
		s.downedMu.Unlock()
	case cluster.MemberDowned:
		s.noteDowned(e.Member)
		s.memberRemoved(e.Member)
	case cluster.MemberExited, cluster.MemberRemoved:
		s.memberRemoved(e.Member)
	}
}

// memberRemoved makes the regions forget the member's address as a home at once (their
// messages wait for the shards' next homes); the coordinator keeps a downed member's
// allocations for DownRemovalMargin (reconcile drops them after), and those it made to
// another process at the address (coordinator.memberRemoved).
func (s *Sharding) memberRemoved(m cluster.Member) {
	addr := m.Address
	for _, r := range s.allRegions() {
		r.forgetHomesAt(func(home string) bool { return home == addr })
		r.unpauseFrom(func(by string) bool { return by == addr })
	}
	if !s.withinDownMargin(addr) {
		s.coord.memberRemoved(m)
	}
}

// passivateIdle runs each region's idle passivation.
func (s *Sharding) passivateIdle() {
	if !s.owner.Hold() {
		return
	}
	defer s.owner.Release()
	now := s.cfg.Now()
	for _, r := range s.allRegions() {
		r.passivateIdle(now)
	}
	s.shedMemory()
	s.idleSweeps.Add(1)
}

// shedMemory passivates the least recently used idle entities of every type while the
// linear memory of the member's active entities is over Config.MemoryLimit (the
// memory each last reported; an entity in hand is left alone). O(n log n) in the
// active entities, and only when over the limit. The caller holds s.owner.
func (s *Sharding) shedMemory() {
	limit := s.cfg.MemoryLimit
	if limit <= 0 {
		return
	}
	type candidate struct {
		e     *entity
		bytes int64
		used  time.Time
	}
	var total int64
	var idle []candidate
	for _, r := range s.allRegions() {
		r.mu.Lock()
		r.eachHostedLocked(func(sh *shard) {
			for _, e := range sh.entities {
				e.mu.Lock()
				live, quiet, used := e.live, !e.running && e.queued() == 0, e.lastUsed
				e.mu.Unlock()
				if !live {
					continue
				}
				b := e.stats.memoryBytes.Load()
				total += b
				if quiet {
					idle = append(idle, candidate{e, b, used})
				}
			}
		})
		r.mu.Unlock()
	}
	if total <= limit {
		return
	}
	slices.SortStableFunc(idle, func(a, b candidate) int { return a.used.Compare(b.used) })
	for _, c := range idle {
		if total <= limit {
			break
		}
		if c.e.passivate(causeMemory) {
			total -= c.bytes
		}
	}
}

// hosting reports whether a member's status lets it host shards it already has: up or
// leaving (a leaving member hands its shards off before it exits). An unreachable
// member still counts until it is downed: it may be running its entities.
func hosting(m cluster.Member) bool {
	return m.Status == cluster.StatusUp || m.Status == cluster.StatusLeaving
}

// sawDowned records when this member first saw the member at addr downed.
func (s *Sharding) sawDowned(addr string) {
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	if _, ok := s.downed[addr]; !ok {
		s.downed[addr] = s.cfg.Membership.Now()
	}
}

// withinDownMargin reports whether the member at addr was downed less than
// DownRemovalMargin ago: its shards stay allocated to it meanwhile.
func (s *Sharding) withinDownMargin(addr string) bool {
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	at, ok := s.downed[addr]
	return ok && s.cfg.Membership.Now().Sub(at) < s.cfg.DownRemovalMargin
}

// noteDowned records m as downed (sawDowned), and as older than this member if it is:
// it may have run the coordinator.
func (s *Sharding) noteDowned(m cluster.Member) {
	s.sawDowned(m.Address)
	if m.IsOlderThan(s.cfg.Membership.Self()) {
		s.downedMu.Lock()
		s.downedOlder[m.Address] = true
		s.downedMu.Unlock()
	}
}

// downMarginLeft returns how long until every member seen downed that was older than
// this one (those down in the membership now included) was downed DownRemovalMargin
// ago; 0 or less if none is within the margin. Only an older member can have run the
// coordinator that this member's takes over from: a younger one's downing delays
// nothing.
func (s *Sharding) downMarginLeft() time.Duration {
	for _, m := range s.cfg.Membership.Members() {
		s.holding(m) // records members down now
	}
	s.downedMu.Lock()
	defer s.downedMu.Unlock()
	now := s.cfg.Membership.Now()
	var left time.Duration
	for addr := range s.downedOlder {
		if at, ok := s.downed[addr]; ok {
			left = max(left, s.cfg.DownRemovalMargin-now.Sub(at))
		}
	}
	return left
}

// holding reports whether m hosts (hosting), recording when it is first seen down.
// The coordinator also keeps the allocations of a member downed less than
// DownRemovalMargin ago (withinDownMargin).
func (s *Sharding) holding(m cluster.Member) bool {
	if m.Status == cluster.StatusDown {
		s.noteDowned(m)
	}
	return hosting(m)
}

// reconcile forgets homes and allocations at members that are gone, in case a removal
// event was dropped, and those of downed members once DownRemovalMargin has passed.
func (s *Sharding) reconcile() {
	alive := map[string]bool{}
	for _, m := range s.cfg.Membership.Members() {
		if s.holding(m) {
			alive[m.Address] = true
		}
	}
	gone := func(addr string) bool { return !alive[addr] }
	for _, r := range s.allRegions() {
		r.forgetHomesAt(gone)
		r.unpauseFrom(gone)
	}
	s.coord.forgetRegions(func(addr string, _ cluster.UID, _ bool) bool { return !alive[addr] && !s.withinDownMargin(addr) })
}
