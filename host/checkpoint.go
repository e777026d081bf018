package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Delta checkpoints. An entity whose state is a transparent snapshot saves, at each
// checkpoint, either a base (a whole snapshot) or a delta: the 4 KiB blocks that differ
// from the last base the store acknowledged, found by tracking the writes to its memory
// (dirtypages.go), with its globals, clocks, timers and subscriptions. Deltas are
// cumulative, so the store keeps one base and one delta per entity (deltastore.go), and
// a delta chains to its base by name (generation and nonce), never to a base it was not
// made against. A base is saved instead of a delta when the store has acknowledged
// none of this incarnation's chain yet, every deltaMaxChain deltas, and when the delta
// would hold more than deltaMaxFraction of the base's bytes (or deltaMinBound, for small
// memories): restoring costs the base and one delta, and a checkpoint costs the blocks
// written since the base. docs/design.md, "Checkpoints", has the figures.

const (
	// deltaMaxChain is how many deltas a base has at most: the next checkpoint is a base.
	deltaMaxChain = 1024
	// deltaMaxFraction: a delta holds at most 1/deltaMaxFraction of its base's non-zero
	// pages, or deltaMinBound, whichever is larger; past it the checkpoint is a base.
	deltaMaxFraction = 8
	deltaMinBound    = 64 << 10
)

// checkpointer is an entity's chain of saved base and deltas, and the tracking of its
// instance's writes since the base. It is used on the entity's goroutine.
type checkpointer struct {
	// base is the base the store acknowledged (restored from, or saved by this
	// incarnation); Gen 0 when there is none to chain to.
	base snapshotBase
	// gen is the highest generation this incarnation knows of: a new base is gen+1.
	gen uint64
	// seq is the number of deltas saved against base.
	seq uint64
	// baseBytes is the base's non-zero memory, for the delta bound.
	baseBytes int
	// dirty is the blocks written since base was taken.
	dirty blockSet
	// pending is a base returned by the last checkpoint and not acknowledged yet.
	pending *pendingBase
	// tracker tracks the writes of inst's memory; nil until a base is taken.
	tracker writeTracker
	inst    *wasmInstance
	scratch []uint32
}

type pendingBase struct {
	base  snapshotBase
	bytes int
}

// newBaseName returns a new base's name, one generation past gen.
func newBaseName(gen uint64) snapshotBase {
	b := snapshotBase{Gen: gen + 1}
	for k := 0; k < len(b.Nonce); k += 8 {
		v := rand.Uint64()
		for j := 0; j < 8; j++ {
			b.Nonce[k+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// stop ends the tracking of the instance's writes; the chain is kept, so that the next
// checkpoint of a new instance knows the generation to go on from, but it is a base.
func (c *checkpointer) stop() {
	if c.tracker != nil {
		c.tracker.stop()
		c.tracker = nil
	}
	c.inst = nil
	c.base = snapshotBase{}
	c.pending = nil
	c.dirty.clear()
}

// track starts tracking the writes of inst's memory, whose content is now the
// acknowledged base with the blocks of delta (nil for none) laid over it.
func (c *checkpointer) track(inst *wasmInstance, base snapshotBase, baseBytes int, delta *snapshotDelta) error {
	c.stop()
	if !inst.m.rt.enter() {
		return fmt.Errorf("%w: %s", ErrRuntimeClosed, inst.name)
	}
	defer inst.m.rt.exit()
	mem, ok := inst.mem.Read(0, inst.mem.Size())
	if !ok {
		return fmt.Errorf("%w: memory of %d bytes", ErrNotSnapshottable, inst.mem.Size())
	}
	c.inst, c.tracker = inst, inst.newWriteTracker(mem)
	c.base, c.baseBytes, c.gen, c.seq = base, baseBytes, max(c.gen, base.Gen), 0
	if delta != nil {
		c.seq = delta.Seq
		for _, b := range delta.Blocks {
			c.dirty.add(b.Index)
		}
	}
	return nil
}

// checkpoint returns the entity's state to save: a delta against the acknowledged base
// when the chain allows one, else a base (whose instanceSnapshot, taken now, it also returns:
// the base of in-memory recovery).
func (e *wasmEntity) checkpoint(extras entityExtras) (state []byte, full *instanceSnapshot, took time.Duration, err error) {
	c := e.cp
	inst := e.inst
	if c.inst != inst {
		c.stop() // a new instance (recovered in memory): its memory is not the base's
	}
	c.pending = nil
	if c.tracker != nil {
		if err := e.noteWrites(); err != nil {
			return nil, nil, 0, err
		}
	}
	if c.tracker != nil && c.base.Gen != 0 && c.seq < deltaMaxChain &&
		c.dirty.n*deltaBlockSize <= max(c.baseBytes/deltaMaxFraction, deltaMinBound) {
		state, err := e.deltaState(extras)
		return state, nil, 0, err
	}
	start := time.Now()
	snap, err := inst.Snapshot()
	if err != nil {
		return nil, nil, 0, err
	}
	took = time.Since(start)
	b, err := snap.MarshalBinary()
	if err != nil {
		return nil, nil, 0, err
	}
	name := newBaseName(c.gen)
	c.gen = name.Gen
	if c.tracker == nil {
		if !inst.m.rt.enter() {
			return nil, nil, 0, fmt.Errorf("%w: %s", ErrRuntimeClosed, inst.name)
		}
		mem, _ := inst.mem.Read(0, inst.mem.Size())
		c.inst, c.tracker = inst, inst.newWriteTracker(mem)
		inst.m.rt.exit()
		c.base = snapshotBase{} // no delta until this base is acknowledged
		c.dirty.clear()
	}
	c.pending = &pendingBase{base: name, bytes: snap.SparseSize()}
	return encodeBaseState(name, b, extras), snap, took, nil
}

// noteWrites adds the blocks written since the last checkpoint to the dirty set. When
// the tracker fails, it is stopped: the checkpoint is a base.
func (e *wasmEntity) noteWrites() error {
	c, inst := e.cp, e.inst
	if !inst.m.rt.enter() {
		return fmt.Errorf("%w: %s", ErrRuntimeClosed, inst.name)
	}
	defer inst.m.rt.exit()
	if inst.closed {
		return ErrInstanceClosed
	}
	mem, _ := inst.mem.Read(0, inst.mem.Size())
	written, err := c.tracker.written(mem, c.scratch[:0])
	c.scratch = written[:0]
	if err != nil {
		e.n.log.Warn("entity checkpoints whole snapshots: its writes are no longer tracked", "entity", e.name(), "err", err)
		c.stop()
		return nil
	}
	for _, k := range written {
		c.dirty.add(k)
	}
	return nil
}

// deltaState returns the delta against the acknowledged base: the dirty blocks.
func (e *wasmEntity) deltaState(extras entityExtras) ([]byte, error) {
	c, inst := e.cp, e.inst
	if !inst.m.rt.enter() {
		return nil, fmt.Errorf("%w: %s", ErrRuntimeClosed, inst.name)
	}
	defer inst.m.rt.exit()
	size := inst.mem.Size()
	mem, ok := inst.mem.Read(0, size)
	if !ok || size%wasmPageSize != 0 {
		return nil, fmt.Errorf("%w: memory of %d bytes is not whole pages", ErrNotSnapshottable, size)
	}
	if err := inst.bindGlobals(); err != nil {
		return nil, err
	}
	d := &snapshotDelta{ModuleDigest: inst.m.Digest, Base: c.base, Seq: c.seq + 1, MemoryPages: size / wasmPageSize,
		Clock: inst.clock.state()}
	blocks := c.dirty.appendTo(c.scratch[:0])
	c.scratch = blocks[:0]
	d.Blocks = make([]deltaBlock, len(blocks))
	for k, b := range blocks {
		// The blocks alias the memory: encoded below, before the guest runs again.
		d.Blocks[k] = deltaBlock{Index: b, Data: mem[int(b)*deltaBlockSize : (int(b)+1)*deltaBlockSize]}
	}
	d.Globals = make([]snapshotGlobal, len(inst.m.snap.globals))
	for k, g := range inst.m.snap.globals {
		d.Globals[k] = snapshotGlobal{Index: g.Index, Type: g.Type, Bits: canonicalBits(g.Type, inst.snapGlobals[k].Get())}
	}
	b, err := d.marshal()
	if err != nil {
		return nil, err
	}
	c.seq++
	return encodeState(stateDelta, b, extras), nil
}

// StateSaved implements sharding.EntityStateSaved: the state the last Snapshot
// returned is in the store. A base becomes the one deltas chain to.
func (e *wasmEntity) StateSaved() {
	e.sinceBaseCost = 0 // a base: the journal's replay starts after it
	e.replayMoved = false
	if e.inst != nil {
		e.journalModule = e.inst.m.Digest // the base names it (entityExtras.Module)
	}
	c := e.cp
	if c == nil || c.pending == nil {
		return
	}
	c.base, c.baseBytes, c.seq = c.pending.base, c.pending.bytes, 0
	c.dirty.clear() // no guest ran since the base was taken
	c.pending = nil
}

// restoreState starts an instance of mod from a saved transparent state: a snapshot
// (stateInstance), a base (stateBase), or a base and its delta (stateChain). It returns
// the entity's extras and, for a base, the chain to go on with. Errors wrap
// ErrBadSnapshot for a state that does not decode or a delta that is not of its base.
func (n *Node) restoreState(ctx context.Context, mod *wasmModule, typ, id string, kind byte, payload []byte) (*wasmInstance, *restoredChain, error) {
	snap, chain, err := n.rt.transparentSnapshot(kind, payload)
	if err != nil {
		return nil, nil, err
	}
	if snap.ModuleDigest != mod.Digest {
		// A memory snapshot belongs to its module: the entity goes on with the code its
		// state was made by (abi/SPEC.md).
		info, _ := n.catalog.get(typ)
		if mod, err = n.modules.get(ctx, snap.ModuleDigest, n.moduleSources(info)); err != nil {
			return nil, nil, err
		}
		mod.CompileInBackground()
		n.log.Info("entity keeps the module of its state", "entity", typ+"/"+id,
			"module", snap.ModuleDigest[:12], "deployed", info.Digest[:12])
	}
	inst, err := mod.Restore(ctx, typ, id, snap)
	if err != nil {
		return nil, nil, err
	}
	return inst, chain, nil
}

// transparentSnapshot decodes a saved transparent state (the payload of a state of kind
// stateInstance, stateBase or stateChain) into the snapshot it holds, a delta applied
// to its base, and, for a base, the chain it starts. Errors wrap ErrBadSnapshot.
func (rt *wasmRuntime) transparentSnapshot(kind byte, payload []byte) (*instanceSnapshot, *restoredChain, error) {
	var chain *restoredChain
	var snapBytes []byte
	switch kind {
	case stateInstance:
		snapBytes = payload
	case stateBase:
		base, b, err := splitBase(payload)
		if err != nil {
			return nil, nil, err
		}
		chain, snapBytes = &restoredChain{base: base}, b
	case stateChain:
		baseState, deltaState, err := splitChain(payload)
		if err != nil {
			return nil, nil, err
		}
		bk, bp, _, err := decodeState(baseState)
		if err != nil {
			return nil, nil, err
		}
		dk, dp, _, err := decodeState(deltaState)
		if err != nil {
			return nil, nil, err
		}
		if bk != stateBase || dk != stateDelta {
			return nil, nil, fmt.Errorf("%w: base and delta of kinds %q and %q", ErrBadSnapshot, bk, dk)
		}
		base, b, err := splitBase(bp)
		if err != nil {
			return nil, nil, err
		}
		d, err := unmarshalDelta(dp, uint32(rt.cfg.MemoryLimit/wasmPageSize))
		if err != nil {
			return nil, nil, err
		}
		if d.Base != base {
			return nil, nil, fmt.Errorf("%w: a delta of base %v over base %v", ErrBadSnapshot, d.Base, base)
		}
		chain, snapBytes = &restoredChain{base: base, delta: d}, b
	default:
		return nil, nil, fmt.Errorf("%w: entity state of kind %q is not a transparent snapshot", ErrBadSnapshot, kind)
	}
	snap, err := rt.UnmarshalSnapshot(snapBytes)
	if err != nil {
		return nil, nil, err
	}
	if chain != nil {
		chain.baseBytes = snap.SparseSize()
		if chain.delta != nil {
			if snap, err = applyDelta(snap, chain.delta); err != nil {
				return nil, nil, err
			}
		}
	}
	return snap, chain, nil
}

// restoredChain is the base (and delta) an instance was restored from.
type restoredChain struct {
	base      snapshotBase
	baseBytes int
	delta     *snapshotDelta
}
