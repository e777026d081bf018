package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/netaddr"
	"github.com/shardhost/shardhost/internal/telemetry"
)

// nodeFlags are the settings of a host that start and dev share.
type nodeFlags struct {
	gossipProfile   string
	memoryLimitMiB  int
	memberMemoryMiB int
	poolBytes       int64
	entityLogRate   float64
	messageDeadline time.Duration
	maxMessageSize  int
	maxModuleSize   int
	askTimeout      time.Duration
	recovery        bool
	// membership lifecycle
	roles             []string
	minMembers        int
	minMembersOfRole  map[string]int
	heartbeatInterval time.Duration
	phiThreshold      float64
	acceptablePause   time.Duration
	sbrStrategy       string
	sbrQuorumSize     int
	sbrStableAfter    time.Duration
	gossipKey         string
	gossipKeyFile     string
	// distributed data
	durableKeys []string
	writeBehind time.Duration
	// entity state
	stateStore string
}

// add defines the flags, their timing defaults those of profile (profile.go).
func (f *nodeFlags) add(cmd *cobra.Command, profile string) {
	d := host.DefaultConfig()
	lc, _, err := lifecycleProfile(profile)
	if err != nil {
		panic(err) // a command names a profile that does not exist
	}
	cmd.Flags().StringSliceVar(&f.roles, "roles", nil, "roles of this member, ROLE,...")
	cmd.Flags().IntVar(&f.minMembers, "min-members", 1, "members that must have joined before the leader moves any to up")
	cmd.Flags().StringToIntVar(&f.minMembersOfRole, "min-members-of-role", nil, "the same per role, ROLE=N,...")
	cmd.Flags().DurationVar(&f.heartbeatInterval, "heartbeat-interval", lc.HeartbeatInterval, "how often a member heartbeats the (up to 5) members it monitors")
	cmd.Flags().Float64Var(&f.phiThreshold, "phi-threshold", lc.FailureDetector.Threshold, "phi accrual failure detector threshold: a member above it is unreachable")
	cmd.Flags().DurationVar(&f.acceptablePause, "acceptable-heartbeat-pause", lc.FailureDetector.AcceptableHeartbeatPause, "heartbeat pause the failure detector tolerates (GC, hiccups)")
	cmd.Flags().StringVar(&f.sbrStrategy, "sbr-strategy", string(lc.SBRStrategy), "split brain resolver: keep-majority, static-quorum, keep-oldest or down-all")
	cmd.Flags().IntVar(&f.sbrQuorumSize, "sbr-quorum-size", 0, "quorum of the static-quorum strategy")
	cmd.Flags().DurationVar(&f.sbrStableAfter, "sbr-stable-after", lc.SBRStableAfter, "how long the set of unreachable members must be stable before the resolver downs any")
	cmd.Flags().StringSliceVar(&f.durableKeys, "durable-keys", nil, "distributed data keys kept on disk, KEY or PREFIX*,... (loaded at start)")
	cmd.Flags().DurationVar(&f.writeBehind, "ddata-write-behind", 0, "write durable keys every interval instead of before each update returns (0)")
	cmd.Flags().StringVar(&f.stateStore, "state-store", "", "entity state store: builtin (replicated on the members' disks), or a PostgreSQL URL postgres://USER[:PASSWORD]@HOST:PORT/DB?sslmode=verify-full, PG* environment variables filling in what it leaves out (default $SHARDHOST_STATE_STORE, else builtin)")
	cmd.Flags().StringVar(&f.gossipKeyFile, "gossip-key-file", "", "file holding the base64 16-, 24- or 32-byte key that encrypts gossip (or the key in SHARDHOST_GOSSIP_KEY); members with another key cannot join")
	cmd.Flags().StringVar(&f.gossipKey, "gossip-key", "", "the gossip key itself: deprecated, as ps shows it to every user of the machine (use --gossip-key-file)")
	cmd.Flags().StringVar(&f.gossipProfile, "gossip-profile", profile, "timing profile: lan (members on a network), local (one idle machine: fast failure detection, for tests) or dev (one machine that may be busy: pauses of seconds pass); --heartbeat-interval, --acceptable-heartbeat-pause and --sbr-stable-after, whose defaults are this command's profile's, override it")
	cmd.Flags().IntVar(&f.memoryLimitMiB, "memory-limit", int(d.Runtime.MemoryLimit>>20), "linear memory cap of each entity instance, in MiB")
	cmd.Flags().IntVar(&f.memberMemoryMiB, "member-memory-limit", 0, "linear memory of all the member's active entities together, in MiB: past it, the least recently used idle ones are passivated until the rest fit (0: no cap)")
	cmd.Flags().Int64Var(&f.poolBytes, "instance-pool-bytes", host.DefaultInstancePoolBytes(), "memory that closed entity instances keep, re-imaged, so that the next activations of their module take no page fault, in bytes of all together (default: 1/16 of physical memory); idle ones are given back within 20 s (0: none kept)")
	cmd.Flags().Float64Var(&f.entityLogRate, "entity-log-rate", host.DefaultEntityLogRate, "log lines per second each entity may write on average (twice that in a burst); the lines beyond are dropped and counted in shardhost.entity.log.dropped; negative: no limit")
	cmd.Flags().DurationVar(&f.messageDeadline, "message-deadline", d.Runtime.MessageDeadline, "how long one message may run inside an entity")
	cmd.Flags().IntVar(&f.maxMessageSize, "max-message-size", d.Runtime.MaxMessageSize, "cap of a message and of a reply, in bytes")
	cmd.Flags().IntVar(&f.maxModuleSize, "max-module-size", d.MaxModuleSize, "cap of a deployed module, in bytes")
	cmd.Flags().DurationVar(&f.askTimeout, "ask-timeout", d.Sharding.AskTimeout, "default time an ask waits for its reply")
	cmd.Flags().BoolVar(&f.recovery, "recovery", d.Recovery, "after a trap, a deadline or the host call budget, restart the entity in memory from its state after its last successful message (false: from its last saved state, which --checkpoint governs)")
}

func (f *nodeFlags) config(log *slog.Logger) (host.Config, error) {
	cfg := host.DefaultConfig()
	lc, gossip, err := lifecycleProfile(f.gossipProfile)
	if err != nil {
		return cfg, err
	}
	cfg.GossipProfile = gossip
	lc.MinMembers = f.minMembers
	lc.MinMembersOfRole = f.minMembersOfRole
	lc.HeartbeatInterval = f.heartbeatInterval
	lc.FailureDetector.Threshold = f.phiThreshold
	lc.FailureDetector.AcceptableHeartbeatPause = f.acceptablePause
	strategy, err := cluster.ParseSBRStrategy(f.sbrStrategy)
	if err != nil {
		return cfg, err
	}
	lc.SBRStrategy, lc.SBRQuorumSize, lc.SBRStableAfter = strategy, f.sbrQuorumSize, f.sbrStableAfter
	if err := (func() error { c := lc; c.Self = cluster.UniqueAddress{Address: "x:1", UID: 1}; return c.Validate() })(); err != nil {
		return cfg, err
	}
	cfg.Lifecycle = lc
	cfg.Roles = f.roles
	cfg.DurableKeys = f.durableKeys
	cfg.DData.WriteBehindInterval = f.writeBehind
	cfg.StateStore = stateStoreOr(f.stateStore)
	if _, err := host.ParseStateStore(cfg.StateStore); err != nil {
		return cfg, err
	}
	key, err := f.readGossipKey(log)
	if err != nil {
		return cfg, err
	}
	cfg.GossipKey = key
	cfg.Runtime.MemoryLimit = uint64(f.memoryLimitMiB) << 20
	if f.memberMemoryMiB < 0 {
		return cfg, fmt.Errorf("--member-memory-limit %d: want MiB, 0 for no cap", f.memberMemoryMiB)
	}
	cfg.Sharding.MemoryLimit = int64(f.memberMemoryMiB) << 20
	switch {
	case f.poolBytes < 0:
		return cfg, fmt.Errorf("--instance-pool-bytes %d: want bytes, 0 for no pool", f.poolBytes)
	case f.poolBytes == 0:
		cfg.Runtime.InstancePoolBytes = -1
	default:
		cfg.Runtime.InstancePoolBytes = f.poolBytes
	}
	if f.entityLogRate == 0 {
		return cfg, fmt.Errorf("--entity-log-rate 0 would drop every line: give a positive rate, or a negative one for no limit")
	}
	cfg.Runtime.EntityLogRate = f.entityLogRate
	cfg.Runtime.MessageDeadline = f.messageDeadline
	cfg.Runtime.MaxMessageSize = f.maxMessageSize
	cfg.MaxModuleSize = f.maxModuleSize
	cfg.Sharding.AskTimeout = f.askTimeout
	cfg.Recovery = f.recovery
	return cfg, nil
}

// readGossipKey returns the gossip key from --gossip-key-file, SHARDHOST_GOSSIP_KEY or
// (with a warning) --gossip-key, or nil for none.
func (f *nodeFlags) readGossipKey(log *slog.Logger) ([]byte, error) {
	text, from := "", ""
	switch {
	case f.gossipKeyFile != "" && f.gossipKey != "":
		return nil, fmt.Errorf("--gossip-key-file and --gossip-key: give one")
	case f.gossipKeyFile != "":
		b, err := os.ReadFile(f.gossipKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %v", err)
		}
		text, from = string(b), "--gossip-key-file "+f.gossipKeyFile
	case f.gossipKey != "":
		log.Warn("--gossip-key shows the gossip key to every user of this machine (ps, /proc): use --gossip-key-file or SHARDHOST_GOSSIP_KEY")
		text, from = f.gossipKey, "--gossip-key"
	case os.Getenv("SHARDHOST_GOSSIP_KEY") != "":
		text, from = os.Getenv("SHARDHOST_GOSSIP_KEY"), "SHARDHOST_GOSSIP_KEY"
	default:
		return nil, nil
	}
	return parseGossipKey(text, from)
}

// parseGossipKey decodes a base64 gossip key of 16, 24 or 32 bytes; from names where it
// came from, for the error.
func parseGossipKey(text, from string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("%s: the gossip key is not base64: %v", from, err)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("%s: the gossip key must decode to 16, 24 or 32 bytes, not %d (make one with shardhost keys generate)", from, n)
	}
	return key, nil
}

// observe gives a node's configuration its telemetry from the OTEL_* environment: the
// tracer provider, the propagators, the meter provider and the Prometheus handler served
// at /metrics, and the logger provider of the entities' logs (OTEL_LOGS_EXPORTER). The returned function flushes and stops them.
func observe(ctx context.Context, cfg *host.Config, node string) (func(), error) {
	prop, err := telemetry.Propagator()
	if err != nil {
		return nil, err
	}
	tp, shutdownTracing, err := telemetry.TracerProvider(ctx, node)
	if err != nil {
		return nil, err
	}
	metrics, err := telemetry.NewMetrics(ctx, node)
	if err != nil {
		shutdownTracing(context.Background())
		return nil, err
	}
	lp, shutdownLogs, err := telemetry.LoggerProvider(ctx, node)
	if err != nil {
		shutdownTracing(context.Background())
		metrics.Shutdown(context.Background())
		return nil, err
	}
	cfg.TracerProvider, cfg.Propagator = tp, prop
	cfg.MeterProvider, cfg.MetricsHandler = metrics.Provider, metrics.Handler
	cfg.Runtime.LoggerProvider = lp
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shutdownTracing(ctx)
		metrics.Shutdown(ctx)
		shutdownLogs(ctx)
	}, nil
}

func newStartCommand(g *globals) *cobra.Command {
	var bind, api, transport, dataDir, memberName string
	var seedTimeout, shutdownTimeout time.Duration
	var configPath string
	var printCfg bool
	var discovery, discoveryServer string
	var discoveryPortFlag, requiredContactPoints int
	var contactPointsStable time.Duration
	var join []string
	var rejoin bool
	var joinTimeout time.Duration
	var nf nodeFlags
	var sf secureFlags
	cmd := &cobra.Command{
		Use:   "start --bind HOST:PORT --api HOST:PORT [--transport HOST:PORT] [--join HOST:PORT,...] [--data-dir DIR]",
		Short: "Run a host: join the cluster and serve entities until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			source, err := applyConfig(cmd, configPath)
			if err != nil {
				return err
			}
			if printCfg {
				printConfig(cmd.OutOrStdout(), cmd, source)
				return nil
			}
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := nf.config(log)
			if err != nil {
				return err
			}
			if bind, err = resolveHostPort("--bind", bind, log); err != nil {
				return err
			}
			if transport, err = resolveHostPort("--transport", transport, log); err != nil {
				return err
			}
			if discovery != "" {
				if len(join) > 0 {
					return fmt.Errorf("--discovery and --join both name the seeds: give one")
				}
				port, err := discoveryPort(discoveryPortFlag, bind)
				if err != nil {
					return fmt.Errorf("--bind %q: %v", bind, err)
				}
				d, err := newDNSDiscovery(discovery, port, discoveryServer)
				if err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				join, err = bootstrap(ctx, d, requiredContactPoints, contactPointsStable, 500*time.Millisecond, log)
				stop()
				if err != nil {
					return err
				}
				log.Info("discovery: joining through the contact points, the lowest first", "points", join)
			}
			cfg.BindAddr, cfg.APIAddr, cfg.TransportAddr, cfg.Join = bind, api, transport, join
			cfg.MemberName = memberName
			selfSeed := len(join) > 0 && isSelf(join[0], bind)
			if selfSeed {
				cfg.Join = join[1:]
			}
			cfg.JoinTimeout = joinTimeout
			if shutdownTimeout > 0 {
				cfg.ShutdownTimeout = shutdownTimeout
			}
			cfg.DataDir = dataDir
			if cfg.DataDir == "" {
				cfg.DataDir = filepath.Join(".shardhost", "node-"+strings.NewReplacer(":", "-", "[", "", "]", "").Replace(bind))
			}
			cfg.Logger = log
			if err := sf.apply(&cfg, log); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			shutdownTelemetry, err := observe(ctx, &cfg, bind)
			if err != nil {
				return err
			}
			defer shutdownTelemetry()
			for {
				n, err := startMember(ctx, cfg, selfSeed, seedTimeout, log)
				if err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					log.Info("leaving the cluster")
					if err := n.Close(); err != nil {
						return fmt.Errorf("stopping: %v", err)
					}
					log.Info("stopped")
					return nil
				case <-n.Exited():
				}
				reason := n.ExitReason()
				n.Kill()
				if reason == cluster.ReasonLeft {
					log.Info("left the cluster; stopped")
					return nil
				}
				if !rejoin {
					return fmt.Errorf("this member is out of the cluster (%s); it stopped hosting. Start it again (or use --rejoin) to join as a new member", reason)
				}
				log.Warn("this member is out of the cluster; rejoining as a new member", "reason", reason)
				if len(cfg.Join) == 0 {
					return fmt.Errorf("this member is out of the cluster (%s) and has no --join seeds to rejoin through", reason)
				}
			}
		},
	}
	cmd.Flags().StringVar(&bind, "bind", "127.0.0.1:7946", "gossip address, HOST:PORT: the member's address (a host name is resolved once, at start, to its first IPv4 address)")
	cmd.Flags().StringVar(&memberName, "member-name", "", "the member's stable name, kept across restarts at other addresses (a StatefulSet pod's DNS name): the built-in state store ranks replicas by it, so a member back at a new --bind with its --data-dir holds the replicas it held, and a member joining with it downs its old incarnation; letters, digits, '.', '-', '_' (default: none, replicas ranked by --bind)")
	cmd.Flags().StringVar(&api, "api", "127.0.0.1:8080", "management API listen address, HOST:PORT")
	cmd.Flags().StringVar(&transport, "transport", "", "node-to-node address, HOST:PORT (default: the bind port + 1)")
	cmd.Flags().StringSliceVar(&join, "join", nil, "gossip addresses of members to join, HOST:PORT,... (none: start a new cluster)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "directory for modules and the compilation cache (default .shardhost/node-HOST-PORT)")
	cmd.Flags().DurationVar(&joinTimeout, "join-timeout", host.DefaultConfig().JoinTimeout, "how long to try the --join seeds before giving up")
	cmd.Flags().DurationVar(&shutdownTimeout, "shutdown-timeout", host.DefaultConfig().ShutdownTimeout, "how long a graceful stop (SIGTERM, leave) may take: handing every shard off with its state, then leaving; past it the member exits with an error")
	cmd.Flags().DurationVar(&seedTimeout, "seed-node-timeout", 5*time.Second, "when this member is the first of --join, how long it tries the other seeds before it forms a new cluster")
	cmd.Flags().BoolVar(&rejoin, "rejoin", false, "when downed or removed, rejoin through --join as a new member instead of exiting")
	nf.add(cmd, profileLAN)
	sf.add(cmd)
	cmd.Flags().StringVar(&discovery, "discovery", "", "find the seeds through DNS instead of --join: dns:NAME (A/AAAA records, a headless Service's, with --discovery-port) or dns:_SERVICE._PROTO.NAME (SRV records)")
	cmd.Flags().IntVar(&discoveryPortFlag, "discovery-port", 0, "gossip port of the members --discovery finds by A/AAAA records (default: the port of --bind)")
	cmd.Flags().IntVar(&requiredContactPoints, "required-contact-points", 2, "with --discovery, how many members DNS must name before a new cluster may form (the lowest address forms it)")
	cmd.Flags().DurationVar(&contactPointsStable, "contact-points-stable", 3*time.Second, "with --discovery, how long DNS must answer the same members before they are used")
	cmd.Flags().StringVar(&discoveryServer, "discovery-dns-server", "", "with --discovery, the DNS server to ask, HOST:PORT (default: the system's resolver)")
	configFlags(cmd, &configPath, &printCfg)
	return cmd
}

// stateStoreOr returns a --state-store value, or when it is empty
// $SHARDHOST_STATE_STORE, or builtin. The environment keeps a URL's password out of
// the process's arguments.
func stateStoreOr(flag string) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv("SHARDHOST_STATE_STORE"); v != "" {
		return v
	}
	return "builtin"
}

// resolveHostPort returns addr (HOST:PORT) with a host name replaced by its first IPv4
// address (else its first address), looked up once: a member's address is an IP, which
// other members dial and rank replicas by. An empty addr or an IP is returned as is. In
// a container, --bind $(hostname):7946 then names the container's address.
func resolveHostPort(flag, addr string, log *slog.Logger) (string, error) {
	if addr == "" {
		return addr, nil
	}
	resolved, err := netaddr.Resolve(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: %v (want HOST:PORT, the host an IP or a name that resolves)", flag, addr, err)
	}
	if resolved != addr {
		log.Info("resolved the member's address", "flag", flag, "name", addr, "address", resolved)
	}
	return resolved, nil
}

// isSelf reports whether the seed address names this member's address bind (an IP:PORT
// after resolveHostPort): the seed's host name resolves to the same address.
func isSelf(seed, bind string) bool {
	if seed == bind {
		return true
	}
	resolved, err := resolveHostPort("--join", seed, slog.New(slog.DiscardHandler))
	return err == nil && resolved == bind
}

// startMember starts the member, by Akka's seed-node rule when it is the first of its
// --join seeds (selfSeed; cfg.Join then lists the others): it joins through the other
// seeds if one answers within seedTimeout, and otherwise forms a new cluster. So members
// started together with the same --join list form one cluster, and the first seed,
// restarted, joins the cluster the others kept (docs/design.md, "Membership").
// A member that is not the first seed joins through its seeds, as host.Start does.
func startMember(ctx context.Context, cfg host.Config, selfSeed bool, seedTimeout time.Duration, log *slog.Logger) (*host.Node, error) {
	if !selfSeed {
		return host.Start(ctx, cfg)
	}
	if len(cfg.Join) > 0 {
		first := cfg
		first.JoinTimeout = seedTimeout
		n, err := host.Start(ctx, first)
		if err == nil || !errors.Is(err, cluster.ErrJoinFailed) || ctx.Err() != nil {
			return n, err
		}
		log.Info("no other seed answered: this member, the first seed, forms a new cluster", "seeds", cfg.Join, "waited", seedTimeout)
	}
	cfg.Join = nil
	return host.Start(ctx, cfg)
}
