package cluster

import (
	"cmp"
	"slices"
)

// heartbeatRing orders members on a ring by a hash of their unique address, the same on
// every member (the spec: "the nodes to monitor are picked out of neighbors in a hashed
// ordered node ring ... the order is the same on all nodes, which ensures full coverage").
type heartbeatRing struct {
	nodes []UniqueAddress // sorted by ringHash
}

// ringHash is FNV-1a of u.String() ("address#uid"), computed without building the
// string: every member must order the ring the same way, across versions too.
func ringHash(u UniqueAddress) uint64 {
	h := fnvOffset
	for i := 0; i < len(u.Address); i++ {
		h ^= uint64(u.Address[i])
		h *= fnvPrime
	}
	var buf [17]byte
	for _, b := range u.UID.appendHex(append(buf[:0], '#')) {
		h ^= uint64(b)
		h *= fnvPrime
	}
	return h
}

const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func newHeartbeatRing(nodes []UniqueAddress) heartbeatRing {
	// Each hash once, not twice per comparison (docs/scale.md).
	type hashed struct {
		h uint64
		n UniqueAddress
	}
	hs := make([]hashed, len(nodes))
	for i, n := range nodes {
		hs[i] = hashed{ringHash(n), n}
	}
	slices.SortFunc(hs, func(a, b hashed) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return a.n.compare(b.n)
	})
	out := make([]UniqueAddress, len(hs))
	for i, x := range hs {
		out[i] = x.n
	}
	return heartbeatRing{nodes: out}
}

// receivers returns the members self monitors: the next k members after self on the
// ring that are reachable, plus every unreachable member met on the way (so that they
// are still watched and can become reachable again), as Akka's HeartbeatNodeRing does.
func (r heartbeatRing) receivers(self UniqueAddress, k int, unreachable map[UniqueAddress]bool) []UniqueAddress {
	start := -1
	for i, n := range r.nodes {
		if n == self {
			start = i
			break
		}
	}
	var out []UniqueAddress
	reachable := 0
	for step := 1; step < len(r.nodes) && reachable < k; step++ {
		i := step
		if start >= 0 {
			i = (start + step) % len(r.nodes)
		} else {
			i = step - 1
		}
		n := r.nodes[i]
		if n == self {
			continue
		}
		out = append(out, n)
		if !unreachable[n] {
			reachable++
		}
	}
	return out
}
