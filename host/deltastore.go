package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardhost/shardhost/sharding"
)

// The state store as sharding sees it on a node: the node's store (replicated, or
// PostgreSQL) with an entity's delta checkpoints (checkpoint.go) kept beside its base.
// A delta is a record of its own, in the entity's shard, under the entity's ID with
// deltaIDPrefix before it, so every StateStore holds deltas without a change, fenced by
// the same epoch as the base: Save puts a saved state of kind stateDelta there and any
// other under the entity's key. Load reads the entity's state and, when it is a base
// that deltas may follow, the delta record, and returns the base with the delta when
// the delta names that base (generation and nonce): never a delta over a base it was
// not made against.
//
//   - No delta record: the base alone (no checkpoint since it).
//   - A delta of an older generation: the base alone. A base is saved after every
//     delta of the previous generation, and holds what they held.
//   - A delta of the same or a newer generation that names another base: the two
//     reads straddled the writes of a new base and its first delta (a writer still at
//     work, as during a handoff); both are read again, up to three times, and then
//     Load fails (ErrBadSnapshot: the entity does not activate rather than lose the
//     delta's messages).
//
// Limit: a writer whose allocation turned out stale may still write a base between the
// load of the shard's new owner and the new owner's first write (fencing refuses the
// stale writer's writes only from then on). The new owner's deltas then name a base the
// store no longer holds, while the stored base is of a newer generation: Load returns
// that base alone, the stale writer's state, until the new owner's next base. Without
// deltas the same race makes the new owner overwrite the stale writer's state: either
// way one side's messages of that window are lost (docs/design.md, invariant 1).
//
// Entity IDs that begin with deltaIDPrefix are refused (ErrInvalidStateKey): no entity
// reads or writes another's delta. The prefix is valid UTF-8 without NUL (the
// replicated store's peers and PostgreSQL's text columns refuse anything else), and
// begins with U+FFFE, a noncharacter that no text should hold.
type deltaStates struct {
	sharding.StateStore
}

// deltaBatchStates is deltaStates over a store with batch saves.
type deltaBatchStates struct {
	deltaStates
	batch sharding.BatchStateStore
}

var (
	_ sharding.StateStore      = deltaStates{}
	_ sharding.BatchStateStore = deltaBatchStates{}
)

// deltaIDPrefix is put before an entity's ID to name its delta record.
const deltaIDPrefix = sharding.DeltaIDPrefix

// deltaLoadAttempts is how many times Load reads a base and its delta that do not match
// before it fails.
const deltaLoadAttempts = 3

// newDeltaStates wraps a node's state store.
func newDeltaStates(s sharding.StateStore) sharding.StateStore {
	d := deltaStates{StateStore: s}
	if b, ok := sharding.StateStoreAs[sharding.BatchStateStore](s); ok {
		return deltaBatchStates{deltaStates: d, batch: b}
	}
	return d
}

// Unwrap returns the node's store: sharding.StateStoreAs finds its other abilities.
func (s deltaStates) Unwrap() sharding.StateStore { return s.StateStore }

func deltaKey(k sharding.EntityKey) sharding.EntityKey {
	k.ID = deltaIDPrefix + k.ID
	return k
}

func checkDeltaKey(k sharding.EntityKey) error {
	if strings.HasPrefix(k.ID, deltaIDPrefix) {
		return fmt.Errorf("%w: entity ID %q begins with the prefix reserved for deltas", sharding.ErrInvalidStateKey, k.ID)
	}
	return nil
}

// Save implements sharding.StateStore: a delta goes to the entity's delta record.
func (s deltaStates) Save(ctx context.Context, key sharding.EntityKey, epoch uint64, state []byte) error {
	if err := checkDeltaKey(key); err != nil {
		return err
	}
	if stateKind(unframed(state)) == stateDelta {
		key = deltaKey(key)
	}
	return s.StateStore.Save(ctx, key, epoch, state)
}

// SaveBatch implements sharding.BatchStateStore: deltas go to their delta records, in
// the same batch.
func (s deltaBatchStates) SaveBatch(ctx context.Context, typ string, shard int, epoch uint64, saves []sharding.StateSave) error {
	out := saves
	for k, sv := range saves {
		if err := checkDeltaKey(sharding.EntityKey{Type: typ, Shard: shard, ID: sv.ID}); err != nil {
			return err
		}
		if stateKind(unframed(sv.State)) == stateDelta {
			if &out[0] == &saves[0] {
				out = append([]sharding.StateSave(nil), saves...)
			}
			out[k].ID = deltaIDPrefix + sv.ID
		}
	}
	return s.batch.SaveBatch(ctx, typ, shard, epoch, out)
}

// Load implements sharding.StateStore: the entity's state, with its delta when it has
// one (see deltaStates). Errors: those of the store; ErrBadSnapshot when the delta
// names another base than the stored one after deltaLoadAttempts reads.
func (s deltaStates) Load(ctx context.Context, key sharding.EntityKey) ([]byte, error) {
	if err := checkDeltaKey(key); err != nil {
		return nil, err
	}
	var base, delta []byte
	var bn, dn snapshotBase
	for attempt := 0; attempt < deltaLoadAttempts; attempt++ {
		var err error
		if base, err = s.StateStore.Load(ctx, key); err != nil {
			return nil, err
		}
		bb, err := sharding.DecodeBase(base)
		if err != nil {
			return nil, err
		}
		baseState := bb.State
		var ok bool
		if bn, ok = savedBaseOf(baseState); !ok {
			return base, nil // not a base: nothing follows it
		}
		delta, err = s.StateStore.Load(ctx, deltaKey(key))
		switch {
		case errors.Is(err, sharding.ErrNoState):
			return base, nil
		case err != nil:
			return nil, err
		}
		db, err := sharding.DecodeBase(delta)
		if err != nil {
			return nil, err
		}
		deltaState := db.State
		if dn, ok = savedDeltaBaseOf(deltaState); !ok {
			return nil, fmt.Errorf("%w: the delta record of %s/%s is not a delta", ErrBadSnapshot, key.Type, key.ID)
		}
		switch {
		case dn == bn && len(baseState) == len(base) && len(deltaState) == len(delta):
			return encodeChain(base, delta), nil // saved without journals
		case dn == bn:
			// Under a journal, each is a base after a record, with the keys remembered
			// then: the chain is the delta's (the later) base.
			return sharding.EncodeBase(sharding.Base{Seq: max(bb.Seq, db.Seq), Keys: db.Keys, History: db.History,
				HistoryAt: db.HistoryAt, Delivery: db.Delivery, State: encodeChain(baseState, deltaState)}), nil
		case dn.Gen < bn.Gen:
			return base, nil // a delta of an earlier base: the base holds what it did
		}
	}
	return nil, fmt.Errorf("%w: the delta of %s/%s is of base %v, the saved base is %v (read %d times)",
		ErrBadSnapshot, key.Type, key.ID, dn, bn, deltaLoadAttempts)
}

// unframed returns a saved state without the journal's framing (sharding.EncodeBase),
// for a look at its kind; a state that does not decode is returned as it is.
func unframed(state []byte) []byte {
	if b, err := sharding.DecodeBase(state); err == nil {
		return b.State
	}
	return state
}
