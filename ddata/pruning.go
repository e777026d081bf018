package ddata

import (
	"time"
)

// prune runs the pruning of removed members' data (Akka's RemovedNodePruning protocol):
//  1. The leader marks each entry that holds data of a removed member: pruning
//     initialized, owned by the leader, seen by the leader.
//  2. Every replica that sees an initialized marker adds itself to its seen set.
//  3. Once every member has seen it, the owner prunes: the removed member's data moves
//     to the owner (Prune), and the marker becomes performed until an obsolete time.
//  4. While performed, data from replicas that missed the pruning is cleaned before it
//     is merged (envelope.merge); after the obsolete time the marker is dropped and the
//     remains cleaned up (PruningCleanup).
func (r *Replicator) prune(now time.Time) {
	view := r.cfg.Membership.View()
	leader := view.HasLeader && view.Leader == r.cfg.Membership.Self().Node()
	live := map[NodeID]bool{}
	for _, m := range view.Members {
		live[NodeID(m.UniqueAddress())] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, env := range r.data {
		p, ok := env.data.(RemovedNodePruning)
		if env.deleted || !ok {
			continue
		}
		changed := false
		markers := map[NodeID]pruning{}
		for n, m := range env.pruning {
			markers[n] = m
		}
		// 1: the leader starts pruning of removed members' data.
		if leader {
			for removed := range r.removed {
				if _, marked := markers[removed]; !marked && p.NeedPruningFrom(removed) {
					markers[removed] = pruning{Owner: r.self, Seen: []NodeID{r.self}}
					changed = true
				}
			}
		}
		for removed, m := range markers {
			switch {
			case !m.Performed && !containsNode(m.Seen, r.self):
				// 2: seen here.
				m.Seen = unionNodes(m.Seen, []NodeID{r.self})
				markers[removed] = m
				changed = true
			case !m.Performed && m.Owner == r.self && seenByAll(m.Seen, live):
				// 3: everyone has seen it: the owner prunes.
				if pruned, ok := p.Prune(removed, r.self).(RemovedNodePruning); ok {
					p = pruned
				}
				markers[removed] = pruning{Owner: r.self, Performed: true,
					ObsoleteAt: now.Add(r.cfg.MaxPruningDissemination).UnixMilli()}
				changed = true
			case m.Performed && now.UnixMilli() > m.ObsoleteAt:
				// 4: the marker is obsolete: drop it and what is left of the node.
				if cleaned, ok := p.PruningCleanup(removed).(RemovedNodePruning); ok {
					p = cleaned
				}
				delete(markers, removed)
				changed = true
			}
		}
		if changed {
			r.setLocked(key, envelope{data: p, pruning: markers, usedAt: env.usedAt})
			r.changed[key] = true
			r.persistLocked(key, false)
		}
	}
	// Forget removed members with nothing left to prune anywhere here.
	for removed := range r.removed {
		pending := false
		for _, env := range r.data {
			if _, marked := env.pruning[removed]; marked {
				pending = true
				break
			}
			if p, ok := env.data.(RemovedNodePruning); ok && !env.deleted && p.NeedPruningFrom(removed) {
				pending = true
				break
			}
		}
		if !pending {
			delete(r.removed, removed)
		}
	}
}

func containsNode(list []NodeID, n NodeID) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

func seenByAll(seen []NodeID, live map[NodeID]bool) bool {
	set := map[NodeID]bool{}
	for _, n := range seen {
		set[n] = true
	}
	for n := range live {
		if !set[n] {
			return false
		}
	}
	return true
}
