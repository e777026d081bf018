package faults

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/history"
)

func quorumOp(kind string, call, ret int64, out string, members ...string) history.Op {
	return history.Op{Kind: kind, Key: ddataKey, Call: call, Ret: ret, Out: out,
		QuorumCall: members, QuorumRet: members}
}

func TestMajoritiesMeet(t *testing.T) {
	three := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name        string
		write, read []string
		want        bool
	}{
		{"same members", three, three, true},
		{"one of five downed", []string{"a", "b", "c", "d", "e"}, []string{"a", "b", "c", "d"}, true},
		{"two of three downed", three, []string{"a"}, false},
		{"two of five downed", []string{"a", "b", "c", "d", "e"}, []string{"a", "b", "c"}, false},
		{"one joined", three, []string{"a", "b", "c", "d"}, true},
		{"a member replaced", three, []string{"a", "b", "x"}, false},
	} {
		w, r := quorumOp(opAdd, 0, 1, "", tc.write...), quorumOp(opSum, 2, 3, "0", tc.read...)
		if got := majoritiesMeet(w, r); got != tc.want {
			t.Errorf("%s: majoritiesMeet = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A change while either was running: nothing is known about its majority.
	w := quorumOp(opAdd, 0, 1, "", three...)
	w.QuorumRet = []string{"a", "b"}
	if majoritiesMeet(w, quorumOp(opSum, 2, 3, "0", three...)) {
		t.Error("a write whose members changed while it ran counted")
	}
}

func TestCheckMajority(t *testing.T) {
	three := []string{"a", "b", "c"}
	ops := []history.Op{
		quorumOp(opAdd, 0, 1, "", three...),
		quorumOp(opAdd, 2, 3, "", three...),
		// Acknowledged after two members were downed: only "a" is left.
		quorumOp(opAdd, 4, 5, "", "a"),
		quorumOp(opSum, 10, 11, "2", three...), // misses the lone member's increment: allowed
	}
	got := checkMajority(ops)
	if len(got.Failures) != 0 || got.Checked != 2 || got.Skipped != 1 {
		t.Fatalf("checkMajority = %+v, want no failure, 2 pairs checked, 1 left out", got)
	}
	// A read over the same members that misses an increment is a violation.
	ops = append(ops, quorumOp(opSum, 12, 13, "1", three...))
	got = checkMajority(ops)
	if len(got.Failures) != 1 || !strings.Contains(got.Failures[0], "returned 1: 2 increments") {
		t.Fatalf("checkMajority = %+v, want the read of 1 reported", got)
	}
	// A read above what was called is a violation whatever the members.
	ops = []history.Op{quorumOp(opAdd, 0, 1, "", three...), quorumOp(opSum, 2, 3, "5", "a")}
	if got := checkMajority(ops); len(got.Failures) != 1 {
		t.Fatalf("checkMajority = %+v, want the read of 5 reported", got)
	}
}

// TestAStaleReadOfTheInboxesLosesNoScheduledMessage: the final check judges an
// acknowledged message missing from the inboxes lost only when its last read of them
// succeeded. Faults seed 47, under a load average of 45, read the inboxes, then two
// acknowledged messages were delivered (the members' log shows their journal records
// and replies), then every member was downed and no read succeeded until the wait's
// end: the check kept its last successful read and reported the two lost.
func TestAStaleReadOfTheInboxesLosesNoScheduledMessage(t *testing.T) {
	sent := map[string]scheduledOutcome{"i2 S7": scheduledAcked, "i2 S8": scheduledAcked, "i0 S9": scheduledRefused}
	at := time.Date(2026, 11, 28, 21, 50, 7, 0, time.UTC)
	where := func(k string) string { return "where " + k }
	down := errors.New("no member runs")

	var stale inboxReads
	stale.note(map[string]int{"i2 S8": 1}, nil, at)
	stale.note(nil, down, at.Add(time.Second))
	failures, unknown := judgeScheduled(sent, stale, where)
	if len(failures) != 0 || !strings.Contains(unknown, "i2 S7") || !strings.Contains(unknown, "no member runs") {
		t.Fatalf("a failed last read: failures %q, unknown %q; want none, and S7 unknown", failures, unknown)
	}

	var fresh inboxReads
	fresh.note(nil, down, at)
	fresh.note(map[string]int{"i2 S8": 1}, nil, at.Add(time.Second))
	failures, unknown = judgeScheduled(sent, fresh, where)
	if unknown != "" || len(failures) != 1 || !strings.Contains(failures[0], "i2 S7 acknowledged, never delivered") || !strings.Contains(failures[0], "where i2 S7") {
		t.Fatalf("a successful last read: failures %q, unknown %q; want S7 lost", failures, unknown)
	}

	// What any successful read shows stands, the last read failed or not.
	stale.seen = map[string]int{"i2 S7": 1, "i2 S8": 2, "i0 S9": 1}
	failures, _ = judgeScheduled(sent, stale, where)
	if len(failures) != 2 || !strings.Contains(strings.Join(failures, "\n"), "S8 delivered 2 times") ||
		!strings.Contains(strings.Join(failures, "\n"), "S9 answered not-delivered") {
		t.Fatalf("doubled and refused in a read before a failed one: %q", failures)
	}

	var none inboxReads
	none.note(nil, down, at)
	if failures, unknown = judgeScheduled(sent, none, where); len(failures) != 0 || !strings.Contains(unknown, "could not be read") {
		t.Fatalf("no read succeeded: failures %q, unknown %q", failures, unknown)
	}
}
