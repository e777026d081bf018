package faults

import (
	"fmt"
	"time"

	"github.com/shardhost/shardhost/internal/history"
)

// checkTimeout bounds porcupine's search per entity; a search that runs out is
// reported as unknown, not as a failure.
const checkTimeout = 10 * time.Second

// checkMajority checks the distributed data counter: a majority read sees at least the
// majority increments acknowledged before it was called, and at most the increments
// called before it returned.
func checkMajority(ops []history.Op) []string {
	var adds []history.Op
	for _, op := range ops {
		if op.Kind == opAdd {
			adds = append(adds, op)
		}
	}
	var out []string
	for _, op := range ops {
		if op.Kind != opSum || op.Ambiguous {
			continue
		}
		v := history.Atoi(op.Out)
		var acked, called int64
		for _, a := range adds {
			if !a.Ambiguous && a.Ret < op.Call {
				acked++
			}
			if a.Call < op.Ret {
				called++
			}
		}
		if v < acked || v > called {
			out = append(out, fmt.Sprintf("majority read of %s at %v-%v on member %d returned %d: %d increments were acknowledged before it, %d called before it returned",
				ddataKey, time.Duration(op.Call).Round(time.Millisecond), time.Duration(op.Ret).Round(time.Millisecond),
				op.Member, v, acked, called))
		}
	}
	return out
}
