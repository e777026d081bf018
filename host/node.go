package host

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/pgstore"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// Topics of the host's member-to-member messages.
const (
	topicModule  = "host/module"  // body: digest; reply: the module's bytes
	topicPrepare = "host/prepare" // body: TypeInfo; reply when the type is ready here
	// body: digest and the module's bytes; reply, once validated and stored here:
	// stageStored if this member wrote it, stageHad if it had it.
	topicStage   = "host/stage"
	topicDiscard = "host/discard" // body: digest; reply once a staged module is removed, or kept
)

// Replies to a stage request.
const (
	stageHad    byte = 0
	stageStored byte = 1
)

// catalogState is the name of the catalog's state in membership gossip.
const catalogState = "catalog"

// Config configures a Node.
type Config struct {
	// BindAddr is the gossip address, host:port; the member's address.
	BindAddr string
	// TransportAddr is where node-to-node frames arrive, host:port. Default: BindAddr's
	// host and port + 1.
	TransportAddr string
	// APIAddr is where the management HTTP API listens, host:port. Empty: no API.
	APIAddr string
	// Join lists seed members' gossip addresses. Empty starts a new cluster.
	Join []string
	// JoinTimeout bounds the attempts to reach a seed. Default 30 s.
	JoinTimeout time.Duration
	// DataDir holds the modules and the compilation cache. Required.
	DataDir string
	// StateStore chooses the entity state store: "builtin" (or "") for the replicated
	// store on the members' disks (DataDir/state), or a PostgreSQL connection string
	// (postgres://…, or libpq's key=value form) for pgstore, with what it leaves out
	// taken from the PG* environment (README: choosing a state store).
	StateStore string
	// BuiltinStateStore configures the built-in store: replicas per shard, request
	// timeout, anti-entropy interval, size caps. Its membership, messenger, logger and
	// directory (DataDir/state) are the node's. Default
	// replstore.DefaultConfig().
	BuiltinStateStore replstore.Config
	// PostgresStateStore configures the PostgreSQL store: pool size, size caps. Its
	// URL is StateStore and its logger the node's. Default pgstore.DefaultConfig().
	PostgresStateStore pgstore.Config
	// GossipProfile is "lan" (default) or "local" (memberlist's own timing).
	GossipProfile string
	// Roles are this member's roles.
	Roles []string
	// TickInterval is how often membership's core is ticked: heartbeats, the failure
	// detector's checks, the leader's actions. Default 100 ms.
	TickInterval time.Duration
	// Lifecycle configures membership: minimum members, the phi accrual failure
	// detector, the split brain resolver (cluster.DefaultCoreConfig; the local profile
	// cluster.DefaultLocalCoreConfig detects crashes in about a second).
	Lifecycle cluster.CoreConfig
	// GossipKey encrypts gossip; members need the same key (16, 24 or 32 bytes). It is
	// kept in DataDir/gossip-keyring, which a rotation (shardhost keys) changes; once
	// there, the kept keyring wins over GossipKey at the next start.
	GossipKey []byte
	// TLS, if set, makes every connection between members mutual TLS, gossip and
	// node-to-node frames alike: a peer without a certificate it accepts can neither
	// join nor send a frame (pki.LoadMemberTLS: member certificates of the cluster CA;
	// docs/design.md, "Security"). Gossip then runs over TCP alone, on BindAddr's port.
	TLS *tls.Config
	// API secures and bounds the management API: tokens, TLS, client certificates,
	// the request cap and timeouts (DefaultAPIConfig; README, "Secure").
	API APIConfig
	// MaxModuleSize caps a deployed module, in bytes. Default 32 MiB.
	MaxModuleSize int
	// Runtime configures the wasm runtime; its CacheDir defaults to DataDir/cache.
	Runtime RuntimeConfig
	// Sharding's sizes and timeouts are used; its dependencies are the node's.
	Sharding sharding.Config
	// DData configures the replicator (intervals, expiry); its dependencies are the
	// node's. DurableKeys (keys, or prefixes ending in '*') are kept on disk under
	// DataDir/ddata, written before an update returns unless DData.WriteBehindInterval
	// is set.
	DData       ddata.ReplicatorConfig
	DurableKeys []string
	// Recovery restarts an entity whose message trapped, overran its deadline or its
	// host call budget from its state after its last successful message, in memory
	// (recovery.go): the failure costs that message alone. It keeps a replay record of
	// each active entity's messages since its last in-memory snapshot (bounded: 4 MiB)
	// and that snapshot. False: the entity restarts from its last saved state, losing
	// what it did since. A crash of the member is what --checkpoint governs either way.
	// Default true.
	Recovery bool
	// ShutdownTimeout bounds Close: the graceful leave, its handoffs (every shard's
	// entities stopped and their state saved) and the removal. Default 30 s.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// TracerProvider makes the spans of every layer: the API (HTTP server spans),
	// member-to-member requests, sharding, the state store, distributed data and the
	// wasm runtime. Nil: no tracing.
	TracerProvider trace.TracerProvider
	// Propagator carries trace context and baggage in API requests and between
	// members. Nil: W3C Trace Context and W3C Baggage.
	Propagator propagation.TextMapPropagator
	// MeterProvider records the metrics of every layer (README, "Observe"). Nil: none.
	MeterProvider metric.MeterProvider
	// MetricsHandler, if set, is served at GET /metrics on the API address: the
	// Prometheus text of MeterProvider's instruments (internal/telemetry.NewMetrics).
	MetricsHandler http.Handler
}

// DefaultConfig returns a node configuration with the defaults described on Config; the
// addresses and the data directory are still to be set.
func DefaultConfig() Config {
	return Config{
		JoinTimeout:   30 * time.Second,
		GossipProfile: "lan",
		TickInterval:  100 * time.Millisecond,
		Lifecycle:     cluster.DefaultCoreConfig(),

		BuiltinStateStore:  replstore.DefaultConfig(),
		PostgresStateStore: pgstore.DefaultConfig(),
		API:                DefaultAPIConfig(),
		MaxModuleSize:      32 << 20,
		Runtime:            DefaultRuntimeConfig(),
		Sharding:           sharding.DefaultConfig(),
		DData:              ddata.DefaultReplicatorConfig(),
		ShutdownTimeout:    30 * time.Second,
		Recovery:           true,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return &ConfigError{Field: "BindAddr", Value: c.BindAddr, Err: err}
	}
	if c.TransportAddr != "" {
		if _, _, err := net.SplitHostPort(c.TransportAddr); err != nil {
			return &ConfigError{Field: "TransportAddr", Value: c.TransportAddr, Err: err}
		}
	}
	if c.APIAddr != "" {
		if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
			return &ConfigError{Field: "APIAddr", Value: c.APIAddr, Err: err}
		}
	}
	if c.DataDir == "" {
		return errors.New("host: a data directory is required")
	}
	if _, err := ParseStateStore(c.StateStore); err != nil {
		return err
	}
	if c.MaxModuleSize <= 0 || c.JoinTimeout <= 0 || c.ShutdownTimeout <= 0 {
		return errors.New("host: module size cap and timeouts must be positive")
	}
	return c.API.Validate()
}

// ConfigError is a Config field whose value cannot work. Its text names the field; a
// command line that set the field from a flag can name the flag instead.
type ConfigError struct {
	Field string // the Config field: "BindAddr", "TransportAddr", "APIAddr", "StateStore"
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("host: Config.%s %q: %v", e.Field, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// DefaultTransportAddr returns the bind address with its port plus one.
func DefaultTransportAddr(bind string) (string, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p >= 65535 {
		return "", fmt.Errorf("host: cannot derive a transport port from %q", bind)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// Node is one shardhost host process: membership, the node-to-node messenger, cluster
// sharding, the wasm runtime with its modules, and the management API.
type Node struct {
	cfg        Config
	events     *eventRing // recent events, for the console
	console    console
	log        *slog.Logger
	tracer     trace.Tracer
	traced     bool
	prop       propagation.TextMapPropagator
	tel        *nodeTelemetry
	rt         *Runtime
	modules    *moduleStore
	catalog    *catalog
	messenger  *cluster.Messenger
	membership *cluster.Membership
	replicator *ddata.Replicator
	store      ddata.DurableStore
	states     sharding.StateStore
	closeState func() error
	sharding   *sharding.Sharding
	backoff    *backoff
	keys       *cluster.KeyManager
	api        *http.Server
	apiLn      net.Listener
	auth       *apiAuth

	// owner owns the node's goroutines; shutdown closes it.
	owner  *owner.Group
	mu     sync.Mutex
	exited chan struct{} // closed when this member is out of the cluster
	// started is closed once Start has assigned every field: work that the catalog or
	// the membership starts during Start waits for it.
	started    chan struct{}
	exitReason string
}

// Start starts a node: it binds the gossip, transport and API addresses, joins the
// seeds (retrying for up to JoinTimeout) and serves until Close.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.TransportAddr == "" && cfg.BindAddr != "" {
		if cfg.TransportAddr, err = DefaultTransportAddr(cfg.BindAddr); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The console's recent events (handoffs, dead letters, membership changes, ...)
	// are the node's own log records, kept as they are written.
	events := newEventRing(consoleEvents)
	cfg.Logger = slog.New(events.handler(cfg.Logger.Handler()))
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("host: data directory: %w", err)
	}
	n := &Node{
		cfg:     cfg,
		events:  events,
		log:     cfg.Logger,
		tracer:  obs.Tracer(cfg.TracerProvider, "host"),
		traced:  obs.Enabled(cfg.TracerProvider),
		prop:    obs.Propagator(cfg.Propagator),
		tel:     newNodeTelemetry(cfg.MeterProvider),
		owner:   owner.New(),
		exited:  make(chan struct{}),
		started: make(chan struct{}),
		backoff: newBackoff(time.Now),
		auth: &apiAuth{tokens: cfg.API.Tokens, authAll: cfg.API.AuthAll,
			clientCerts: cfg.API.TLS != nil && cfg.API.TLS.ClientCAs != nil},
	}
	// Whatever started is stopped again if a later step fails.
	defer func() {
		if err != nil {
			n.shutdown(context.Background(), false)
		}
	}()

	rc := cfg.Runtime
	if rc.CacheDir == "" {
		rc.CacheDir = filepath.Join(cfg.DataDir, "cache")
	}
	rc.Logger, rc.TracerProvider, rc.MeterProvider = cfg.Logger, cfg.TracerProvider, cfg.MeterProvider
	if n.rt, err = NewRuntime(ctx, rc); err != nil {
		return nil, err
	}
	if n.modules, err = newModuleStore(n.rt, filepath.Join(cfg.DataDir, "modules"), cfg.Logger); err != nil {
		return nil, err
	}
	n.modules.fetch = n.fetchModule
	n.catalog = newCatalog(n.typeChanged, filepath.Join(cfg.DataDir, "types.cbor"), cfg.Logger)

	tcfg := cluster.DefaultTCPConfig()
	tcfg.BindAddr = cfg.TransportAddr
	tcfg.MaxFrameSize = cfg.MaxModuleSize + 1<<20
	tcfg.Logger = cfg.Logger
	tcfg.TLSConfig = cfg.TLS
	if n.messenger, err = cluster.NewMessenger(func(h cluster.FrameHandler) (cluster.Transport, error) {
		return cluster.NewTCPTransport(tcfg, h)
	}, cfg.Logger, cluster.WithTracing(cfg.TracerProvider, n.prop), cluster.WithMetrics(cfg.MeterProvider)); err != nil {
		return nil, fmt.Errorf("host: node-to-node transport on %s: %w", cfg.TransportAddr, err)
	}

	gossipKey, moreKeys, err := gossipKeys(cfg.DataDir, cfg.GossipKey, cfg.Logger)
	if err != nil {
		return nil, err
	}

	var apiAddr string
	if cfg.APIAddr != "" {
		if n.apiLn, err = net.Listen("tcp", cfg.APIAddr); err != nil {
			return nil, fmt.Errorf("host: API on %s: %w", cfg.APIAddr, err)
		}
		apiAddr = n.apiLn.Addr().String()
	}

	if n.membership, err = cluster.NewMembership(cluster.MembershipConfig{
		BindAddr:      cfg.BindAddr,
		TransportAddr: n.messenger.LocalAddr(),
		APIAddr:       apiAddr,
		Roles:         cfg.Roles,
		Seeds:         cfg.Join,
		Lifecycle:     cfg.Lifecycle,
		TickInterval:  cfg.TickInterval,
		Profile:       cfg.GossipProfile,
		GossipKey:     gossipKey,
		GossipKeys:    moreKeys,
		TLS:           cfg.TLS,
		States:        map[string]cluster.StateDelegate{catalogState: n.catalog},
		Logger:        cfg.Logger,
		MeterProvider: cfg.MeterProvider,
	}); err != nil {
		return nil, err
	}
	exits := n.membership.Subscribe(64)
	if n.keys, err = cluster.NewKeyManager(cluster.KeyManagerConfig{Membership: n.membership, Messenger: n.messenger,
		Logger: cfg.Logger, Persist: func(keys [][]byte) error { return saveKeyring(cfg.DataDir, keys) }}); err != nil {
		return nil, err
	}

	dc := cfg.DData
	dc.Membership, dc.Messenger, dc.Logger = n.membership, n.messenger, cfg.Logger
	dc.TracerProvider, dc.MeterProvider = cfg.TracerProvider, cfg.MeterProvider
	// The shard coordinator's state is always durable: after a full restart the
	// coordinator knows the shards (and restarts remembered entities).
	if n.store, err = ddata.OpenBoltStore(filepath.Join(cfg.DataDir, "ddata")); err != nil {
		return nil, err
	}
	dc.Store, dc.DurableKeys = n.store, append([]string{"sharding-coordinator*"}, cfg.DurableKeys...)
	if n.replicator, err = ddata.NewReplicator(dc); err != nil {
		return nil, err
	}

	if n.states, n.closeState, err = n.openStateStore(ctx); err != nil {
		return nil, err
	}

	sc := cfg.Sharding
	// A downed member's shards move after the resolver's stable-after, the time its own
	// side takes to down it (Akka's down-removal-margin default).
	sc.DownRemovalMargin = cfg.Lifecycle.SBRStableAfter
	sc.Membership, sc.Messenger, sc.Types, sc.Factory = n.membership, n.messenger, (*typeResolver)(n), (*entityFactory)(n)
	sc.DData = n.replicator
	sc.States = newDeltaStates(n.states) // deltastore.go: delta checkpoints beside their base
	sc.Logger, sc.TracerProvider, sc.MeterProvider = cfg.Logger, cfg.TracerProvider, cfg.MeterProvider
	if n.sharding, err = sharding.New(sc); err != nil {
		return nil, err
	}
	n.messenger.Handle(topicModule, n.handleModule)
	n.messenger.Handle(topicPrepare, n.handlePrepare)
	n.messenger.Handle(topicStage, n.handleStage)
	n.messenger.Handle(topicDiscard, n.handleDiscard)
	// The types this member knew before a restart get ready again (their modules are
	// in the data directory); the cluster's catalog may bring newer versions.
	if err := n.catalog.load(); err != nil {
		return nil, err
	}

	n.owner.Go(func() { n.watchExit(exits) })
	jctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	err = n.membership.Join(jctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if n.apiLn != nil {
		ac := cfg.API
		n.api = &http.Server{Handler: n.Handler(), ReadHeaderTimeout: ac.ReadHeaderTimeout, ReadTimeout: ac.ReadTimeout,
			IdleTimeout: ac.IdleTimeout, MaxHeaderBytes: ac.MaxHeaderBytes, TLSConfig: ac.TLS,
			ErrorLog: slog.NewLogLogger(n.log.With("component", "api").Handler(), slog.LevelDebug)}
		n.owner.Go(func() {
			var err error
			if ac.TLS != nil {
				err = n.api.ServeTLS(n.apiLn, "", "")
			} else {
				err = n.api.Serve(n.apiLn)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("API server stopped", "err", err)
			}
		})
	}
	self := n.membership.Self()
	n.log.Info("node started", "address", self.Address, "uid", self.UID,
		"transport", self.TransportAddr, "api", apiAddr, "data_dir", cfg.DataDir)
	close(n.started)
	return n, nil
}

// watchExit stops hosting at once when the cluster has downed or removed this member
// (or it has left), and reports it through Exited.
func (n *Node) watchExit(sub *cluster.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-n.owner.Done():
			return
		case e := <-sub.C:
			if e.Kind != cluster.SelfExited {
				continue
			}
			n.mu.Lock()
			n.exitReason = e.Reason
			n.mu.Unlock()
			if e.Reason != cluster.ReasonLeft {
				// Downed or removed: another member may take over our shards any moment.
				ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
				n.sharding.Abort(ctx)
				cancel()
				n.log.Error("this member is out of the cluster and stopped hosting", "reason", e.Reason)
			}
			close(n.exited)
			return
		}
	}
}

// Exited is closed when this member is out of the cluster: downed, removed or left.
// ExitReason says which.
func (n *Node) Exited() <-chan struct{} { return n.exited }

// ExitReason says why the member is out of the cluster ("" while it is in).
func (n *Node) ExitReason() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitReason
}

// Membership returns the node's cluster membership.
func (n *Node) Membership() *cluster.Membership { return n.membership }

// Self returns this node's member record.
func (n *Node) Self() cluster.Member { return n.membership.Self() }

// Members returns the members this node sees, sorted by address.
func (n *Node) Members() []cluster.Member { return n.membership.Members() }

// APIAddr returns the address the API listens on ("" if none).
func (n *Node) APIAddr() string {
	if n.apiLn == nil {
		return ""
	}
	return n.apiLn.Addr().String()
}

// StateRing returns the built-in state store's ring (replstore.Store.Ring),
// and false with another store.
func (n *Node) StateRing() (replstore.Ring, bool) {
	rs, ok := sharding.StateStoreAs[*replstore.Store](n.states)
	if !ok {
		return replstore.Ring{}, false
	}
	return rs.Ring(), true
}

// ErrNoStateRing: ForgetStateMember with a state store that keeps no ring of members
// (PostgreSQL).
var ErrNoStateRing = errors.New("host: the state store keeps no members to forget (only the builtin store does)")

// ForgetStateMember makes every member up stop retaining the member at address in the
// built-in state store's ring (replstore.Store.ForgetMember): for a
// member gone for good with its data, whose shards are unavailable while two of their
// three replicas are retained. The writes only it (and other gone members) held are
// lost. It returns the members that retained it. Errors: ErrNoStateRing,
// replstore.ErrMemberNotGone (address is up, joining or leaving: down it first),
// sharding.ErrStoreUnavailable (some members up did not answer).
func (n *Node) ForgetStateMember(ctx context.Context, address string) ([]string, error) {
	rs, ok := sharding.StateStoreAs[*replstore.Store](n.states)
	if !ok {
		return nil, fmt.Errorf("%w (%T)", ErrNoStateRing, n.states)
	}
	by, err := rs.ForgetMember(ctx, address)
	if err == nil {
		n.log.WarnContext(ctx, "operator action: state store members forgot a member; writes only it held are lost", "member", address, "retained_by", fmt.Sprint(by))
	}
	return by, err
}

// Replicator returns the node's distributed data replicator.
func (n *Node) Replicator() *ddata.Replicator { return n.replicator }

// Sharding returns the node's cluster sharding.
func (n *Node) Sharding() *sharding.Sharding { return n.sharding }

// Types returns the entity types deployed in the cluster, as this node knows them.
func (n *Node) Types() []TypeInfo { return n.catalog.list() }

// ModuleInfo is one version of an entity type's module, as Node.Modules lists them.
type ModuleInfo struct {
	Type string `json:"type"`
	ModuleVersion
	// Current says this version is the one new activations use.
	Current bool `json:"current"`
	// Local says this member holds the module.
	Local bool `json:"local"`
	// Engine says how this member runs the module's new instances: "compiler",
	// "interpreter" (validated; compiling in the background, or not since this
	// process started), "interpreter (compile failed)"; empty when this member has not
	// loaded the module since it started.
	Engine string `json:"engine,omitempty"`
	// CompileError says why this member's compilation of the module failed.
	CompileError string `json:"compile_error,omitempty"`
}

// Modules lists the versions of every deployed type, by type name and newest first.
func (n *Node) Modules() []ModuleInfo {
	out := []ModuleInfo{}
	for _, t := range n.catalog.list() {
		for i, v := range t.Versions() {
			mi := ModuleInfo{Type: t.Name, ModuleVersion: v, Current: i == 0, Local: n.modules.has(v.Digest)}
			if mod := n.modules.loaded(v.Digest); mod != nil {
				mi.Engine = mod.Engine()
				if err := mod.CompileError(); err != nil {
					mi.CompileError = err.Error()
				}
			}
			out = append(out, mi)
		}
	}
	return out
}

// Close leaves the cluster gracefully: the member becomes leaving, hands its shards off,
// waits to be removed, forwards what reached it meanwhile, and releases everything.
func (n *Node) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	return n.shutdown(ctx, true)
}

// Kill stops the node as abruptly as possible short of exiting: no leave message and no
// entity state saved, so the others see a crash. For tests.
func (n *Node) Kill() error { return n.shutdown(context.Background(), false) }

func (n *Node) shutdown(ctx context.Context, leave bool) error {
	if !n.owner.Close() {
		return nil
	}
	var errs []error
	stopAPI := func() {
		if n.api != nil {
			errs = append(errs, n.api.Shutdown(ctx))
		} else if n.apiLn != nil {
			n.apiLn.Close()
		}
	}
	if !leave {
		stopAPI()
	} else if n.api != nil {
		// A graceful stop serves its API while it leaves (/ready says 503 from now,
		// so that a load balancer turns away): a request that reaches it meanwhile is
		// routed like any other, to wherever its entity lives. Its answers close their
		// connections, so that no client is left holding an idle connection that the
		// final Shutdown closes under a request it is sending (EOF, for a request that
		// may or may not have been handled); a new connection is refused instead.
		n.api.SetKeepAlivesEnabled(false)
	}
	if n.membership != nil {
		if leave {
			errs = append(errs, n.membership.Leave(ctx))
			if n.sharding != nil {
				if err := n.sharding.Drain(ctx); err != nil {
					n.log.Warn("leaving with messages still buffered", "err", err)
				}
			}
		} else {
			errs = append(errs, n.membership.Shutdown())
		}
	}
	if leave {
		stopAPI()
	}
	if n.sharding != nil {
		if leave {
			errs = append(errs, n.sharding.Stop(ctx))
		} else {
			// As a crash: entity state since the last checkpoint is lost.
			errs = append(errs, n.sharding.Abort(ctx))
		}
	}
	if n.replicator != nil {
		errs = append(errs, n.replicator.Close())
	}
	if n.closeState != nil {
		errs = append(errs, n.closeState())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	n.owner.Wait()
	if n.messenger != nil {
		errs = append(errs, n.messenger.Close())
	}
	if n.rt != nil {
		errs = append(errs, n.rt.Close(context.Background()))
	}
	return errors.Join(errs...)
}

// DeployResult is what Deploy did.
type DeployResult struct {
	Type TypeInfo `json:"type"`
	// Members says, for each member, whether the type is ready there.
	Members []MemberDeployment `json:"members"`
	// Settings are the type's settings now, in TypeInfo.SettingList's order.
	Settings []Setting `json:"settings"`
	// Changed maps the settings this deployment changed to their previous values
	// (empty for a new type).
	Changed map[string]string `json:"changed,omitempty"`
	// Unchanged says the type already ran this module with these settings: nothing
	// was deployed and Type is the current version (Members is empty).
	Unchanged bool `json:"unchanged,omitempty"`
}

// Setting is one setting of an entity type, named as the deploy flag and rendered as
// the flag takes it (durations as Go durations, "0" for none).
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SettingList returns the type's settings, by deploy flag: shards, allocation, checkpoint,
// passivate-after, max-active, remember-entities and role.
func (t TypeInfo) SettingList() []Setting {
	checkpoint := t.Checkpoint
	if checkpoint == "" {
		checkpoint = sharding.CheckpointPassivation
	}
	allocation := t.Allocation
	if allocation == "" {
		allocation = sharding.AllocationLeastShard
	}
	return []Setting{
		{"shards", strconv.Itoa(t.NumberOfShards)},
		{"allocation", allocation},
		{"checkpoint", checkpoint},
		{"passivate-after", (time.Duration(t.PassivateAfterMs) * time.Millisecond).String()},
		{"max-active", strconv.Itoa(t.MaxActive)},
		{"remember-entities", strconv.FormatBool(t.RememberEntities)},
		{"role", t.Role},
	}
}

// settingChanges maps the settings of next that differ from prev's to prev's values.
func settingChanges(prev, next TypeInfo) map[string]string {
	was := prev.SettingList()
	changed := map[string]string{}
	for k, s := range next.SettingList() {
		if was[k].Value != s.Value {
			changed[s.Name] = was[k].Value
		}
	}
	return changed
}

// MemberDeployment is one member's part of a deployment.
type MemberDeployment struct {
	Node  string `json:"node"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// Deploy validates a module and makes it the entity type st.Name in the whole cluster,
// with the settings st (NumberOfShards 0: the type's current number, or
// abi.DefaultNumberOfShards for a new type; other empty fields take their defaults). It
// returns once every member has the type ready or has failed to; members that join
// later get it through gossip. Ready means that the member has validated the module on
// wazero's interpreter (Runtime.Load), stored it durably and started the type's region:
// its entities answer from then on, on the interpreter, while each member compiles the
// module in the background (Module.CompileInBackground); new activations use the
// compiled code once it is ready, and active entities move to it at their next message
// (README, "Write, deploy and talk to your own entity").
//
// A deploy has two steps. First every member validates and stores the module at once:
// this member sends its bytes to every other (a stage request) and validates its own
// copy meanwhile; each member stores only what it has validated. Then, if this member
// accepted the module, the type's catalog entry goes to every member (prepare), which
// starts its region; this member prepares as soon as it has accepted the module, while
// the others may still validate it. A member that refused the module in the first step
// is reported not ready and gets no prepare (it learns of the type by gossip, and tries
// again). If this member refuses it, the deploy fails and no member learns of the type,
// and those that stored it remove it again (discard): nothing is kept, on any member,
// of a module that this member refuses. Errors: ErrBadRequest (name, settings),
// ErrModuleTooLarge, ErrInvalidModule, ErrShardsChanged.
func (n *Node) Deploy(ctx context.Context, wasm []byte, st sharding.TypeSettings) (res DeployResult, err error) {
	name := st.Name
	span := noopSpan
	if n.traced {
		ctx, span = n.tracer.Start(ctx, "deploy "+name, trace.WithAttributes(obs.EntityType.String(name),
			obs.Node.String(n.membership.Self().Address), attribute.Int("shardhost.module.bytes", len(wasm))))
	}
	defer func() {
		outcome := obs.OutcomeOK
		if err != nil {
			outcome = sharding.ErrorCode(withCode(err))
			if _, code := statusOf(err); code != "" {
				outcome = code
			}
			obs.Fail(span, err, outcome)
		}
		n.tel.deploys.Add(context.Background(), 1, n.tel.attrs.Get([2]string{name, "o:" + outcome}))
		span.End()
	}()
	if err := ValidateTypeName(name); err != nil {
		return DeployResult{}, err
	}
	if len(wasm) > n.cfg.MaxModuleSize {
		return DeployResult{}, fmt.Errorf("%w: %d bytes, the cap is %d", ErrModuleTooLarge, len(wasm), n.cfg.MaxModuleSize)
	}
	prev, exists := n.catalog.get(name)
	switch {
	case st.NumberOfShards == 0 && exists:
		st.NumberOfShards = prev.NumberOfShards
	case st.NumberOfShards == 0:
		st.NumberOfShards = abi.DefaultNumberOfShards
	case exists && prev.NumberOfShards != st.NumberOfShards:
		return DeployResult{}, fmt.Errorf("%w: %s has %d shards, not %d", ErrShardsChanged, name, prev.NumberOfShards, st.NumberOfShards)
	}
	if err := st.Validate(); err != nil {
		return DeployResult{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	self := n.membership.Self()
	digest := Digest(wasm)
	if exists && prev.Digest == digest && len(settingChanges(prev, n.catalog.next(st, prev.Digest, prev.Size, self.Address))) == 0 {
		// The same module with the same settings: nothing to deploy, no new version.
		span.SetAttributes(attrModuleVer.Int64(int64(prev.Version)), attrModuleDigest.String(prev.Digest))
		return DeployResult{Type: prev, Unchanged: true, Members: []MemberDeployment{}, Settings: prev.SettingList()}, nil
	}
	staging := n.stageEverywhere(ctx, digest, wasm)
	mod, _, err := n.modules.put(ctx, digest, wasm)
	if err != nil {
		n.discardStaged(ctx, digest, staging())
		return DeployResult{}, err
	}
	info := n.catalog.next(st, mod.Digest, mod.Size, self.Address)
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		info.DeployTrace = fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	}
	span.SetAttributes(attrModuleVer.Int64(int64(info.Version)), attrModuleDigest.String(info.Digest))
	// Prepared here while the others may still validate: this member accepted the
	// module, so the deploy goes ahead whatever they answer.
	err = n.prepare(ctx, info)
	staged := staging()
	if err != nil {
		return DeployResult{}, err
	}
	res = DeployResult{Type: info, Members: n.tellEveryMember(ctx, info, staged), Settings: info.SettingList()}
	// Compiled once every member has validated it, so that on a shared machine the
	// compilations do not slow the others' validations; asks run on the interpreter
	// meanwhile.
	mod.CompileInBackground()
	if exists {
		res.Changed = settingChanges(prev, info)
	}
	n.log.InfoContext(ctx, "entity type deployed", "type", name, "version", info.Version, "digest", info.Digest[:12],
		"shards", st.NumberOfShards, "bytes", info.Size)
	return res, nil
}

// UndeployResult is what Undeploy did.
type UndeployResult struct {
	// Type is the catalog's entry that removed the type.
	Type TypeInfo `json:"type"`
	// Members says, for each member, whether it stopped the type (Ready).
	Members []MemberDeployment `json:"members"`
	// StateDeleted says the type's state was deleted (deleteState).
	StateDeleted bool `json:"state_deleted"`
}

// ErrCannotDeleteState: undeploy --delete-state with a state store that cannot delete
// a type's state.
var ErrCannotDeleteState = errors.New("host: the state store cannot delete an entity type's state")

// Undeploy removes the entity type name from the cluster: every member passivates its
// entities (their state saved, as at a graceful shutdown) and stops routing its
// messages, which then fail as for an unknown type; a member that cannot be reached now
// does it when it learns of the removal by gossip. The saved state stays in the state
// store, and a later deploy of the name takes it up, unless deleteState is set: then,
// once every member stopped the type, its snapshots and remember marks are deleted
// from the store (sharding.TypeStateDeleter). Errors: ErrUnknownEntityType;
// ErrCannotDeleteState (checked first: nothing is removed); for the deletion,
// ErrStoreUnavailable or ErrShardUnavailable for a member that did not stop the type:
// the type is removed then and its state not (wholly) deleted, and Undeploy of the
// removed type with deleteState tries the deletion again.
func (n *Node) Undeploy(ctx context.Context, name string, deleteState bool) (UndeployResult, error) {
	self := n.membership.Self()
	var deleter sharding.TypeStateDeleter
	if deleteState {
		var ok bool
		if deleter, ok = sharding.StateStoreAs[sharding.TypeStateDeleter](n.states); !ok {
			return UndeployResult{}, fmt.Errorf("%w (%T)", ErrCannotDeleteState, n.states)
		}
	}
	info, ok := n.catalog.removal(name, self.Address)
	if !ok {
		cur, exists := n.catalog.entry(name)
		if !exists || !cur.Removed || !deleteState {
			return UndeployResult{}, n.unknownType(name)
		}
		info = cur // removed already: delete its state now (a retry)
	}
	res, err := n.applyEverywhere(ctx, info)
	if err != nil || !deleteState {
		return res, err
	}
	for _, m := range res.Members {
		if !m.Ready {
			return res, fmt.Errorf("%w: %s has not stopped %s (%s): its state is not deleted, as the member could still save some",
				sharding.ErrShardUnavailable, m.Node, name, m.Error)
		}
	}
	at := time.Now().UnixNano()
	if rs, ok := sharding.StateStoreAs[*replstore.Store](n.states); ok {
		err = rs.DeleteTypeAt(ctx, name, uint64(at))
	} else {
		err = deleter.DeleteType(ctx, name)
	}
	if err != nil {
		return res, err
	}
	// Recorded in the catalog: a member that was away deletes its copy when it learns.
	if marked, ok := n.catalog.stateDeleted(name, self.Address, at); ok {
		if res, err = n.applyEverywhere(ctx, marked); err != nil {
			return res, err
		}
	}
	res.StateDeleted = true
	n.log.InfoContext(ctx, "entity type's state deleted", "type", name)
	return res, nil
}

// applyEverywhere applies a catalog entry of a removed type here and on every member
// (each stops the type, and applies a state deletion it records), and gossips it.
func (n *Node) applyEverywhere(ctx context.Context, info TypeInfo) (UndeployResult, error) {
	name := info.Name
	if err := n.prepare(ctx, info); err != nil {
		return UndeployResult{}, err
	}
	res := UndeployResult{Type: info, Members: n.tellEveryMember(ctx, info, nil)}
	n.log.InfoContext(ctx, "entity type undeployed", "type", name, "version", info.Version)
	return res, nil
}

// stageResult is one member's answer to a stage request.
type stageResult struct {
	wrote bool  // the member stored the module's file (it did not have it)
	err   error // the member refused the module or could not be asked
}

// stageEverywhere sends a module to every other member in a stage request, in which
// each validates and stores it, and returns at once. The function it returns waits for
// every answer and returns them by member address.
func (n *Node) stageEverywhere(ctx context.Context, digest string, wasm []byte) func() map[string]stageResult {
	self := n.membership.Self()
	body := make([]byte, 0, len(digest)+len(wasm))
	body = append(append(body, digest...), wasm...)
	out := map[string]stageResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range n.membership.Members() {
		if m.Address == self.Address {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := n.messenger.Request(ctx, m.TransportAddr, topicStage, body)
			mu.Lock()
			out[m.Address] = stageResult{wrote: err == nil && len(b) == 1 && b[0] == stageStored, err: err}
			mu.Unlock()
		}()
	}
	return func() map[string]stageResult {
		wg.Wait()
		return out
	}
}

// discardStaged tells the members that stored a module in their stage step to remove
// it, the deploy having failed, and waits for them (for up to JoinTimeout, even if ctx
// is done: a deploy whose caller went away is cleaned up too); a member that cannot be
// told keeps the file (an unused module, never run).
func (n *Node) discardStaged(ctx context.Context, digest string, staged map[string]stageResult) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.JoinTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for addr, r := range staged {
		m, ok := n.membership.Member(addr)
		if !r.wrote || !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.messenger.Request(ctx, m.TransportAddr, topicDiscard, []byte(digest)); err != nil {
				n.log.WarnContext(ctx, "a refused module stays on a member", "digest", digest[:12], "member", addr, "err", err)
			}
		}()
	}
	wg.Wait()
}

// tellEveryMember gossips a catalog entry this member has applied, and sends it to every
// other member in a prepare request, waiting for each to apply it (or fail to): whether
// each member is ready, in the order of its view. A member whose stage step failed
// (staged; nil for none) is reported with that failure and gets no prepare request.
func (n *Node) tellEveryMember(ctx context.Context, info TypeInfo, staged map[string]stageResult) []MemberDeployment {
	n.membership.Broadcast(catalogState, mustEncodeTypes([]TypeInfo{info}))
	self := n.membership.Self()
	members := n.membership.Members()
	out := make([]MemberDeployment, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Node = m.Address
		if m.Address == self.Address {
			out[i].Ready = true
			continue
		}
		if r, ok := staged[m.Address]; ok && r.err != nil {
			out[i].Error = r.err.Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.messenger.Request(ctx, m.TransportAddr, topicPrepare, mustEncodeTypes([]TypeInfo{info})); err != nil {
				out[i].Error = err.Error()
				return
			}
			out[i].Ready = true
		}()
	}
	wg.Wait()
	return out
}

// prepare makes a type ready on this node: in the catalog, its module compiled (fetched
// if needed), its region started. Its "prepare" span is a child of ctx's: on every
// member, of the deploying request's (through the prepare request). Prepared after
// gossip, with no span in ctx, it starts a trace of its own, linked to the deploying
// request's span (TypeInfo.DeployTrace).
func (n *Node) prepare(ctx context.Context, info TypeInfo) (err error) {
	if n.traced {
		opts := []trace.SpanStartOption{trace.WithAttributes(obs.EntityType.String(info.Name),
			obs.Node.String(n.membership.Self().Address), attrModuleVer.Int64(int64(info.Version)), attrModuleDigest.String(info.Digest))}
		if !trace.SpanContextFromContext(ctx).IsValid() && info.DeployTrace != "" {
			deploy := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": info.DeployTrace})
			if sc := trace.SpanContextFromContext(deploy); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		var span trace.Span
		ctx, span = n.tracer.Start(ctx, "prepare "+info.Name, opts...)
		defer func() {
			obs.Fail(span, err, sharding.ErrorCode(withCode(err)))
			span.End()
		}()
	}
	// Not merge: its callback (typeChanged) would prepare the type a second time, and
	// start the module's compilation before this member's deploy or prepare request
	// has answered, which then waits for a CPU that the compilation takes.
	n.catalog.apply([]TypeInfo{info})
	cur, _ := n.catalog.entry(info.Name)
	if cur.StateDeletedAt > 0 {
		// The type's state was deleted: this member's replica too, before the type
		// runs here again (the built-in store; a database was deleted once, by Undeploy).
		if rs, ok := sharding.StateStoreAs[*replstore.Store](n.states); ok {
			if err := rs.ForgetType(cur.Name, uint64(cur.StateDeletedAt)); err != nil {
				return fmt.Errorf("deleting this member's copy of the state of %s: %w", cur.Name, err)
			}
		}
	}
	if cur.Removed {
		return n.sharding.StopType(ctx, cur.Name)
	}
	if _, err := n.modules.get(ctx, cur.Digest, n.moduleSources(cur)); err != nil {
		return err
	}
	return n.sharding.StartType(cur.Settings())
}

// typeChanged is the catalog's callback for entries learned by gossip: the type is
// prepared in the background.
func (n *Node) typeChanged(info TypeInfo) {
	n.owner.Go(func() {
		select {
		case <-n.started:
		case <-n.owner.Done():
			return
		}
		ctx, cancel := context.WithTimeout(n.owner.Context(), n.cfg.JoinTimeout)
		defer cancel()
		if err := n.prepare(ctx, info); err != nil {
			n.log.Warn("entity type not ready on this node", "type", info.Name, "err", err)
			return
		}
		n.compileType(info.Name)
	})
}

// compileType starts the background compilation of the type's current module, if this
// member has loaded it.
func (n *Node) compileType(name string) {
	cur, ok := n.catalog.get(name)
	if !ok {
		return
	}
	if mod := n.modules.loaded(cur.Digest); mod != nil {
		mod.CompileInBackground()
	}
}

// moduleSources lists the members to fetch a type's module from: its deployer first.
func (n *Node) moduleSources(info TypeInfo) []string {
	self := n.membership.Self().Address
	from := []string{info.DeployedBy}
	for _, m := range n.membership.Members() {
		if m.Address != info.DeployedBy && m.Address != self {
			from = append(from, m.Address)
		}
	}
	return from
}

// fetchModule asks members for a module's bytes, in order, until one has it.
func (n *Node) fetchModule(ctx context.Context, digest string, from []string) ([]byte, error) {
	var errs []error
	for _, addr := range from {
		m, ok := n.membership.Member(addr)
		if !ok || m.UID == n.membership.Self().UID {
			continue
		}
		b, err := n.messenger.Request(ctx, m.TransportAddr, topicModule, []byte(digest))
		if err == nil {
			n.log.Info("module fetched", "digest", digest[:12], "from", addr, "bytes", len(b))
			return b, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: module %s: no other member to fetch it from", ErrModuleUnavailable, digest)
	}
	return nil, fmt.Errorf("%w: module %s: no member could send it: %v", ErrModuleUnavailable, digest, errors.Join(errs...))
}

func (n *Node) handleModule(req *cluster.Request) {
	n.owner.Go(func() { req.Reply(n.modules.bytes(string(req.Body))) })
}

// handleStage validates and stores a module that a deploy sends (stageEverywhere).
func (n *Node) handleStage(req *cluster.Request) {
	if len(req.Body) < 64 {
		req.Reply(nil, fmt.Errorf("%w: malformed stage request", ErrBadRequest))
		return
	}
	digest, wasm := string(req.Body[:64]), req.Body[64:]
	n.owner.Go(func() {
		if len(wasm) > n.cfg.MaxModuleSize {
			req.Reply(nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrModuleTooLarge, len(wasm), n.cfg.MaxModuleSize))
			return
		}
		if !validDigest(digest) || Digest(wasm) != digest {
			req.Reply(nil, fmt.Errorf("%w: module %.12s arrived with another digest", ErrModuleUnavailable, digest))
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), n.cfg.JoinTimeout)
		defer cancel()
		_, wrote, err := n.modules.put(ctx, digest, wasm)
		if err != nil {
			req.Reply(nil, err)
			return
		}
		reply := stageHad
		if wrote {
			reply = stageStored
		}
		req.Reply([]byte{reply}, nil)
	})
}

// handleDiscard removes a module that this member stored for a deploy that failed,
// unless a catalog entry names it.
func (n *Node) handleDiscard(req *cluster.Request) {
	digest := string(req.Body)
	n.owner.Go(func() {
		removed, err := n.modules.discard(req.Context(), digest, n.catalog.references)
		if removed {
			n.log.Info("module of a refused deploy removed", "digest", digest[:12])
		}
		req.Reply(nil, err)
	})
}

func (n *Node) handlePrepare(req *cluster.Request) {
	var infos []TypeInfo
	if err := catalogDecMode.Unmarshal(req.Body, &infos); err != nil || len(infos) != 1 {
		req.Reply(nil, fmt.Errorf("%w: malformed type info", ErrBadRequest))
		return
	}
	n.owner.Go(func() {
		ctx, cancel := context.WithTimeout(req.Context(), n.cfg.JoinTimeout)
		defer cancel()
		err := n.prepare(ctx, infos[0])
		req.Reply(nil, err)
		if err == nil {
			n.compileType(infos[0].Name) // after the reply: the deploy does not wait for it
		}
	})
}

func mustEncodeTypes(ts []TypeInfo) []byte {
	b, err := catalogEncMode.Marshal(ts)
	if err != nil {
		panic(err)
	}
	return b
}

// typeResolver is the node as sharding's TypeResolver.
type typeResolver Node

func (r *typeResolver) EntityType(ctx context.Context, name string) (sharding.TypeSettings, error) {
	n := (*Node)(r)
	info, ok := n.catalog.get(name)
	if !ok {
		return sharding.TypeSettings{}, n.unknownType(name)
	}
	if _, err := n.modules.get(ctx, info.Digest, n.moduleSources(info)); err != nil {
		return sharding.TypeSettings{}, withCode(err)
	}
	return info.Settings(), nil
}
