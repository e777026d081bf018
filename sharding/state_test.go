package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

func TestStateSurvivesPassivation(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore(), withConfig(func(c *Config) { c.ReconcileInterval = 50 * time.Millisecond }))
	n := tc.nodes[0]
	for i := 0; i < 5; i++ {
		mustAsk(t, n, "idle", "a", "inc")
	}
	testutil.Eventually(t, 5*time.Second, "idle passivation", func() bool { return !activeOn(tc, "idle/a") })
	if got := mustAsk(t, n, "idle", "a", "inc"); got != "6" {
		t.Fatalf("after passivation the count is %s, want 6", got)
	}
}

// activationsOf counts the activations of key recorded so far.
func activationsOf(tc *testCluster, key string) int {
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	n := 0
	for _, l := range tc.acts.log {
		if strings.HasSuffix(l, " "+key) {
			n++
		}
	}
	return n
}

func TestEntityRequestedPassivation(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "p", "inc")
	mustAsk(t, n, "counter", "p", "inc")
	// The tell queues behind the passivating message and reaches the next incarnation.
	ctx := context.Background()
	done := make(chan string, 1)
	go func() { done <- mustAsk(t, n, "counter", "p", "passivate") }()
	if err := n.sharding.Tell(ctx, "counter", "p", []byte("inc")); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != "ok" {
		t.Fatalf("passivate replied %q", got)
	}
	if got := mustAsk(t, n, "counter", "p", "get"); got != "3" {
		t.Fatalf("count %s after passivation, want 3", got)
	}
	if got := activationsOf(tc, "counter/p"); got != 2 {
		t.Fatalf("%d activations, want 2 (one before, one after the passivation)", got)
	}
	if p := n.sharding.region("counter").Passivations(); p != 1 {
		t.Fatalf("%d passivations, want 1", p)
	}
}

// Under the passivation policy, a terminated entity restarts from its last saved
// state: what it acknowledged since is lost.
func TestTerminatedEntityRestartsFromItsSavedState(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "passive", "t", "inc")
	mustAsk(t, n, "passive", "t", "inc")
	mustAsk(t, n, "passive", "t", "passivate") // saves 2
	mustAsk(t, n, "passive", "t", "inc")       // 3, not saved
	if _, err := ask(t, n, "passive", "t", "crash"); err == nil || ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "passive", "t", "get"); got != "2" {
		t.Fatalf("count %s after the crash, want the saved 2", got)
	}
	if got := activationsOf(tc, "passive/t"); got != 3 {
		t.Fatalf("%d activations, want 3", got)
	}
}

// Under the journal (the default), a terminated entity restarts from its base and the
// records after it: nothing it acknowledged is lost, and what failed is not replayed.
func TestTerminatedJournaledEntityKeepsWhatItAcknowledged(t *testing.T) {
	store := NewMemoryStateStore()
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.States = store }))
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "t", "inc")
	mustAsk(t, n, "counter", "t", "inc")
	mustAsk(t, n, "counter", "t", "passivate") // no base: the journal holds it all
	mustAsk(t, n, "counter", "t", "inc")       // 3, journaled as record 4
	if _, err := ask(t, n, "counter", "t", "fail"); ErrorCode(err) != CodeEntityError {
		t.Fatalf("fail: %v", err)
	}
	if _, err := ask(t, n, "counter", "t", "crash"); err == nil || ErrorCode(err) != CodeGuestTrap {
		t.Fatalf("crash: %v", err)
	}
	if got := mustAsk(t, n, "counter", "t", "get"); got != "3" {
		t.Fatalf("count %s after the crash, want the journaled 3", got)
	}
	if got := activationsOf(tc, "counter/t"); got != 3 {
		t.Fatalf("%d activations, want 3", got)
	}
	key := EntityKey{Type: "counter", Shard: abiShard("t", 10), ID: "t"}
	// A passivation under the journal saves no base (the next activation replays the
	// records instead), so that they stay revertible.
	if _, err := store.Load(context.Background(), key); !errors.Is(err, ErrNoState) {
		t.Fatalf("a base after a passivation under the journal: %v, want none", err)
	}
	recs, err := store.ReadJournal(context.Background(), key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		en, err := DecodeJournalEntry(key, r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", en.Seq, en.Payload))
	}
	// Every record is kept (the history), the failed messages are not journaled, and
	// the get after the crash is record 5.
	if want := "[1:inc 2:inc 3:passivate 4:inc 5:get]"; fmt.Sprint(got) != want {
		t.Fatalf("journal %v, want %s", got, want)
	}
}

func TestStateMovesWithAGracefulLeave(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore())
	want := map[string]int{}
	for i := 0; i < 40; i++ {
		id := "m" + strconv.Itoa(i)
		for k := 0; k <= i%3; k++ {
			mustAsk(t, tc.nodes[0], "counter", id, "inc")
		}
		want[id] = i%3 + 1
	}
	tc.stop(tc.nodes[2], true)
	tc.waitMembers()
	for id, n := range want {
		if got := mustAsk(t, tc.nodes[1], "counter", id, "get"); got != strconv.Itoa(n) {
			t.Fatalf("%s = %s after the leave, want %d", id, got, n)
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
}

func TestStateMovesWithARebalance(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore(), withConfig(func(c *Config) { c.RebalanceInterval = 200 * time.Millisecond }))
	want := map[string]int{}
	for i := 0; i < 30; i++ {
		id := "b" + strconv.Itoa(i)
		for k := 0; k <= i%4; k++ {
			mustAsk(t, tc.nodes[0], "counter", id, "inc")
		}
		want[id] = i%4 + 1
	}
	newcomer := tc.add()
	tc.waitMembers()
	// A handed-off shard is allocated anew when a message asks for it: keep asking.
	testutil.Eventually(t, 20*time.Second, "shards on the newcomer", func() bool {
		for id := range want {
			ask(t, tc.nodes[0], "counter", id, "get")
		}
		return len(newcomer.sharding.LocalState().Shards) >= 3
	})
	moved := 0
	for id, n := range want {
		r, err := ask(t, tc.nodes[0], "counter", id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Payload) != strconv.Itoa(n) {
			t.Fatalf("%s = %s after the rebalance, want %d", id, r.Payload, n)
		}
		if r.Node == newcomer.addr() {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no entity moved to the newcomer")
	}
}

func TestEveryMessageCheckpointLosesNoAcknowledgedMessageInACrash(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore(), withFastFailureDetection())
	var victim *testNode
	acked := map[string]int{}
	for i := 0; len(acked) < 30; i++ {
		id := "d" + strconv.Itoa(i)
		r, err := ask(t, tc.nodes[0], "durable", id, "inc")
		if err != nil {
			t.Fatal(err)
		}
		acked[id] = 1
		if r.Node != tc.nodes[0].addr() {
			victim = tc.nodes[1]
			if r.Node == tc.nodes[2].addr() {
				victim = tc.nodes[2]
			}
		}
	}
	for id := range acked {
		mustAsk(t, tc.nodes[0], "durable", id, "inc")
		acked[id]++
	}
	// The victim's process dies: no leave, no handoff, no save on stop.
	victim.crash(true) // its entities die with it, unsaved
	tc.waitMembers()
	for id, n := range acked {
		if got := mustAsk(t, tc.nodes[0], "durable", id, "get"); got != strconv.Itoa(n) {
			t.Fatalf("%s = %s after the crash, want %d acknowledged increments", id, got, n)
		}
	}
}

func TestRememberedEntitiesRestartWhereTheirShardGoes(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore())
	ids := []string{}
	for i := 0; i < 20; i++ {
		id := "r" + strconv.Itoa(i)
		mustAsk(t, tc.nodes[0], "remember", id, "inc")
		ids = append(ids, id)
	}
	leaver := tc.nodes[2]
	var onLeaver []string
	for _, id := range ids {
		tc.acts.mu.Lock()
		if tc.acts.active["remember/"+id] == leaver.addr() {
			onLeaver = append(onLeaver, id)
		}
		tc.acts.mu.Unlock()
	}
	if len(onLeaver) == 0 {
		t.Skip("no remembered entity on the leaving member")
	}
	tc.stop(leaver, true)
	// Without any message, the leaver's remembered entities come back elsewhere.
	testutil.Eventually(t, 15*time.Second, "remembered entities restarted", func() bool {
		for _, id := range onLeaver {
			if !activeOn(tc, "remember/"+id) {
				return false
			}
		}
		return true
	})
	for _, id := range onLeaver {
		if got := mustAsk(t, tc.nodes[0], "remember", id, "get"); got != "1" {
			t.Fatalf("%s restarted with %s", id, got)
		}
	}
}

func TestStaleEpochWritesAreRefused(t *testing.T) {
	st := NewMemoryStateStore()
	ctx := context.Background()
	key := EntityKey{Type: "t", Shard: 1, ID: "a"}
	if err := st.Save(ctx, key, 5, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, key, 4, []byte("old")); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale save: %v", err)
	}
	if b, _ := st.Load(ctx, key); string(b) != "new" {
		t.Fatalf("state %q", b)
	}
}

func TestARegionDropsAStaleShardOnANewerEpoch(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore())
	n := tc.nodes[0]
	r, err := ask(t, n, "counter", "x", "inc")
	if err != nil {
		t.Fatal(err)
	}
	host := tc.nodes[0]
	if r.Node == tc.nodes[1].addr() {
		host = tc.nodes[1]
	}
	reg := host.sharding.region("counter")
	sh := abiShard("x", 10)
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()
	// Another allocation of the shard, with a newer epoch, is announced: this copy stops.
	reg.dropStale(sh, epoch+1)
	reg.mu.Lock()
	still := reg.hostedLocked(sh) != nil
	reg.mu.Unlock()
	if still {
		t.Fatal("the stale shard is still hosted")
	}
	testutil.Eventually(t, 15*time.Second, "the stale entity stopped", func() bool { return !activeOn(tc, "counter/x") })
	// Its entity did not save on the way out (it was fenced), and it serves again.
	if got := mustAsk(t, n, "counter", "x", "get"); !strings.HasPrefix(got, "1") && got != "0" {
		t.Fatalf("after the stale shard: %s", got)
	}
}

// TestAStaleShardsActivatingEntityStopsAndItsMessagesMove: a shard's allocation here
// turns out stale while one of its entities is still activating, with messages queued
// for it. The entity must not live on once activated (a second live instance beside
// the shard's new home), and the queued messages go on to the shard's home instead of
// being handled by the stale copy and lost with it. Found by TestThreeNodesDeployAnd
// ServeCounters on a loaded machine (host package): an activation slowed by the state
// store outlasted the coordinator's HostShard timeout.
func TestAStaleShardsActivatingEntityStopsAndItsMessagesMove(t *testing.T) {
	tc := newTestCluster(t, 1, withSharedStateStore())
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "x", "inc") // the shard is hosted here
	reg := n.sharding.region("counter")
	sh := abiShard("x", 10)
	var id string // another entity of x's shard
	for i := 0; ; i++ {
		if id = "y" + strconv.Itoa(i); abiShard(id, 10) == sh {
			break
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	n.factory.holdActivation = func(typ, eid string) {
		if eid == id {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	for k := 0; k < 3; k++ {
		if err := n.sharding.Tell(context.Background(), "counter", id, []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	<-entered // the entity is activating, its other messages queued behind the first
	reg.mu.Lock()
	epoch := reg.hostedLocked(sh).epoch
	reg.mu.Unlock()
	reg.dropStale(sh, epoch+1)
	close(release)
	// The stale copy stops without handling anything, and only then do its messages,
	// routed again, start the entity anew: one live instance at any time.
	testutil.Eventually(t, 15*time.Second, "a second activation of "+id, func() bool {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		return slices.Index(tc.acts.log[slices.Index(tc.acts.log, n.addr()+" counter/"+id)+1:], n.addr()+" counter/"+id) >= 0
	})
	// No message is lost: the stale copy handled none, the new copy all.
	testutil.Eventually(t, 15*time.Second, id+" = 3", func() bool {
		r, err := ask(t, n, "counter", id, "get")
		return err == nil && string(r.Payload) == "3"
	})
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.double) > 0 {
		t.Fatalf("two live instances: %v", tc.acts.double)
	}
}
