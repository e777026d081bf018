package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
)

// allocation is a shard's home and its fencing epoch.
type allocation struct {
	region string
	epoch  uint64
}

// coordinator is the shard coordinator (Akka's ShardCoordinator), run as a cluster
// singleton: every member has one, active only where the singleton runs. It decides
// the home of each shard with the type's allocation strategy, records it (with a new
// fencing epoch) in distributed data with WriteMajority, makes the chosen region host
// the shard, and only then answers. A coordinator that starts (after the previous one
// moved or crashed) reads the allocations back with ReadMajority and checks them
// against what the regions host. Without distributed data (tests) it rebuilds them
// from the regions alone.
type coordinator struct {
	s *Sharding

	mu         sync.Mutex
	active     bool
	recovering bool
	gen        uint64 // bumped whenever activity changes; stale work is dropped
	alloc      map[string]map[int]allocation
	// index counts, per type and region, the shards of alloc and tentative there
	// (coordinator_index.go); changed only through setAllocLocked, deleteAllocLocked,
	// setAllAllocLocked and the tentative's helpers.
	index       shardIndex
	maxEpoch    map[string]uint64
	inflight    map[shardRef][]func(shardHome, error)
	tentative   map[shardRef]string // decided, not yet hosted: counted by the strategy
	leaving     map[string]bool     // regions that said they are leaving
	rebalancing map[string]map[int]bool
	typesSaved  map[string]bool // types recorded in coordinatorTypesKey
	// bucketsSaved holds, per type, the buckets recorded in coordinatorBucketsKey.
	bucketsSaved map[string]map[int]bool
	// known holds every shard ever allocated, per type: the shards of types that
	// remember entities are allocated again at once when they lose their home.
	known map[string]map[int]bool
	// incarnation is, per region (member address) with allocations, the UID of the
	// process they were made to (or recovered from). Regions are named by address, and
	// a member restarted at its address is a new process that hosts nothing: its
	// previous incarnation's allocations, and their epochs, must not pass to it
	// (forgetReplacedLocked).
	incarnation map[string]cluster.UID
	// replaced is forgetReplacedLocked's scratch: per region with a recorded process,
	// what the members say of it.
	replaced map[string]replacedState
}

// replacedState is what the members say of a region's recorded process
// (forgetReplacedLocked): whether it still hosts, and whether another process is in
// the cluster at its address.
type replacedState struct{ recordedHosts, successor bool }

// epochTagBits is how many low bits of an allocation epoch name the coordinator that
// gave it (nextEpoch).
const epochTagBits = 24

// nextEpoch returns the allocation epoch that follows max, the newest the coordinator
// knows for the type, when the coordinator runs in the process uid: the count above
// max's, in the high 40 bits, and the low 24 bits of uid below.
//
// Fencing orders allocations by their epochs only if no epoch is given twice (the
// state store keeps one epoch's writes as one owner's). A coordinator is a cluster
// singleton, but for a moment two can be active: one on a member about to be downed,
// or paused, and its successor. Both recovered the same max and would give one count
// to two regions (faults/doc.go, bug 14). With the tag, the two allocations have two
// epochs, and the state store refuses the older one's fence or save once the newer
// one has fenced. Two processes' tags are equal with probability 2^-24. An epoch from
// before the tag (a count alone, below 2^24) is older than every tagged one.
func nextEpoch(max uint64, uid cluster.UID) uint64 {
	return (max>>epochTagBits+1)<<epochTagBits | uint64(uid)&(1<<epochTagBits-1)
}

func newCoordinator(s *Sharding) *coordinator {
	c := &coordinator{s: s}
	c.reset()
	return c
}

func (c *coordinator) reset() {
	c.alloc = map[string]map[int]allocation{}
	c.index = shardIndex{}
	c.maxEpoch = map[string]uint64{}
	c.inflight = map[shardRef][]func(shardHome, error){}
	c.tentative = map[shardRef]string{}
	c.leaving = map[string]bool{}
	c.rebalancing = map[string]map[int]bool{}
	c.typesSaved = map[string]bool{}
	c.bucketsSaved = map[string]map[int]bool{}
	c.known = map[string]map[int]bool{}
	c.incarnation = map[string]cluster.UID{}
}

func (c *coordinator) knowLocked(typ string, shard int) {
	if c.known[typ] == nil {
		c.known[typ] = map[int]bool{}
	}
	c.known[typ][shard] = true
}

// allocateRemembered allocates, without waiting for a message, every known shard of the
// types that remember entities and has no home: their regions restart the entities; and
// every known shard without a home that holds reminders in the state store: its new home
// fires them (reminders_run.go); or outbox marks: its new home activates their
// entities, which send their unacknowledged tells again (delivery.go).
func (c *coordinator) allocateRemembered() { c.allocateHomeless(nil) }

// allocateHomeless is allocateRemembered for the shards of only, or, for nil, every
// known shard: the ones without a home of a type that remembers entities are
// allocated, and the others if the state store holds reminders or outbox marks for
// them (one or two store reads a shard).
func (c *coordinator) allocateHomeless(only []shardRef) {
	c.mu.Lock()
	if !c.active {
		c.mu.Unlock()
		return
	}
	var refs, others []shardRef
	remembers := map[string]bool{}
	consider := func(typ string, shard int) {
		if a, ok := c.alloc[typ][shard]; ok && a.region != "" {
			return
		}
		remember, ok := remembers[typ]
		if !ok {
			remember = c.s.typeSettings(typ).RememberEntities
			remembers[typ] = remember
		}
		if remember {
			refs = append(refs, shardRef{Type: typ, Shard: shard})
		} else {
			others = append(others, shardRef{Type: typ, Shard: shard})
		}
	}
	if only == nil {
		for typ, shards := range c.known {
			for shard := range shards {
				consider(typ, shard)
			}
		}
	} else {
		for _, ref := range only {
			if c.known[ref.Type][ref.Shard] {
				consider(ref.Type, ref.Shard)
			}
		}
	}
	c.mu.Unlock()
	for _, ref := range others {
		if c.s.reminders != nil {
			ctx, cancel := context.WithTimeout(c.s.owner.Context(), c.s.cfg.RequestTimeout)
			due, next, err := c.s.reminders.DueReminders(ctx, ref.Type, ref.Shard, math.MaxInt64, 1)
			cancel()
			if err != nil {
				c.s.log.Debug("reading the reminders of a shard without home", "shard", ref.String(), "err", err)
			} else if len(due) > 0 || next > 0 {
				refs = append(refs, ref)
				continue
			}
		}
		if c.s.journal != nil {
			// Outboxes with unacknowledged tells (outboxMarkPrefix): the shard's new
			// home activates their entities, which send them again.
			ctx, cancel := context.WithTimeout(c.s.owner.Context(), c.s.cfg.RequestTimeout)
			ids, err := c.s.cfg.States.Remembered(ctx, ref.Type, ref.Shard)
			cancel()
			if err != nil {
				c.s.log.Debug("reading the outbox marks of a shard without home", "shard", ref.String(), "err", err)
			} else if slices.ContainsFunc(ids, isOutboxMark) {
				refs = append(refs, ref)
			}
		}
	}
	for _, ref := range refs {
		c.getShardHome(context.Background(), ref, func(_ shardHome, err error) {
			if err != nil {
				c.s.log.Debug("allocating a shard of remembered entities", "shard", ref.String(), "err", err)
			}
		})
	}
}

// Start activates the coordinator on this member (cluster.SingletonService): it
// recovers its state, then answers requests.
func (c *coordinator) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recovering = true
	c.gen++
	gen := c.gen
	if !c.s.owner.Go(func() { c.recover(gen) }) {
		c.recovering = false
	}
	c.s.owner.Go(func() { c.rebalanceLoop(gen) })
}

// Stop deactivates the coordinator (cluster.SingletonService): requests are refused
// with errNotCoordinator until it starts again, here or elsewhere. The requests waiting
// for an allocation get that error on a goroutine of sharding's owner, or on the
// caller's once sharding is stopping (never with c.mu held: the callbacks reply, as
// finish's do).
func (c *coordinator) Stop() {
	c.mu.Lock()
	c.active, c.recovering = false, false
	c.gen++
	waiters := c.inflight
	c.reset()
	c.mu.Unlock()
	fail := func() {
		for _, ws := range waiters {
			for _, cb := range ws {
				cb(shardHome{}, errNotCoordinator)
			}
		}
	}
	if !c.s.owner.Go(fail) {
		fail()
	}
}

func (c *coordinator) current(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen == gen
}

// getShardHome answers where a shard lives, allocating it if it has no home. cb is
// called exactly once, possibly on another goroutine, never with c.mu held.
func (c *coordinator) getShardHome(ctx context.Context, ref shardRef, cb func(shardHome, error)) {
	requester := ref.Requester
	ref.Requester, ref.Epoch, ref.Leaving = "", 0, false
	c.mu.Lock()
	if !c.active {
		c.mu.Unlock()
		cb(shardHome{}, errNotCoordinator)
		return
	}
	members := c.s.cfg.Membership.Members()
	c.forgetReplacedLocked(members)
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		if hosting(m) {
			alive[m.Address] = true
		}
	}
	if a, ok := c.alloc[ref.Type][ref.Shard]; ok && a.region != "" && alive[a.region] {
		process := uint64(c.incarnation[a.region])
		c.mu.Unlock()
		cb(shardHome{Region: a.region, Epoch: a.epoch, Process: process}, nil)
		return
	}
	if a, ok := c.alloc[ref.Type][ref.Shard]; ok && a.region != "" && c.s.withinDownMargin(a.region) {
		// Its region was downed and may still run the shard's entities: not elsewhere
		// before the margin has passed.
		c.mu.Unlock()
		cb(shardHome{}, fmt.Errorf("%w: %s was at %s, downed less than %v ago", ErrShardUnavailable, ref, a.region,
			c.s.cfg.DownRemovalMargin))
		return
	}
	if waiters, ok := c.inflight[ref]; ok {
		c.inflight[ref] = append(waiters, cb)
		c.mu.Unlock()
		return
	}
	c.inflight[ref] = []func(shardHome, error){cb}
	settings := c.s.typeSettings(ref.Type)
	// Every candidate with the shards allocated there, tentative ones included, from the
	// index: O(members) a decision, not O(shards).
	current := c.candidatesLocked(members, settings)
	c.index.fill(ref.Type, current, c.s.cfg.Strategy != nil)
	gen := c.gen
	region, err := strategyFor(settings, c.s.cfg.Strategy, c.s.cfg.MaxSimultaneousRebalance).AllocateShard(requester, ref.Shard, current)
	var epoch uint64
	var process cluster.UID
	if err == nil {
		process, err = processAt(members, region)
	}
	if err == nil {
		c.tentative[ref] = region
		c.index.add(ref.Type, region, indexSlot{shard: ref.Shard, tentative: true})
		epoch = nextEpoch(c.maxEpoch[ref.Type], c.s.cfg.Membership.Self().UID)
		c.maxEpoch[ref.Type] = epoch
	}
	c.mu.Unlock()
	if err != nil {
		c.finish(ref, shardHome{}, err)
		return
	}
	home := shardHome{Region: region, Epoch: epoch, Process: uint64(process)}
	ok := c.s.owner.Go(func() {
		// In the trace of the request that asked (if traced): an "allocate" span with
		// the allocation's write and the HostShard request.
		actx, span := context.WithoutCancel(ctx), noopSpan
		if c.s.tel.traced && obs.Traced(ctx) {
			actx, span = c.s.tracer.Start(actx, "allocate "+ref.Type, trace.WithAttributes(obs.EntityType.String(ref.Type),
				obs.ShardID.Int(ref.Shard), attrHome.String(region), attrEpoch.Int64(int64(epoch)), obs.Node.String(c.s.self)))
		}
		// Record the allocation before any region hosts the shard: a coordinator that
		// takes over finds it.
		pctx, cancel := context.WithTimeout(actx, c.s.cfg.RequestTimeout)
		err := c.persist(pctx, ref.Type, ref.Shard, allocation{region, epoch})
		cancel()
		if err != nil {
			err = wrapCause(ErrShardUnavailable, "recording the allocation of "+ref.String(), err)
			failSpan(span, err)
			span.End()
			c.finish(ref, shardHome{}, err)
			return
		}
		host := ref
		host.Epoch, host.UID = epoch, uint64(process)
		c.s.hostShard(actx, region, host, func(err error) {
			failSpan(span, err)
			span.End()
			// A request that timed out may have reached the region, which then hosts the
			// shard, its answer lost: the shard stays allocated there, as the allocation
			// was recorded before the request (Akka's coordinator likewise keeps a
			// recorded allocation and sends HostShard again). The next request for its
			// home names the region, which hosts it then if it had not. Allocating it
			// anew elsewhere ran it on two members: a drop sent to the region was lost as
			// well (faults seed 300850: the coordinator's member was cut off just after
			// the request reached the region).
			unknown := errors.Is(err, cluster.ErrRequestTimeout)
			if err != nil && !unknown {
				// Refused or never sent: should the region host the shard nonetheless (an
				// answer that came late), that copy must not serve beside the next
				// allocation.
				c.s.dropShardAt(region, shardRef{Type: ref.Type, Shard: ref.Shard, Epoch: epoch + 1})
			}
			if err == nil || unknown {
				c.mu.Lock()
				if gen == c.gen {
					c.setAllocLocked(ref.Type, ref.Shard, allocation{region, epoch})
					c.knowLocked(ref.Type, ref.Shard)
					if unknown {
						c.noteIncarnationLocked(region, members) // no answer: no proof of the process there
					} else {
						c.hostedByLocked(region, process, shardRef{Type: ref.Type, Shard: ref.Shard})
					}
					c.s.log.Debug("shard allocated", "shard", ref.String(), "region", region, "epoch", epoch, "unconfirmed", unknown)
				} else {
					err = errNotCoordinator
				}
				c.mu.Unlock()
			}
			c.finish(ref, home, err)
		})
	})
	if !ok {
		c.finish(ref, shardHome{}, ErrStopped)
	}
}

func (c *coordinator) finish(ref shardRef, home shardHome, err error) {
	c.mu.Lock()
	waiters := c.inflight[ref]
	delete(c.inflight, ref)
	if region, ok := c.tentative[ref]; ok {
		c.index.remove(ref.Type, region, indexSlot{shard: ref.Shard, tentative: true})
		delete(c.tentative, ref)
	}
	c.mu.Unlock()
	if err != nil {
		home = shardHome{}
	}
	for _, cb := range waiters {
		cb(home, err)
	}
}

// candidatesLocked returns the regions that may take new shards of a type, each with no
// shards yet: reachable up members with the type's role that are not leaving. Joining,
// leaving, unreachable and down members get none.
func (c *coordinator) candidatesLocked(members []cluster.Member, t TypeSettings) map[string][]int {
	current := make(map[string][]int, len(members))
	for _, m := range members {
		if m.Status == cluster.StatusUp && m.Reachable && !c.leaving[m.Address] &&
			(t.Role == "" || hasRole(m.Roles, t.Role)) {
			current[m.Address] = nil
		}
	}
	return current
}

func hasRole(roles []string, role string) bool {
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}

// rebalanceLoop runs rounds of rebalancing while this coordinator is active (gen).
func (c *coordinator) rebalanceLoop(gen uint64) {
	t := time.NewTicker(c.s.cfg.RebalanceInterval)
	defer t.Stop()
	for {
		select {
		case <-c.s.owner.Done():
			return
		case <-t.C:
		}
		if !c.current(gen) {
			return
		}
		c.rebalanceRound(gen)
		// A safety net for remembered entities whose allocation failed (no member
		// could host them then).
		c.allocateRemembered()
	}
}

// rebalanceRound asks each type's strategy which shards to move and has their regions
// hand them off; the coordinator allocates them anew when asked for them next.
func (c *coordinator) rebalanceRound(gen uint64) {
	members := c.s.cfg.Membership.Members()
	type move struct {
		ref    shardRef
		region string
	}
	var moves []move
	c.mu.Lock()
	if !c.active || c.gen != gen {
		c.mu.Unlock()
		return
	}
	for typ, shards := range c.alloc {
		settings := c.s.typeSettings(typ)
		current := c.candidatesLocked(members, settings)
		for shard, a := range shards {
			if _, ok := current[a.region]; ok {
				current[a.region] = append(current[a.region], shard)
			}
		}
		if c.rebalancing[typ] == nil {
			c.rebalancing[typ] = map[int]bool{}
		}
		for _, shard := range strategyFor(settings, c.s.cfg.Strategy, c.s.cfg.MaxSimultaneousRebalance).Rebalance(current, c.rebalancing[typ]) {
			c.rebalancing[typ][shard] = true
			moves = append(moves, move{shardRef{Type: typ, Shard: shard}, shards[shard].region})
		}
	}
	c.mu.Unlock()
	for _, mv := range moves {
		c.s.log.Info("rebalancing a shard", "shard", mv.ref.String(), "from", mv.region)
		c.s.handOffAt(mv.region, mv.ref, func(err error) {
			if err != nil {
				c.s.log.Warn("rebalance handoff failed", "shard", mv.ref.String(), "from", mv.region, "err", err)
			}
			c.mu.Lock()
			delete(c.rebalancing[mv.ref.Type], mv.ref.Shard)
			c.mu.Unlock()
		})
	}
}

// shardStopped forgets a shard's allocation after its region handed it off (Akka's
// ShardStopped), and records that it has none (keeping its epoch).
func (c *coordinator) shardStopped(ref shardRef) {
	c.mu.Lock()
	if ref.Leaving && ref.Requester != "" {
		c.leaving[ref.Requester] = true
	}
	a, ok := c.alloc[ref.Type][ref.Shard]
	drop := ok && (ref.Requester == "" || a.region == ref.Requester)
	if drop {
		c.deleteAllocLocked(ref.Type, ref.Shard)
		c.s.log.Debug("shard handed off", "shard", ref.String(), "from", a.region)
	}
	active := c.active
	c.mu.Unlock()
	if drop && active {
		c.s.owner.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.RequestTimeout)
			defer cancel()
			if err := c.persist(ctx, ref.Type, ref.Shard, allocation{"", a.epoch}); err != nil {
				c.s.log.Debug("recording a handoff", "shard", ref.String(), "err", err)
			}
			// This shard alone: the other shards without a home were looked at when
			// they lost it (and every RebalanceInterval). A walk of every known shard
			// here, with a store read for each homeless one, made a member's leave with
			// S/M shards cost O(S²/M) (docs/scale.md).
			c.allocateHomeless([]shardRef{{Type: ref.Type, Shard: ref.Shard}})
		})
	}
}

// processAt returns the UID of the process that hosts at addr (up or leaving) among
// members: the one listed, or, when a restarted process is listed beside its previous
// incarnation (not downed yet), the one reachable. Two processes cannot hold one
// address, and the HostShard that names the one chosen proves it is there
// (hostedByLocked). None, or no way to choose: the shard is not allocated there now.
func processAt(members []cluster.Member, addr string) (cluster.UID, error) {
	var all, reachable []cluster.UID
	for _, m := range members {
		if m.Address == addr && hosting(m) {
			all = append(all, m.UID)
			if m.Reachable {
				reachable = append(reachable, m.UID)
			}
		}
	}
	switch {
	case len(all) == 1:
		return all[0], nil
	case len(reachable) == 1:
		return reachable[0], nil
	}
	return 0, fmt.Errorf("%w: %d processes up at %s, %d reachable", ErrShardUnavailable, len(all), addr, len(reachable))
}

// hostedByLocked records that the process uid at region hosts the shard just allocated
// there (ref): it confirmed the HostShard that named it, so it holds the address and
// any other process recorded there is gone. The allocations made to that other process
// are forgotten: the new one hosts none of them, and forgetReplacedLocked would
// otherwise drop them later with this one, while it is hosted (faults seed 2365: the
// process recorded at the address was the previous one, seen up when the HostShard
// left, and the restarted one answered it).
func (c *coordinator) hostedByLocked(region string, uid cluster.UID, ref shardRef) {
	prev, ok := c.incarnation[region]
	c.incarnation[region] = uid
	if !ok || prev == uid {
		return
	}
	dropped := 0
	for typ, shards := range c.alloc {
		for id, a := range shards {
			if a.region == region && (typ != ref.Type || id != ref.Shard) {
				c.deleteAllocLocked(typ, id)
				dropped++
			}
		}
	}
	delete(c.leaving, region)
	c.s.log.Info("forgot the allocations of a replaced process: its successor at the address took a shard",
		"region", region, "previous_uid", prev, "uid", uid, "shards", dropped)
	if dropped > 0 && c.active {
		c.s.owner.Go(c.allocateRemembered)
	}
}

// noteIncarnationLocked records, for a region the coordinator has allocations at, the
// UID of its process: the one member at that address that hosts, or else the one
// downed there (whose allocations DownRemovalMargin keeps). A region already recorded keeps its
// UID until forgetReplacedLocked drops it.
func (c *coordinator) noteIncarnationLocked(region string, members []cluster.Member) {
	if region == "" {
		return
	}
	if _, ok := c.incarnation[region]; ok {
		return
	}
	var hosts, down []cluster.UID
	for _, m := range members {
		switch {
		case m.Address != region:
		case hosting(m):
			hosts = append(hosts, m.UID)
		case m.Status == cluster.StatusDown:
			down = append(down, m.UID)
		}
	}
	// Two processes at one address (an old incarnation not yet downed everywhere):
	// which one holds the allocations is not known, and none is recorded.
	switch {
	case len(hosts) == 1:
		c.incarnation[region] = hosts[0]
	case len(hosts) == 0 && len(down) == 1:
		c.incarnation[region] = down[0]
	}
}

// forgetReplacedLocked forgets the allocations at every region whose process was
// replaced: it no longer hosts and a member with another UID joined at its address. The cluster downs the
// previous incarnation as the new one joins (two processes cannot hold one address), so
// its allocations go at once, without DownRemovalMargin, and the shards are allocated
// again with new epochs. Without this, the new process would be handed its previous
// incarnation's shards at their old epochs, and the state store, which orders one
// epoch's writes by the writer's clock, could order its writes below those of its
// previous incarnation (a clock that went back across the restart) and lose them
// (faults seed 10011).
func (c *coordinator) forgetReplacedLocked(members []cluster.Member) {
	if len(c.incarnation) == 0 {
		return
	}
	// One pass over the members, for every region with a recorded process: O(members)
	// per call, and a call per request for a shard's home (it was a pass over the
	// members per region, O(members²): 90,000 address comparisons a request at 300
	// members, docs/scale.md).
	if c.replaced == nil {
		c.replaced = map[string]replacedState{}
	}
	clear(c.replaced)
	for _, m := range members {
		uid, ok := c.incarnation[m.Address]
		if !ok {
			continue
		}
		st := c.replaced[m.Address]
		switch {
		case m.UID == uid:
			st.recordedHosts = hosting(m)
		case m.Status != cluster.StatusDown && m.Status != cluster.StatusRemoved && m.Status != cluster.StatusExiting:
			st.successor = true
		}
		c.replaced[m.Address] = st
	}
	for region, uid := range c.incarnation {
		// Replaced: the recorded process no longer hosts (downed, exiting, or gone from
		// the membership) and another one at its address is in the cluster. While the
		// recorded one still hosts, its allocations stand, even beside a second UID at
		// the address (a stale entry the gossip brought back, seed 13364): dropping
		// them would allocate its shards elsewhere while it still ran them.
		if st := c.replaced[region]; st.recordedHosts || !st.successor {
			continue
		}
		delete(c.incarnation, region)
		dropped := 0
		for typ, shards := range c.alloc {
			for id, a := range shards {
				if a.region == region {
					c.deleteAllocLocked(typ, id)
					dropped++
				}
			}
		}
		delete(c.leaving, region)
		c.s.log.Info("forgot the allocations of a replaced process: a new incarnation joined at its address",
			"region", region, "previous_uid", uid, "shards", dropped)
		if dropped > 0 && c.active {
			c.s.owner.Go(c.allocateRemembered)
		}
	}
}

// memberRemoved forgets the allocations of a member that is gone (removed, exited, or
// downed past DownRemovalMargin): those at its address, unless they were made to
// another process there. Regions are named by address, and the removal of a previous
// incarnation may be handled after its successor at the address was given shards (a
// restart, whose old incarnation the leader removes as the new one comes up: faults
// seed 2172): forgetting those would allocate them elsewhere while it hosts them.
// forgetReplacedLocked forgets the previous incarnation's own allocations.
func (c *coordinator) memberRemoved(m cluster.Member) {
	c.forgetRegions(func(region string, incarnation cluster.UID, recorded bool) bool {
		return region == m.Address && (!recorded || incarnation == m.UID)
	})
}

// forgetRegions forgets the allocations at the regions gone reports, given the process
// recorded there (noteIncarnationLocked), if one is.
func (c *coordinator) forgetRegions(gone func(region string, incarnation cluster.UID, recorded bool) bool) {
	c.mu.Lock()
	c.forgetReplacedLocked(c.s.cfg.Membership.Members())
	// Decided once per region, before its incarnation is forgotten below.
	decided := map[string]bool{}
	isGone := func(region string) bool {
		g, ok := decided[region]
		if !ok {
			uid, recorded := c.incarnation[region]
			g = gone(region, uid, recorded)
			decided[region] = g
		}
		return g
	}
	for r := range c.incarnation {
		if isGone(r) {
			delete(c.incarnation, r)
		}
	}
	for r := range c.leaving {
		if isGone(r) {
			delete(c.leaving, r)
		}
	}
	dropped := false
	for typ, shards := range c.alloc {
		for id, a := range shards {
			if isGone(a.region) {
				c.deleteAllocLocked(typ, id)
				dropped = true
			}
		}
	}
	active := c.active
	c.mu.Unlock()
	if dropped && active {
		c.s.owner.Go(c.allocateRemembered)
	}
}

// allocations returns a copy of the allocations (type → shard → region), for tests and
// inspection.
func (c *coordinator) allocations() map[string]map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[int]string, len(c.alloc))
	for t, shards := range c.alloc {
		out[t] = make(map[int]string, len(shards))
		for id, a := range shards {
			out[t][id] = a.region
		}
	}
	return out
}
