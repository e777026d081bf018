// Forgetting a member of the Store's ring (ring.go).
//
// An operator forgets a member gone for good (ForgetMember, `shardhost state
// forget-member`): every live member drops it from its ring (a new generation), and a
// handover round may then admit the live set; the writes that only the forgotten
// member (and other gone ones) held are lost, which the operator accepts. A member
// up, joining or leaving cannot be forgotten: with two of a shard's three replicas
// replaced (two disks lost), the operator stops one, forgets it, and starts it again
// on its new directory, which then joins as a new member. Members that missed the
// request take the newer generation from the next handover round.

package replstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

// hasKey reports whether m has key k.
func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// ForgetMember makes every live member stop retaining the member addr (as the ring
// names it: its stable name, cluster.Member.Name, if it had one, else its gossip
// address, as the membership lists it): an operator's way out when a member is gone
// for good with its data (see the file comment). Each live member drops addr from its
// ring, a new generation, saved; a handover round then admits the members up once few
// enough are retained, and the shards addr held are served from the replicas up,
// without the writes that only addr and other gone members held. That loss is what
// the operator accepts. It returns the members that were retaining addr. Members that
// do not answer take the new generation from a later handover round.
//
// Errors: ErrMemberNotGone (addr is this member, or is up, joining or leaving: down
// it first), sharding.ErrStoreUnavailable naming the live members that did not forget it.
func (s *Store) ForgetMember(ctx context.Context, addr string) ([]string, error) {
	if !s.owner.Enter() {
		return nil, closedError()
	}
	defer s.owner.Leave()
	if err := s.forgettable(addr); err != nil {
		return nil, err
	}
	v := s.ringView()
	type answer struct {
		addr     string
		retained bool
		err      error
	}
	answers := make(chan answer, len(v.live))
	for _, a := range v.live {
		r := v.replica(a, v.stores[a])
		run := func() {
			if r.local {
				retained, err := s.forgetLocal(addr)
				answers <- answer{a, retained, err}
				return
			}
			var reply stateForgetReply
			err := s.call(ctx, r, topicStateForget, &stateForgetReq{Addr: addr}, &reply)
			answers <- answer{a, reply.Retained, err}
		}
		if !s.owner.Go(run) {
			answers <- answer{a, false, closedError()}
		}
	}
	var retainedBy, failed []string
	for range v.live {
		a := <-answers
		switch {
		case a.err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", a.addr, a.err))
		case a.retained:
			retainedBy = append(retainedBy, a.addr)
		}
	}
	sort.Strings(retainedBy)
	if len(failed) > 0 {
		sort.Strings(failed)
		return retainedBy, fmt.Errorf("%w: member %s forgotten by %d of %d members up; not by %s (they take the new ring from a later handover round)",
			sharding.ErrStoreUnavailable, addr, len(v.live)-len(failed), len(v.live), strings.Join(failed, "; "))
	}
	return retainedBy, nil
}

// forgettable reports whether addr (a name or an address: memberKey) may be forgotten:
// not this member, and every incarnation of addr the membership lists is gone (down,
// exiting, removed).
func (s *Store) forgettable(addr string) error {
	if addr == "" {
		return fmt.Errorf("%w: no member address", ErrMemberNotGone)
	}
	if addr == memberKey(s.cfg.Membership.Self()) {
		return fmt.Errorf("%w: %s is this member", ErrMemberNotGone, addr)
	}
	for _, m := range s.cfg.Membership.Members() {
		if memberKey(m) == addr && m.Status != cluster.StatusDown && m.Status != cluster.StatusExiting && m.Status != cluster.StatusRemoved {
			return fmt.Errorf("%w: %s is %v; only a member gone for good can be forgotten (down it first)", ErrMemberNotGone, addr, m.Status)
		}
	}
	return nil
}

// forgetLocal drops addr from this member's ring (a new generation, saved) if addr may
// be forgotten here; it reports whether this member retained addr.
func (s *Store) forgetLocal(addr string) (bool, error) {
	if err := s.forgettable(addr); err != nil {
		return false, err
	}
	s.ringView() // starts the ring if this member is up
	r := &s.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.admitted != nil && hasKey(r.admitted, addr):
		delete(r.admitted, addr)
	case r.admitted == nil && r.restored != nil && slices.Contains(r.restored.Admitted, addr):
		// Not started yet (this member is not up): the ring it will start from.
		i := slices.Index(r.restored.Admitted, addr)
		r.restored.Admitted = slices.Delete(slices.Clone(r.restored.Admitted), i, i+1)
		if i < len(r.restored.Stores) {
			r.restored.Stores = slices.Delete(slices.Clone(r.restored.Stores), i, i+1)
		}
		r.restored.Gen++
		if s.disk != nil {
			if err := s.disk.saveRing(r.restored); err != nil {
				return false, err
			}
		}
		s.log.Warn("state store: an operator forgot a retained member; writes that only it (and other gone members) held are lost",
			"member", addr, "gen", r.restored.Gen)
		return true, nil
	default:
		return false, nil
	}
	r.gen++
	s.saveRingLocked()
	s.log.Warn("state store: an operator forgot a retained member; writes that only it (and other gone members) held are lost",
		"member", addr, "gen", r.gen, "members", ringKey(slices.Sorted(maps.Keys(r.admitted))))
	select {
	case s.kick <- struct{}{}: // a repair pass and a handover round now
	default:
	}
	return true, nil
}

// serveForget answers state/forget: ForgetMember on this member alone.
func (s *Store) serveForget(from string, body []byte) []byte {
	var req stateForgetReq
	if err := decodeState(body, &req); err != nil {
		return stateFail(err)
	}
	retained, err := s.forgetLocal(req.Addr)
	if err != nil {
		return stateFail(err)
	}
	return s.encodeReply(&stateForgetReply{Retained: retained})
}
