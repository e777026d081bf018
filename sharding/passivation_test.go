package sharding

import (
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

func mustPolicy(t *testing.T, strategy string, capacity int) policy[string] {
	t.Helper()
	p, err := newPolicy(strategy, capacity, fnv64)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPassivationStrategyByName(t *testing.T) {
	if _, err := newPolicy("mru", 3, fnv64); err == nil {
		t.Fatal("an unknown strategy was accepted")
	}
	ts := TypeSettings{Name: "t", NumberOfShards: 1, MaxActive: 3, PassivationStrategy: "fifo"}
	if err := ts.Validate(); err == nil {
		t.Fatal("Validate accepted passivation strategy fifo")
	}
	ts.PassivationStrategy = ""
	if err := ts.Validate(); err != nil || ts.PassivationStrategy != PassivationLRU {
		t.Fatalf("default strategy %q, %v: want lru", ts.PassivationStrategy, err)
	}
}

func TestLRUPolicyPassivatesTheLeastRecentlyUsed(t *testing.T) {
	p := mustPolicy(t, PassivationLRU, 3)
	for _, k := range []string{"a", "b", "c"} {
		if v := p.access(k); v != nil {
			t.Fatalf("victims %v under the cap", v)
		}
	}
	p.access("a")
	if v := p.access("d"); !slices.Equal(v, []string{"b"}) {
		t.Fatalf("victims %v, want [b]", v)
	}
	p.remove("c")
	if v := p.add("e"); v != nil || p.len() != 3 {
		t.Fatalf("victims %v, len %d after a removal: want none and 3", v, p.len())
	}
}

func TestLFUPolicyPassivatesTheLeastFrequentlyUsed(t *testing.T) {
	p := mustPolicy(t, PassivationLFU, 3)
	for _, k := range []string{"a", "a", "a", "b", "c", "c"} {
		p.access(k)
	}
	// a is the least recently used, b the least frequently.
	if v := p.access("d"); !slices.Equal(v, []string{"b"}) {
		t.Fatalf("victims %v, want [b]", v)
	}
	// d (1 use) and, on a tie, the least recently used go first.
	p.access("e") // evicts d, the only one used once
	if v := p.access("f"); !slices.Equal(v, []string{"e"}) {
		t.Fatalf("victims %v, want [e]", v)
	}
}

// A scan of one-off entities passes through W-TinyLFU's window without pushing out the
// frequently used ones; an LRU loses them all.
func TestWTinyLFUPolicyResistsAScan(t *testing.T) {
	const capacity = 100
	hot := make([]string, 50)
	for i := range hot {
		hot[i] = "hot" + strconv.Itoa(i)
	}
	for name, want := range map[string]int{PassivationWTinyLFU: len(hot), PassivationLRU: 0} {
		p := mustPolicy(t, name, capacity)
		for range 5 {
			for _, k := range hot {
				p.access(k)
			}
		}
		gone := map[string]bool{}
		for i := range 1000 {
			for _, v := range p.access("scan" + strconv.Itoa(i)) {
				gone[v] = true
			}
		}
		kept := 0
		for _, k := range hot {
			if !gone[k] {
				kept++
			}
		}
		if kept != want {
			t.Errorf("%s kept %d of %d hot entities through a scan, want %d", name, kept, len(hot), want)
		}
	}
}

// Every strategy keeps within its capacity, never passivates the entity it admits, and
// names only entities it tracked.
func TestPoliciesKeepTheirCapacity(t *testing.T) {
	for _, name := range []string{PassivationLRU, PassivationLFU, PassivationWTinyLFU} {
		for _, capacity := range []int{1, 2, 7, 150} {
			p := mustPolicy(t, name, capacity)
			tracked := map[string]bool{}
			rng := rand.New(rand.NewSource(1))
			for i := range 20_000 {
				k := strconv.Itoa(rng.Intn(capacity * 4))
				var victims []string
				switch op := rng.Intn(10); {
				case op == 0:
					p.remove(k)
					delete(tracked, k)
					continue
				case op == 1:
					victims = p.add(k)
				default:
					victims = p.access(k)
				}
				for _, v := range victims {
					if v == k || !tracked[v] {
						t.Fatalf("%s cap %d step %d: victim %q (admitting %q, tracked %v)", name, capacity, i, v, k, tracked[v])
					}
					delete(tracked, v)
				}
				tracked[k] = true
				if p.len() != len(tracked) || p.len() > capacity {
					t.Fatalf("%s cap %d step %d: len %d, tracked %d", name, capacity, i, p.len(), len(tracked))
				}
			}
		}
	}
}

// In a region, a type with the lfu strategy passivates its least frequently used
// entity where lru would take the least recently used.
func TestMaxActivePassivatesByTheTypesStrategy(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	for _, id := range []string{"a", "a", "a", "b", "c", "c"} {
		mustAsk(t, n, "bounded-lfu", id, "inc")
	}
	mustAsk(t, n, "bounded-lfu", "d", "inc")
	testutil.Eventually(t, 5*time.Second, "b passivated", func() bool { return !activeOn(tc, "bounded-lfu/b") })
	for _, id := range []string{"a", "c", "d"} {
		if !activeOn(tc, "bounded-lfu/"+id) {
			t.Fatalf("%s passivated instead of b", id)
		}
	}
	if got := mustAsk(t, n, "bounded-lfu", "a", "get"); got != "3" {
		t.Fatalf("a lost its state: %s", got)
	}
}

// Past the member's MemoryLimit, the least recently used entities are passivated until
// the rest fit.
func TestMemoryLimitPassivatesTheLeastRecentlyUsed(t *testing.T) {
	const mib = 1 << 20
	tc := newTestCluster(t, 1, withSharedStateStore(), withConfig(func(c *Config) {
		c.MemoryLimit = 3 * mib
		c.ReconcileInterval = 50 * time.Millisecond
	}))
	n := tc.nodes[0]
	n.factory.memoryBytes = mib
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		mustAsk(t, n, "counter", id, "inc")
	}
	testutil.Eventually(t, 10*time.Second, "a and b passivated", func() bool {
		return !activeOn(tc, "counter/a") && !activeOn(tc, "counter/b")
	})
	for _, id := range []string{"c", "d", "e"} {
		if !activeOn(tc, "counter/"+id) {
			t.Fatalf("%s passivated: only a and b had to go", id)
		}
	}
	if got := mustAsk(t, n, "counter", "a", "get"); got != "1" {
		t.Fatalf("a lost its state: %s", got)
	}
}

// A redeploy that lowers the cap (and changes the strategy) passivates the entities
// past it, and the new strategy keeps the cap after.
func TestRedeployLoweringMaxActivePassivates(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	for _, id := range []string{"a", "b", "c"} {
		mustAsk(t, n, "bounded", id, "inc")
	}
	if err := n.sharding.StartType(TypeSettings{Name: "bounded", NumberOfShards: 1, MaxActive: 2, PassivationStrategy: PassivationLFU}); err != nil {
		t.Fatal(err)
	}
	activeCount := func() int {
		k := 0
		for _, id := range []string{"a", "b", "c", "d"} {
			if activeOn(tc, "bounded/"+id) {
				k++
			}
		}
		return k
	}
	testutil.Eventually(t, 5*time.Second, "one of three passivated", func() bool { return activeCount() == 2 })
	if got := n.sharding.region("bounded").Settings().PassivationStrategy; got != PassivationLFU {
		t.Fatalf("strategy %q after the redeploy", got)
	}
	mustAsk(t, n, "bounded", "d", "inc")
	testutil.Eventually(t, 5*time.Second, "two active with d", func() bool { return activeCount() == 2 && activeOn(tc, "bounded/d") })
}
