package cluster_test

import (
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// TestCoreIsDrivableFromOutsideThePackage runs three Cores with nothing but the
// exported API, as an embedder with its own transport would: Tick and Step on a
// simulated clock, every message through EncodeMessage and DecodeMessage. They form
// one cluster of three up members, converged, with one leader.
func TestCoreIsDrivableFromOutsideThePackage(t *testing.T) {
	addrs := []string{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.3:7946"}
	cores := map[string]*cluster.Core{}
	for i, a := range addrs {
		cfg := cluster.DefaultCoreConfig()
		cfg.Self = cluster.UniqueAddress{Address: a, UID: cluster.UID(i + 1)}
		cfg.TransportAddr = a
		cfg.RandomSeed = int64(i + 1)
		if i > 0 {
			cfg.Seeds = addrs[:1]
		}
		c, err := cluster.NewCore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cores[a] = c
	}
	now := time.Unix(1_800_000_000, 0)
	var inflight []cluster.Outbound
	deliver := func(outs []cluster.Outbound) {
		for _, o := range outs {
			b, err := cluster.EncodeMessage(o.Msg)
			if err != nil {
				t.Fatal(err)
			}
			m, err := cluster.DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			inflight = append(inflight, cluster.Outbound{To: o.To, Msg: m, Reliable: o.Reliable})
		}
	}
	converged := func() bool {
		leaders := map[cluster.UniqueAddress]bool{}
		for _, c := range cores {
			v := c.View()
			if !v.Converged || len(v.Members) != 3 {
				return false
			}
			for _, m := range v.Members {
				if m.Status != cluster.StatusUp {
					return false
				}
			}
			leaders[v.Leader] = true
		}
		return len(leaders) == 1
	}
	for step := 0; step < 600 && !converged(); step++ {
		now = now.Add(100 * time.Millisecond)
		for _, a := range addrs {
			deliver(cores[a].Tick(now))
		}
		for len(inflight) > 0 {
			batch := inflight
			inflight = nil
			for _, o := range batch {
				if c, ok := cores[o.To.Address]; ok {
					deliver(c.Step(now, o.Msg))
				}
			}
		}
	}
	if !converged() {
		for a, c := range cores {
			t.Logf("%s: %+v", a, c.View())
		}
		t.Fatal("the three cores did not form a converged cluster of up members")
	}
	if _, err := cluster.DecodeMessage([]byte{0xff, 0x00}); err == nil {
		t.Fatal("DecodeMessage accepted garbage")
	}
}
