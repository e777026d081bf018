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
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/pgstore"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// catalogState is the name of the catalog's state in membership gossip.
const catalogState = "catalog"

// Config configures a Node.
type Config struct {
	// BindAddr is the gossip address, host:port; the member's address.
	BindAddr string
	// MemberName is the member's stable name (cluster.MembershipConfig.Name): "" for
	// none, else one of its own, the same across restarts, such as a StatefulSet pod's
	// DNS name. The built-in state store ranks replicas by it instead of BindAddr, so
	// a member restarted at another address with its DataDir holds the replicas it held
	// (docs/kubernetes.md); a member joining with it downs its old incarnation.
	MemberName string
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
	// taken from the PG* environment (docs/state-stores.md, "Choosing a state store").
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
	// MeterProvider records the metrics of every layer (docs/observability.md). Nil: none.
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
		Runtime:            defaultRuntimeConfig(),
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
	if err := cluster.CheckMemberName(c.MemberName); err != nil {
		return &ConfigError{Field: "MemberName", Value: c.MemberName, Err: err}
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
	Field string // the Config field: "BindAddr", "MemberName", "TransportAddr", "APIAddr", "StateStore"
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("host: Config.%s %q: %v", e.Field, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// defaultTransportAddr returns the bind address with its port plus one.
func defaultTransportAddr(bind string) (string, error) {
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
	samples    sampler // the console's charts (charts.go)
	log        *slog.Logger
	tracer     trace.Tracer
	traced     bool
	prop       propagation.TextMapPropagator
	tel        *nodeTelemetry
	egress     *egressClient   // entities' outbound HTTP (egress.go)
	routeTel   *routeTelemetry // the HTTP routes to entities (routes.go)
	routeLimit routeLimiter
	rt         *wasmRuntime
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
	active     *activeVersions // this member's active entities by module version (versions.go)
	rollouts   *rolloutStats   // this member's message outcomes of canaries in flight (rollout.go)
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
		if cfg.TransportAddr, err = defaultTransportAddr(cfg.BindAddr); err != nil {
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
		cfg:      cfg,
		events:   events,
		log:      cfg.Logger,
		tracer:   obs.Tracer(cfg.TracerProvider, "host"),
		traced:   obs.Enabled(cfg.TracerProvider),
		prop:     obs.Propagator(cfg.Propagator),
		tel:      newNodeTelemetry(cfg.MeterProvider),
		egress:   newEgressClient(cfg.MeterProvider),
		routeTel: newRouteTelemetry(cfg.MeterProvider),
		owner:    owner.New(),
		exited:   make(chan struct{}),
		started:  make(chan struct{}),
		backoff:  newBackoff(time.Now),
		active:   newActiveVersions(),
		rollouts: newRolloutStats(),
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
	if n.rt, err = newWasmRuntime(ctx, rc); err != nil {
		return nil, err
	}
	if n.modules, err = newModuleStore(n.rt, filepath.Join(cfg.DataDir, "modules"), cfg.Logger); err != nil {
		return nil, err
	}
	n.modules.fetch = n.fetchModule
	n.catalog = newCatalog(n.typeChanged, filepath.Join(cfg.DataDir, "types.cbor"), cfg.Logger)
	if err := n.registerVersionMetrics(cfg.MeterProvider); err != nil {
		return nil, fmt.Errorf("host: metrics: %w", err)
	}
	registerModuleVersions(cfg.MeterProvider, n.catalog)

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
		Name:          cfg.MemberName,
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
	if rs, ok := sharding.StateStoreAs[*replstore.Store](n.states); ok {
		// After sharding's handoff, which still saves state: a leaving member stays
		// until the state store's ring lets go of it (docs/state-stores.md).
		n.membership.RegisterLeaveHook(rs.AwaitHandover)
	}
	n.messenger.Handle(topicModule, n.handleModule)
	n.messenger.Handle(topicPrepare, n.handlePrepare)
	n.messenger.Handle(topicStage, n.handleStage)
	n.messenger.Handle(topicDiscard, n.handleDiscard)
	n.messenger.Handle(topicVersions, n.handleVersions)
	n.messenger.Handle(topicEntityLogs, n.handleEntityLogs)
	n.messenger.Handle(topicSamples, n.handleSamples)
	n.rt.logs.member = n.membership.Self().Address // before any entity logs a line
	// The types this member knew before a restart get ready again (their modules are
	// in the data directory); the cluster's catalog may bring newer versions.
	if err := n.catalog.load(); err != nil {
		return nil, err
	}

	n.owner.Go(func() { n.watchExit(exits) })
	n.owner.Go(n.sample)
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
	// Activation says how this member makes new instances of the module
	// (DeployResult.Activation); empty when it has not loaded the module.
	Activation string `json:"activation,omitempty"`
	// The entities on this version (VersionUsage), filled by ModuleReport: Active and
	// ActiveTransparent running it, Passivated and PassivatedTransparent whose saved
	// state takes it at their next activation; PassivatedUnknown when the passivated
	// counts are missing or partial.
	Active                int  `json:"active"`
	ActiveTransparent     int  `json:"active_transparent,omitempty"`
	Passivated            int  `json:"passivated"`
	PassivatedTransparent int  `json:"passivated_transparent,omitempty"`
	PassivatedUnknown     bool `json:"passivated_unknown,omitempty"`
}

// TypeStatus is a deployed entity type with its entities by module version, as
// TypeReport lists them (GET /v1/types).
type TypeStatus struct {
	TypeInfo
	Usage TypeUsage `json:"usage"`
}

// TypeReport returns the deployed types, by name, each with its entities by module
// version (VersionUsage, with the passivated ones counted from the state store).
func (n *Node) TypeReport(ctx context.Context) []TypeStatus {
	usage := map[string]TypeUsage{}
	for _, u := range n.VersionUsage(ctx, true) {
		usage[u.Type] = u
	}
	out := []TypeStatus{}
	for _, t := range n.catalog.list() {
		u, ok := usage[t.Name]
		if !ok {
			u = TypeUsage{Type: t.Name, Versions: []VersionUsage{}, PassivatedUnknown: true}
		}
		out = append(out, TypeStatus{TypeInfo: t, Usage: u})
	}
	return out
}

// ModuleReport is Modules with each version's entities (VersionUsage), and a row of
// Version 0 for a module the type's history no longer lists that entities still run
// or saved states still name.
func (n *Node) ModuleReport(ctx context.Context) []ModuleInfo {
	usage := map[string]map[string]VersionUsage{}
	known := map[string]bool{}
	unknown := map[string]bool{}
	for _, u := range n.VersionUsage(ctx, true) {
		usage[u.Type] = map[string]VersionUsage{}
		unknown[u.Type] = u.PassivatedUnknown
		seen := map[string]bool{}
		for _, v := range u.Versions {
			if !seen[v.Digest] { // counted under the newest version of its module
				seen[v.Digest] = true
				usage[u.Type][fmt.Sprint(v.Version)+"/"+v.Digest] = v
			}
		}
	}
	out := []ModuleInfo{}
	for _, mi := range n.Modules() {
		k := fmt.Sprint(mi.Version) + "/" + mi.Digest
		v := usage[mi.Type][k]
		known[mi.Type+"/"+k] = true
		mi.Active, mi.ActiveTransparent, mi.Passivated, mi.PassivatedTransparent = v.Active, v.ActiveTransparent, v.Passivated, v.PassivatedTransparent
		mi.PassivatedUnknown = unknown[mi.Type]
		out = append(out, mi)
	}
	// Modules no longer in a type's history that entities still run, after the
	// type's listed versions.
	var extra []ModuleInfo
	for typ, vs := range usage {
		for k, v := range vs {
			if known[typ+"/"+k] {
				continue
			}
			extra = append(extra, ModuleInfo{Type: typ, ModuleVersion: ModuleVersion{Digest: v.Digest}, Local: n.modules.has(v.Digest),
				Active: v.Active, ActiveTransparent: v.ActiveTransparent, Passivated: v.Passivated,
				PassivatedTransparent: v.PassivatedTransparent, PassivatedUnknown: unknown[typ]})
		}
	}
	sort.Slice(extra, func(i, j int) bool {
		if extra[i].Type != extra[j].Type {
			return extra[i].Type < extra[j].Type
		}
		return extra[i].Digest < extra[j].Digest
	})
	for _, e := range extra {
		at := len(out)
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Type == e.Type {
				at = i + 1
				break
			}
		}
		out = slices.Insert(out, at, e)
	}
	return out
}

// Modules lists the versions of every deployed type, by type name and newest first.
func (n *Node) Modules() []ModuleInfo {
	out := []ModuleInfo{}
	for _, t := range n.catalog.list() {
		for i, v := range t.Versions() {
			mi := ModuleInfo{Type: t.Name, ModuleVersion: v, Current: i == 0, Local: n.modules.has(v.Digest)}
			if mod := n.modules.loaded(v.Digest); mod != nil {
				mi.Engine = mod.Engine()
				mi.Activation = mod.Activation()
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
