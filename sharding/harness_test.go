package sharding

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
)

var quiet = func() *slog.Logger {
	if os.Getenv("SS_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// QuietLogger is quiet, for the external tests (replstore_test.go).
var QuietLogger = quiet

// activations records which member activated which entity, to check that no entity is
// ever active on two members at once.
type activations struct {
	mu     sync.Mutex
	active map[string]string // "type/id" → node
	log    []string          // "node type/id" in activation order
	double []string
	lives  map[string]int // "node type/id" → live instances there
	// reminded lists the reminders delivered: "node type/id name due payload".
	reminded []firedReminder
	// scheduled lists the scheduled messages delivered (KindMessage with a Tag):
	// name is empty, due the Tag.
	scheduled []firedReminder
}

// firedReminder is a reminder a fake entity got.
type firedReminder struct {
	node, key, name, payload string
	due, at                  int64 // Unix ms: the due time (MessageInfo.Tag) and the delivery's
}

// reminders returns the reminders of key delivered so far.
func (a *activations) reminders(key string) []firedReminder {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []firedReminder
	for _, f := range a.reminded {
		if f.key == key {
			out = append(out, f)
		}
	}
	return out
}

// scheduledTo returns the scheduled messages delivered to key so far.
func (a *activations) scheduledTo(key string) []firedReminder {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []firedReminder
	for _, f := range a.scheduled {
		if f.key == key {
			out = append(out, f)
		}
	}
	return out
}

func (a *activations) activate(node, key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if other, ok := a.active[key]; ok && other != node {
		a.double = append(a.double, fmt.Sprintf("%s on %s and %s", key, other, node))
	}
	if a.lives == nil {
		a.lives = map[string]int{}
	}
	if a.lives[node+" "+key] > 0 {
		a.double = append(a.double, fmt.Sprintf("%s twice on %s", key, node))
	}
	a.lives[node+" "+key]++
	a.active[key] = node
	a.log = append(a.log, node+" "+key)
}

func (a *activations) stopped(node, key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lives[node+" "+key] > 0 {
		a.lives[node+" "+key]--
	}
	if a.active[key] == node {
		delete(a.active, key)
	}
}

// fakeFactory makes in-memory entities: "inc" adds one and replies the count, "get"
// replies the count, "append X" appends X to a list and "list" replies it, "fail"
// returns an entity error, "slow" sleeps 50 ms, "block" waits for onReceive, "passivate"
// asks for passivation, "crash" kills the entity (as a trap kills a wasm instance),
// "forward TYPE/ID" adds one and passes the message on to TYPE/ID (ForwardTo).
type fakeFactory struct {
	node string
	acts *activations
	// failActivation makes NewEntity fail for IDs with this prefix.
	failActivation string
	// holdActivation, if set, is called by NewEntity before it makes an entity: a test
	// blocks an activation there.
	holdActivation func(typ, id string)
	// onReceive, if set, is called by Receive before it handles msg: a test blocks an
	// entity there.
	onReceive func(key, msg string)
	// onReminder, if set (before any message), is called by Receive for each reminder
	// delivered, with its due time (Unix ms) and the delivery's time, instead of
	// recording it in acts.reminded (BenchmarkReminderSteadyState).
	onReminder func(node string, due int64, at time.Time)
	// memoryBytes, when set (before any message), makes the entities
	// EntityInspectors reporting this much memory.
	memoryBytes uint64
	// s is the member's sharding, which the entities of types "sender*" send through
	// (delivery_test.go).
	s *Sharding
}

// inspectedEntity is a fakeEntity that reports its memory.
type inspectedEntity struct {
	*fakeEntity
	bytes uint64
}

func (e inspectedEntity) Inspect() EntityFacts { return EntityFacts{MemoryBytes: e.bytes} }

type codedErr struct{ code, msg string }

func (e *codedErr) Error() string     { return e.msg }
func (e *codedErr) ErrorCode() string { return e.code }

func (f *fakeFactory) NewEntity(ctx context.Context, typ, id string, state []byte) (Entity, error) {
	if f.failActivation != "" && strings.HasPrefix(id, f.failActivation) {
		return nil, &codedErr{CodeActivationError, "activation refused for " + id}
	}
	if f.holdActivation != nil {
		f.holdActivation(typ, id)
	}
	f.acts.activate(f.node, typ+"/"+id)
	e := &fakeEntity{f: f, key: typ + "/" + id}
	if state != nil {
		// The state is "n|item,item,...".
		n, list, _ := strings.Cut(string(state), "|")
		e.n, _ = strconv.Atoi(n)
		if list != "" {
			e.list = strings.Split(list, ",")
		}
	}
	if f.memoryBytes > 0 {
		return inspectedEntity{e, f.memoryBytes}, nil
	}
	if strings.HasPrefix(typ, "sender") {
		return &sendingEntity{fakeEntity: e}, nil
	}
	return e, nil
}

func (e *fakeEntity) Snapshot(ctx context.Context) ([]byte, error) {
	return []byte(strconv.Itoa(e.n) + "|" + strings.Join(e.list, ",")), nil
}

type fakeEntity struct {
	f    *fakeFactory
	key  string
	n    int
	list []string
	// dead and passivate implement EntityLifecycle ("crash", "passivate").
	dead, passivate bool
}

func (e *fakeEntity) Terminated() bool { return e.dead }

func (e *fakeEntity) PassivationRequested() bool {
	p := e.passivate
	e.passivate = false
	return p
}

func (e *fakeEntity) Receive(ctx context.Context, payload []byte) ([]byte, error) {
	msg := string(payload)
	if e.f.onReceive != nil {
		e.f.onReceive(e.key, msg)
	}
	if mi, _ := MessageInfoFrom(ctx); mi.Kind == KindReminder {
		e.n++
		if e.f.onReminder != nil {
			e.f.onReminder(e.f.node, int64(mi.Tag), time.Now())
			return nil, nil
		}
		e.f.acts.mu.Lock()
		e.f.acts.reminded = append(e.f.acts.reminded, firedReminder{node: e.f.node, key: e.key, name: mi.Sender,
			payload: msg, due: int64(mi.Tag), at: time.Now().UnixMilli()})
		e.f.acts.mu.Unlock()
		return nil, nil
	}
	if mi, _ := MessageInfoFrom(ctx); mi.Kind == KindMessage && mi.Tag != 0 {
		e.f.acts.mu.Lock()
		e.f.acts.scheduled = append(e.f.acts.scheduled, firedReminder{node: e.f.node, key: e.key, payload: msg,
			due: int64(mi.Tag), at: time.Now().UnixMilli()})
		e.f.acts.mu.Unlock()
	}
	switch {
	case msg == "inc":
		e.n++
		return []byte(strconv.Itoa(e.n)), nil
	case msg == "get":
		return []byte(strconv.Itoa(e.n)), nil
	case strings.HasPrefix(msg, "append "):
		e.list = append(e.list, strings.TrimPrefix(msg, "append "))
		return nil, nil
	case msg == "list":
		return []byte(strings.Join(e.list, ",")), nil
	case msg == "fail":
		return nil, &codedErr{CodeEntityError, "entity says no"}
	case msg == "slow":
		time.Sleep(50 * time.Millisecond) // the slowness is the message's point, not a wait
		return nil, nil
	case msg == "block": // held in onReceive, if the test holds it
		return nil, nil
	case msg == "passivate":
		e.passivate = true
		return []byte("ok"), nil
	case msg == "crash":
		e.dead = true
		return nil, &codedErr{CodeGuestTrap, "entity crashed"}
	case strings.HasPrefix(msg, "forward "):
		e.n++
		typ, id, _ := strings.Cut(strings.TrimPrefix(msg, "forward "), "/")
		return nil, &ForwardTo{EntityType: typ, EntityID: id}
	}
	return nil, &codedErr{CodeEntityError, "unknown message " + msg}
}

func (e *fakeEntity) Stop(ctx context.Context) { e.f.acts.stopped(e.f.node, e.key) }

// types is a TypeResolver with a fixed set of types (name → shards, or full settings);
// block, if set, is waited on first, and entered, if set, closed when a lookup first
// waits on it.
type types struct {
	known    map[string]int
	settings map[string]TypeSettings
	block    chan struct{}
	entered  chan struct{}
	once     sync.Once
}

func (t *types) EntityType(ctx context.Context, name string) (TypeSettings, error) {
	if t.block != nil {
		if t.entered != nil {
			t.once.Do(func() { close(t.entered) })
		}
		select {
		case <-t.block:
		case <-ctx.Done():
			return TypeSettings{}, ctx.Err()
		}
	}
	if st, ok := t.settings[name]; ok {
		return st, nil
	}
	n, ok := t.known[name]
	if !ok {
		return TypeSettings{}, fmt.Errorf("%w: %q", ErrUnknownEntityType, name)
	}
	return TypeSettings{Name: name, NumberOfShards: n}, nil
}

// testNode is one member: a clustertest member (membership on the in-memory gossip
// network, messaging on the in-memory frames network) running sharding with fake
// entities.
type testNode struct {
	member     *clustertest.Member
	name       string
	membership *cluster.Membership // member.Membership, for short
	messenger  *cluster.Messenger  // member.Messenger, for short
	sharding   *Sharding
	factory    *fakeFactory
	types      *types
}

func (n *testNode) addr() string { return n.membership.Self().Address }

// stopped reports whether the member has stopped (testCluster.stop, crash).
func (n *testNode) stopped() bool { return n.member.Stopped() }

// crash stops the member as its process dying: its membership and messenger go first,
// then its sharding stops (Abort, if abort: its entities die unsaved; else Stop) and
// the member stops (clustertest.Member.Crash: its state store closes).
func (n *testNode) crash(abort bool) {
	n.membership.Shutdown()
	n.messenger.Close()
	if abort {
		n.sharding.Abort(context.Background())
	} else {
		n.sharding.Stop(context.Background())
	}
	n.member.Crash()
}

type testCluster struct {
	t         testing.TB
	cluster   *clustertest.Cluster
	acts      *activations
	nodes     []*testNode // every member started, stopped ones included, in order
	mutate    func(*Config)
	lifecycle cluster.CoreConfig
	// members are the clustertest options of the members (roles, clocks).
	members []clustertest.Option
	// states, if set, is the entity state store every member shares.
	states *MemoryStateStore
	// memberStores, if set, gives each member a state store of its own, on its
	// membership and messenger, over a fresh directory (withMemberStateStores).
	memberStores MemberStateStore
}

// clusterOption sets up a testCluster before its members start.
type clusterOption func(*testCluster)

// withConfig changes each member's sharding Config before it starts.
func withConfig(mutate func(*Config)) clusterOption {
	return func(tc *testCluster) { tc.mutate = mutate }
}

// withFastFailureDetection makes members detect a crash in about a second (for tests
// of crashes); by default failure detection is slow (clustertest.Tolerant), so that a
// loaded machine under the race detector does not make a member look crashed.
func withFastFailureDetection() clusterOption {
	return func(tc *testCluster) { tc.lifecycle = cluster.DefaultLocalCoreConfig() }
}

// withSharedStateStore gives every member one in-memory entity state store.
func withSharedStateStore() clusterOption {
	return func(tc *testCluster) { tc.states = NewMemoryStateStore() }
}

// withMembershipClock gives the i-th member added (its Index) the membership clock
// clock(i) (cluster.MembershipConfig.Now).
func withMembershipClock(clock func(i int) func() time.Time) clusterOption {
	return func(tc *testCluster) {
		tc.members = append(tc.members, clustertest.WithConfig(func(i int, c *cluster.MembershipConfig) { c.Now = clock(i) }))
	}
}

// withMembershipClocks gives each member a clustertest.Clock of its own
// (clustertest.WithClocks), which its membership runs on: testNode.member.Clock.
func withMembershipClocks() clusterOption {
	return func(tc *testCluster) { tc.members = append(tc.members, clustertest.WithClocks()) }
}

// MemberStateStore makes a member's own entity state store on its membership and
// messenger, over a fresh directory, and returns it with the function that closes it
// (package replstore's store: replstore_test.go).
type MemberStateStore func(tb testing.TB, ms *cluster.Membership, msgr *cluster.Messenger, dir string) (StateStore, func() error)

// withMemberStateStores gives each member a state store of its own, made by f.
func withMemberStateStores(f MemberStateStore) clusterOption {
	return func(tc *testCluster) { tc.memberStores = f }
}

// withRoles gives the i-th member added (its Index) the roles roles(i).
func withRoles(roles func(i int) []string) clusterOption {
	return func(tc *testCluster) {
		tc.members = append(tc.members, clustertest.WithConfig(func(i int, c *cluster.MembershipConfig) { c.Roles = roles(i) }))
	}
}

// newTestCluster starts n members of a clustertest cluster, set up by opts, and waits
// until they all see each other. Its members stop when the test ends.
func newTestCluster(t testing.TB, n int, opts ...clusterOption) *testCluster {
	t.Helper()
	tc := &testCluster{
		t:         t,
		acts:      &activations{active: map[string]string{}},
		lifecycle: clustertest.Tolerant(),
	}
	for _, o := range opts {
		o(tc)
	}
	tc.cluster = clustertest.New(t, 0, append([]clustertest.Option{clustertest.WithCore(tc.lifecycle), clustertest.WithLogger(quiet)}, tc.members...)...)
	// After the cluster's own cleanup is registered, so that it runs first: members
	// still running at the end stop as a crash does (stop), not clustertest's Crash.
	t.Cleanup(tc.stopAll)
	for i := 0; i < n; i++ {
		tc.add()
	}
	tc.waitMembers()
	return tc
}

// add starts one more member, joined to the first live one.
func (tc *testCluster) add() *testNode {
	tc.t.Helper()
	m := tc.cluster.Add()
	return tc.run(m, fmt.Sprintf("node-%d", m.Index))
}

// restart starts a new process in place of a stopped member: at its gossip and
// transport addresses, with a new UID, joined to the first live member.
func (tc *testCluster) restart(old *testNode) *testNode {
	tc.t.Helper()
	return tc.run(tc.cluster.Restart(old.member), old.name+"'")
}

// run starts sharding, with its own state store if the cluster gives one, on a member
// in the cluster, and registers their stops with the member (OnStop).
func (tc *testCluster) run(m *clustertest.Member, name string) *testNode {
	t := tc.t
	t.Helper()
	ms, msgr := m.Membership, m.Messenger
	node := &testNode{member: m, name: name, membership: ms, messenger: msgr,
		types: &types{known: map[string]int{"counter": 10, "other": 7}, settings: map[string]TypeSettings{
			"idle":           {Name: "idle", NumberOfShards: 5, PassivateAfter: 300 * time.Millisecond},
			"bounded":        {Name: "bounded", NumberOfShards: 1, MaxActive: 3},
			"bounded-lfu":    {Name: "bounded-lfu", NumberOfShards: 1, MaxActive: 3, PassivationStrategy: PassivationLFU},
			"zipf-lru":       {Name: "zipf-lru", NumberOfShards: 4, MaxActive: 50, PassivationStrategy: PassivationLRU},
			"zipf-lfu":       {Name: "zipf-lfu", NumberOfShards: 4, MaxActive: 50, PassivationStrategy: PassivationLFU},
			"zipf-w-tinylfu": {Name: "zipf-w-tinylfu", NumberOfShards: 4, MaxActive: 50, PassivationStrategy: PassivationWTinyLFU},
			"durable":        {Name: "durable", NumberOfShards: 10, Checkpoint: CheckpointEveryMessage},
			"passive":        {Name: "passive", NumberOfShards: 10, Checkpoint: CheckpointPassivation},
			"remember":       {Name: "remember", NumberOfShards: 10, RememberEntities: true},
			"history":        {Name: "history", NumberOfShards: 10, History: 5},
			"history-all":    {Name: "history-all", NumberOfShards: 10, History: HistoryAll},
			"worker":         {Name: "worker", NumberOfShards: 20, Role: "worker"},
			"sender":         {Name: "sender", NumberOfShards: 10},
			"sender-amo":     {Name: "sender-amo", NumberOfShards: 10, Delivery: DeliveryAtMostOnce},
			"remind":         {Name: "remind", NumberOfShards: abi.DefaultNumberOfShards},
			"ttl":            {Name: "ttl", NumberOfShards: 4, StateTTL: time.Hour},
		}}}
	node.factory = &fakeFactory{node: ms.Self().Address, acts: tc.acts}
	cfg := DefaultConfig()
	cfg.Membership, cfg.Messenger, cfg.Types, cfg.Factory, cfg.Logger = ms, msgr, node.types, node.factory, quiet
	if tc.states != nil {
		cfg.States = tc.states
	}
	if tc.memberStores != nil {
		var closeStore func() error
		cfg.States, closeStore = tc.memberStores(t, ms, msgr, t.TempDir())
		m.OnStop(func() { closeStore() })
	}
	cfg.ReconcileInterval = 50 * time.Millisecond
	// The margin at least the resolver's stable-after, as the defaults pair them: with
	// the slow failure detection of most tests (a 5 s pause tolerated, 10 s stable-after)
	// the default 5 s margin gave a hosting lease of 2.5 s, which a member slowed under
	// the race detector on a loaded machine missed now and then, stopping its entities
	// unsaved (TestEntitiesAcrossThreeMembers lost an increment, no store behind it).
	cfg.DownRemovalMargin = max(cfg.DownRemovalMargin, tc.lifecycle.SBRStableAfter)
	if tc.mutate != nil {
		tc.mutate(&cfg)
	}
	sh, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node.sharding = sh
	node.factory.s = sh
	m.OnStop(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := sh.Stop(ctx); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	tc.nodes = append(tc.nodes, node)
	return node
}

// link cuts (on false) or restores the links between two members, gossip and
// messages both ways.
func (tc *testCluster) link(a, b *testNode, on bool) {
	if on {
		tc.cluster.Reconnect(a.member, b.member)
	} else {
		tc.cluster.Disconnect(a.member, b.member)
	}
}

func (tc *testCluster) live() []*testNode {
	var out []*testNode
	for _, n := range tc.nodes {
		if !n.stopped() {
			out = append(out, n)
		}
	}
	return out
}

// waitMembers waits until every live member sees every live member up, converged.
func (tc *testCluster) waitMembers() {
	tc.t.Helper()
	tc.cluster.WaitUp()
}

// stop stops a member: gracefully (it leaves, its shards handed off first, then drains
// and stops) or as a crash (its membership stops first, then its sharding).
func (tc *testCluster) stop(n *testNode, leave bool) {
	if leave {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.membership.Leave(ctx); err != nil {
			tc.t.Errorf("leaving %s: %v", n.name, err)
		}
		if err := n.sharding.Drain(ctx); err != nil {
			tc.t.Errorf("draining %s: %v", n.name, err)
		}
	} else {
		n.membership.Shutdown()
	}
	n.member.Crash() // sharding's Stop, the store's Close (OnStop), then the member's
}

func (tc *testCluster) stopAll() {
	for _, n := range tc.nodes {
		if !n.stopped() {
			tc.stop(n, false)
		}
	}
}

func ask(t *testing.T, n *testNode, typ, id, msg string) (Reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.sharding.Ask(ctx, typ, id, []byte(msg))
}

func mustAsk(t *testing.T, n *testNode, typ, id, msg string) string {
	t.Helper()
	r, err := ask(t, n, typ, id, msg)
	if err != nil {
		t.Fatalf("ask %s/%s %q via %s: %v", typ, id, msg, n.name, err)
	}
	return string(r.Payload)
}

func abiShard(id string, n int) int { return abi.ShardID(id, n) }
