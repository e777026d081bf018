// Package history records what clients asked of a cluster, with invoke and return
// times, and checks it: each entity's operations must be linearizable
// (github.com/anishathalye/porcupine, after Jepsen's Knossos), failed calls counting as
// ambiguous (they may or may not have taken effect). The fault-schedule harness
// (faults/) records asks through the Go API of in-process members, the Docker end-to-end
// tests (e2e/docker_faults_test.go) through the HTTP API of containers; both check the
// same way. Design: docs/design.md ("Invariants").
package history

import (
	"strconv"
	"sync"
	"time"
)

// Operation kinds on entities. A counter entity answers inc with the new count and get
// with the count (examples/wasm/counter with "inc" and "get", and faults' Go counter); a
// register entity stores what write carries and answers read with it ("" at first).
const (
	Inc   = "inc"
	Get   = "get"
	Write = "write"
	Read  = "read"
)

// Op is one operation of a history: what a client asked, of which member, when
// (nanoseconds since the history started) and what came back. An ambiguous operation
// (an error: a timeout, a refusal, a member going away) may or may not have taken
// effect; a failed one certainly did not (it never reached a member: a refused
// connection), and the checks leave it out.
type Op struct {
	Client    int    // a porcupine client: a new one after each ambiguous operation
	Kind      string // Inc, Get, Write, Read, or a kind of the recorder's own
	Key       string // the entity ("counter/c0") or another key
	Arg       string // the value written
	Out       string // the reply
	Call, Ret int64
	Ambiguous bool
	Failed    bool // never reached the member; not Ambiguous
	Member    int  // the member asked
	Err       string
	// Minority: a partition was on when it was called and the member asked was on the
	// minority side.
	Minority, DuringPartition bool
	// QuorumCall and QuorumRet are, for a recorder's own checks, the members the
	// member asked counted a quorum over (faults: distributed data's majority), as it
	// saw them when the call started and when it returned.
	QuorumCall, QuorumRet []string
}

// History collects operations from concurrent clients.
type History struct {
	start   time.Time
	mu      sync.Mutex
	ops     []Op
	nextCID int
}

// New returns an empty history whose times count from start.
func New(start time.Time) *History { return &History{start: start} }

// Now is the time since the history started, in nanoseconds: an Op's Call and Ret.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// At converts a history time back to wall time.
func (h *History) At(t int64) time.Time { return h.start.Add(time.Duration(t)) }

// Add records an operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// NewClient returns a new porcupine client ID. A client whose operation ended ambiguous
// takes a new one: its operation may still be in flight, and one client's operations
// must not overlap.
func (h *History) NewClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextCID++
	return h.nextCID - 1
}

// Ops returns a copy of the operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Counts are a history's operations counted.
type Counts struct {
	// Operations: all, acknowledged, ambiguous, failed (they never reached a member).
	Ops, Acked, Ambiguous, Failed int
	// Operations called during a partition on a member of the majority side, and of the
	// minority side, and how many of each were acknowledged.
	MajorityOps, MajorityAcked, MinorityOps, MinorityAcked int
}

// Count counts ops.
func Count(ops []Op) Counts {
	var c Counts
	for _, op := range ops {
		c.Ops++
		switch {
		case op.Failed:
			c.Failed++
		case op.Ambiguous:
			c.Ambiguous++
		default:
			c.Acked++
		}
		acked := !op.Failed && !op.Ambiguous
		if op.DuringPartition {
			if op.Minority {
				c.MinorityOps++
				if acked {
					c.MinorityAcked++
				}
			} else {
				c.MajorityOps++
				if acked {
					c.MajorityAcked++
				}
			}
		}
	}
	return c
}

// Atoi parses a decimal reply; -1 if it is not one.
func Atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
