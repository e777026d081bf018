// Package quorum is the wait for a quorum: requests go to several replicas in parallel,
// and the caller goes on once enough of them answered well, or fails once too many
// failed for that, or when its context ends. The entity state store (sharding) waits
// for a majority of a shard's replicas with it; ddata's replicator waits for the
// replicas a consistency level needs.
package quorum

import (
	"context"
	"errors"
	"fmt"
)

// ShortError is the error of a wait that ended without its quorum: too many replicas
// failed (Cause is nil, Errs holds their errors), or the context ended first (Cause is
// its error, not wrapped: the caller's deadline is not the replicas' failure).
// errors.Is and errors.As look through Errs.
type ShortError struct {
	OK, Total, Need int
	Errs            []error
	Cause           error
}

func (e *ShortError) Error() string {
	s := fmt.Sprintf("%d of %d answered, %d needed", e.OK, e.Total, e.Need)
	if e.Cause != nil {
		s += fmt.Sprintf(", when %v", e.Cause)
	}
	if len(e.Errs) > 0 {
		s += ": " + errors.Join(e.Errs...).Error()
	}
	return s
}

// Unwrap returns the replicas' errors.
func (e *ShortError) Unwrap() []error { return e.Errs }

// fatal marks a failure that ends the wait at once.
type fatal struct{ err error }

func (f fatal) Error() string { return f.err.Error() }
func (f fatal) Unwrap() error { return f.err }

// Fatal marks a failure that no later answer can make up for (a replica that refuses a
// write as stale, say): judged so, an answer ends Await with err itself.
func Fatal(err error) error { return fatal{err} }

// Await receives answers from results until need of total replicas succeeded (judge
// returns nil for a success and the replica's error for a failure), and returns the
// answers received, failures included, in the order they came. It fails with a
// *ShortError once more than total-need failed (the quorum is lost) or when ctx ends
// first, and with err itself at once when judge returns Fatal(err). It reads at most
// total answers; those it did not read stay in results for the caller (a later repair,
// say), so results should be buffered for total.
func Await[A any](ctx context.Context, results <-chan A, total, need int, judge func(A) error) ([]A, error) {
	var answers []A
	ok := 0
	var errs []error
	for ok < need {
		if len(errs) > total-need {
			return answers, &ShortError{OK: ok, Total: total, Need: need, Errs: errs}
		}
		select {
		case a := <-results:
			answers = append(answers, a)
			err := judge(a)
			if err == nil {
				ok++
				continue
			}
			var f fatal
			if errors.As(err, &f) {
				return answers, f.err
			}
			errs = append(errs, err)
		case <-ctx.Done():
			return answers, &ShortError{OK: ok, Total: total, Need: need, Errs: errs, Cause: ctx.Err()}
		}
	}
	return answers, nil
}

// Group is one configuration of a joint quorum: Size replicas, Need of which must
// succeed.
type Group struct{ Size, Need int }

// AwaitJoint is Await for a joint quorum, as in Raft's joint consensus (Ongaro and
// Ousterhout, "In Search of an Understandable Consensus Algorithm", section 6): every
// answer counts for the groups in names (a bit per index into groups), and the wait
// succeeds once every group has Need successes. It fails with a *ShortError (of the
// first group that can no longer reach its Need, or of the first one short when ctx
// ends) or with err itself when judge returns Fatal(err). total is the number of
// answers that can come (each replica once, whatever its groups); AwaitJoint reads at
// most that many. With one group it is Await.
func AwaitJoint[A any](ctx context.Context, results <-chan A, total int, groups []Group, names func(A) uint64, judge func(A) error) ([]A, error) {
	ok := make([]int, len(groups))
	failed := make([]int, len(groups))
	var answers []A
	var errs []error
	done := func() bool {
		for g, gr := range groups {
			if ok[g] < gr.Need {
				return false
			}
		}
		return true
	}
	lost := func() int {
		for g, gr := range groups {
			if failed[g] > gr.Size-gr.Need {
				return g
			}
		}
		return -1
	}
	short := func(g int, cause error) *ShortError {
		return &ShortError{OK: ok[g], Total: groups[g].Size, Need: groups[g].Need, Errs: errs, Cause: cause}
	}
	for !done() {
		if g := lost(); g >= 0 {
			return answers, short(g, nil)
		}
		if len(answers) == total {
			// Every answer came and some group is still short: its replicas were
			// counted wrong by the caller. Report it rather than wait forever.
			for g, gr := range groups {
				if ok[g] < gr.Need {
					return answers, short(g, nil)
				}
			}
		}
		select {
		case a := <-results:
			answers = append(answers, a)
			err := judge(a)
			var f fatal
			if errors.As(err, &f) {
				return answers, f.err
			}
			if err != nil {
				errs = append(errs, err)
			}
			in := names(a)
			for g := range groups {
				if in&(1<<g) == 0 {
					continue
				}
				if err == nil {
					ok[g]++
				} else {
					failed[g]++
				}
			}
		case <-ctx.Done():
			for g, gr := range groups {
				if ok[g] < gr.Need {
					return answers, short(g, ctx.Err())
				}
			}
		}
	}
	return answers, nil
}
