package sharding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
)

// Topics of the messages between members. The names are Akka's where the meaning is
// the same (docs/design.md, "Cluster sharding").
//
// The handoff differs from Akka's on purpose: there the coordinator sends BeginHandOff
// to every region and HandOff to the shard's region, which answers ShardStopped. Here
// the coordinator sends HandOff only, and the region that hands the shard off
// broadcasts BeginHandOff and, once the shard stopped, HandOffComplete itself. A
// graceful leave, which no coordinator starts, thus follows the same procedure as a
// rebalance; and the acknowledgements of BeginHandOff come back on the connections that
// carried the messages given back before them, which keeps each sender's order.
const (
	topicDeliver      = "sharding/deliver"
	topicGetShardHome = "sharding/get-shard-home"
	topicHostShard    = "sharding/host-shard"
	topicRegionState  = "sharding/region-state"
	topicListEntities = "sharding/list-entities"
	// HandOff is the coordinator asking a region to hand a shard off (a rebalance).
	topicHandOff = "sharding/hand-off"
	// A region handing a shard off: BeginHandOff tells every region to stop routing to
	// it and buffer (acknowledged); Return gives a message back to its sender's region;
	// ShardStopped tells the coordinator that the shard's entities have stopped here,
	// and HandOffComplete lets the regions resolve the shard's new home.
	topicBeginHandOff    = "sharding/begin-hand-off"
	topicReturn          = "sharding/return"
	topicShardStopped    = "sharding/shard-stopped"
	topicHandOffComplete = "sharding/hand-off-complete"
	// DropShard is the coordinator telling a region that its copy of a shard is stale.
	topicDropShard = "sharding/drop-shard"
)

// atMember has the member at addr do a request: when addr is this member, local runs
// on a goroutine s owns, without a round trip through the messenger; otherwise body
// goes to addr on topic, answered within timeout. reply gets the outcome. A nil reply
// makes the request one-way (a Tell).
func (s *Sharding) atMember(ctx context.Context, addr, topic string, body []byte, timeout time.Duration,
	local func(reply func([]byte, error)), reply func([]byte, error)) {
	oneWay := reply == nil
	if oneWay {
		reply = func([]byte, error) {}
	}
	if addr == s.self {
		if !s.owner.Go(func() { local(reply) }) {
			reply(nil, ErrStopped)
		}
		return
	}
	to, err := s.transportAddr(addr)
	if err != nil {
		reply(nil, err)
		return
	}
	if oneWay {
		s.cfg.Messenger.TellContext(ctx, to, topic, body)
		return
	}
	s.cfg.Messenger.RequestAsyncContext(ctx, to, topic, body, timeout, reply)
}

// askMember is atMember waiting for the answer: at most timeout, or until s stops
// (ErrStopped).
func (s *Sharding) askMember(ctx context.Context, addr, topic string, body []byte, timeout time.Duration,
	local func(reply func([]byte, error))) ([]byte, error) {
	type result struct {
		body []byte
		err  error
	}
	ch := make(chan result, 1)
	s.atMember(ctx, addr, topic, body, timeout, local, func(b []byte, err error) {
		select {
		case ch <- result{b, err}:
		default: // answered already
		}
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.body, r.err
	case <-t.C:
		return nil, fmt.Errorf("no answer from %s in %v: %w", addr, timeout, context.DeadlineExceeded)
	case <-s.owner.Done():
		return nil, ErrStopped
	}
}

// shardHome asks the coordinator (the singleton on the oldest member) where a shard
// lives, allocating it if needed. It blocks for at most Config.CoordinatorTimeout.
// Errors: ErrShardUnavailable, ErrStopped.
func (s *Sharding) shardHome(ctx context.Context, ref shardRef) (shardHome, error) {
	oldest, ok := cluster.SingletonHost(s.cfg.Membership.Members(), "")
	if !ok {
		return shardHome{}, fmt.Errorf("%w: no up member to run the coordinator", ErrShardUnavailable)
	}
	ref.Requester = s.self
	b, err := s.askMember(ctx, oldest.Address, topicGetShardHome, encode(ref), s.cfg.CoordinatorTimeout(),
		func(reply func([]byte, error)) {
			s.coord.getShardHome(ctx, ref, func(h shardHome, err error) {
				if err != nil {
					reply(nil, err)
					return
				}
				reply(encode(h), nil)
			})
		})
	if err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrShardUnavailable) {
		err = wrapCause(ErrShardUnavailable, "asking the coordinator at "+oldest.Address, err)
	}
	if err != nil {
		return shardHome{}, err
	}
	var h shardHome
	if err := decode(b, &h); err != nil {
		return shardHome{}, err
	}
	return h, nil
}

// hostShard tells the region at addr to host a shard (Akka's HostShard); cb gets the
// outcome.
func (s *Sharding) hostShard(ctx context.Context, addr string, ref shardRef, cb func(error)) {
	s.atMember(ctx, addr, topicHostShard, encode(ref), s.cfg.RequestTimeout,
		func(reply func([]byte, error)) { reply(nil, s.hostShardHere(ref)) },
		func(_ []byte, err error) { cb(err) })
}

func (s *Sharding) hostShardHere(ref shardRef) error {
	if s.leaving.Load() {
		return errLeaving
	}
	if self := s.cfg.Membership.Self().UID; ref.UID != 0 && ref.UID != uint64(self) {
		// Meant for an earlier process at this address (the coordinator had not seen
		// this one join yet): hosting it here would run the shard where the
		// coordinator does not know it runs, and it would move it without a handoff
		// (faults seed 73128).
		return fmt.Errorf("%w: host %s: the request is for process %016x at this address, this is %016x", ErrShardUnavailable, ref, ref.UID, uint64(self))
	}
	// The coordinator waits RequestTimeout from its sending: waiting here (for the
	// type's settings) at most half of that, the shard is hosted while the coordinator
	// still waits for the answer, not after it gave up and allocated the shard anew.
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout/2)
	defer cancel()
	r, err := s.ensureRegion(ctx, ref.Type)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		// The type's settings came too late (a resolver that compiled a module
		// meanwhile): the coordinator may have given up, so do not host.
		return fmt.Errorf("%w: the settings of %s came after %v", ErrShardUnavailable, ref.Type, s.cfg.RequestTimeout/2)
	}
	r.hostShard(ref.Shard, ref.Epoch)
	return nil
}

// Handlers of member-to-member messages. They run on the transport's reader goroutine
// and must not block: slow work goes to an owned goroutine.

func (s *Sharding) handleDeliver(req *cluster.Request) {
	var env envelope
	if err := decodeEnvelope(req.Body, &env); err != nil {
		s.log.Warn("dropping a malformed envelope", "from", req.From, "err", err)
		req.Reply(nil, err)
		return
	}
	// The context has the sender's trace and, for an ask, the server span the reply
	// ends (the messenger's): the entity's spans are its children and end before it.
	ctx := req.Context()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(obs.EntityType.String(env.EntityType), obs.EntityID.String(env.EntityID), attrHops.Int(int(env.Hops)))
	}
	d := delivery{env: env, ctx: ctx, ask: !req.OneWay()}
	if !d.ask {
		// A tell fails here, with nobody to tell: a dead letter. The closure has a copy
		// of the envelope, so that env stays on the stack for an ask.
		env := env
		d.reply = func(_ Reply, err error) {
			if err != nil {
				s.tellFailed(context.WithoutCancel(ctx), env, err)
			}
		}
	}
	// The sender's deadline, as the time it had left (envelope.TimeLeft), and for an
	// ask at most AskTimeout: the asker's own timeout, not this member's, bounds how
	// long the message may hold the entity.
	d.deadline = deadlineAt(env.TimeLeft, time.Now(), d.ask, s.cfg.AskTimeout)
	if d.ask {
		d.reply = func(r Reply, err error) {
			w := wireReply{Payload: r.Payload, Node: r.Node}
			if err != nil {
				w = wireReply{Code: ErrorCode(err), Error: err.Error(), Node: s.self}
				var re *RemoteError
				if errors.As(err, &re) && re.Node != "" {
					w.Node = re.Node
				}
			}
			replyWire(&w, func(b []byte) { req.Reply(b, nil) })
		}
	}
	s.route(d)
}

func (s *Sharding) handleGetShardHome(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		req.Reply(nil, err)
		return
	}
	s.coord.getShardHome(req.Context(), ref, func(home shardHome, err error) {
		if err != nil {
			req.Reply(nil, err)
			return
		}
		req.Reply(encode(home), nil)
	})
}

func (s *Sharding) handleHostShard(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		req.Reply(nil, err)
		return
	}
	if !s.owner.Go(func() { req.Reply(nil, s.hostShardHere(ref)) }) {
		req.Reply(nil, ErrStopped)
	}
}

func (s *Sharding) handleRegionState(req *cluster.Request) {
	req.Reply(encode(s.LocalState()), nil)
}

// handOffAt has the region at addr hand a shard off (Akka's HandOff, for a
// rebalance); cb gets the outcome once the handoff is complete, within
// Config.HandOffRequestTimeout.
func (s *Sharding) handOffAt(addr string, ref shardRef, cb func(error)) {
	s.atMember(context.Background(), addr, topicHandOff, encode(ref), s.cfg.HandOffRequestTimeout(),
		func(reply func([]byte, error)) { reply(nil, s.handOffHere(ref)) },
		func(_ []byte, err error) { cb(err) })
}

func (s *Sharding) handOffHere(ref shardRef) error {
	r := s.region(ref.Type)
	if r == nil {
		return fmt.Errorf("%w: no region of %s here", ErrShardUnavailable, ref.Type)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandOffTimeout())
	defer cancel()
	return r.handOffShard(ctx, ref.Shard)
}

// dropShardAt tells the region at addr that its copy of ref's shard is stale (ref.Epoch
// is the current allocation's). One-way.
func (s *Sharding) dropShardAt(addr string, ref shardRef) {
	s.atMember(context.Background(), addr, topicDropShard, encode(ref), 0, func(func([]byte, error)) {
		if r := s.region(ref.Type); r != nil {
			r.dropStale(ref.Shard, ref.Epoch)
		}
	}, nil)
}

func (s *Sharding) handleDropShard(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		return
	}
	if r := s.region(ref.Type); r != nil {
		r.dropStale(ref.Shard, ref.Epoch)
	}
}

func (s *Sharding) handleHandOff(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		req.Reply(nil, err)
		return
	}
	if !s.owner.Go(func() { req.Reply(nil, s.handOffHere(ref)) }) {
		req.Reply(nil, ErrStopped)
	}
}

// handleBeginHandOff: another region hands a shard off; buffer its messages here until
// it completes. The acknowledgement follows, on the same connection, every message this
// member had already sent it.
func (s *Sharding) handleBeginHandOff(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		req.Reply(nil, err)
		return
	}
	if r := s.region(ref.Type); r != nil {
		r.pause(ref.Shard, ref.Requester, decodeSpanContext(ref.HandOff))
	}
	req.Reply(nil, nil)
}

// handleHandOffComplete: the shard's handoff is over; resolve its new home.
func (s *Sharding) handleHandOffComplete(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		return
	}
	if r := s.region(ref.Type); r != nil {
		r.unpause(ref.Shard)
	}
}

// handleReturn: a region handing a shard off gives back a tell this member sent it.
func (s *Sharding) handleReturn(req *cluster.Request) {
	var env envelope
	if err := decode(req.Body, &env); err != nil {
		return
	}
	if r := s.region(env.EntityType); r != nil {
		r.reroute(delivery{env: env, ctx: req.Context(), deadline: deadlineAt(env.TimeLeft, time.Now(), false, 0)})
	}
}

// broadcastHandOff sends a handoff message about ref to every other member; with wait,
// it waits for their acknowledgements (at most RequestTimeout).
func (s *Sharding) broadcastHandOff(ctx context.Context, topic string, ref shardRef, wait bool) {
	body := encode(ref)
	var wg sync.WaitGroup
	for _, m := range s.cfg.Membership.Members() {
		if m.Address == s.self || m.Status == cluster.StatusDown || m.Status == cluster.StatusRemoved {
			continue
		}
		if !wait {
			s.cfg.Messenger.TellContext(ctx, m.TransportAddr, topic, body)
			continue
		}
		wg.Add(1)
		go func() { // no owner: it lives one request, which the call waits for
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			defer cancel()
			if _, err := s.cfg.Messenger.Request(rctx, m.TransportAddr, topic, body); err != nil {
				s.log.Warn("a region did not acknowledge a handoff", "region", m.Address, "shard", ref.String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

func (s *Sharding) handleShardStopped(req *cluster.Request) {
	var ref shardRef
	if err := decode(req.Body, &ref); err != nil {
		req.Reply(nil, err)
		return
	}
	s.coord.shardStopped(ref)
	req.Reply(nil, nil)
}

// shardStopped tells the coordinator that this region no longer hosts a shard (Akka's
// ShardStopped), within RequestTimeout.
func (s *Sharding) shardStopped(ctx context.Context, ref shardRef) error {
	ref.Requester, ref.Leaving = s.self, s.leaving.Load()
	host, ok := cluster.SingletonHost(s.cfg.Membership.Members(), "")
	if !ok {
		return fmt.Errorf("%w: no coordinator", ErrShardUnavailable)
	}
	_, err := s.askMember(ctx, host.Address, topicShardStopped, encode(ref), s.cfg.RequestTimeout,
		func(reply func([]byte, error)) {
			s.coord.shardStopped(ref)
			reply(nil, nil)
		})
	return err
}
