package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestSeedNodesStartedTogetherFormOneCluster: three processes started at once with the
// same --join list (each member's address in it) form one cluster, by the seed-node
// rule: the first seed, finding no other, forms it and the others join. The first seed
// stopped and started again with the same command joins the cluster the others kept
// instead of forming a second one.
func TestSeedNodesStartedTogetherFormOneCluster(t *testing.T) {
	ports := freePorts(t, 3)
	binds := make([]string, 3)
	for i, p := range ports {
		binds[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	seeds := strings.Join(binds, ",")
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	hosts := make([]*host, 3)
	for i := range hosts {
		hosts[i] = launchHostWith(t, dirs[i], binds[i], seeds)
	}
	uids := map[string]string{}
	for _, h := range hosts {
		waitView(t, h, 90*time.Second, "the three members up", func(ms []memberJSON) bool {
			for _, m := range ms {
				uids[m.Address] = m.UID
			}
			return allUpView(3)(ms)
		})
	}
	if !strings.Contains(hosts[0].log.String(), "forms a new cluster") {
		t.Errorf("the first seed did not say it formed the cluster:\n%s", hosts[0].log)
	}
	for _, h := range hosts[1:] {
		if strings.Contains(h.log.String(), "forms a new cluster") {
			t.Errorf("%s, not the first seed, formed a cluster:\n%s", h.bind, h.log)
		}
	}

	// The cluster serves state (e2e TestComposeFile on a loaded machine: the first seed,
	// forming the cluster with a second store on the state directory its failed join
	// had made, took the directory for one that had been in a cluster and waited for
	// members that never were, and every shard it held a replica of was refused).
	out, errText, ok := cli(t, hosts[1], nil, "deploy", "--type", "counter", testwasm.Path(t, "counter"))
	if !ok {
		t.Fatalf("deploy: %s%s", out, errText)
	}
	const counters = 24
	for i := range counters {
		incTo(t, hosts[i%3], fmt.Sprintf("seed-%d", i), 1)
	}

	hosts[0].stop(t)
	waitView(t, hosts[1], 60*time.Second, "two members after the first seed left", func(ms []memberJSON) bool { return allUpView(2)(ms) })
	again := restartHostAt(t, dirs[0], binds[0], seeds)
	for _, h := range []*host{again, hosts[1], hosts[2]} {
		waitView(t, h, 90*time.Second, "the restarted first seed in the kept cluster", func(ms []memberJSON) bool {
			for _, m := range ms {
				if m.Address != binds[0] && m.UID != uids[m.Address] {
					return false // a member of another cluster
				}
			}
			return allUpView(3)(ms)
		})
	}
	if strings.Contains(again.log.String(), "forms a new cluster") {
		t.Fatalf("the restarted first seed formed a cluster of its own:\n%s", again.log)
	}
	for i := range counters {
		incTo(t, again, fmt.Sprintf("seed-%d", i), 2)
	}
}

// incTo brings counter id from want-1 to want through h, asking "get" first so that an
// inc whose outcome was lost (a timeout) is not sent twice; it fails the test on any
// other count (one lost, or one applied twice) and retries refusals for up to 90 s.
func incTo(t *testing.T, h *host, id string, want int) {
	t.Helper()
	testutil.EventuallyNil(t, 90*time.Second, fmt.Sprintf("counter %s at %d", id, want), func() error {
		status, body, _, err := api(h, "ask", "counter", id, "get")
		if err != nil || status != 200 {
			return fmt.Errorf("get %s: %d %s %v", id, status, body, err)
		}
		switch body {
		case fmt.Sprint(want):
			return nil
		case fmt.Sprint(want - 1):
			status, body, _, err = api(h, "ask", "counter", id, "inc")
			return fmt.Errorf("inc %s sent: %d %s %v", id, status, body, err) // read back next time
		}
		t.Fatalf("counter %s through %s is %q, want %d or %d (a count lost or doubled)", id, h.bind, body, want-1, want)
		return nil
	})
}
