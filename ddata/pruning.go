package ddata

import (
	"slices"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// prune runs the pruning of removed members' data (Akka's RemovedNodePruning protocol,
// docs/design.md, "Distributed data"):
//  1. The leader marks each entry that holds data of a removed member: pruning
//     initialized, owned by the leader, seen by the leader.
//  2. Every replica that has an initialized marker adds itself to its seen set: as it
//     merges the marker in (addSeenLocked), or here.
//  3. Once every member has seen it, the owner prunes: the removed member's data moves
//     to the owner (Prune), and the marker becomes performed until an obsolete time.
//  4. While performed, data from replicas that missed the pruning is cleaned before it
//     is merged (envelope.merge); after the obsolete time the marker is dropped and the
//     remains cleaned up (PruningCleanup).
//
// The markers are data of their envelopes, merged like them, so gossip carries them
// as it carries the data. Gossip alone took a number of rounds that grew with the keys
// (a key's digest comes round once every keys/MaxDeltaElements rounds) and with the
// members (a marker reaches every member, and every member's seen mark the owner, by
// random exchanges), once per step. So each step also goes straight where it is needed:
// the leader sends the entries it marked (step 1) and the owner those it pruned (step
// 3) to every member at once, and each replica tells the owner which entries it has
// seen (step 2) in a pruningSeenMsg, a key name each, batched with the next deltas;
// the owner adds what it was told to the seen sets on its next pruning tick.
// A step is then one message away whatever the keys and members, the bytes O(keys ×
// members) (docs/scale.md has the times measured). Gossip still repairs what a lost
// message left out.
func (r *Replicator) prune(now time.Time) {
	view := r.cfg.Membership.View()
	leader := view.HasLeader && view.Leader == r.cfg.Membership.Self().Node()
	live := map[NodeID]bool{}
	for _, m := range view.Members {
		live[NodeID(m.UniqueAddress())] = true
	}
	r.mu.Lock()
	// spread: entries whose marker this replica started (1) or performed (3), for
	// every member.
	spread := map[string][]byte{}
	for key, env := range r.data {
		p, ok := env.data.(RemovedNodePruning)
		if env.deleted || !ok {
			continue
		}
		if len(env.pruning) == 0 && (!leader || len(r.removed) == 0) {
			continue
		}
		if !r.pruneDueLocked(key, env, p, leader, live, now) {
			continue // nothing to do: no copy of the markers, every tick, for every key
		}
		changed, send := false, false
		markers := make(map[NodeID]pruning, len(env.pruning))
		for n, m := range env.pruning {
			markers[n] = m
		}
		// 1: the leader starts pruning of removed members' data.
		if leader {
			for removed := range r.removed {
				if _, marked := markers[removed]; !marked && p.NeedPruningFrom(removed) {
					markers[removed] = pruning{Owner: r.self, Seen: []NodeID{r.self}}
					changed, send = true, true
				}
			}
		}
		for removed, m := range markers {
			if from := r.seenBy[key][removed]; len(from) > 0 && !m.Performed && m.Owner == r.self {
				// 2: seen by those that told this replica, the owner.
				m.Seen = unionNodes(m.Seen, from)
				markers[removed] = m
				changed = true
			}
			switch {
			case !m.Performed && !containsNode(m.Seen, r.self):
				// 2: seen here.
				m.Seen = unionNodes(m.Seen, []NodeID{r.self})
				markers[removed] = m
				changed = true
				r.noteSeenLocked(m.Owner, removed, key)
			case !m.Performed && m.Owner == r.self && seenByAll(m.Seen, live):
				// 3: everyone has seen it: the owner prunes.
				if pruned, ok := p.Prune(removed, r.self).(RemovedNodePruning); ok {
					p = pruned
				}
				markers[removed] = pruning{Owner: r.self, Performed: true,
					ObsoleteAt: now.Add(r.cfg.MaxPruningDissemination).UnixMilli()}
				changed, send = true, true
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
			env := envelope{data: p, pruning: markers, usedAt: env.usedAt}
			r.setLocked(key, env)
			r.changed[key] = true
			r.persistLocked(key, false)
			if send {
				if b, err := env.encode(); err == nil {
					spread[key] = b
				}
			}
		}
	}
	// What the others told of markers this replica no longer owns, or that are gone, is
	// dropped with the rest.
	clear(r.seenBy)
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
	r.mu.Unlock()
	if len(spread) > 0 {
		r.broadcastEntries(spread)
	}
}

// pruneDueLocked reports whether prune has anything to do for key's entry env (whose
// data is p): a removed member to mark (leader), a marker to mark seen here or with
// what others told, one to perform, one obsolete. It allocates nothing. r.mu is held.
func (r *Replicator) pruneDueLocked(key string, env envelope, p RemovedNodePruning, leader bool, live map[NodeID]bool, now time.Time) bool {
	if leader {
		for removed := range r.removed {
			if _, marked := env.pruning[removed]; !marked && p.NeedPruningFrom(removed) {
				return true
			}
		}
	}
	for removed, m := range env.pruning {
		switch {
		case m.Performed:
			if now.UnixMilli() > m.ObsoleteAt {
				return true
			}
		case !containsNode(m.Seen, r.self):
			return true
		case m.Owner == r.self && (len(r.seenBy[key][removed]) > 0 || seenByAll(m.Seen, live)):
			return true
		}
	}
	return false
}

// addSeenLocked adds this replica to the seen set of every initialized marker of env
// that lacks it (step 2 of prune, as the marker arrives: Akka's replicator marks a
// marker seen as it writes a received envelope) and notes it for the marker's owner.
// It returns env, changed or not. r.mu is held.
func (r *Replicator) addSeenLocked(key string, env envelope) envelope {
	var markers map[NodeID]pruning
	for removed, m := range env.pruning {
		if m.Performed || containsNode(m.Seen, r.self) {
			continue
		}
		if markers == nil {
			markers = make(map[NodeID]pruning, len(env.pruning))
			for n, o := range env.pruning {
				markers[n] = o
			}
		}
		m.Seen = unionNodes(m.Seen, []NodeID{r.self})
		markers[removed] = m
		r.noteSeenLocked(m.Owner, removed, key)
	}
	if markers == nil {
		return env
	}
	env.pruning = markers
	return env
}

// noteSeenLocked records that this replica has seen owner's marker of removed in key,
// for the next pruningSeenMsg to owner (sendSeen). r.mu is held.
func (r *Replicator) noteSeenLocked(owner, removed NodeID, key string) {
	if owner == r.self {
		return
	}
	byRemoved := r.seenFor[owner]
	if byRemoved == nil {
		byRemoved = map[NodeID][]string{}
		r.seenFor[owner] = byRemoved
	}
	byRemoved[removed] = append(byRemoved[removed], key)
}

// sendSeen tells each owner of a pruning which of its markers this replica has seen
// since the last call, in messages of at most MaxDeltaElements keys. An owner that is
// no longer a member is skipped: whoever owns the markers now learns by gossip.
func (r *Replicator) sendSeen() {
	r.mu.Lock()
	if len(r.seenFor) == 0 {
		r.mu.Unlock()
		return
	}
	seen := r.seenFor
	r.seenFor = map[NodeID]map[NodeID][]string{}
	r.mu.Unlock()
	for owner, byRemoved := range seen {
		to, ok := r.memberByNode(owner)
		if !ok || !to.Reachable {
			continue
		}
		for removed, keys := range byRemoved {
			for start := 0; start < len(keys); start += r.cfg.MaxDeltaElements {
				msg := pruningSeenMsg{From: r.self, Removed: removed, Keys: keys[start:min(start+r.cfg.MaxDeltaElements, len(keys))]}
				r.cfg.Messenger.Tell(to.TransportAddr, topicPruning, r.encode(msg))
			}
		}
	}
}

// handlePruningSeen records that the sender has seen the markers it names; prune
// adds it to their seen sets if they are this replica's (step 2 of prune, told to the
// owner). Once per pruning tick and key, not per message: each change of a marker's
// seen set re-encodes its entry for the digest, O(members) bytes, and one message a
// member for each key would make that O(keys × members²) at the owner.
func (r *Replicator) handlePruningSeen(req *cluster.Request) {
	var msg pruningSeenMsg
	if err := decMode.Unmarshal(req.Body, &msg); err != nil || msg.From == "" || msg.Removed == "" {
		r.log.DebugContext(req.Context(), "dropping a malformed pruning seen message", "from", req.From, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range msg.Keys {
		byRemoved := r.seenBy[key]
		if byRemoved == nil {
			byRemoved = map[NodeID][]NodeID{}
			r.seenBy[key] = byRemoved
		}
		byRemoved[msg.Removed] = append(byRemoved[msg.Removed], msg.From)
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

// seenByAll reports whether every live member is in seen, which is sorted (a binary
// search each, no allocation).
func seenByAll(seen []NodeID, live map[NodeID]bool) bool {
	if len(seen) < len(live) {
		return false
	}
	for n := range live {
		if _, ok := slices.BinarySearch(seen, n); !ok {
			return false
		}
	}
	return true
}
