// Routing on this member: a message goes to its entity type's region, which this
// member starts once the TypeResolver knows the type (messages wait for it meanwhile).

package sharding

import (
	"context"
	"fmt"
)

// maxHops bounds how often one message is forwarded between regions. In a stable cluster
// a message takes at most one hop; more happen only while shard homes move.
const maxHops = 3

// route delivers d to its region, waiting for the entity type if this member does not
// know it yet. Failures go to d.answer.
func (s *Sharding) route(d delivery) {
	if !s.owner.Hold() {
		d.fail(ErrStopped)
		return
	}
	defer s.owner.Release()
	s.mu.Lock()
	r := s.regions[d.env.EntityType]
	if r == nil {
		if s.waiting >= s.cfg.BufferSize {
			s.mu.Unlock()
			s.deadLetter(d, ErrBufferFull)
			return
		}
		first := len(s.typeWaiters[d.env.EntityType]) == 0
		s.typeWaiters[d.env.EntityType] = append(s.typeWaiters[d.env.EntityType], d)
		s.waiting++
		s.mu.Unlock()
		if first {
			typ := d.env.EntityType
			s.owner.GoHeld(func() { s.resolveType(typ) })
		}
		return
	}
	s.mu.Unlock()
	r.deliver(d)
}

// resolveType asks the TypeResolver about a type messages wait for, then starts its
// region (which delivers them) or fails them.
func (s *Sharding) resolveType(typ string) {
	ctx, cancel := context.WithTimeout(s.owner.Context(), s.cfg.ResolveTimeout)
	defer cancel()
	settings, err := s.cfg.Types.EntityType(ctx, typ)
	if err == nil {
		err = s.StartType(settings)
	}
	if err != nil {
		s.mu.Lock()
		waiters := s.typeWaiters[typ]
		delete(s.typeWaiters, typ)
		s.waiting -= len(waiters)
		s.mu.Unlock()
		for _, d := range waiters {
			d.fail(err)
		}
	}
}

// ensureRegion returns the region of typ, resolving the type if needed (may block).
func (s *Sharding) ensureRegion(ctx context.Context, typ string) (*shardRegion, error) {
	s.mu.Lock()
	r := s.regions[typ]
	s.mu.Unlock()
	if r != nil {
		return r, nil
	}
	settings, err := s.cfg.Types.EntityType(ctx, typ)
	if err != nil {
		return nil, err
	}
	return s.startType(settings)
}

// HasRegion reports whether this member runs a region (hosting or proxy-only) of the
// entity type typ: StartType has returned it and StopType has not stopped it.
func (s *Sharding) HasRegion(typ string) bool { return s.region(typ) != nil }

func (s *Sharding) region(typ string) *shardRegion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.regions[typ]
}

func (s *Sharding) allRegions() []*shardRegion {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*shardRegion, 0, len(s.regions))
	for _, r := range s.regions {
		out = append(out, r)
	}
	return out
}

// transportAddr returns where to send frames for the member at addr.
func (s *Sharding) transportAddr(addr string) (string, error) {
	m, ok := s.cfg.Membership.Member(addr)
	if !ok {
		return "", fmt.Errorf("%w: member %s is not in the cluster", ErrShardUnavailable, addr)
	}
	return m.TransportAddr, nil
}
