package replstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

var _ sharding.StateLister = (*Store)(nil)

// ListStates implements sharding.StateLister: shard after shard of q.Type (q.Shards
// of them, which the replicated store needs: it keeps shards apart), the entities a
// majority of each shard's replicas answer with (their union), read from their
// files' keys without loading a state. Errors: sharding.ErrInvalidStateKey (no type,
// no number of shards, a limit under 1), sharding.ErrStoreUnavailable.
func (s *Store) ListStates(ctx context.Context, q sharding.StateListing) ([]sharding.StoredEntity, bool, error) {
	switch {
	case q.Limit < 1:
		return nil, false, fmt.Errorf("%w: listing limit %d", sharding.ErrInvalidStateKey, q.Limit)
	case q.Type == "" || q.Shards < 1:
		return nil, false, fmt.Errorf("%w: the replicated store lists one entity type at a time, with its number of shards", sharding.ErrInvalidStateKey)
	}
	if err := sharding.CheckStateKey(q.Type, 0, q.Prefix, false); err != nil {
		return nil, false, err
	}
	start, after := 0, ""
	if q.After != nil {
		switch {
		case q.After.Type > q.Type:
			return nil, false, nil
		case q.After.Type == q.Type:
			start, after = q.After.Shard, q.After.ID
		}
	}
	var out []sharding.StoredEntity
	for shard := start; shard < q.Shards; shard++ {
		if shard != start {
			after = ""
		}
		want := q.Limit - len(out)
		recs, more, err := s.shardEntities(ctx, q.Type, shard, after, q.Prefix, want)
		if err != nil {
			return nil, false, err
		}
		for _, r := range recs {
			out = append(out, sharding.StoredEntity{Key: sharding.EntityKey{Type: q.Type, Shard: shard, ID: r.ID}, Bytes: int64(r.Size), SavedAt: lastWritten(r)})
		}
		if more || len(out) == q.Limit && shard+1 < q.Shards {
			return out, true, nil
		}
	}
	return out, false, nil
}

// StatOne implements sharding.StateLister: the entity's snapshot size from a
// majority of its shard's replicas. JournalRecords is not counted (0). Errors:
// sharding.ErrNoState, sharding.ErrInvalidStateKey, sharding.ErrStoreUnavailable.
func (s *Store) StatOne(ctx context.Context, key sharding.EntityKey) (sharding.StoredEntity, error) {
	if err := sharding.CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return sharding.StoredEntity{}, err
	}
	// The entity's ID sorts first among the IDs it begins.
	recs, _, err := s.shardEntities(ctx, key.Type, key.Shard, "", key.ID, 1)
	if err != nil {
		return sharding.StoredEntity{}, err
	}
	if len(recs) == 0 || recs[0].ID != key.ID {
		return sharding.StoredEntity{}, fmt.Errorf("%w: %s/%d/%s", sharding.ErrNoState, key.Type, key.Shard, key.ID)
	}
	return sharding.StoredEntity{Key: key, Bytes: int64(recs[0].Size), SavedAt: lastWritten(recs[0])}, nil
}

// lastWritten is when a listed entity was last written (sharding.StoredEntity.SavedAt):
// its newest record's Seq, the writer's clock; zero if not known.
func lastWritten(r stateRecord) time.Time {
	if r.Last == 0 || r.Last > math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, int64(r.Last))
}

type stateEntitiesAnswer struct {
	rep     stateReplica
	records []stateRecord
	more    bool
	err     error
}

func (a stateEntitiesAnswer) replica() stateReplica { return a.rep }

func (a stateEntitiesAnswer) failure() error { return a.err }

// shardEntities returns at most want entities of a shard after after whose IDs begin
// with prefix, in ID order: the union of what a majority of its replicas hold, up to
// the last ID every replica that had more gave; more: some are left.
func (s *Store) shardEntities(ctx context.Context, typ string, shard int, after, prefix string, want int) ([]stateRecord, bool, error) {
	var out []stateRecord
	for {
		page, more, bound, err := s.shardEntitiesPage(ctx, typ, shard, after, prefix, want-len(out))
		if err != nil {
			return nil, false, err
		}
		out = append(out, page...)
		// A page the replicas' tombstones thinned (stateKindGone) goes on from where
		// every replica that had more stopped.
		if !more || len(out) >= want || bound <= after {
			return out, more, nil
		}
		after = bound
	}
}

// shardEntitiesPage is a round of shardEntities: bound is the last ID every replica
// that had more gave ("" if none had more).
func (s *Store) shardEntitiesPage(ctx context.Context, typ string, shard int, after, prefix string, want int) ([]stateRecord, bool, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, "", fmt.Errorf("%w: %w", sharding.ErrStoreUnavailable, err)
	}
	reps, err := s.replicaSet(typ, shard)
	if err != nil {
		return nil, false, "", err
	}
	results := make(chan stateEntitiesAnswer, len(reps.reps))
	for _, r := range reps.reps {
		if !s.owner.Go(func() {
			recs, more, err := s.entitiesFrom(s.owner.Context(), r, typ, shard, after, prefix, want)
			results <- stateEntitiesAnswer{rep: r, records: recs, more: more, err: err}
		}) {
			results <- stateEntitiesAnswer{rep: r, err: closedError()}
		}
	}
	answers, err := awaitMajority(ctx, reps, results)
	if err != nil {
		return nil, false, "", fmt.Errorf("replstore: entities of %s/%d: %w", typ, shard, err)
	}
	recordReplicas(ctx, len(reps.reps), answeredOK(answers))
	merged := map[string]stateRecord{}
	gones := map[string]stateVersion{} // the newest tombstone of each entity
	bound, bounded := "", false
	for _, a := range answers {
		for _, r := range a.records {
			if g, ok := gones[r.ID]; a.err == nil && r.Kind == stateKindGone && (!ok || g.less(r.version())) {
				gones[r.ID] = r.version()
			}
		}
	}
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		for _, r := range a.records {
			if g, ok := gones[r.ID]; r.Kind == stateKindGone || ok && !g.less(r.version()) {
				continue // deleted since: a replica that missed the deletion lists it
			}
			cur, ok := merged[r.ID]
			if !ok || cur.Kind != stateKindSnapshot || r.Kind == stateKindSnapshot && cur.version().less(r.version()) {
				merged[r.ID] = r
			}
			if ok {
				m := merged[r.ID]
				m.Last = max(cur.Last, r.Last)
				merged[r.ID] = m
			}
		}
		if a.more && len(a.records) > 0 {
			if last := a.records[len(a.records)-1].ID; !bounded || last < bound {
				bound, bounded = last, true
			}
		}
	}
	out := make([]stateRecord, 0, len(merged))
	for _, r := range merged {
		if !bounded || r.ID <= bound {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b stateRecord) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	more := bounded
	if len(out) > want {
		out, more = out[:want], true
	}
	return out, more, bound, nil
}

// entitiesFrom reads at most want entities of a shard from one replica, page by page.
func (s *Store) entitiesFrom(ctx context.Context, r stateReplica, typ string, shard int, after, prefix string, want int) ([]stateRecord, bool, error) {
	if r.local {
		return s.disk.entitiesPage(stateShardPrefix(typ, shard), after, prefix, int(^uint(0)>>1), want)
	}
	var out []stateRecord
	for {
		var reply stateRememberedReply
		if err := s.call(ctx, r, topicStateRemembered, &stateRememberedReq{Type: typ, Shard: shard, After: after, Entities: true, Prefix: prefix}, &reply); err != nil {
			return nil, false, err
		}
		for i, rec := range reply.Records {
			// IDs must ascend: a peer cannot make us loop.
			if rec.Kind != stateKindSnapshot && rec.Kind != stateKindJournal && rec.Kind != stateKindGone || rec.ID <= after || len(rec.ID) > sharding.MaxStateIDLen {
				return nil, false, fmt.Errorf("%w: replica %s: bad entities page (record %q after %q)", sharding.ErrStoreUnavailable, r.addr, rec.ID, after)
			}
			after = rec.ID
			out = append(out, stateRecord{Kind: rec.Kind, ID: rec.ID, Epoch: rec.Epoch, Seq: rec.Seq, Size: rec.Size, Last: rec.Last})
			if len(out) == want {
				return out, reply.More || i+1 < len(reply.Records), nil
			}
		}
		if !reply.More {
			return out, false, nil
		}
		if len(reply.Records) == 0 {
			return nil, false, fmt.Errorf("%w: replica %s: bad entities page (more, but empty)", sharding.ErrStoreUnavailable, r.addr)
		}
	}
}
