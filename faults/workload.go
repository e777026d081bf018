package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/shardhost/shardhost/ddata"
)

// Operation kinds of the history.
const (
	opInc   = "inc"   // counter entity
	opGet   = "get"   // counter entity
	opWrite = "write" // register entity
	opRead  = "read"  // register entity
	opAdd   = "add"   // ddata GCounter, WriteMajority
	opSum   = "sum"   // ddata GCounter, ReadMajority
)

// ddataKey is the GCounter the clients increment and read with majority consistency.
const ddataKey = "faults-gcounter"

// Op is one operation of the history: what a client asked, of which member, when
// (nanoseconds since the run started) and what came back. An ambiguous operation (an
// error: a timeout, a refusal, a member going away) may or may not have taken effect.
type Op struct {
	Client    int // a porcupine client: a new one after each ambiguous operation
	Kind      string
	Key       string // "counter/c0", "register/r1" or the ddata key
	Arg       string // the value written
	Out       string // the reply
	Call, Ret int64
	Ambiguous bool
	Member    int // the slot asked
	Err       string
	// Minority: a partition was on when it was called and the member asked was on the
	// minority side.
	Minority, DuringPartition bool
}

// History collects operations from concurrent clients.
type History struct {
	start   time.Time
	mu      sync.Mutex
	ops     []Op
	nextCID int
}

func (h *History) now() int64 { return int64(time.Since(h.start)) }

func (h *History) add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *History) newClient() int {
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

// The entities of the workload.
var (
	counterIDs  = []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	registerIDs = []string{"r0", "r1", "r2"}
)

// opTimeout bounds one operation; it ends as ambiguous after.
const opTimeout = 2 * time.Second

// client runs operations against random targets until ctx ends.
type client struct {
	c      *Cluster
	h      *History
	r      *rand.Rand
	cid    int
	n      int // the client's number, for unique register values
	writes int
	// minority reports whether a slot is on the minority side of a partition now, and
	// whether a partition is on.
	minority func(slot int) (bool, bool)
}

func (cl *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		cl.step(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(5+cl.r.IntN(20)) * time.Millisecond):
		}
	}
}

// step does one random operation.
func (cl *client) step(ctx context.Context) {
	targets := cl.c.targets()
	if len(targets) == 0 {
		return
	}
	m := targets[cl.r.IntN(len(targets))]
	var op Op
	switch x := cl.r.IntN(10); {
	case x < 4:
		op.Key = "counter/" + counterIDs[cl.r.IntN(len(counterIDs))]
		op.Kind = opInc
		if cl.r.IntN(3) == 0 {
			op.Kind = opGet
		}
	case x < 8:
		op.Key = "register/" + registerIDs[cl.r.IntN(len(registerIDs))]
		op.Kind = opRead
		if cl.r.IntN(2) == 0 {
			op.Kind = opWrite
			cl.writes++
			op.Arg = fmt.Sprintf("%d-%d", cl.n, cl.writes)
		}
	default:
		op.Key = ddataKey
		op.Kind = opSum
		if cl.r.IntN(2) == 0 {
			op.Kind = opAdd
		}
	}
	cl.do(ctx, m, op)
}

// do runs op against m and records it.
func (cl *client) do(ctx context.Context, m *member, op Op) {
	op.Client, op.Member = cl.cid, m.slot
	op.Minority, op.DuringPartition = cl.minority(m.slot)
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	op.Call = cl.h.now()
	out, err := cl.c.call(octx, m, op)
	op.Ret = cl.h.now()
	if err != nil {
		op.Ambiguous, op.Err = true, err.Error()
		cl.cid = cl.h.newClient()
	}
	op.Out = out
	cl.h.add(op)
}

// call performs one operation on member m. The member's components are read under
// the cluster's lock: a crash may close them meanwhile, which fails the call.
func (c *Cluster) call(ctx context.Context, m *member, op Op) (string, error) {
	c.mu.Lock()
	if m.state != stateRunning {
		c.mu.Unlock()
		return "", errors.New("member not running")
	}
	sh, repl := m.sh, m.repl
	c.mu.Unlock()
	switch op.Kind {
	case opInc, opGet, opRead, opWrite:
		typ, id, _ := cutKey(op.Key)
		msg := op.Kind
		if op.Kind == opWrite {
			msg = "write " + op.Arg
		}
		r, err := sh.Ask(ctx, typ, id, []byte(msg))
		if err != nil {
			return "", err
		}
		return string(r.Payload), nil
	case opAdd:
		self := repl.SelfNodeID()
		_, err := repl.Update(ctx, ddataKey, ddata.GCounter{}, ddata.WriteMajority(0),
			func(d ddata.ReplicatedData) (ddata.ReplicatedData, ddata.ReplicatedData, error) {
				next, delta := d.(ddata.GCounter).Increment(self, 1)
				return next, delta, nil
			})
		return "", err
	case opSum:
		d, err := repl.Get(ctx, ddataKey, ddata.ReadMajority(0))
		if errors.Is(err, ddata.ErrNotFound) {
			return "0", nil
		}
		if err != nil {
			return "", err
		}
		return d.(ddata.GCounter).Count().String(), nil
	}
	return "", fmt.Errorf("unknown operation %q", op.Kind)
}

func cutKey(key string) (typ, id string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// atoi parses a decimal reply; -1 if it is not one.
func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
