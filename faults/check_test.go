package faults

import (
	"strings"
	"testing"

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
