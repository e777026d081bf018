package sharding

import (
	"context"
	"errors"
	"sync"
)

// handOffBatchEntities caps the snapshots of one SaveBatch call during a handoff (the
// store may split a call further by bytes).
const handOffBatchEntities = 1000

// stopForHandOffBatched stops a shard's entities for a handoff when the state store
// saves batches: each entity finishes what it received and gives its snapshot
// (handOffParallelism at a time), the snapshots of the shard go to the store in
// SaveBatch calls (one round trip each instead of one per entity), and then the
// instances stop. An entity whose snapshot was not saved stops all the same, as with
// single saves: its state since its last checkpoint is lost, and logged.
func stopForHandOffBatched(ctx context.Context, store BatchStateStore, entities map[string]*entity) {
	type pending struct {
		e     *entity
		state []byte
	}
	var mu sync.Mutex
	byEpoch := map[uint64][]pending{}
	forEachEntity(entities, func(e *entity) {
		e.waitIdle(ctx)
		if state, ok := e.snapshotForStop(ctx); ok {
			mu.Lock()
			byEpoch[e.currentEpoch()] = append(byEpoch[e.currentEpoch()], pending{e, state})
			mu.Unlock()
		}
	})
	saved := map[*entity]bool{}
	for epoch, all := range byEpoch {
		for len(all) > 0 {
			part := all[:min(len(all), handOffBatchEntities)]
			all = all[len(part):]
			first := part[0].e
			saves := make([]StateSave, len(part))
			for i, p := range part {
				saves[i] = StateSave{ID: p.e.id, State: p.state}
			}
			s := first.r.s
			sctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			err := store.SaveBatch(sctx, first.r.settings.Name, first.shard, epoch, saves)
			cancel()
			if err != nil {
				s.log.Warn("entity states not saved", "type", first.r.settings.Name, "shard", first.shard,
					"entities", len(part), "err", err)
				if errors.Is(err, ErrStaleEpoch) {
					for _, p := range part {
						p.e.fenced.Store(true)
					}
				}
				continue
			}
			for _, p := range part {
				saved[p.e] = true
			}
		}
	}
	forEachEntity(entities, func(e *entity) {
		if e.inst == nil {
			return
		}
		if saved[e] {
			e.unsaved = 0
		}
		e.release(ctx, e.unsaved == 0 && !e.fenced.Load())
		s := e.r.s
		s.tel.passivations.Add(context.Background(), 1, s.tel.typeAttr(e.r.settings.Name, attrPassivationCause, causeHandoff))
	})
}

// forEachEntity runs fn for every entity, handOffParallelism at a time, and waits.
func forEachEntity(entities map[string]*entity, fn func(*entity)) {
	sem := make(chan struct{}, handOffParallelism)
	var wg sync.WaitGroup
	for _, e := range entities {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // no owner: it lives one fn, which the call waits for
			defer func() { <-sem; wg.Done() }()
			fn(e)
		}()
	}
	wg.Wait()
}

// snapshotForStop runs the entity's stop hook and returns its snapshot if it has
// unsaved state to save (as stop with save does, short of saving it).
func (e *entity) snapshotForStop(ctx context.Context) ([]byte, bool) {
	s := e.r.s
	if e.inst == nil {
		return nil, false
	}
	hooked := false
	if h, ok := e.inst.(EntityStopHook); ok && !e.fenced.Load() {
		if h.BeforeStop(ctx) {
			e.unsaved++
			hooked = true
		}
	}
	if e.unsaved == 0 || s.cfg.States == nil || e.fenced.Load() || !e.baseAtStop(hooked) {
		return nil, false
	}
	state, err := e.snapshot(ctx)
	if err != nil {
		s.log.Warn("entity state not saved", "entity", e.r.settings.Name+"/"+e.id, "err", err)
		return nil, false
	}
	return state, state != nil
}

// release stops the entity's instance (after its state was saved, or not: saved says
// whether what it holds is in the store) and logs the stop.
func (e *entity) release(ctx context.Context, saved bool) {
	if e.inst == nil {
		return
	}
	e.inst.Stop(ctx)
	e.inst = nil
	e.mu.Lock()
	e.live = false
	e.mu.Unlock()
	e.r.released(e)
	e.releaseLife()
	e.r.s.tel.active.Add(context.Background(), -1, e.r.tel.typeOnly)
	e.r.s.log.DebugContext(ctx, "entity stopped", "entity", e.r.settings.Name+"/"+e.id, "shard", e.shard, "saved", saved)
	e.clearOutboxMark()
}
