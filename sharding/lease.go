// The hosting lease (Config.HostingLease): this member hosts only while it has had a
// heartbeat round trip with a majority of the members within the lease.

package sharding

import (
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// leaseLeft returns how long this member may still host (see Config.HostingLease):
// until its majority contact is a lease old; 0 or less when it may not.
func (s *Sharding) leaseLeft() time.Duration {
	if s.lease <= 0 {
		return time.Duration(1<<63 - 1)
	}
	if !s.leaseHeld.Load() {
		return 0
	}
	v := s.cfg.Membership.View()
	if v.Exited || v.MajorityContact.IsZero() {
		return 0
	}
	// On membership's clock, MajorityContact's (time.Now's monotonic reading unless
	// cluster.MembershipConfig.Now is set): a process paused past its lease finds it
	// lapsed when it resumes, whatever the wall clock did.
	return s.lease - s.since(v.MajorityContact)
}

// since is the time since t on membership's clock: its Since when it has one
// (*cluster.Membership: one clock read where Now makes two), else Now().Sub(t).
func (s *Sharding) since(t time.Time) time.Duration {
	if m, ok := s.cfg.Membership.(interface{ Since(time.Time) time.Duration }); ok {
		return m.Since(t)
	}
	return s.cfg.Membership.Now().Sub(t)
}

// hosting reports whether this member may host now (leaseLeft).
func (s *Sharding) hostingAllowed() bool { return s.leaseLeft() > 0 }

// awaitLease waits until this member may host, for at most RequestTimeout and until
// deadline (if set): a member that just joined, or whose contact lapsed for a moment,
// gets it back within a heartbeat round. Errors: ErrNoMajority.
func (s *Sharding) awaitLease(deadline time.Time) error {
	if s.hostingAllowed() {
		return nil
	}
	limit := time.Now().Add(s.cfg.RequestTimeout)
	if !deadline.IsZero() && deadline.Before(limit) {
		limit = deadline
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.owner.Done():
			return ErrStopped
		case <-t.C:
		}
		if s.hostingAllowed() {
			return nil
		}
		if time.Now().After(limit) {
			return ErrNoMajority
		}
	}
}

// watchLease keeps leaseHeld (Config.HostingLease), checking it every fifth of the
// lease (checkLease).
func (s *Sharding) watchLease() {
	tick := time.NewTicker(max(s.lease/5, 5*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.owner.Done():
			return
		case <-tick.C:
		}
		s.checkLease(s.cfg.Membership.View(), s.cfg.Membership.Now())
	}
}

// checkLease takes or gives up the hosting lease by the view v at now (membership's
// clock): when the majority contact is older than the lease, or this member is out of
// the cluster, it stops hosting, and the entities here stop without saving (the next
// message for one activates it again once the lease is back); it takes the lease again
// once the contact is back in a converged view in which this member is up or leaving.
func (s *Sharding) checkLease(v cluster.View, now time.Time) {
	contact := !v.Exited && !v.MajorityContact.IsZero() && now.Sub(v.MajorityContact) < s.lease
	switch held := s.leaseHeld.Load(); {
	case held && !contact:
		s.leaseHeld.Store(false)
		stopped := 0
		for _, r := range s.allRegions() {
			stopped += r.stopForLease()
		}
		s.logLeaseLost(v, now, stopped)
	case !held && contact && v.Converged && s.selfHosting(v):
		s.leaseHeld.Store(true)
		s.log.Debug("hosting lease held", "lease", s.lease)
	}
}

// logLeaseLost logs the end of the hosting lease, having stopped stopped entities, for
// what it is. Expected, at info: this member is leaving, or left (its shards were
// handed off); or it has had no heartbeat round trip yet with a majority of the
// members up, which grew (members that just joined, as when a cluster starts), and
// nothing stopped. A lapse, at warn: the contact it had is older than the lease, it is
// out of the cluster otherwise (downed, removed), or members joined and entities
// stopped. A contact it never had is "never", not a zero time.
func (s *Sharding) logLeaseLost(v cluster.View, now time.Time, stopped int) {
	contact, ago := "never", time.Duration(0)
	if !v.MajorityContact.IsZero() {
		contact, ago = v.MajorityContact.Format(time.RFC3339Nano), now.Sub(v.MajorityContact).Round(time.Millisecond)
	}
	switch {
	case s.leaving.Load() || v.Exited && v.ExitReason == cluster.ReasonLeft:
		s.log.Info("hosting lease ended: this member is leaving the cluster", "entities", stopped)
	case v.Exited:
		s.log.Warn("hosting lease lapsed: this member is out of the cluster; the entities here stop",
			"reason", v.ExitReason, "entities", stopped)
	case v.MajorityContact.IsZero() && stopped == 0:
		s.log.Info("hosting lease waits for a heartbeat round trip with a majority of the members up (members joined)",
			"lease", s.lease, "members", len(v.Members))
	case v.MajorityContact.IsZero():
		s.log.Warn("hosting lease lapsed: no heartbeat round trip yet with a majority of the members up (members joined); the entities here stop",
			"lease", s.lease, "contact", contact, "members", len(v.Members), "entities", stopped)
	default:
		s.log.Warn("hosting lease lapsed: no heartbeat round trip with a majority of the members within the lease; the entities here stop",
			"lease", s.lease, "contact", contact, "ago", ago, "entities", stopped)
	}
}

// selfHosting reports whether this member is up or leaving in v.
func (s *Sharding) selfHosting(v cluster.View) bool {
	for _, m := range v.Members {
		if m.Address == s.self {
			return hosting(m)
		}
	}
	return false
}
