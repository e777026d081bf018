package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// This file is the membership state of the cluster specification: members with their
// status, a vector clock, a seen set, a reachability table and tombstones of removed
// members, with a monotonic merge (a join-semilattice: commutative, associative,
// idempotent), after Akka's cluster specification ("Membership", "Vector Clocks",
// "Gossip Convergence", "Leader", "Membership Lifecycle"); see docs/design.md.

// UniqueAddress identifies one incarnation of a member: its address and the UID chosen
// when its process started. It orders by address, then UID.
type UniqueAddress struct {
	// omitempty: a member's address and UID are never empty, so they encode as before;
	// the zero value is an empty map, which Message.From then leaves out (a contact
	// message names its sender by UID alone, Message.FromUID).
	Address string `cbor:"1,keyasint,omitempty" json:"address"`
	UID     UID    `cbor:"2,keyasint,omitempty" json:"uid"`
}

func (u UniqueAddress) String() string { return uniqueAddress(u.Address, u.UID) }

// Less orders unique addresses: by address, then UID.
func (u UniqueAddress) Less(o UniqueAddress) bool { return u.compare(o) < 0 }

// compare orders u and o as Less does: -1, 0 or 1.
func (u UniqueAddress) compare(o UniqueAddress) int {
	if c := strings.Compare(u.Address, o.Address); c != 0 {
		return c
	}
	return cmp.Compare(u.UID, o.UID)
}

// statusRank orders statuses for merging: a later lifecycle step wins. removed > down >
// exiting > leaving > up > joining (Akka's Member.highestPriorityOf).
func statusRank(s MemberStatus) int {
	switch s {
	case StatusJoining:
		return 1
	case StatusUp:
		return 2
	case StatusLeaving:
		return 3
	case StatusExiting:
		return 4
	case StatusDown:
		return 5
	case StatusRemoved:
		return 6
	}
	return 0
}

// gossipMember is a member as the membership state holds it.
type gossipMember struct {
	Node   UniqueAddress `cbor:"1,keyasint"`
	Status MemberStatus  `cbor:"2,keyasint"`
	// UpNumber orders members by age: the leader gives each member the next number when
	// it moves it to up. 0 until then.
	UpNumber      int      `cbor:"3,keyasint,omitempty"`
	Roles         []string `cbor:"4,keyasint,omitempty"`
	TransportAddr string   `cbor:"5,keyasint,omitempty"`
	APIAddr       string   `cbor:"6,keyasint,omitempty"`
	// ReadyToExit is set by a leaving member once its leave hooks (shard handoff) are
	// done; the leader moves it to exiting only then. It never goes back to false.
	ReadyToExit bool `cbor:"7,keyasint,omitempty"`
	// Name is the member's stable name (Member.Name), "" for none.
	Name string `cbor:"8,keyasint,omitempty"`
}

// higher reports whether m wins over o in a merge: later status, then lower up-number,
// then ready to exit.
func (m gossipMember) higher(o gossipMember) bool {
	if rm, ro := statusRank(m.Status), statusRank(o.Status); rm != ro {
		return rm > ro
	}
	if m.UpNumber != o.UpNumber {
		if m.UpNumber == 0 || o.UpNumber == 0 {
			return m.UpNumber != 0
		}
		return m.UpNumber < o.UpNumber
	}
	return m.ReadyToExit && !o.ReadyToExit
}

func (m gossipMember) hasRole(role string) bool {
	for _, r := range m.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// vectorClock maps a node (UniqueAddress.String()) to its counter.
type vectorClock map[string]uint64

// ordering is how two vector clocks compare.
type ordering int

const (
	orderSame ordering = iota
	orderBefore
	orderAfter
	orderConcurrent
)

// Compare orders v against o.
func (v vectorClock) Compare(o vectorClock) ordering {
	less, greater := false, false
	for k, a := range v {
		if b := o[k]; a > b {
			greater = true
		} else if a < b {
			less = true
		}
	}
	for k, b := range o {
		if _, ok := v[k]; !ok && b > 0 {
			less = true
		}
	}
	switch {
	case less && greater:
		return orderConcurrent
	case less:
		return orderBefore
	case greater:
		return orderAfter
	}
	return orderSame
}

func (v vectorClock) merge(o vectorClock) vectorClock {
	out := make(vectorClock, len(v)+len(o))
	for k, a := range v {
		out[k] = a
	}
	for k, b := range o {
		if b > out[k] {
			out[k] = b
		}
	}
	return out
}

func (v vectorClock) increment(node string) vectorClock {
	out := v.merge(nil)
	out[node]++
	return out
}

// observerRecord is what one observer (a member's failure detector) reports: the
// subjects it finds unreachable, versioned by the observer.
type observerRecord struct {
	Version     uint64          `cbor:"1,keyasint"`
	Unreachable []UniqueAddress `cbor:"2,keyasint,omitempty"` // sorted, no duplicates
}

// gossipState is the membership state (Akka's Gossip). Values are immutable: every
// change returns a new one.
type gossipState struct {
	members      map[UniqueAddress]gossipMember
	version      vectorClock
	seen         map[UniqueAddress]bool
	reachability map[UniqueAddress]observerRecord // by observer
	tombstones   map[UniqueAddress]int64          // removed members → removal time, Unix ns
}

func emptyGossip() gossipState {
	return gossipState{
		members:      map[UniqueAddress]gossipMember{},
		version:      vectorClock{},
		seen:         map[UniqueAddress]bool{},
		reachability: map[UniqueAddress]observerRecord{},
		tombstones:   map[UniqueAddress]int64{},
	}
}

func (g gossipState) clone() gossipState {
	out := gossipState{
		members:      make(map[UniqueAddress]gossipMember, len(g.members)),
		version:      g.version.merge(nil),
		seen:         make(map[UniqueAddress]bool, len(g.seen)),
		reachability: make(map[UniqueAddress]observerRecord, len(g.reachability)),
		tombstones:   make(map[UniqueAddress]int64, len(g.tombstones)),
	}
	for k, v := range g.members {
		out.members[k] = v
	}
	for k, v := range g.seen {
		out.seen[k] = v
	}
	for k, v := range g.reachability {
		out.reachability[k] = v
	}
	for k, v := range g.tombstones {
		out.tombstones[k] = v
	}
	return out
}

// Merge is the join of two membership states. The vector clocks merge pointwise; each
// member takes its highest status; tombstones are united and remove their members
// everywhere; each observer's reachability record comes from the higher observer
// version; the seen set is the union of the seen sets of the inputs whose version is
// the merged version (a newer state's seen set supersedes an older one's).
func (g gossipState) Merge(o gossipState) gossipState {
	out := gossipState{
		members:      map[UniqueAddress]gossipMember{},
		version:      g.version.merge(o.version),
		seen:         map[UniqueAddress]bool{},
		reachability: map[UniqueAddress]observerRecord{},
		tombstones:   map[UniqueAddress]int64{},
	}
	for _, t := range []map[UniqueAddress]int64{g.tombstones, o.tombstones} {
		for k, at := range t {
			if at > out.tombstones[k] || out.tombstones[k] == 0 {
				out.tombstones[k] = at
			}
		}
	}
	for _, ms := range []map[UniqueAddress]gossipMember{g.members, o.members} {
		for k, m := range ms {
			if _, gone := out.tombstones[k]; gone {
				continue
			}
			if cur, ok := out.members[k]; !ok || m.higher(cur) {
				out.members[k] = m
			}
		}
	}
	for _, in := range []gossipState{g, o} {
		if in.version.Compare(out.version) == orderSame {
			for k := range in.seen {
				if _, gone := out.tombstones[k]; !gone {
					out.seen[k] = true
				}
			}
		}
	}
	for _, rs := range []map[UniqueAddress]observerRecord{g.reachability, o.reachability} {
		for obs, rec := range rs {
			if _, gone := out.tombstones[obs]; gone {
				continue
			}
			cur, ok := out.reachability[obs]
			switch {
			case !ok || rec.Version > cur.Version:
				out.reachability[obs] = rec
			case rec.Version == cur.Version:
				out.reachability[obs] = observerRecord{Version: rec.Version, Unreachable: unionSorted(cur.Unreachable, rec.Unreachable)}
			}
		}
	}
	for obs, rec := range out.reachability {
		out.reachability[obs] = observerRecord{Version: rec.Version, Unreachable: withoutTombstoned(rec.Unreachable, out.tombstones)}
	}
	return out
}

func unionSorted(a, b []UniqueAddress) []UniqueAddress {
	set := map[UniqueAddress]bool{}
	for _, x := range a {
		set[x] = true
	}
	for _, x := range b {
		set[x] = true
	}
	return sortedSet(set)
}

func sortedSet(set map[UniqueAddress]bool) []UniqueAddress {
	out := make([]UniqueAddress, 0, len(set))
	for x := range set {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

func withoutTombstoned(list []UniqueAddress, tombstones map[UniqueAddress]int64) []UniqueAddress {
	out := list[:0:0]
	for _, x := range list {
		if _, gone := tombstones[x]; !gone {
			out = append(out, x)
		}
	}
	return out
}

// sortedMembers returns the members sorted by unique address.
func (g gossipState) sortedMembers() []gossipMember {
	out := make([]gossipMember, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	// slices.SortFunc, not sort.Slice: the members are large structs, which sort.Slice
	// swaps through reflection (a third of a tick's CPU at 100 members, docs/scale.md).
	slices.SortFunc(out, func(a, b gossipMember) int { return a.Node.compare(b.Node) })
	return out
}

// isReachable reports whether no live observer finds node unreachable. Records of
// observers that are down or gone do not count (Akka: reachability excluding downed
// observers).
func (g gossipState) isReachable(node UniqueAddress) bool {
	for obs, rec := range g.reachability {
		if m, ok := g.members[obs]; !ok || m.Status == StatusDown {
			continue
		}
		for _, s := range rec.Unreachable {
			if s == node {
				return false
			}
		}
	}
	return true
}

// unreachableSet returns the members some live observer finds unreachable.
// unreachableSetFor is unreachableSet as the split brain resolver on self uses it: the
// observations of members that self itself finds unreachable are left out. In a bridge
// partition (one member reaches both sides, which do not reach each other) the gossip
// carries each side's observations of the other to it through the bridge; counted, they
// make every member of a side see the rest of its own side unreachable, take itself for
// the leader of a side of two (itself and the bridge) and down it, until the whole
// cluster is down. Akka's resolver likewise sets apart the observations of indirectly
// connected members. A clean partition is decided as before: no observation crosses it.
func (g gossipState) unreachableSetFor(self UniqueAddress) map[UniqueAddress]bool {
	mine := map[UniqueAddress]bool{}
	for _, s := range g.reachability[self].Unreachable {
		mine[s] = true
	}
	out := map[UniqueAddress]bool{}
	for obs, rec := range g.reachability {
		if m, ok := g.members[obs]; !ok || m.Status == StatusDown || mine[obs] {
			continue
		}
		for _, s := range rec.Unreachable {
			if _, ok := g.members[s]; ok {
				out[s] = true
			}
		}
	}
	return out
}

func (g gossipState) unreachableSet() map[UniqueAddress]bool {
	out := map[UniqueAddress]bool{}
	for obs, rec := range g.reachability {
		if m, ok := g.members[obs]; !ok || m.Status == StatusDown {
			continue
		}
		for _, s := range rec.Unreachable {
			if _, ok := g.members[s]; ok {
				out[s] = true
			}
		}
	}
	return out
}

// leader returns the leader as self sees it: the first member in sorted order among the
// reachable up or leaving members (self counts as reachable); if there is none, the
// first reachable member of any other status but down and exiting. The spec: "the
// leader is simply the first node in sorted order that is able to take the leadership
// role, where the preferred member states for a leader are up and leaving".
//
// One pass over the members with the unreachable set computed once: asking isReachable
// of each member of a sorted copy scanned every observer's record for each, O(members²)
// on every tick (leaderActions and View call it; docs/scale.md).
func (g gossipState) leader(self UniqueAddress) (UniqueAddress, bool) {
	return g.leaderGiven(self, g.unreachableSet())
}

// leaderGiven is leader with the unreachable set already computed.
func (g gossipState) leaderGiven(self UniqueAddress, unreachable map[UniqueAddress]bool) (UniqueAddress, bool) {
	var best, fallback UniqueAddress
	var haveBest, haveFallback bool
	for _, m := range g.members {
		if m.Node != self && unreachable[m.Node] {
			continue
		}
		switch m.Status {
		case StatusUp, StatusLeaving:
			if !haveBest || m.Node.Less(best) {
				best, haveBest = m.Node, true
			}
		case StatusJoining:
			if !haveFallback || m.Node.Less(fallback) {
				fallback, haveFallback = m.Node, true
			}
		}
	}
	if haveBest {
		return best, true
	}
	return fallback, haveFallback
}

// converged reports gossip convergence as self sees it: every unreachable member is
// down or exiting, and every up or leaving member has seen the current version.
func (g gossipState) converged(self UniqueAddress) bool {
	return g.convergedGiven(self, g.unreachableSet())
}

// convergedGiven is converged with the unreachable set already computed.
func (g gossipState) convergedGiven(self UniqueAddress, unreachable map[UniqueAddress]bool) bool {
	for node := range unreachable {
		if node == self {
			continue
		}
		if s := g.members[node].Status; s != StatusDown && s != StatusExiting {
			return false
		}
	}
	for _, m := range g.members {
		if (m.Status == StatusUp || m.Status == StatusLeaving) && !g.seen[m.Node] {
			return false
		}
	}
	return true
}

// seenBy returns g with node added to the seen set.
func (g gossipState) seenBy(node UniqueAddress) gossipState {
	if g.seen[node] {
		return g
	}
	out := g.clone()
	out.seen[node] = true
	return out
}

// changed returns g as changed by self: a new version, seen only by self.
func (g gossipState) changed(self UniqueAddress) gossipState {
	out := g.clone()
	out.version = out.version.increment(self.String())
	out.seen = map[UniqueAddress]bool{self: true}
	return out
}

// String summarises g on one line, for logs and test failures.
func (g gossipState) String() string {
	var parts []string
	for _, m := range g.sortedMembers() {
		flag := ""
		if !g.isReachable(m.Node) {
			flag = " unreachable"
		}
		seen := ""
		if g.seen[m.Node] {
			seen = " seen"
		}
		parts = append(parts, fmt.Sprintf("%s %s#%d%s%s", m.Node.Address, m.Status, m.UpNumber, flag, seen))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// gossipWire is gossipState's encoding: deterministic CBOR with sorted lists.
type gossipWire struct {
	Members      []gossipMember  `cbor:"1,keyasint"`
	Version      vectorClock     `cbor:"2,keyasint"`
	Seen         []UniqueAddress `cbor:"3,keyasint,omitempty"`
	Reachability []reachWire     `cbor:"4,keyasint,omitempty"`
	Tombstones   []tombstoneWire `cbor:"5,keyasint,omitempty"`
}

type reachWire struct {
	Observer UniqueAddress  `cbor:"1,keyasint"`
	Record   observerRecord `cbor:"2,keyasint"`
}

type tombstoneWire struct {
	Node UniqueAddress `cbor:"1,keyasint"`
	At   int64         `cbor:"2,keyasint"`
}

func (g gossipState) wire() gossipWire {
	w := gossipWire{Members: g.sortedMembers(), Version: g.version, Seen: sortedSet(g.seen)}
	obs := make([]UniqueAddress, 0, len(g.reachability))
	for o := range g.reachability {
		obs = append(obs, o)
	}
	sort.Slice(obs, func(i, j int) bool { return obs[i].Less(obs[j]) })
	for _, o := range obs {
		w.Reachability = append(w.Reachability, reachWire{o, g.reachability[o]})
	}
	ts := make([]UniqueAddress, 0, len(g.tombstones))
	for t := range g.tombstones {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Less(ts[j]) })
	for _, t := range ts {
		w.Tombstones = append(w.Tombstones, tombstoneWire{t, g.tombstones[t]})
	}
	return w
}

func (w gossipWire) gossip() (gossipState, error) {
	g := emptyGossip()
	for _, m := range w.Members {
		if m.Node.Address == "" || m.Node.UID == 0 || statusRank(m.Status) == 0 {
			return gossipState{}, fmt.Errorf("%w: bad member %+v", errMalformedGossip, m.Node)
		}
		if _, dup := g.members[m.Node]; dup {
			return gossipState{}, fmt.Errorf("%w: member %s twice", errMalformedGossip, m.Node)
		}
		g.members[m.Node] = m
	}
	for k, v := range w.Version {
		g.version[k] = v
	}
	for _, s := range w.Seen {
		g.seen[s] = true
	}
	for _, r := range w.Reachability {
		g.reachability[r.Observer] = observerRecord{Version: r.Record.Version, Unreachable: unionSorted(r.Record.Unreachable, nil)}
	}
	for _, t := range w.Tombstones {
		g.tombstones[t.Node] = t.At
	}
	return g, nil
}
