// The state TTL (TypeSettings.StateTTL): a sweep on each member finds the entities of
// its hosted shards that have been idle longer than their type's TTL, in the state
// store's index, and deletes their state through each entity's mailbox.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// kindExpire asks an entity's mailbox to delete the entity's state if it has been
// idle longer than its type's StateTTL (the state TTL sweep). It never reaches the
// entity, and does not activate it.
const kindExpire MessageKind = 19

// The replies of a kindExpire ask.
const (
	expireDeleted = "deleted" // idle past the TTL: its state is deleted
	expireKept    = "kept"    // it handled a message within the TTL, or its outbox still sends
	expireNone    = "none"    // the store holds nothing of it
)

// expireSweepPage is how many entities of the store's index one listing call reads.
const expireSweepPage = 1000

// expireLoop runs the state TTL sweep every Config.StateTTLInterval, until the member
// stops.
func (s *Sharding) expireLoop() {
	interval := s.cfg.StateTTLInterval
	if interval <= 0 {
		interval = time.Minute
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.owner.Done():
			return
		case <-tick.C:
			if _, err := s.expireIdle(s.owner.Context()); err != nil && s.owner.Context().Err() == nil {
				s.log.Warn("state TTL sweep", "err", err)
			}
		}
	}
}

// expireIdle is one state TTL sweep: for each type with a StateTTL hosted here, the
// entities of the shards this member hosts whose last write in the store's index
// (StoredEntity.SavedAt) is older than the TTL on sharding's clock, and those active
// here idle that long, each asked through its mailbox (kindExpire) to delete its state
// if it is still idle (an active one is passivated first). It returns how many it
// deleted. Nothing without a store that lists its entities (StateLister) and deletes
// one (EntityStateDeleter). Errors: the store's listing errors, per type (the other
// types are swept).
func (s *Sharding) expireIdle(ctx context.Context) (int, error) {
	if _, ok := StateStoreAs[EntityStateDeleter](s.cfg.States); !ok {
		return 0, nil
	}
	lister, ok := StateStoreAs[StateLister](s.cfg.States)
	if !ok {
		return 0, nil
	}
	deleted := 0
	var errs []error
	for _, r := range s.allRegions() {
		ttl := r.Settings().StateTTL
		if ttl <= 0 {
			continue
		}
		n, err := s.expireType(ctx, lister, r, ttl)
		deleted += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.settings.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// expireType sweeps one type (expireIdle).
func (s *Sharding) expireType(ctx context.Context, lister StateLister, r *shardRegion, ttl time.Duration) (int, error) {
	hosted := map[int]bool{}
	var active []string
	now := s.cfg.Now()
	r.mu.Lock()
	r.eachHostedLocked(func(sh *shard) {
		hosted[sh.id] = true
		for id, e := range sh.entities {
			if e.active() && now.Sub(e.lastActive()) > ttl {
				active = append(active, id)
			}
		}
	})
	r.mu.Unlock()
	if len(hosted) == 0 {
		return 0, nil
	}
	deleted := 0
	expire := func(id string) {
		out, err := s.AskMessage(ctx, Message{EntityType: r.settings.Name, EntityID: id, Kind: kindExpire})
		if err != nil {
			s.log.Debug("state TTL: entity not expired", "entity", r.settings.Name+"/"+id, "err", err)
			return
		}
		if string(out.Payload) == expireDeleted {
			deleted++
		}
	}
	for _, id := range active {
		expire(id)
	}
	q := StateListing{Type: r.settings.Name, Limit: expireSweepPage, Shards: r.settings.NumberOfShards}
	for {
		page, more, err := lister.ListStates(ctx, q)
		if err != nil {
			return deleted, err
		}
		for _, e := range page {
			if hosted[e.Key.Shard] && !e.SavedAt.IsZero() && now.Sub(e.SavedAt) > ttl {
				expire(e.Key.ID)
			}
		}
		if !more || len(page) == 0 {
			return deleted, nil
		}
		q.After = &page[len(page)-1].Key
	}
}

// lastActive is when the entity last finished a message, or was activated if it has
// handled none since.
func (e *entity) lastActive() time.Time {
	last := max(e.stats.lastMessage.Load(), e.stats.activatedAt.Load())
	return time.Unix(0, last)
}

// lastJournalTime returns the time of the newest record of the entity's journal (zero
// if none), read from the store.
func (e *entity) lastJournalTime(ctx context.Context) (time.Time, error) {
	js, ok := StateStoreAs[JournalStore](e.r.s.cfg.States)
	if !ok {
		return time.Time{}, nil
	}
	recs, err := js.ReadJournal(ctx, e.key(), 1, 0)
	if err != nil || len(recs) == 0 {
		return time.Time{}, err
	}
	var last time.Time
	for _, r := range recs {
		if en, err := DecodeJournalEntry(e.key(), r); err == nil && en.Time.After(last) {
			last = en.Time
		}
	}
	return last, nil
}

// expire handles a kindExpire delivery on the entity's mailbox goroutine: it deletes
// the entity's state (EntityStateDeleter, fenced at the shard's epoch here) if the
// entity is idle longer than its type's StateTTL, passivating it first if it is
// active. Idle: no message finished here within the TTL (the entity's own record, if
// this member has one), and, for an entity without instance, its last write in the
// store's index (StateLister.StatOne) older than the TTL. Its reminders stay
// (EntityStateDeleter). The reply is expireDeleted, expireKept or expireNone.
func (e *entity) expire(ctx context.Context) (string, error) {
	s := e.r.s
	ttl := e.r.Settings().StateTTL
	del, ok := StateStoreAs[EntityStateDeleter](s.cfg.States)
	if ttl <= 0 || !ok {
		return expireKept, nil
	}
	now := s.cfg.Now()
	e.mu.Lock()
	paused := e.pausedLocked()
	e.mu.Unlock()
	if paused {
		return expireKept, nil // an operator's to resume or skip
	}
	if e.stats.lastMessage.Load() != 0 || e.inst != nil {
		if now.Sub(e.lastActive()) <= ttl {
			return expireKept, nil
		}
	}
	if e.ob.busy() {
		return expireKept, nil // its outbox still sends: a new mailbox would send again
	}
	if e.inst == nil {
		lister, ok := StateStoreAs[StateLister](s.cfg.States)
		if !ok {
			return expireKept, nil
		}
		st, err := lister.StatOne(ctx, e.key())
		switch {
		case errors.Is(err, ErrNoState):
			return expireNone, nil
		case err != nil:
			return "", err
		case st.SavedAt.IsZero() || now.Sub(st.SavedAt) <= ttl:
			return expireKept, nil
		}
		if st.JournalRecords > 0 {
			// A store that counts journal records may date only snapshots (PostgreSQL):
			// the journal's newest record tells when the entity last handled a message.
			last, err := e.lastJournalTime(ctx)
			if err != nil {
				return "", err
			}
			if now.Sub(last) <= ttl {
				return expireKept, nil
			}
		}
	} else {
		e.passivateNow(ctx, causeStateTTL, trace.SpanContext{})
		if e.inst != nil {
			return expireKept, nil
		}
	}
	epoch := e.currentEpoch()
	if err := e.fence(ctx, epoch); err != nil {
		return "", err
	}
	if err := del.DeleteEntity(ctx, e.key(), epoch); err != nil {
		return "", err
	}
	// What the mailbox knew of the old state goes with it: the next activation starts
	// anew.
	e.remembered = false
	e.seq, e.baseSeq, e.histBase, e.histAt = 0, 0, 0, 0
	e.stats.lastMessage.Store(0)
	e.stats.activatedAt.Store(0)
	e.r.expired.Add(1)
	s.tel.expired.Add(context.Background(), 1, e.r.tel.typeOnly)
	s.log.DebugContext(ctx, "entity state deleted: idle longer than its state TTL", "entity", e.name(), "ttl", ttl)
	return expireDeleted, nil
}
