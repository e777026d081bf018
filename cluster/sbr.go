package cluster

import (
	"fmt"
	"sort"
)

// SBRStrategy is how the split brain resolver decides which side of a partition
// survives (Akka's split brain resolver strategies).
type SBRStrategy string

const (
	// KeepMajority keeps the side with more members; on a tie, the side with the member
	// of the lowest address. The default.
	KeepMajority SBRStrategy = "keep-majority"
	// StaticQuorum keeps a side with at least QuorumSize members; others down themselves.
	StaticQuorum SBRStrategy = "static-quorum"
	// KeepOldest keeps the side with the oldest member, unless that member is alone and
	// the other side is not (down-if-alone).
	KeepOldest SBRStrategy = "keep-oldest"
	// DownAll downs every member: a partition ends the cluster.
	DownAll SBRStrategy = "down-all"
)

// ParseSBRStrategy checks a strategy name.
func ParseSBRStrategy(s string) (SBRStrategy, error) {
	switch st := SBRStrategy(s); st {
	case KeepMajority, StaticQuorum, KeepOldest, DownAll:
		return st, nil
	}
	return "", fmt.Errorf("cluster: unknown split brain resolver strategy %q (want keep-majority, static-quorum, keep-oldest or down-all)", s)
}

// sbrDecide returns the members to down, seen from a side of a partition: reachable
// reports whether a member is on this side (self's side). Counting members are those up
// or leaving (joining members are not counted but are downed with their side); down,
// exiting and removed members take no part. The decision on each side is made by that
// side's leader and is consistent with the other side's: at most one side survives.
// Source: Akka's split brain resolver (keep-majority, static-quorum, keep-oldest,
// down-all).
func sbrDecide(strategy SBRStrategy, quorumSize int, members []gossipMember, reachable func(UniqueAddress) bool) []UniqueAddress {
	var mine, theirs, mineAll, theirsAll []gossipMember
	for _, m := range members {
		if m.Status == StatusDown || m.Status == StatusExiting || m.Status == StatusRemoved {
			continue
		}
		counts := m.Status == StatusUp || m.Status == StatusLeaving
		if reachable(m.Node) {
			mineAll = append(mineAll, m)
			if counts {
				mine = append(mine, m)
			}
		} else {
			theirsAll = append(theirsAll, m)
			if counts {
				theirs = append(theirs, m)
			}
		}
	}
	if len(theirsAll) == 0 {
		return nil
	}
	keepMine := false
	switch strategy {
	case KeepMajority:
		switch {
		case len(mine) != len(theirs):
			keepMine = len(mine) > len(theirs)
		default:
			keepMine = containsLowest(mine, theirs)
		}
	case StaticQuorum:
		keepMine = len(mine) >= quorumSize
	case KeepOldest:
		oldest, onMine := oldestOf(mine, theirs)
		switch {
		case oldest == nil:
			keepMine = containsLowest(mine, theirs)
		case onMine && len(mine) == 1 && len(theirs) > 1:
			keepMine = false // down-if-alone
		case !onMine && len(theirs) == 1 && len(mine) > 1:
			keepMine = true
		default:
			keepMine = onMine
		}
	case DownAll:
		return nodesOf(append(mineAll, theirsAll...))
	}
	if keepMine {
		return nodesOf(theirsAll)
	}
	return nodesOf(mineAll)
}

// containsLowest reports whether the member with the lowest address is in a.
func containsLowest(a, b []gossipMember) bool {
	all := append(append([]gossipMember(nil), a...), b...)
	if len(all) == 0 {
		return false
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Node.Less(all[j].Node) })
	for _, m := range a {
		if m.Node == all[0].Node {
			return true
		}
	}
	return false
}

// oldestOf returns the oldest member (lowest up-number, then address) and whether it is in a.
func oldestOf(a, b []gossipMember) (*gossipMember, bool) {
	var best *gossipMember
	inA := false
	for i, side := range [][]gossipMember{a, b} {
		for j := range side {
			m := &side[j]
			if m.UpNumber == 0 {
				continue
			}
			if best == nil || m.UpNumber < best.UpNumber || (m.UpNumber == best.UpNumber && m.Node.Less(best.Node)) {
				best, inA = m, i == 0
			}
		}
	}
	return best, inA
}

func nodesOf(ms []gossipMember) []UniqueAddress {
	out := make([]UniqueAddress, len(ms))
	for i, m := range ms {
		out[i] = m.Node
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
