// Inspection: what this member hosts (LocalState), what every member hosts
// (ClusterShardingState), and its counters.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/shardhost/shardhost/cluster"
)

// Leaving reports whether this member has begun handing its shards off to leave.
func (s *Sharding) Leaving() bool { return s.leaving.Load() }

// DeadLetters returns how many messages became dead letters here since start: dropped
// because a buffer or mailbox was full, or tells that failed (tellFailed).
func (s *Sharding) DeadLetters() uint64 { return s.deadLetters.Load() }

// LocalState returns the shards this member hosts and their active entities, sorted,
// and the counters of its regions.
func (s *Sharding) LocalState() RegionState {
	st := RegionState{Node: s.self, Shards: []ShardState{}, DeadLetters: s.DeadLetters()}
	for _, r := range s.allRegions() {
		st.Shards = append(st.Shards, r.state()...)
		st.Passivations += r.Passivations()
		st.BufferedDuringHandoff += r.BufferedDuringHandoff()
	}
	sort.Slice(st.Shards, func(i, j int) bool {
		if st.Shards[i].Type != st.Shards[j].Type {
			return st.Shards[i].Type < st.Shards[j].Type
		}
		return st.Shards[i].ID < st.Shards[j].ID
	})
	return st
}

// ClusterShardingState asks every member for its region state and returns them sorted
// by node. Members that do not answer are listed in the error and left out. It is
// Akka's GetClusterShardingStats with the IDs of the active entities rather than their
// number; the name differs so as to suggest neither counts nor Akka's
// CurrentClusterState, which is about membership.
func (s *Sharding) ClusterShardingState(ctx context.Context) ([]RegionState, error) {
	members := s.cfg.Membership.Members()
	states := make([]RegionState, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m.Address == s.self {
			states[i] = s.LocalState()
			continue
		}
		wg.Add(1)
		go func() { // no owner: it lives one request, which the call waits for
			defer wg.Done()
			states[i], errs[i] = s.remoteState(ctx, m)
		}()
	}
	wg.Wait()
	var out []RegionState
	for i := range states {
		if errs[i] == nil {
			out = append(out, states[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, errors.Join(errs...)
}

func (s *Sharding) remoteState(ctx context.Context, m cluster.Member) (RegionState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	b, err := s.cfg.Messenger.Request(ctx, m.TransportAddr, topicRegionState, nil)
	if err != nil {
		return RegionState{}, fmt.Errorf("region state of %s: %w", m.Address, err)
	}
	var st RegionState
	if err := decode(b, &st); err != nil {
		return RegionState{}, fmt.Errorf("region state of %s: %w", m.Address, err)
	}
	return st, nil
}
