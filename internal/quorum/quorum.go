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
