package quorum

import (
	"context"
	"errors"
	"strings"
	"testing"
)

var errDown = errors.New("replica down")

func feed(answers ...error) <-chan error {
	c := make(chan error, len(answers))
	for _, a := range answers {
		c <- a
	}
	return c
}

func same(err error) error { return err }

func TestAwaitReturnsOnceTheQuorumAnswered(t *testing.T) {
	results := feed(nil, errDown, nil, nil)
	got, err := Await(context.Background(), results, 4, 2, same)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Await read %d answers, want 3 (it stops at the quorum)", len(got))
	}
	if len(results) != 1 {
		t.Fatalf("%d answers left for the caller, want 1", len(results))
	}
}

func TestAwaitFailsOnceTheQuorumIsLost(t *testing.T) {
	// 3 of 5 needed: the third failure makes it impossible, whatever follows.
	results := feed(errDown, nil, errDown, errDown, nil)
	got, err := Await(context.Background(), results, 5, 3, same)
	short, ok := errors.AsType[*ShortError](err)
	if !ok {
		t.Fatalf("Await = %v, want a *ShortError", err)
	}
	if short.OK != 1 || short.Total != 5 || short.Need != 3 || len(short.Errs) != 3 || short.Cause != nil {
		t.Fatalf("short = %+v", short)
	}
	if !errors.Is(err, errDown) || len(got) != 4 {
		t.Fatalf("err %v (want it to wrap the failures), %d answers read, want 4", err, len(got))
	}
	if msg := err.Error(); !strings.Contains(msg, "1 of 5 answered, 3 needed") || !strings.Contains(msg, "replica down") {
		t.Fatalf("message %q", msg)
	}
}

func TestAwaitEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan error) // unbuffered: the cancel follows the answer's receipt
	go func() {
		results <- nil
		cancel()
	}()
	_, err := Await(ctx, results, 3, 2, same)
	short, ok := errors.AsType[*ShortError](err)
	if !ok || short.Cause != context.Canceled || short.OK != 1 {
		t.Fatalf("Await = %v, want a *ShortError with 1 answer, caused by the cancel", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("the caller's cancel is wrapped as if a replica had failed with it")
	}
}

func TestAwaitStopsAtAFatalAnswer(t *testing.T) {
	stale := errors.New("stale epoch")
	results := feed(nil, stale, nil)
	_, err := Await(context.Background(), results, 3, 2, func(err error) error {
		if err == stale {
			return Fatal(err)
		}
		return err
	})
	if err != stale {
		t.Fatalf("Await = %v, want the fatal error itself", err)
	}
}

func TestAwaitWithMoreNeededThanReplicasFailsAtOnce(t *testing.T) {
	_, err := Await(context.Background(), make(chan error), 1, 2, same)
	if _, ok := errors.AsType[*ShortError](err); !ok {
		t.Fatalf("Await = %v, want a *ShortError", err)
	}
}

// jointAnswer is an answer of a replica in the groups named by its bits.
type jointAnswer struct {
	in  uint64
	err error
}

func feedJoint(answers ...jointAnswer) <-chan jointAnswer {
	c := make(chan jointAnswer, len(answers))
	for _, a := range answers {
		c <- a
	}
	return c
}

func TestAwaitJointNeedsEveryGroup(t *testing.T) {
	// Old {a, b, c} and new {b, c, d}: b and c are in both. a and d answering is a
	// majority of neither; a, b (old) and then d (new with b) is both.
	groups := []Group{{Size: 3, Need: 2}, {Size: 3, Need: 2}}
	in := func(a jointAnswer) uint64 { return a.in }
	judge := func(a jointAnswer) error { return a.err }
	results := feedJoint(jointAnswer{in: 1}, jointAnswer{in: 2}, jointAnswer{in: 3}, jointAnswer{in: 2}, jointAnswer{in: 3})
	got, err := AwaitJoint(context.Background(), results, 4, groups, in, judge)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("AwaitJoint read %d answers, want 3 (a, d, then b counts for both)", len(got))
	}
}

func TestAwaitJointFailsWhenOneGroupIsLost(t *testing.T) {
	// The old group loses two of its three (a and b fail): whatever the new group
	// answers, the joint quorum is lost.
	groups := []Group{{Size: 3, Need: 2}, {Size: 3, Need: 2}}
	results := feedJoint(jointAnswer{in: 1, err: errDown}, jointAnswer{in: 2}, jointAnswer{in: 3, err: errDown}, jointAnswer{in: 2})
	_, err := AwaitJoint(context.Background(), results, 4, groups,
		func(a jointAnswer) uint64 { return a.in }, func(a jointAnswer) error { return a.err })
	short, ok := errors.AsType[*ShortError](err)
	if !ok || short.Total != 3 || short.Need != 2 || !errors.Is(err, errDown) {
		t.Fatalf("AwaitJoint = %v, want the old group's ShortError", err)
	}
}

func TestAwaitJointWithOneGroupIsAwait(t *testing.T) {
	results := feedJoint(jointAnswer{in: 1}, jointAnswer{in: 1, err: errDown}, jointAnswer{in: 1})
	got, err := AwaitJoint(context.Background(), results, 3, []Group{{Size: 3, Need: 2}},
		func(a jointAnswer) uint64 { return a.in }, func(a jointAnswer) error { return a.err })
	if err != nil || len(got) != 3 {
		t.Fatalf("AwaitJoint = %d answers, %v", len(got), err)
	}
}
