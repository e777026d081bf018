package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testutil"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight (probeNode waits for its
	// ack or its probe interval, then returns): on a loaded machine one can outlive the
	// last test by more than goleak's retries. It is memberlist's, not ours, and ends
	// by itself; every goroutine of shardhost is still checked.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func TestEntitiesAcrossThreeMembers(t *testing.T) {
	tc := newTestCluster(t, 3)
	const entities = 300
	// Every entity gets i%5+1 increments, sent through different members.
	var wg sync.WaitGroup
	for i := 0; i < entities; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "c-" + strconv.Itoa(i)
			for k := 0; k < i%5+1; k++ {
				via := tc.nodes[(i+k)%3]
				if _, err := ask(t, via, "counter", id, "inc"); err != nil {
					t.Errorf("inc %s via %s: %v", id, via.name, err)
				}
			}
		}()
	}
	wg.Wait()
	hosts := map[string]int{}
	for i := 0; i < entities; i++ {
		id := "c-" + strconv.Itoa(i)
		r, err := ask(t, tc.nodes[i%3], "counter", id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(i%5 + 1); string(r.Payload) != want {
			t.Fatalf("%s = %s, want %s", id, r.Payload, want)
		}
		hosts[r.Node]++
	}
	if len(hosts) != 3 {
		t.Fatalf("entities live on %d members: %v", len(hosts), hosts)
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
	// The region states agree: every entity on exactly one member, and least-shard
	// spread the 10 shards 4/3/3.
	seen := map[string]string{}
	ctx := context.Background()
	states, err := tc.nodes[1].sharding.ClusterShardingState(ctx)
	if err != nil || len(states) != 3 {
		t.Fatalf("cluster state: %v %v", states, err)
	}
	for _, st := range states {
		if n := len(st.Shards); n < 3 || n > 4 {
			t.Errorf("%s hosts %d shards", st.Node, n)
		}
		for _, sh := range st.Shards {
			for _, id := range sh.Entities {
				if other, dup := seen[id]; dup {
					t.Fatalf("%s active on %s and %s", id, other, st.Node)
				}
				seen[id] = st.Node
			}
		}
	}
	if len(seen) != entities {
		t.Fatalf("%d entities active, want %d", len(seen), entities)
	}
}

func TestOrderPerSenderThroughBufferingAndForwarding(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	// Tells from each member to the same entities, the first of them buffered while the
	// shard home is resolved, the others forwarded or local.
	for _, n := range tc.nodes {
		for _, id := range []string{"x", "y", "z"} {
			for k := 0; k < 200; k++ {
				if err := n.sharding.Tell(ctx, "counter", id, []byte(fmt.Sprintf("append %s:%d", n.name, k))); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, id := range []string{"x", "y", "z"} {
		// An ask from each member after its tells sees all of them (FIFO per sender).
		for _, n := range tc.nodes {
			next := map[string]int{}
			list := mustAsk(t, n, "counter", id, "list")
			for _, item := range strings.Split(list, ",") {
				name, k, _ := strings.Cut(item, ":")
				kk, _ := strconv.Atoi(k)
				if kk < next[name] {
					t.Fatalf("%s: %s out of order (want ≥ %d)", id, item, next[name])
				}
				next[name] = kk + 1
			}
			if next[n.name] != 200 {
				t.Fatalf("%s: ask via %s saw %d of its tells", id, n.name, next[n.name])
			}
		}
	}
}

func TestErrorsKeepTheirCodeAcrossMembers(t *testing.T) {
	tc := newTestCluster(t, 2)
	// Find an entity hosted on node-1 and ask it from node-0.
	var id string
	for i := 0; ; i++ {
		id = "e" + strconv.Itoa(i)
		r, err := ask(t, tc.nodes[0], "counter", id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == tc.nodes[1].addr() {
			break
		}
	}
	_, err := ask(t, tc.nodes[0], "counter", id, "fail")
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeEntityError || re.Message != "entity says no" || re.Node != tc.nodes[1].addr() {
		t.Fatalf("remote entity error: %#v", err)
	}
	if _, err := ask(t, tc.nodes[0], "nope", "a", "get"); !errors.Is(err, ErrUnknownEntityType) || ErrorCode(err) != CodeUnknownType {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := ask(t, tc.nodes[0], "counter", "", "get"); !errors.Is(err, ErrEmptyEntityID) || ErrorCode(err) != CodeBadRequest {
		t.Fatalf("empty id: %v", err)
	}
	if err := tc.nodes[0].sharding.Tell(context.Background(), "counter", "", nil); !errors.Is(err, ErrEmptyEntityID) {
		t.Fatalf("tell empty id: %v", err)
	}
	// A failed activation fails the message with its code, and the next message tries again.
	tc.nodes[0].factory.failActivation = "bad"
	tc.nodes[1].factory.failActivation = "bad"
	if _, err := ask(t, tc.nodes[0], "counter", "bad-1", "get"); ErrorCode(err) != CodeActivationError {
		t.Fatalf("activation failure: %v", err)
	}
}

func TestBufferOverflowIsADeadLetter(t *testing.T) {
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.BufferSize = 5 }))
	n := tc.nodes[0]
	n.types.block = make(chan struct{}) // the type stays unresolved: messages wait
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := n.sharding.Tell(ctx, "counter", "a", []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.sharding.Tell(ctx, "counter", "a", []byte("inc")); !errors.Is(err, ErrBufferFull) {
		t.Fatalf("sixth tell: %v", err)
	}
	if n.sharding.DeadLetters() != 1 {
		t.Fatalf("dead letters %d", n.sharding.DeadLetters())
	}
	close(n.types.block)
	testutil.Eventually(t, 5*time.Second, "buffered tells", func() bool {
		r, err := ask(t, n, "counter", "a", "get")
		return err == nil && string(r.Payload) == "5"
	})
}

func TestMailboxOverflowIsADeadLetter(t *testing.T) {
	tc := newTestCluster(t, 1, withConfig(func(c *Config) { c.MailboxSize = 3 }))
	n := tc.nodes[0]
	ctx := context.Background()
	mustAsk(t, n, "counter", "a", "get") // activate and home the shard
	var failed int
	for i := 0; i < 20; i++ {
		if err := n.sharding.Tell(ctx, "counter", "a", []byte("slow")); err != nil {
			if !errors.Is(err, ErrMailboxFull) {
				t.Fatal(err)
			}
			failed++
		}
	}
	if failed == 0 || n.sharding.DeadLetters() != uint64(failed) {
		t.Fatalf("%d tells failed, %d dead letters", failed, n.sharding.DeadLetters())
	}
}

// A tell the entity refuses is a dead letter with the failure's code as its reason,
// counted where it failed: on the member that routed it or on the one it was
// forwarded to: a failed tell never vanishes.
func TestFailedTellIsADeadLetter(t *testing.T) {
	tc := newTestCluster(t, 2)
	ctx := context.Background()
	total := func() uint64 { return tc.nodes[0].sharding.DeadLetters() + tc.nodes[1].sharding.DeadLetters() }
	for i := 0; i < 10; i++ {
		if err := tc.nodes[i%2].sharding.Tell(ctx, "counter", fmt.Sprintf("f-%d", i), []byte("fail")); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "10 dead letters", func() bool { return total() == 10 })
	mustAsk(t, tc.nodes[0], "counter", "f-0", "get")
	if got := total(); got != 10 {
		t.Fatalf("%d dead letters after a good ask, want 10", got)
	}
}

// Passivate stops an active entity wherever it is hosted, saving its state, and
// leaves an inactive one alone; the next message activates it again with its state.
func TestPassivateFromOutside(t *testing.T) {
	tc := newTestCluster(t, 2, withSharedStateStore(), withFastFailureDetection())
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		mustAsk(t, tc.nodes[0], "counter", "p", "inc")
	}
	for k, want := range []bool{true, false} {
		got, err := tc.nodes[k].sharding.Passivate(ctx, "counter", "p")
		if err != nil || got != want {
			t.Fatalf("passivate %d via %s: %v %v, want %v", k, tc.nodes[k].name, got, err, want)
		}
	}
	tc.acts.mu.Lock()
	_, active := tc.acts.active["counter/p"]
	tc.acts.mu.Unlock()
	if active {
		t.Fatal("counter/p still active after the passivation")
	}
	if got := mustAsk(t, tc.nodes[1], "counter", "p", "get"); got != "3" {
		t.Fatalf("after passivation: %q, want 3", got)
	}
}

// levelRecorder is a slog.Handler that keeps each record's message and level.
type levelRecorder struct {
	mu     sync.Mutex
	levels map[string][]slog.Level
}

func (r *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *levelRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *levelRecorder) WithGroup(string) slog.Handler            { return r }
func (r *levelRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels[rec.Message] = append(r.levels[rec.Message], rec.Level)
	return nil
}

func (r *levelRecorder) of(msg string) []slog.Level {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Level(nil), r.levels[msg]...)
}

// An entity's activation and stop are logged at Debug, not Info: a line per activation
// at Info cost ~5 µs of the 50 µs an activation may take (docs/design.md, "Targets").
func TestEntityActivationAndStopLogAtDebug(t *testing.T) {
	rec := &levelRecorder{levels: map[string][]slog.Level{}}
	tc := newTestCluster(t, 1, withSharedStateStore(), withConfig(func(c *Config) { c.Logger = slog.New(rec) }))
	mustAsk(t, tc.nodes[0], "counter", "logged", "inc")
	if _, err := tc.nodes[0].sharding.Passivate(context.Background(), "counter", "logged"); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"entity activated", "entity stopped"} {
		if got := rec.of(msg); len(got) != 1 || got[0] != slog.LevelDebug {
			t.Errorf("%q logged at %v, want once at DEBUG", msg, got)
		}
	}
}

func TestShardsMoveWhenTheirMemberLeaves(t *testing.T) {
	tc := newTestCluster(t, 3)
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
		mustAsk(t, tc.nodes[0], "counter", ids[i], "inc")
	}
	leaver := tc.nodes[2]
	tc.stop(leaver, true)
	tc.waitMembers()
	for _, id := range ids {
		r, err := ask(t, tc.nodes[0], "counter", id, "get")
		if err != nil {
			t.Fatalf("%s after leave: %v", id, err)
		}
		if r.Node == leaver.addr() {
			t.Fatalf("%s still routed to the member that left", id)
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
}

func TestCoordinatorMovesToTheNextOldestAndRecovers(t *testing.T) {
	tc := newTestCluster(t, 3)
	// Home shards on node-1 and node-2 while node-0 coordinates.
	homes := map[string]string{}
	for i := 0; i < 40; i++ {
		id := "k" + strconv.Itoa(i)
		r, err := ask(t, tc.nodes[1], "counter", id, "inc")
		if err != nil {
			t.Fatal(err)
		}
		homes[id] = r.Node
	}
	tc.stop(tc.nodes[0], true)
	tc.waitMembers()
	testutil.Eventually(t, 5*time.Second, "the new coordinator", func() bool {
		tc.nodes[1].sharding.coord.mu.Lock()
		defer tc.nodes[1].sharding.coord.mu.Unlock()
		return tc.nodes[1].sharding.coord.active
	})
	// The new coordinator knows where the surviving shards are: entities on node-1 and
	// node-2 kept their state and their member.
	for id, home := range homes {
		if home == tc.nodes[0].addr() {
			continue
		}
		r, err := ask(t, tc.nodes[2], "counter", id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if r.Node != home || string(r.Payload) != "1" {
			t.Fatalf("%s: %q on %s, want 1 on %s", id, r.Payload, r.Node, home)
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
}

func TestStopFailsNewMessagesAndStopsEntities(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	mustAsk(t, n, "counter", "a", "inc")
	tc.stop(n, false)
	if _, err := ask(t, n, "counter", "a", "get"); !errors.Is(err, ErrStopped) {
		t.Fatalf("after stop: %v", err)
	}
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.active) != 0 {
		t.Fatalf("entities still active: %v", tc.acts.active)
	}
}

func TestStartTypeRefusesAnotherShardCount(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.nodes[0].sharding
	if err := s.StartType(TypeSettings{Name: "t", NumberOfShards: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartType(TypeSettings{Name: "t", NumberOfShards: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartType(TypeSettings{Name: "t", NumberOfShards: 11}); err == nil {
		t.Fatal("shard count changed")
	}
}

// hostOf returns the test node that hosts typ/id now.
func hostOf(t *testing.T, tc *testCluster, via *testNode, typ, id string) *testNode {
	t.Helper()
	r, err := ask(t, via, typ, id, "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.nodes {
		if n.addr() == r.Node {
			return n
		}
	}
	t.Fatalf("no node at %s", r.Node)
	return nil
}

func TestHandOffOnLeaveLosesNoMessageAndKeepsOrder(t *testing.T) {
	tc := newTestCluster(t, 3)
	// An entity hosted on a member other than the sender's.
	var id string
	var leaver *testNode
	for i := 0; ; i++ {
		id = "h" + strconv.Itoa(i)
		if h := hostOf(t, tc, tc.nodes[0], "counter", id); h != tc.nodes[0] {
			leaver = h
			break
		}
	}
	const total = 400
	sent := make(chan struct{})
	var told atomic.Int64
	go func() {
		defer close(sent)
		for k := 0; k < total; k++ {
			if err := tc.nodes[0].sharding.Tell(context.Background(), "counter", id, []byte("append "+strconv.Itoa(k))); err != nil {
				t.Errorf("tell %d: %v", k, err)
			}
			told.Add(1)
			time.Sleep(2 * time.Millisecond) // the stream's pace, so that some messages meet the handoff: not a wait
		}
	}()
	// The member leaves once a quarter of the messages are on their way.
	testutil.Eventually(t, 10*time.Second, "the first 100 tells", func() bool { return told.Load() >= total/4 })
	tc.stop(leaver, true)
	<-sent
	// The entity's new incarnation got a contiguous, ordered tail of the messages: the
	// ones sent during the handoff waited in buffers, none was lost or reordered.
	var list string
	testutil.Eventually(t, 10*time.Second, "the last message", func() bool {
		r, err := ask(t, tc.nodes[0], "counter", id, "list")
		list = string(r.Payload)
		return err == nil && strings.HasSuffix(list, strconv.Itoa(total-1))
	})
	items := strings.Split(list, ",")
	first, _ := strconv.Atoi(items[0])
	for i, item := range items {
		if item != strconv.Itoa(first+i) {
			t.Fatalf("gap or disorder at %d: %s", i, list)
		}
	}
	if r, _ := ask(t, tc.nodes[0], "counter", id, "list"); r.Node == leaver.addr() {
		t.Fatal("still hosted on the member that left")
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v\nlog: %v\nleaver %s", tc.acts.double, tc.acts.log, leaver.addr())
	}
}

func TestShardsOfACrashedMemberMoveOnceItIsDowned(t *testing.T) {
	tc := newTestCluster(t, 3, withFastFailureDetection())
	ids := map[string]*testNode{}
	var victim *testNode
	for i := 0; len(ids) < 30; i++ {
		id := "k" + strconv.Itoa(i)
		h := hostOf(t, tc, tc.nodes[0], "counter", id)
		ids[id] = h
		if h != tc.nodes[0] {
			victim = h
		}
	}
	// The victim's process dies: no leave, no handoff.
	victim.crash(false)
	tc.acts.mu.Lock()
	for key, node := range tc.acts.active {
		if node == victim.addr() {
			delete(tc.acts.active, key) // died with its process
		}
	}
	tc.acts.mu.Unlock()
	tc.waitMembers() // the resolver downed it and the leader removed it
	for id, was := range ids {
		r, err := ask(t, tc.nodes[0], "counter", id, "get")
		if err != nil {
			t.Fatalf("%s after the crash: %v", id, err)
		}
		if was == victim && r.Node == victim.addr() {
			t.Fatalf("%s still routed to the crashed member", id)
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
}

func TestRebalanceAfterAJoinKeepsOrderAndSingleActivation(t *testing.T) {
	fast := func(c *Config) { c.RebalanceInterval = 200 * time.Millisecond }
	tc := newTestCluster(t, 3, withConfig(fast))
	// Home all 10 shards of "counter" (4/3/3 by least-shard) with one entity each.
	ids := map[int]string{}
	for i := 0; len(ids) < 10; i++ {
		id := "r" + strconv.Itoa(i)
		sh := abiShard(id, 10)
		if _, ok := ids[sh]; !ok {
			ids[sh] = id
			mustAsk(t, tc.nodes[0], "counter", id, "get")
		}
	}
	// Keep telling every entity while a fourth member joins and shards move to it.
	stop := make(chan struct{})
	done := make(chan struct{})
	sent := map[string]int{}
	sender := tc.nodes[0]
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, id := range ids {
				sender.sharding.Tell(context.Background(), "counter", id, []byte("append "+strconv.Itoa(k)))
				sent[id] = k + 1
			}
			time.Sleep(5 * time.Millisecond) // the stream's pace across the rebalance: not a wait
		}
	}()
	newcomer := tc.add()
	tc.waitMembers()
	testutil.Eventually(t, 20*time.Second, "shards on the newcomer", func() bool {
		st := newcomer.sharding.LocalState()
		return len(st.Shards) >= 2
	})
	close(stop)
	<-done
	// Every entity got a contiguous, ordered tail of its messages (a moved entity starts
	// afresh: its state does not move yet), and none ran on two members at once.
	for _, id := range ids {
		want := strconv.Itoa(sent[id] - 1)
		var list string
		testutil.Eventually(t, 60*time.Second, id+"'s last message", func() bool {
			r, err := ask(t, tc.nodes[1], "counter", id, "list")
			list = string(r.Payload)
			return err == nil && strings.HasSuffix(list, ","+want) || list == want
		})
		items := strings.Split(list, ",")
		first, _ := strconv.Atoi(items[0])
		for i, item := range items {
			if item != strconv.Itoa(first+i) {
				t.Fatalf("%s: gap or disorder at %d: %s", id, i, list)
			}
		}
	}
	if len(tc.acts.double) > 0 {
		t.Fatalf("entities active twice: %v", tc.acts.double)
	}
	var counts []int
	for _, n := range tc.live() {
		counts = append(counts, len(n.sharding.LocalState().Shards))
	}
	t.Logf("shards per member after the rebalance: %v", counts)
}

func activeOn(tc *testCluster, key string) bool {
	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	_, ok := tc.acts.active[key]
	return ok
}

// simClock is a simulated clock: it moves only when the test advances it.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func newSimClock() *simClock { return &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestIdleEntitiesArePassivatedAndComeBackOnTheNextMessage(t *testing.T) {
	clock := newSimClock()
	tc := newTestCluster(t, 2, withConfig(func(c *Config) { c.ReconcileInterval = 50 * time.Millisecond; c.Now = clock.Now }))
	n := tc.nodes[0]
	mustAsk(t, n, "idle", "a", "inc")
	// Idleness is measured on sharding's clock: while it stands still, the entity
	// stays, however long the sweeps (every ReconcileInterval) run.
	sweeps := n.sharding.idleSweeps.Load()
	testutil.Eventually(t, 5*time.Second, "three idle sweeps", func() bool { return n.sharding.idleSweeps.Load() >= sweeps+3 })
	if !activeOn(tc, "idle/a") {
		t.Fatal("passivated although sharding's clock did not move")
	}
	clock.Advance(time.Second) // past the type's PassivateAfter (300 ms)
	testutil.Eventually(t, 5*time.Second, "idle passivation", func() bool { return !activeOn(tc, "idle/a") })
	// The next message activates a new incarnation (state does not survive
	// passivation without a state store: the count starts again).
	if got := mustAsk(t, n, "idle", "a", "inc"); got != "1" {
		t.Fatalf("after passivation: %s", got)
	}
	if !activeOn(tc, "idle/a") {
		t.Fatal("not active again")
	}
	// Messages that arrive while an entity passivates wait and are delivered in order.
	for round := 0; round < 5; round++ {
		clock.Advance(time.Second)
		testutil.Eventually(t, 5*time.Second, "passivation", func() bool { return !activeOn(tc, "idle/a") })
		for k := 0; k < 20; k++ {
			n.sharding.Tell(context.Background(), "idle", "a", []byte("append "+strconv.Itoa(round*100+k)))
		}
		list := mustAsk(t, n, "idle", "a", "list")
		want := ""
		for k := 0; k < 20; k++ {
			if k > 0 {
				want += ","
			}
			want += strconv.Itoa(round*100 + k)
		}
		if list != want {
			t.Fatalf("round %d: %s", round, list)
		}
	}
	// The shards report counts active entities only.
	clock.Advance(time.Second)
	testutil.Eventually(t, 5*time.Second, "passivation", func() bool { return !activeOn(tc, "idle/a") })
	for _, st := range n.sharding.LocalState().Shards {
		if st.Type == "idle" && len(st.Entities) != 0 {
			t.Fatalf("passivated entity listed: %v", st)
		}
	}
}

func TestMaxActivePassivatesTheLeastRecentlyUsed(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	for _, id := range []string{"a", "b", "c"} {
		mustAsk(t, n, "bounded", id, "inc")
	}
	mustAsk(t, n, "bounded", "a", "inc") // b is now the least recently used
	mustAsk(t, n, "bounded", "d", "inc")
	testutil.Eventually(t, 5*time.Second, "b passivated", func() bool { return !activeOn(tc, "bounded/b") })
	for _, id := range []string{"a", "c", "d"} {
		if !activeOn(tc, "bounded/"+id) {
			t.Fatalf("%s passivated instead of b", id)
		}
	}
	if got := mustAsk(t, n, "bounded", "a", "get"); got != "2" {
		t.Fatalf("a lost its state: %s", got)
	}
}

// A member without a type's role runs a proxy-only region: it routes the type's
// messages and hosts none of its shards.
func TestProxyOnlyRegionOnMembersWithoutTheRole(t *testing.T) {
	tc := newTestCluster(t, 3, withRoles(func(i int) []string {
		if i == 2 {
			return nil // the proxy
		}
		return []string{"worker"}
	}))
	proxy := tc.nodes[2]
	hosts := map[string]int{}
	for i := 0; i < 60; i++ {
		r, err := ask(t, proxy, "worker", "w"+strconv.Itoa(i), "inc")
		if err != nil {
			t.Fatal(err)
		}
		hosts[r.Node]++
	}
	if hosts[proxy.addr()] > 0 || len(hosts) != 2 {
		t.Fatalf("replies came from %v: want the two workers only", hosts)
	}
	for _, sh := range proxy.sharding.LocalState().Shards {
		if sh.Type == "worker" {
			t.Fatalf("the proxy hosts shard %d of worker", sh.ID)
		}
	}
	// A type without a role is hosted by every member, the proxy included.
	for i := 0; i < 60; i++ {
		r, err := ask(t, proxy, "counter", "c"+strconv.Itoa(i), "inc")
		if err != nil {
			t.Fatal(err)
		}
		hosts[r.Node]++
	}
	if hosts[proxy.addr()] == 0 {
		t.Fatal("the proxy hosts no counter: roleless types belong on every member")
	}
}
