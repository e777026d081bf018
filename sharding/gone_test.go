package sharding

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// The idle sweep forgets an entity (no instance, no message) just after a delivery
// looked it up: the delivery goes to the entity's new mailbox. It used to start an
// instance in the forgotten mailbox, which no shard map held: the entity's next message
// made a new mailbox, whose activation waited for that instance to stop, forever
// (bench/peers hung on it, 64 askers over 1,000 Go entities).
func TestADeliveryToAForgottenEntityGoesToItsNewMailbox(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	ctx := context.Background()
	mustAsk(t, n, "counter", "a", "inc") // the shard is hosted here
	if ok, err := n.sharding.Passivate(ctx, "counter", "a"); err != nil || !ok {
		t.Fatalf("passivate: %v %v", ok, err)
	}
	r := n.sharding.region("counter")
	var once sync.Once
	r.afterLookup = func(id string) {
		if id == "a" {
			// The sweep runs between the lookup and the delivery (the caller holds
			// the owner, as the sweep needs).
			once.Do(func() { r.passivateIdle(time.Now()) })
		}
	}
	for want := 1; want <= 3; want++ {
		if got := mustAsk(t, n, "counter", "a", "inc"); got != strconv.Itoa(want) {
			t.Fatalf("inc %d: %s", want, got)
		}
	}
	// The entity with the instance is the one its shard's map holds.
	r.mu.Lock()
	defer r.mu.Unlock()
	life, mapped := r.lives["a"], r.hostedLocked(abiShard("a", r.settings.NumberOfShards)).entities["a"]
	if life == nil || life != mapped {
		t.Fatalf("the live entity %p is not the mapped one %p", life, mapped)
	}
}

// A delivery looks an entity up, and its shard is handed off before the delivery
// reaches the mailbox: the message follows the shard to its new home. It used to
// start the entity again on the member that had handed the shard off, beside its
// new home.
func TestADeliveryToAnEntityWhoseShardWasHandedOffFollowsTheShard(t *testing.T) {
	tc := newTestCluster(t, 2)
	// An entity hosted on node-1, asked on node-1.
	var id string
	leaver := tc.nodes[1]
	for i := 0; ; i++ {
		id = "h" + strconv.Itoa(i)
		if hostOf(t, tc, tc.nodes[0], "counter", id) == leaver {
			break
		}
	}
	r := leaver.sharding.region("counter")
	shard := abiShard(id, r.settings.NumberOfShards)
	stopped := make(chan struct{})
	var once sync.Once
	r.afterLookup = func(got string) {
		if got != id {
			return
		}
		once.Do(func() {
			// node-1 leaves, and hands the shard off, while the delivery is between
			// the lookup and the mailbox.
			go func() {
				defer close(stopped)
				tc.stop(leaver, true)
			}()
			testutil.Eventually(t, 15*time.Second, "the shard handed off", func() bool {
				r.mu.Lock()
				defer r.mu.Unlock()
				sl := r.slots[shard]
				return sl.hosted == nil && !sl.handing
			})
		})
	}
	res, err := ask(t, leaver, "counter", id, "inc")
	if err != nil {
		t.Fatalf("the ask in the handoff: %v", err)
	}
	if res.Node == leaver.addr() {
		t.Fatalf("answered by %s, which handed the shard off", res.Node)
	}
	<-stopped
	if got := mustAsk(t, tc.nodes[0], "counter", id, "get"); got != "1" {
		t.Fatalf("after the handoff: %s", got)
	}
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v\nlog: %v", tc.acts.double, tc.acts.log)
	}
}
