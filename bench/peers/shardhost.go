package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

// The counter module is deployed twice: as counterType, with the run's checkpoint
// policy (the journal by default: each message's record durable before its reply or
// effects leave), and, for the rows that compare like with like with Proto.Actor's
// counters, which live in memory only, as memCounterType, whose state is saved only
// at passivation (nothing written per message).
const (
	counterType    = "counter"
	memCounterType = "counter-mem"
)

// shardCounters asks and tells one counter type through one member's sharding: the
// entity may live on that member or on another.
type shardCounters struct {
	s   *sharding.Sharding
	typ string
}

var _ counters = shardCounters{}

func (c shardCounters) Ask(ctx context.Context, id string, msg []byte) ([]byte, error) {
	r, err := c.s.Ask(ctx, c.typ, id, msg)
	return r.Payload, err
}

func (c shardCounters) Tell(id string, msg []byte) error {
	return c.s.Tell(context.Background(), c.typ, id, msg)
}

// Busy: a full buffer or mailbox refuses a tell synchronously; the sender retries.
func (c shardCounters) Busy(err error) bool {
	return errors.Is(err, sharding.ErrBufferFull) || errors.Is(err, sharding.ErrMailboxFull)
}

// shardCluster is count members in this process on loopback (gossip and the
// node-to-node transport over real TCP), with the counter module deployed.
type shardCluster struct {
	nodes []*host.Node
	dir   string
}

// startShardCluster starts count members with the host's defaults except for fast
// local gossip, no API, quiet logs, a compilation cache shared by the run (cacheDir) and
// in-memory recovery as the run asks (on by default, as in host.DefaultConfig). The
// counter type is deployed with checkpoint as its policy (empty: the default, the
// journal) and, with mem, memCounterType with checkpoints at passivation.
func startShardCluster(ctx context.Context, count int, wasm []byte, cacheDir string, recovery bool, checkpoint string, mem bool) (*shardCluster, error) {
	dir, err := os.MkdirTemp("", "peers-shardhost-")
	if err != nil {
		return nil, err
	}
	c := &shardCluster{dir: dir}
	for i := 0; i < count; i++ {
		cfg := host.DefaultConfig()
		cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0", ""
		cfg.DataDir = fmt.Sprintf("%s/m%d", dir, i)
		cfg.GossipProfile = "local"
		lc := cluster.DefaultLocalCoreConfig()
		lc.FailureDetector.AcceptableHeartbeatPause = 5 * time.Second // a loaded 2-core machine
		lc.SBRStableAfter = 10 * time.Second
		cfg.Lifecycle = lc
		cfg.Runtime.CacheDir = cacheDir
		cfg.Recovery = recovery
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if i > 0 {
			cfg.Join = []string{c.nodes[0].Self().Address}
		}
		n, err := host.Start(ctx, cfg)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.Membership().WaitUp(ctx); err != nil {
			c.stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for len(n.Members()) != count || !n.Membership().View().Converged {
			if time.Now().After(deadline) {
				c.stop()
				return nil, fmt.Errorf("shardhost: %d members did not converge", count)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := c.nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: counterType, Checkpoint: checkpoint}); err != nil {
		c.stop()
		return nil, err
	}
	if mem {
		if _, err := c.nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: memCounterType, Checkpoint: "passivation"}); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *shardCluster) stop() {
	for _, n := range c.nodes {
		n.Kill()
	}
	os.RemoveAll(c.dir)
}

// homeAllShards activates one entity in each of the type's shards, so that later
// first messages find their shard's home known and measure an activation alone.
func homeAllShards(ctx context.Context, c counters) error {
	seen := make(map[int]bool, abi.DefaultNumberOfShards)
	for i := 0; len(seen) < abi.DefaultNumberOfShards; i++ {
		id := "home-" + strconv.Itoa(i)
		s := abi.ShardID(id, abi.DefaultNumberOfShards)
		if seen[s] {
			continue
		}
		seen[s] = true
		if _, err := c.Ask(ctx, id, msgGet); err != nil {
			return err
		}
	}
	return nil
}

// remoteIDs returns n entity IDs of type typ whose shards are hosted by member 1 of c,
// after every shard of the type has a home.
func (c *shardCluster) remoteIDs(ctx context.Context, typ, prefix string, n int) ([]string, error) {
	if err := homeAllShards(ctx, shardCounters{c.nodes[0].Sharding(), typ}); err != nil {
		return nil, err
	}
	st, err := c.nodes[0].Sharding().ClusterShardingState(ctx)
	if err != nil {
		return nil, err
	}
	there := map[int]bool{}
	for _, r := range st {
		if r.Node != c.nodes[1].Self().Address {
			continue
		}
		for _, s := range r.Shards {
			if s.Type == typ {
				there[s.ID] = true
			}
		}
	}
	if len(there) == 0 {
		return nil, errors.New("shardhost: member 1 hosts no shard")
	}
	ids := make([]string, 0, n)
	for i := 0; len(ids) < n; i++ {
		id := prefix + strconv.Itoa(i)
		if there[abi.ShardID(id, abi.DefaultNumberOfShards)] {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
