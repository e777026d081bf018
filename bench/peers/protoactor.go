package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// counterActor is the Proto.Actor twin of examples/wasm/counter and counter-rust: the
// same messages ("inc", "inc N", "get") as text, the same decimal reply. Locally a
// message is a []byte; over the remote (gRPC) transport it is a wrapperspb.BytesValue,
// as remote messages must be protobuf messages.
type counterActor struct{ n int64 }

func (a *counterActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case []byte:
		reply := a.handle(m)
		if ctx.Sender() != nil {
			ctx.Respond(reply)
		}
	case *wrapperspb.BytesValue:
		reply := a.handle(m.Value)
		if ctx.Sender() != nil {
			ctx.Respond(&wrapperspb.BytesValue{Value: reply})
		}
	}
}

// handle does what the wasm counters do: split the text into fields, apply it, and
// format the count.
func (a *counterActor) handle(msg []byte) []byte {
	f := bytes.Fields(msg)
	switch {
	case len(f) == 1 && string(f[0]) == "get":
	case len(f) == 1 && string(f[0]) == "inc":
		a.n++
	case len(f) == 2 && string(f[0]) == "inc":
		d, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return []byte("counter: inc wants an integer")
		}
		a.n += d
	default:
		return []byte("counter: unknown message")
	}
	return strconv.AppendInt(nil, a.n, 10)
}

func quietActorSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

// protoCounters are counter actors in one actor system, found by ID: an actor is
// spawned (named by the ID) at its first message, as a virtual actor is activated.
type protoCounters struct {
	root  *actor.RootContext
	props *actor.Props
	pids  sync.Map // id -> *actor.PID
}

var _ counters = (*protoCounters)(nil)

func newProtoCounters(sys *actor.ActorSystem) *protoCounters {
	return &protoCounters{root: sys.Root, props: actor.PropsFromProducer(func() actor.Actor { return &counterActor{} })}
}

func (p *protoCounters) pid(id string) *actor.PID {
	if v, ok := p.pids.Load(id); ok {
		return v.(*actor.PID)
	}
	pid, err := p.root.SpawnNamed(p.props, id)
	if err != nil && !errors.Is(err, actor.ErrNameExists) {
		panic(err)
	}
	v, _ := p.pids.LoadOrStore(id, pid)
	return v.(*actor.PID)
}

func (p *protoCounters) Ask(ctx context.Context, id string, msg []byte) ([]byte, error) {
	res, err := p.root.RequestFuture(p.pid(id), msg, askTimeout).Result()
	if err != nil {
		return nil, err
	}
	b, ok := res.([]byte)
	if !ok {
		return nil, fmt.Errorf("proto.actor: reply %T", res)
	}
	return b, nil
}

func (p *protoCounters) Tell(id string, msg []byte) error {
	p.root.Send(p.pid(id), msg)
	return nil
}

func (p *protoCounters) Busy(error) bool { return false }

// protoRemote asks counters hosted by another actor system, over Proto.Actor's remote
// (gRPC) transport.
type protoRemote struct {
	root *actor.RootContext
	addr string
	pids sync.Map // id -> *actor.PID
}

var _ counters = (*protoRemote)(nil)

func (p *protoRemote) pid(id string) *actor.PID {
	if v, ok := p.pids.Load(id); ok {
		return v.(*actor.PID)
	}
	v, _ := p.pids.LoadOrStore(id, actor.NewPID(p.addr, id))
	return v.(*actor.PID)
}

func (p *protoRemote) Ask(ctx context.Context, id string, msg []byte) ([]byte, error) {
	res, err := p.root.RequestFuture(p.pid(id), &wrapperspb.BytesValue{Value: msg}, askTimeout).Result()
	if err != nil {
		return nil, err
	}
	b, ok := res.(*wrapperspb.BytesValue)
	if !ok {
		return nil, fmt.Errorf("proto.actor: remote reply %T", res)
	}
	return b.Value, nil
}

func (p *protoRemote) Tell(id string, msg []byte) error {
	p.root.Send(p.pid(id), &wrapperspb.BytesValue{Value: msg})
	return nil
}

func (p *protoRemote) Busy(error) bool { return false }

// protoPair is two actor systems with remote on loopback: counters live on the server
// and are asked from the client.
type protoPair struct {
	client, server     *actor.ActorSystem
	clientRem, servRem *remote.Remote
	local              *protoCounters // the server's counters, asked on the server
	remote             *protoRemote
}

func startProtoPair() *protoPair {
	p := &protoPair{client: quietActorSystem(), server: quietActorSystem()}
	p.servRem = remote.NewRemote(p.server, remote.Configure("127.0.0.1", 0))
	p.servRem.Start()
	p.clientRem = remote.NewRemote(p.client, remote.Configure("127.0.0.1", 0))
	p.clientRem.Start()
	p.local = newProtoCounters(p.server)
	p.remote = &protoRemote{root: p.client.Root, addr: p.server.Address()}
	return p
}

func (p *protoPair) stop() {
	p.clientRem.Shutdown(true)
	p.servRem.Shutdown(true)
	p.client.Shutdown()
	p.server.Shutdown()
}
