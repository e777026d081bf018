package history

import (
	"strings"
	"testing"
	"time"
)

// ops builds a one-client-per-op history of one counter from (kind, out, call, ret)
// steps; ret < 0 makes the operation ambiguous.
func counterOps(steps ...[4]any) []Op {
	var out []Op
	for i, s := range steps {
		op := Op{Client: i, Key: "counter/c", Kind: s[0].(string), Out: s[1].(string), Call: int64(s[2].(int)), Ret: int64(s[3].(int))}
		if op.Ret < 0 {
			op.Ambiguous, op.Out, op.Ret = true, "", op.Call+1
		}
		out = append(out, op)
	}
	return out
}

func TestACounterWithAnAmbiguousIncIsLinearizable(t *testing.T) {
	ops := counterOps(
		[4]any{Inc, "1", 0, 10},
		[4]any{Inc, "", 20, -1}, // timed out: may or may not have happened
		[4]any{Get, "2", 40, 50},
		[4]any{Inc, "3", 60, 70},
	)
	if v, u := CheckEntities(ops, time.Second); len(v) > 0 || len(u) > 0 {
		t.Fatalf("violations %v, unknown %v", v, u)
	}
	if lost := CheckCounterReads(ops); len(lost) > 0 {
		t.Fatal(lost)
	}
}

func TestALostIncIsNotLinearizable(t *testing.T) {
	ops := counterOps(
		[4]any{Inc, "1", 0, 10},
		[4]any{Inc, "2", 20, 30},
		[4]any{Get, "1", 40, 50}, // the second acknowledged inc is gone
	)
	v, _ := CheckEntities(ops, time.Second)
	if len(v) != 1 || !strings.Contains(v[0], "counter/c is not linearizable") {
		t.Fatalf("violations %v, want counter/c not linearizable", v)
	}
	lost := CheckCounterReads(ops)
	if len(lost) != 1 || !strings.Contains(lost[0], "2 incs were acknowledged before it: 1 lost") {
		t.Fatalf("CheckCounterReads: %v", lost)
	}
}

func TestACountNoIncCalledCouldGiveIsReported(t *testing.T) {
	ops := counterOps([4]any{Inc, "1", 0, 10}, [4]any{Get, "5", 20, 30})
	if lost := CheckCounterReads(ops); len(lost) != 1 || !strings.Contains(lost[0], "only 1 incs were called") {
		t.Fatalf("CheckCounterReads: %v", lost)
	}
}

func TestARegisterReadOfAnOverwrittenValueIsNotLinearizable(t *testing.T) {
	ops := []Op{
		{Client: 0, Key: "register/r", Kind: Write, Arg: "a", Call: 0, Ret: 10},
		{Client: 1, Key: "register/r", Kind: Write, Arg: "b", Call: 20, Ret: 30},
		{Client: 2, Key: "register/r", Kind: Read, Out: "a", Call: 40, Ret: 50},
	}
	if v, _ := CheckEntities(ops, time.Second); len(v) != 1 {
		t.Fatalf("violations %v, want one", v)
	}
	ops[2].Out = "b"
	if v, _ := CheckEntities(ops, time.Second); len(v) != 0 {
		t.Fatalf("violations %v, want none", v)
	}
}

func TestAFailedIncIsLeftOut(t *testing.T) {
	ops := counterOps([4]any{Inc, "1", 0, 10}, [4]any{Inc, "", 20, 30}, [4]any{Get, "1", 40, 50})
	ops[1].Failed = true // the connection was refused: it did not happen
	if v, _ := CheckEntities(ops, time.Second); len(v) > 0 {
		t.Fatal(v)
	}
	if lost := CheckCounterReads(ops); len(lost) > 0 {
		t.Fatal(lost)
	}
	failedGet := ops[2]
	failedGet.Failed, failedGet.Out = true, ""
	if lost := CheckCounterReads(append(ops, failedGet)); len(lost) > 0 {
		t.Fatalf("a failed get was read as a count: %v", lost)
	}
	ops[2].Out = "2" // a count only the failed inc could give
	if v, _ := CheckEntities(ops, time.Second); len(v) != 1 {
		t.Fatalf("violations %v, want one", v)
	}
}

func TestCountSplitsThePartitionsSides(t *testing.T) {
	c := Count([]Op{
		{DuringPartition: true, Minority: true, Ambiguous: true},
		{DuringPartition: true},
		{DuringPartition: true, Ambiguous: true},
		{},
		{Failed: true, DuringPartition: true, Minority: true},
	})
	want := Counts{Ops: 5, Acked: 2, Ambiguous: 2, Failed: 1, MajorityOps: 2, MajorityAcked: 1, MinorityOps: 2}
	if c != want {
		t.Fatalf("%+v, want %+v", c, want)
	}
}
