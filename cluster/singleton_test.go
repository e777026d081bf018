package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
)

// tracker records where a singleton runs, and fails on two at once.
type tracker struct {
	mu      sync.Mutex
	running map[string]bool
	double  bool
	starts  []string
}

type trackedService struct {
	tr   *tracker
	name string
}

func (s trackedService) Start() {
	s.tr.mu.Lock()
	defer s.tr.mu.Unlock()
	if len(s.tr.running) > 0 {
		s.tr.double = true
	}
	s.tr.running[s.name] = true
	s.tr.starts = append(s.tr.starts, s.name)
}

func (s trackedService) Stop() {
	s.tr.mu.Lock()
	defer s.tr.mu.Unlock()
	delete(s.tr.running, s.name)
}

func (tr *tracker) where() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for n := range tr.running {
		out = append(out, n)
	}
	return out
}

func TestSingletonRunsOnceAndMovesOnLeaveAndCrash(t *testing.T) {
	c := newCluster(t, 4)
	ms := c.Members()
	tr := &tracker{running: map[string]bool{}}
	var singletons []*cluster.Singleton
	for _, m := range ms {
		s := cluster.NewSingleton(m.Membership, "", trackedService{tr, m.Addr.Gossip}, quiet)
		singletons = append(singletons, s)
		defer s.Close()
	}
	oldest, _ := cluster.Oldest(ms[0].Membership.Members())
	testutil.Eventually(t, 5*time.Second, "the singleton on the oldest", func() bool {
		w := tr.where()
		return len(w) == 1 && w[0] == oldest.Address
	})
	// The oldest leaves: the singleton moves, never running twice.
	leaver := memberOf(t, ms, oldest.Node())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := leaver.Membership.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	var rest []*clustertest.Member
	for _, m := range ms {
		if m != leaver {
			rest = append(rest, m)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the leaver removed", func() bool { return allUp(rest) })
	next, _ := cluster.Oldest(rest[0].Membership.Members())
	testutil.Eventually(t, 10*time.Second, "the singleton on the next oldest", func() bool {
		w := tr.where()
		return len(w) == 1 && w[0] == next.Address && next.Address != oldest.Address
	})
	// The new host crashes: the next starts it only once the crashed one is downed.
	crashed := memberOf(t, rest, next.Node())
	crashedAt := time.Now()
	singletons[crashed.Index].Close() // its process is gone
	tr.Stop(next.Address)
	crashed.Membership.Shutdown()
	testutil.Eventually(t, 15*time.Second, "the singleton after the crash", func() bool {
		w := tr.where()
		return len(w) == 1 && w[0] != next.Address && w[0] != oldest.Address
	})
	t.Logf("singleton back %v after the crash (local profile)", time.Since(crashedAt).Round(10*time.Millisecond))
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.double {
		t.Fatalf("the singleton ran twice at once; starts: %v", tr.starts)
	}
}

// Stop marks a crashed member's instance as gone (its process died with it).
func (tr *tracker) Stop(name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.running, name)
}
