package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/history"
	"github.com/shardhost/shardhost/sharding"
)

// Operation kinds of the history: those of entities are history's (Inc, Get, Write,
// Read); these two are the distributed data counter's.
const (
	opAdd = "add" // ddata GCounter, WriteMajority
	opSum = "sum" // ddata GCounter, ReadMajority
)

// ddataKey is the GCounter the clients increment and read with majority consistency.
const ddataKey = "faults-gcounter"

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
	h      *history.History
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
	var op history.Op
	switch x := cl.r.IntN(10); {
	case x < 4:
		op.Key = "counter/" + counterIDs[cl.r.IntN(len(counterIDs))]
		op.Kind = history.Inc
		if cl.r.IntN(3) == 0 {
			op.Kind = history.Get
		}
	case x < 8:
		op.Key = "register/" + registerIDs[cl.r.IntN(len(registerIDs))]
		op.Kind = history.Read
		if cl.r.IntN(2) == 0 {
			op.Kind = history.Write
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
func (cl *client) do(ctx context.Context, m *member, op history.Op) {
	op.Client, op.Member = cl.cid, m.slot
	op.Minority, op.DuringPartition = cl.minority(m.slot)
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	ddataOp := op.Kind == opAdd || op.Kind == opSum
	if ddataOp {
		op.QuorumCall = cl.c.quorumSet(m)
	}
	op.Call = cl.h.Now()
	out, err := cl.c.call(octx, m, op)
	op.Ret = cl.h.Now()
	if ddataOp {
		op.QuorumRet = cl.c.quorumSet(m)
	}
	switch {
	case err != nil && !ddataOp && errors.Is(err, sharding.ErrNotDelivered):
		// It never reached its entity, so it did nothing: the checks leave it out, and
		// fail a history in which it took effect all the same.
		op.Failed, op.Err = true, err.Error()
	case err != nil:
		op.Ambiguous, op.Err = true, err.Error()
		cl.cid = cl.h.NewClient()
	}
	op.Out = out
	cl.h.Add(op)
}

// call performs one operation on member m. The member's components are read under
// the cluster's lock: a crash may close them meanwhile, which fails the call.
func (c *Cluster) call(ctx context.Context, m *member, op history.Op) (string, error) {
	c.mu.Lock()
	if m.state != stateRunning {
		c.mu.Unlock()
		return "", errors.New("member not running")
	}
	sh, repl := m.sh, m.repl
	c.mu.Unlock()
	switch op.Kind {
	case history.Inc, history.Get, history.Read, history.Write:
		typ, id, _ := cutKey(op.Key)
		msg := op.Kind
		if op.Kind == history.Write {
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

// quorumSet returns the members m's replicator counts a majority over (ddata's
// Replicator.peers and itself): itself and the members up or leaving it sees, as
// sorted unique addresses; nil if m does not run.
func (c *Cluster) quorumSet(m *member) []string {
	c.mu.Lock()
	ms := m.ms
	running := m.state == stateRunning
	c.mu.Unlock()
	if !running || ms == nil {
		return nil
	}
	self := ms.Self()
	out := []string{self.String()}
	for _, o := range ms.Members() {
		if o.UID != self.UID && (o.Status == cluster.StatusUp || o.Status == cluster.StatusLeaving) {
			out = append(out, o.UniqueAddress())
		}
	}
	slices.Sort(out)
	return out
}

func cutKey(key string) (typ, id string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
