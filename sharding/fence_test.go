package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/testutil"
)

// TestANewOwnersFirstReadFencesTheFormerOwner: a shard moves to a new owner (epoch e+1)
// while its former owner (epoch e) has not learnt of it yet (cut off, or paused) and
// still hosts an entity with every-message checkpoints. Once the new owner has read the
// entity's state (its activation), a save of the former owner must be refused
// (ErrStaleEpoch): acknowledged after that read, it would be missed by it, and the new
// owner's next save would overwrite it, an acknowledged write lost. Before the new
// owner fenced the shard on its first activation (shardRegion.fenceShard, ShardFencer), its
// epoch reached the store with its first save only, so the former owner's save here
// was acknowledged and lost. The new owner's activation is held between its read and
// its instance (factory.holdActivation) while the former owner saves: no timing.
// replstore_test.go runs it on the replicated store (RunNewOwnersFirstReadFences).
func TestANewOwnersFirstReadFencesTheFormerOwner(t *testing.T) {
	testNewOwnersFirstReadFences(t, withSharedStateStore())
}

// RunNewOwnersFirstReadFences runs TestANewOwnersFirstReadFencesTheFormerOwner with a
// state store of each member's own, made by newStore.
func RunNewOwnersFirstReadFences(t *testing.T, newStore MemberStateStore) {
	testNewOwnersFirstReadFences(t, withMemberStateStores(newStore))
}

func testNewOwnersFirstReadFences(t *testing.T, store clusterOption) {
	tc := newTestCluster(t, 3, store)
	r, err := ask(t, tc.nodes[0], "durable", "x", "inc")
	if err != nil {
		t.Fatal(err)
	}
	var former, next *testNode
	for _, n := range tc.nodes {
		if n.addr() == r.Node {
			former = n
		} else if next == nil {
			next = n
		}
	}
	sh := abiShard("x", 10)
	reg := former.sharding.region("durable")
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()

	// The shard moves to next at epoch+1, as the coordinator's HostShard tells
	// it; the former owner is not told.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	next.factory.holdActivation = func(typ, id string) {
		if id == "x" {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	nreg, err := next.sharding.startType(next.types.settings["durable"])
	if err != nil {
		t.Fatal(err)
	}
	nreg.hostShard(sh, epoch+1)
	type result struct {
		r   Reply
		err error
	}
	got := make(chan result, 1)
	go func() {
		r, err := ask(t, next, "durable", "x", "get")
		got <- result{r, err}
	}()
	<-entered // next has read x's state and is making its instance

	// The former owner's save comes after the new owner's read: refused.
	r, err = ask(t, former, "durable", "x", "inc")
	if err == nil {
		close(release)
		<-got
		t.Fatalf("the former owner's save at epoch %d was acknowledged (x = %s) after the new owner read x at epoch %d: "+
			"the new owner misses it and overwrites it", epoch, r.Payload, epoch+1)
	}
	if !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("the former owner's ask failed with %v, want ErrStaleEpoch", err)
	}
	close(release)
	res := <-got
	if res.err != nil || string(res.r.Payload) != "1" {
		t.Fatalf("the new owner's get: %q, %v; want 1", res.r.Payload, res.err)
	}
	// A fence of the former owner (its next activation of an entity of the
	// shard) is refused too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := former.sharding.fence(ctx, "durable", sh, epoch); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a fence at epoch %d after %d: %v, want ErrStaleEpoch", epoch, epoch+1, err)
	}
}

// TestASaveRefusedAsStaleDropsTheShard: a checkpoint refused as stale (the shard's new
// owner has fenced it) fences the entity and drops the shard here, as a newer epoch in
// a message does. Kept, the fenced copy took every later message for the entity from a
// sender on this member (whose messages carry no epoch) and routed it again to
// itself, endlessly: a message spun in its mailbox past its deadline, and Stop timed
// out waiting for it.
func TestASaveRefusedAsStaleDropsTheShard(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "durable", "x", "inc")
	sh := abiShard("x", 10)
	reg := n.sharding.region("durable")
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()
	// The shard's new owner fences it.
	if err := tc.states.FenceShard(context.Background(), "durable", sh, epoch+1); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, n, "durable", "x", "inc"); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("an inc whose checkpoint is stale: %v, want ErrStaleEpoch", err)
	}
	reg.mu.Lock()
	hosted := reg.hostedLocked(sh) != nil
	reg.mu.Unlock()
	if hosted {
		t.Fatal("the shard is still hosted here after its save was refused as stale")
	}
}

// Faults seed 2204 (-max-side=2, the cluster downed and restarted piecemeal) found two
// lives of a counter: two coordinators were active for a moment, and the one about to
// be downed allocated a shard again, at the epoch the other had given it before, to the
// region that had handed it off since. That region had fenced the shard at that epoch
// when it first hosted it, and fenceShard's memo of the fence survived the handoff: it
// read the entity without fencing again, while the shard's new owner had fenced it at a
// newer epoch, and activated it beside it. A shard hosted anew is fenced anew.
func TestSeed2204AShardHostedAgainIsFencedAgain(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "durable", "x", "inc") // hosts the shard, fenced at its epoch
	sh := abiShard("x", 10)
	reg := n.sharding.region("durable")
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()
	reg.dropStale(sh, epoch+1) // no longer hosted here
	// The shard's new owner fences it; a stale allocation brings it back here.
	if err := tc.states.FenceShard(context.Background(), "durable", sh, epoch+1); err != nil {
		t.Fatal(err)
	}
	reg.hostShard(sh, epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reg.fenceShard(ctx, sh, epoch); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("the fence of shard %d hosted again at epoch %d, after a fence at %d: %v, want ErrStaleEpoch", sh, epoch, epoch+1, err)
	}
}

// TestSeed2204TwoActiveCoordinatorsGiveTwoEpochs: the rest of bug 14 (faults/doc.go).
// For a moment two coordinators were active (one on a member about to be downed), and
// both, from the same newest epoch, allocated a shard at the same next one: fencing,
// which orders allocations by epoch, could not tell the two owners apart. Here the
// second member's coordinator is started beside the singleton's and both allocate one
// shard: the two epochs must differ, and the state store must refuse the older one
// once the newer one has fenced. Before nextEpoch tagged epochs with the coordinator's
// process, both were 1.
func TestSeed2204TwoActiveCoordinatorsGiveTwoEpochs(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	active := func(c *coordinator) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.active
	}
	for _, n := range tc.nodes {
		if c := n.sharding.coord; !active(c) {
			c.Start()
		}
	}
	testutil.Eventually(t, 30*time.Second, "the two coordinators both active", func() bool {
		return active(tc.nodes[0].sharding.coord) && active(tc.nodes[1].sharding.coord)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := shardRef{Type: "durable", Shard: 3}
	var wg sync.WaitGroup
	homes, errs := make([]shardHome, 2), make([]error, 2)
	for i, n := range tc.nodes {
		wg.Add(1)
		n.sharding.coord.getShardHome(ctx, ref, func(h shardHome, err error) {
			homes[i], errs[i] = h, err
			wg.Done()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s's coordinator: %v", tc.nodes[i].name, err)
		}
	}
	if homes[0].Epoch == homes[1].Epoch {
		t.Fatalf("two coordinators allocated shard %d at one epoch %d (to %s and %s)", ref.Shard, homes[0].Epoch,
			homes[0].Region, homes[1].Region)
	}
	older, newer := min(homes[0].Epoch, homes[1].Epoch), max(homes[0].Epoch, homes[1].Epoch)
	if err := tc.states.FenceShard(ctx, ref.Type, ref.Shard, newer); err != nil {
		t.Fatal(err)
	}
	if err := tc.states.FenceShard(ctx, ref.Type, ref.Shard, older); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a fence at epoch %d after one at %d: %v, want ErrStaleEpoch", older, newer, err)
	}
}

func TestNextEpoch(t *testing.T) {
	a, b := cluster.UID(0x1234_5678_9abc), cluster.UID(0x9999_0000_0001)
	for _, last := range []uint64{0, 1, 7, 1<<epochTagBits - 1, nextEpoch(0, a), nextEpoch(41<<epochTagBits|5, b)} {
		ea, eb := nextEpoch(last, a), nextEpoch(last, b)
		if ea <= last || eb <= last || ea == eb {
			t.Errorf("nextEpoch(%d) = %d and %d for two processes: want two epochs above it", last, ea, eb)
		}
		if nextEpoch(ea, a) <= ea || nextEpoch(ea, b) <= max(ea, eb) {
			t.Errorf("the epochs after %d and %d do not follow them", ea, eb)
		}
	}
}

// TestSeed82303ACopyHostedAnewWaitsForTheDroppedCopysEntity: fault seed 82303 (and
// 109, 82278, 82305: a machine at load 12). A HostShard timed out at the coordinator,
// which told the region to drop the shard and allocated it again, to the same member at
// a newer epoch; an entity of the dropped copy was activating, and made its instance
// 120 ms after the drop, while the new copy activated the entity too: two lives on one
// member, 1 ms apart. An entity now takes its place among the region's lives before
// its instance is made (entity.claimLife): refused if its copy was dropped, and
// waiting while another entity of its ID here still has an instance.
func TestSeed82303ACopyHostedAnewWaitsForTheDroppedCopysEntity(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "durable", "x", "inc") // hosts x's shard
	sh := abiShard("x", 10)
	id := ""
	for i := 0; id == ""; i++ {
		if w := fmt.Sprint("w", i); abiShard(w, 10) == sh {
			id = w
		}
	}
	reg := n.sharding.region("durable")
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()

	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool // not a sync.Once: its later callers would wait for the first
	n.factory.holdActivation = func(typ, eid string) {
		if eid == id && held.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := ask(t, n, "durable", id, "inc")
		first <- err
	}()
	<-entered // the entity of the copy at epoch is making its instance

	// The copy is dropped as stale and the shard hosted here again at a newer epoch.
	reg.dropStale(sh, epoch+1)
	reg.hostShard(sh, epoch+2)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := n.sharding.Ask(ctx, "durable", id, []byte("get"))
	cancel()
	if err == nil {
		t.Error("the new copy's entity answered while the dropped copy's was making its instance")
	}
	close(release)
	<-first
	if got := mustAsk(t, n, "durable", id, "get"); got == "" {
		t.Fatal("no answer")
	}
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.double) > 0 {
		t.Fatalf("two lives: %v", tc.acts.double)
	}
}

// TestSeed82278ACoordinatorStartsAfterTheDownRemovalMargin: fault seed 82278 (a machine
// at load 12). The coordinator's member was downed and a new coordinator started on the
// next oldest member at once, read the allocations, and answered; the downed member,
// not yet aware, still had a majority's contact and allocated a shard to a third
// member, which activated its entity, and the new coordinator gave the shard to a fourth
// one: two lives of a counter. A coordinator now starts only once no member older than
// its own was downed less than DownRemovalMargin ago, as Akka's singleton hands over
// after the down-removal margin.
func TestSeed82278ACoordinatorStartsAfterTheDownRemovalMargin(t *testing.T) {
	rec := &logRecorder{}
	tc := newTestCluster(t, 1, withMembershipClocks(), withConfig(func(c *Config) {
		c.DownRemovalMargin = time.Minute
		c.Logger = slog.New(rec)
	}))
	s := tc.nodes[0].sharding
	if left := s.downMarginLeft(); left > 0 {
		t.Fatalf("%v of a down-removal margin left with no member downed", left)
	}
	c := s.coord
	active := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.active
	}
	testutil.Eventually(t, 30*time.Second, "the coordinator to start", active)
	c.Stop()
	younger := tc.nodes[0].membership.Self()
	younger.Address, younger.UpNumber = "10.0.0.8:7946", younger.UpNumber+1
	s.noteDowned(younger) // could not have run the coordinator: delays nothing
	if left := s.downMarginLeft(); left > 0 {
		t.Fatalf("%v of a down-removal margin left after the downing of a younger member", left)
	}
	older := tc.nodes[0].membership.Self()
	older.Address = "10.0.0.9:7946" // as old, and first by address
	s.noteDowned(older)             // the previous coordinator's member, say
	if left := s.downMarginLeft(); left <= 0 || left > time.Minute {
		t.Fatalf("%v of the down-removal margin left just after a downing, want (0, 1m]", left)
	}
	c.Start()
	// The coordinator looks at the margin left, waits (up to 500 ms) and looks again:
	// once it has looked twice, it has had its chance to start.
	const waits = "shard coordinator waits for the down-removal margin of a downed member before it starts"
	testutil.Eventually(t, 30*time.Second, "the coordinator to wait for the margin twice", func() bool {
		return len(rec.find(waits)) >= 2
	})
	if active() {
		t.Fatal("the coordinator started within the down-removal margin of a downed member")
	}
	tc.nodes[0].member.Clock.SetOffset(time.Minute)
	testutil.Eventually(t, 30*time.Second, "the coordinator to start once the margin has passed", active)
}

// TestSeed82305AStaleCopyDoesNotActivateItsEntities: bug 20 (faults/doc.go). A member
// kept a copy of a shard from long before, the shard allocated elsewhere since and
// fenced there at a newer epoch; its region remembered its own fence at the old epoch,
// so a message that reached the copy activated the entity without fencing again,
// beside the shard's owner, until its first save was refused. An activation's load
// now carries the copy's epoch (WithReadEpoch), and the store refuses it: the copy is
// dropped and the entity is not started here.
func TestSeed82305AStaleCopyDoesNotActivateItsEntities(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	if got := mustAsk(t, n, "durable", "x", "inc"); got != "1" {
		t.Fatalf("inc: %q", got)
	}
	sh := abiShard("x", 10)
	reg := n.sharding.region("durable")
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()
	mustAsk(t, n, "durable", "x", "passivate")
	testutil.Eventually(t, 30*time.Second, "the entity passivated", func() bool {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		_, active := tc.acts.active["durable/x"]
		return !active
	})
	// The shard's owner elsewhere fences it; this region still hosts its copy at
	// epoch, fenced there before.
	if err := tc.states.FenceShard(context.Background(), "durable", sh, epoch+1); err != nil {
		t.Fatal(err)
	}
	tc.acts.mu.Lock()
	before := len(tc.acts.log)
	tc.acts.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// The coordinator here still allocates the shard to this region at epoch: the ask
	// cannot be served, and must not be by the stale copy.
	if r, err := n.sharding.Ask(ctx, "durable", "x", []byte("get")); err == nil {
		t.Fatalf("the stale copy answered %q", r.Payload)
	}
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if started := tc.acts.log[before:]; len(started) > 0 {
		t.Fatalf("the stale copy at epoch %d, the shard fenced at %d, started %v", epoch, epoch+1, started)
	}
}
