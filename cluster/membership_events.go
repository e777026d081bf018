// Membership's lifecycle events and their subscriptions.

package cluster

import (
	"strconv"
	"sync/atomic"
)

// EventKind says what happened.
type EventKind uint8

const (
	// MemberJoined: a member is joining.
	MemberJoined EventKind = iota + 1
	// MemberUp: a member is up and serves.
	MemberUp
	// MemberLeft: a member is leaving.
	MemberLeft
	// MemberExited: a member is exiting.
	MemberExited
	// MemberDowned: a member was marked down.
	MemberDowned
	// MemberRemoved: a member is out of the cluster for good.
	MemberRemoved
	// UnreachableMember: a failure detector finds a member unreachable.
	UnreachableMember
	// ReachableMember: every monitor of a member finds it reachable again.
	ReachableMember
	// LeaderChanged: the leader (Member) is another member, or none (zero Member).
	LeaderChanged
	// ConvergenceChanged: the view converged (Converged true) or stopped converging.
	ConvergenceChanged
	// SelfExited: this member is out of the cluster (Reason says why); it must stop
	// hosting at once.
	SelfExited
)

var eventNames = [...]string{"", "member-joined", "member-up", "member-left", "member-exited", "member-downed",
	"member-removed", "unreachable-member", "reachable-member", "leader-changed", "convergence-changed", "self-exited"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// MemberEvent is a change of membership.
type MemberEvent struct {
	Kind      EventKind
	Member    Member
	Converged bool   // for ConvergenceChanged
	Reason    string // for SelfExited
}

// Subscription receives membership events. Events are never blocked on: when C is full
// an event is dropped and counted, so a subscriber that can miss events re-reads
// Members.
type Subscription struct {
	// C delivers the events, in the order they happened.
	C       <-chan MemberEvent
	c       chan MemberEvent
	dropped atomic.Uint64
	m       *Membership
}

// Dropped returns how many events did not fit in C.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription; C is not closed.
func (s *Subscription) Close() {
	s.m.subMu.Lock()
	defer s.m.subMu.Unlock()
	delete(s.m.subs, s)
}

func (s *Subscription) deliver(e MemberEvent) {
	select {
	case s.c <- e:
	default:
		s.dropped.Add(1)
	}
}
