package faults

import (
	"fmt"
	"slices"
	"time"

	"github.com/shardhost/shardhost/internal/history"
)

// checkTimeout bounds porcupine's search per entity; a search that runs out is
// reported as unknown, not as a failure.
const checkTimeout = 10 * time.Second

// majorityCheck is what checkMajority saw: its violations, and how many pairs of a
// read and an increment acknowledged before it were left out because their majorities
// need not meet.
type majorityCheck struct {
	Failures []string
	Checked  int // pairs checked
	Skipped  int // pairs left out: the membership changed between them
}

// checkMajority checks the distributed data counter: a majority read sees at least the
// majority increments acknowledged before it was called whose majority must meet its
// own, and at most the increments called before it returned.
//
// Majorities meet only over the same members, or nearly: a ReadMajority counts N/2+1 of
// the N members its replicator sees when it starts, and a WriteMajority did the same
// with the members it saw. When the cluster downs members in between (a bridge
// partition of 3 members can leave one member alone, whose majority is itself), the two
// need not share a member: Akka's Distributed Data documentation states it as a caveat
// of its majorities, which ours follow ("there is small risk that you may read stale
// data if the cluster membership has changed between the Update and the Get"; its
// minCap narrows the risk in small clusters, it does not close it). So an increment counts for a
// read when its majority and the read's must intersect: both saw one set of members
// each from call to return, and the two majorities add up to more than the members of
// both sets.
func checkMajority(ops []history.Op) majorityCheck {
	var adds []history.Op
	for _, op := range ops {
		if op.Kind == opAdd {
			adds = append(adds, op)
		}
	}
	var out majorityCheck
	for _, op := range ops {
		if op.Kind != opSum || op.Ambiguous {
			continue
		}
		v := history.Atoi(op.Out)
		var acked, called int64
		for _, a := range adds {
			if !a.Ambiguous && a.Ret < op.Call {
				if majoritiesMeet(a, op) {
					acked++
					out.Checked++
				} else {
					out.Skipped++
				}
			}
			if a.Call < op.Ret {
				called++
			}
		}
		if v < acked || v > called {
			out.Failures = append(out.Failures, fmt.Sprintf("majority read of %s at %v-%v on member %d returned %d: %d increments were acknowledged before it by majorities that meet its own, %d called before it returned",
				ddataKey, time.Duration(op.Call).Round(time.Millisecond), time.Duration(op.Ret).Round(time.Millisecond),
				op.Member, v, acked, called))
		}
	}
	return out
}

// majoritiesMeet reports whether every majority of write's members and every majority
// of read's share a member: each saw one set from call to return, and N/2+1 of the
// write's plus N/2+1 of the read's exceed the members of both sets together.
func majoritiesMeet(write, read history.Op) bool {
	if len(write.QuorumCall) == 0 || len(read.QuorumCall) == 0 ||
		!slices.Equal(write.QuorumCall, write.QuorumRet) || !slices.Equal(read.QuorumCall, read.QuorumRet) {
		return false
	}
	union := map[string]bool{}
	for _, m := range write.QuorumCall {
		union[m] = true
	}
	for _, m := range read.QuorumCall {
		union[m] = true
	}
	return len(write.QuorumCall)/2+1+len(read.QuorumCall)/2+1 > len(union)
}
