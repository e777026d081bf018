// The configuration of sharding (Config) and of an entity type (TypeSettings).

package sharding

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// TypeSettings are the sharding settings of an entity type, given at deploy.
type TypeSettings struct {
	Name string `json:"name"`
	// NumberOfShards is fixed for the life of the cluster; abi.ShardID uses it.
	NumberOfShards int `json:"shards"`
	// Role: only members with this role host the type's shards; the others run
	// proxy-only regions that route its messages. Empty: every member hosts.
	Role string `json:"role,omitempty"`
	// Allocation is the shard allocation strategy: AllocationLeastShard (default) or
	// AllocationPriority.
	Allocation string `json:"allocation,omitempty"`
	// PassivateAfter passivates an entity idle for this long; 0 never.
	PassivateAfter time.Duration `json:"passivate_after,omitempty"`
	// MaxActive caps the active entities of the type per region; the one
	// PassivationStrategy chooses is passivated to make room. 0: no cap.
	MaxActive int `json:"max_active,omitempty"`
	// PassivationStrategy chooses whom MaxActive passivates: PassivationLRU (the
	// default), PassivationLFU or PassivationWTinyLFU. docs/sharding.md compares them.
	PassivationStrategy string `json:"passivation_strategy,omitempty"`
	// StateTTL, when not 0, deletes the durable state (snapshot, journal, remember
	// mark; not its reminders) of an entity that has handled no message for this long:
	// the state TTL sweep (statettl.go), through a store that can delete one entity's
	// state (EntityStateDeleter; every built-in store can). At least MinStateTTL. 0
	// (the default): kept for good. docs/state.md says what is deleted and when.
	StateTTL time.Duration `json:"state_ttl,omitempty"`
	// Checkpoint says how an entity's state survives a crash of its member:
	// CheckpointJournal (the default: every handled message is journaled before its
	// reply leaves, and a base is saved now and then), or, saving only snapshots,
	// CheckpointPassivation (on passivation and handoff: a crash loses the messages
	// since), CheckpointEveryMessage (a snapshot before each reply), or "every:N" (a
	// crash loses up to N-1 acknowledged messages). docs/sharding.md, "What a failure
	// loses", compares them.
	Checkpoint string `json:"checkpoint,omitempty"`
	// History is how many journal records (CheckpointJournal) stay behind the entity's
	// last base: what `shardhost history` shows, and how far back a revert or a fork
	// reaches. Every record of at least the last History stays, from a copy of a base
	// (a KindBase record) that a revert starts from. Default DefaultHistory; -1 keeps
	// none; HistoryAll keeps every record from the entity's first (a transparent
	// state's upgrade replays them on the new module: docs/state.md). HistoryAge, when
	// set, counts instead.
	History int `json:"history,omitempty"`
	// HistoryAge, when not 0, keeps the records of at least the last HistoryAge (and
	// History does not count): `--history 24h`. At most a year.
	HistoryAge time.Duration `json:"history_age,omitempty"`
	// IdempotencyRetention is how long an entity remembers a message's idempotency key
	// (Message.IdempotencyKey) and its reply: a message with the same key within it is
	// answered with that reply and not handled again. Default
	// DefaultIdempotencyRetention (24 h); at most a year. An entity remembers at most
	// 10,000 keys and 4 MiB of replies, forgetting the oldest first past that.
	IdempotencyRetention time.Duration `json:"idempotency_retention,omitempty"`
	// Delivery is how the type's entities send to other entities (delivery.go):
	// DeliveryEffectivelyOnce (the default: under the journal a tell leaves from an
	// outbox once its message's record is durable and is retried until the receiver
	// acknowledges it, and every tell and ask carries a sender sequence the receiver
	// deduplicates by), or DeliveryAtMostOnce (no sequence, no retry: a tell lost with
	// a crash is lost). docs/delivery.md says what holds on a crash.
	Delivery string `json:"delivery,omitempty"`
	// MaxRetries is how many times in a row a message no one waits for (a tell, a
	// timer's, a change's) may fail the same way, a trap or the deadline, before its
	// entity pauses on it (pause.go; Sharding.Resume, Sharding.Skip) instead of
	// dropping it as a dead letter; the attempts are DefaultMaxRetries by default, 100
	// ms apart and doubling. -1: never pause (such a message is a dead letter at its
	// first failure). An ask's failure goes to its asker, whatever this says.
	MaxRetries int `json:"max_retries,omitempty"`
	// RememberEntities restarts a shard's entities wherever the shard goes.
	RememberEntities bool `json:"remember_entities,omitempty"`
	// Outbound HTTP of the type's entities (the host's http_request; docs/security.md,
	// "Outbound HTTP"). Sharding only carries these; the host checks and applies them.
	// EgressAllow lists the scheme://host[:port] patterns entities may reach; empty:
	// none. EgressTimeout bounds one request (0: the host's default, 10 s), within the
	// message deadline; EgressMaxResponse caps a response body in bytes (0: 1 MiB);
	// EgressRate is the requests per second one entity may make (0: 10).
	EgressAllow       []string      `json:"egress,omitempty"`
	EgressTimeout     time.Duration `json:"egress_timeout,omitempty"`
	EgressMaxResponse int64         `json:"egress_max_response,omitempty"`
	EgressRate        float64       `json:"egress_rate,omitempty"`
	// HTTP routes to the type's entities (the host's routes; docs/http-routes.md).
	// Sharding only carries these; the host checks and applies them. HTTPRoutes are
	// path patterns such as "/shop/{id}/..."; HTTPPublic those of them served without
	// authentication; HTTPMaxBody caps a request body in bytes (0: the host's default,
	// 1 MiB less the request's encoding); HTTPRate is the requests per second each
	// member admits per route (0: the host's default, 100).
	HTTPRoutes  []string `json:"http_routes,omitempty"`
	HTTPPublic  []string `json:"http_public,omitempty"`
	HTTPMaxBody int64    `json:"http_max_body,omitempty"`
	HTTPRate    float64  `json:"http_rate,omitempty"`
	// LogLines is how many log lines (stdout, stderr, log calls) each entity of the
	// type keeps on the member that runs it (the host's entity logs; sharding does not
	// read it). 0: the host's default, 1,000.
	LogLines int `json:"log_lines,omitempty"`
}

// Allocation strategies and checkpoint policies by name.
const (
	AllocationLeastShard   = "least-shard"
	AllocationPriority     = "priority"
	CheckpointJournal      = "journal"
	CheckpointPassivation  = "passivation"
	CheckpointEveryMessage = "every-message"
)

// DefaultHistory is TypeSettings.History's default: the journal records kept behind a
// base.
const DefaultHistory = 1000

// HistoryAll is TypeSettings.History for a journal that keeps every record from the
// entity's first: its bases are still copied into it every DefaultHistory records, for
// reverts, and nothing is truncated.
const HistoryAll = -2

// MinStateTTL is the shortest TypeSettings.StateTTL: shorter would delete the state of
// entities between two messages of an ordinary conversation.
const MinStateTTL = time.Minute

// maxHistory caps TypeSettings.History.
const maxHistory = 10_000_000

// Validate checks the settings; it fills in the defaults of empty fields.
func (t *TypeSettings) Validate() error {
	switch {
	case t.Name == "":
		return errors.New("sharding: an entity type needs a name")
	case t.NumberOfShards < 1 || t.NumberOfShards > 100_000:
		return fmt.Errorf("sharding: number of shards %d (want 1 to 100000)", t.NumberOfShards)
	case t.PassivateAfter < 0 || t.MaxActive < 0:
		return fmt.Errorf("sharding: passivate-after and max-active must not be negative")
	case t.StateTTL < 0 || t.StateTTL > 0 && t.StateTTL < MinStateTTL:
		return fmt.Errorf("sharding: state TTL %v (want 0, for none, or at least %v)", t.StateTTL, MinStateTTL)
	}
	switch t.Allocation {
	case "":
		t.Allocation = AllocationLeastShard
	case AllocationLeastShard, AllocationPriority:
	default:
		return fmt.Errorf("sharding: allocation %q (want %s or %s)", t.Allocation, AllocationLeastShard, AllocationPriority)
	}
	switch t.PassivationStrategy {
	case "":
		t.PassivationStrategy = PassivationLRU
	case PassivationLRU, PassivationLFU, PassivationWTinyLFU:
	default:
		return fmt.Errorf("sharding: passivation strategy %q (want %s, %s or %s)", t.PassivationStrategy, PassivationLRU, PassivationLFU, PassivationWTinyLFU)
	}
	if t.Checkpoint == "" {
		t.Checkpoint = CheckpointJournal
	}
	switch t.Delivery {
	case "":
		t.Delivery = DeliveryEffectivelyOnce
	case DeliveryEffectivelyOnce, DeliveryAtMostOnce:
	default:
		return fmt.Errorf("sharding: delivery %q (want %s or %s)", t.Delivery, DeliveryEffectivelyOnce, DeliveryAtMostOnce)
	}
	if _, err := checkpointEvery(t.Checkpoint); err != nil {
		return err
	}
	switch {
	case t.MaxRetries == 0:
		t.MaxRetries = DefaultMaxRetries
	case t.MaxRetries < -1 || t.MaxRetries > 100:
		return fmt.Errorf("sharding: max retries %d (want -1 for never, or 1 to 100)", t.MaxRetries)
	}
	switch {
	case t.IdempotencyRetention == 0:
		t.IdempotencyRetention = DefaultIdempotencyRetention
	case t.IdempotencyRetention < 0 || t.IdempotencyRetention > 365*24*time.Hour:
		return fmt.Errorf("sharding: idempotency retention %v (want up to a year)", t.IdempotencyRetention)
	}
	switch {
	case t.History == 0:
		t.History = DefaultHistory
	case t.History < HistoryAll || t.History > maxHistory:
		return fmt.Errorf("sharding: history of %d records (want -1 for none, -2 for all, or 1 to %d)", t.History, maxHistory)
	}
	if t.HistoryAge < 0 || t.HistoryAge > 365*24*time.Hour {
		return fmt.Errorf("sharding: history of %v (want up to a year)", t.HistoryAge)
	}
	return nil
}

// keepsHistory reports whether the type keeps records behind its bases.
func (t TypeSettings) keepsHistory() bool {
	return t.HistoryAge > 0 || t.History > 0 || t.History == HistoryAll
}

// KeepsAllHistory reports whether the type's journals keep every record from each
// entity's first (History is HistoryAll, and no HistoryAge counts instead).
func (t TypeSettings) KeepsAllHistory() bool { return t.History == HistoryAll && t.HistoryAge == 0 }

// historyPassed reports whether records (a count) and age (a duration) behind the
// entity's last record are past what the type's history keeps.
func (t TypeSettings) historyPassed(records uint64, age time.Duration) bool {
	switch {
	case t.HistoryAge > 0:
		return age >= t.HistoryAge
	case t.History == HistoryAll:
		return records >= DefaultHistory // a copy of the base every so often, for reverts
	}
	return t.History > 0 && records >= uint64(t.History)
}

// historyLimit says what the type's history keeps, for an error.
func (t TypeSettings) historyLimit() string {
	switch {
	case t.HistoryAge > 0:
		return "the last " + t.HistoryAge.String()
	case t.History > 0:
		return "the last " + strconv.Itoa(t.History) + " records"
	case t.History == HistoryAll:
		return "every record"
	}
	return "none"
}

// checkpointEvery returns after how many messages an entity's state is saved under a
// checkpoint policy: 0 for passivation (only on passivation and handoff) and for the
// journal (which saves bases by its own rule), 1 for every message, N for "every:N".
func checkpointEvery(policy string) (int, error) {
	switch policy {
	case CheckpointPassivation, CheckpointJournal, "":
		return 0, nil
	case CheckpointEveryMessage:
		return 1, nil
	}
	if n, ok := strings.CutPrefix(policy, "every:"); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 1 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("sharding: checkpoint policy %q (want journal, passivation, every-message or every:N)", policy)
}

// Config configures Sharding.
type Config struct {
	Membership Membership
	Messenger  Messenger
	Types      TypeResolver
	Factory    EntityFactory
	// DData keeps the coordinator's state (allocations and epochs) with WriteMajority and
	// ReadMajority. Nil: the coordinator rebuilds its state from the regions alone.
	DData DData
	// States keeps entity state (snapshots, remembered entities): with it, state moves
	// with its shard and survives passivation and crashes (per the checkpoint policy).
	// Nil: an entity's state lives only in its instance.
	States StateStore
	// Strategy, if set, allocates the shards of every type; by default each type uses
	// the strategy its settings name (least-shard or priority).
	Strategy ShardAllocationStrategy
	// RebalanceInterval is how often the coordinator looks for shards to move. Default 10 s.
	RebalanceInterval time.Duration
	// DownRemovalMargin is how long the shards of a member that was downed (not one that
	// left) stay allocated to it before they may move, as Akka's down-removal-margin:
	// the downed member, on the other side of a partition, may still run their entities
	// until its own split brain resolver or the news of its downing stops it, and a
	// second activation meanwhile would break "at most one active instance". Longer
	// leaves the shards unavailable longer after a crash; shorter than the time the
	// downed side takes to stop risks two lives of an entity at once. Default 5 s (the
	// resolver's default stable-after; host sets the resolver's own); 0 moves them at
	// once.
	DownRemovalMargin time.Duration
	// HostingLease is how recent this member's heartbeat round trips with a majority
	// of the members must be for it to host (cluster.View.MajorityContact): past it,
	// the member activates no entity, handles no message and saves no state, and it
	// stops its entities without saving; after such a lapse it hosts again only once
	// it has the contact back and its view of the cluster has converged (so that a
	// downing it missed has reached it). A member cut off from the majority, paused
	// or behind a bridge member thus stops hosting before the majority, which downs it
	// after the resolver's stable-after, moves its shards after DownRemovalMargin (Akka
	// leaves this to the downed side's resolver; a member that does not learn of its
	// downing, or whose resolver sees another leader, is what the lease covers). It must
	// be shorter than DownRemovalMargin, with room for a save in flight, and longer than
	// the failure detector's heartbeat interval, or the lease lapses while nothing is
	// wrong. 0: half of DownRemovalMargin; negative, or a DownRemovalMargin of 0: no
	// lease (a member hosts whatever its contact).
	HostingLease time.Duration
	// MaxSimultaneousRebalance caps the shards of one type in handoff at once. Default 3.
	MaxSimultaneousRebalance int
	// BufferSize caps the messages a region buffers while shard homes are resolved
	// (and, per entity type, while the type is being resolved). Over it, messages are
	// dead letters: ErrBufferFull. Default 100,000 (Akka's buffer-size).
	BufferSize int
	// MailboxSize caps the messages queued for one entity. Default 10,000.
	MailboxSize int
	// RequestTimeout bounds one request to the coordinator or a region. Default 3 s.
	RequestTimeout time.Duration
	// ResolveTimeout is how long messages wait for their shard's home (retrying the
	// coordinator) before they fail with ErrShardUnavailable. Default 10 s.
	ResolveTimeout time.Duration
	// AskTimeout bounds an ask whose context has no deadline. On the member that hosts
	// the entity, a forwarded ask's deadline is the sooner of the asker's (which the
	// message carries) and AskTimeout from its arrival. Default 10 s.
	AskTimeout time.Duration
	// ReconcileInterval is how often membership is re-read, in case events were
	// missed, and idle entities and MemoryLimit are checked. Default 1 s.
	ReconcileInterval time.Duration
	// MemoryLimit, when above 0, caps the linear memory of the member's active
	// entities, every type together, in bytes (as EntityInspector reports it): past
	// it, every ReconcileInterval, the least recently used idle entities are
	// passivated until the rest fit. 0: no cap.
	MemoryLimit int64
	// StateTTLInterval is the time between two state TTL sweeps (TypeSettings.StateTTL,
	// statettl.go), each of which reads the store's index of every type with a TTL
	// that this member hosts shards of. Default 1 minute: an entity's state outlives
	// its TTL by up to this much. 0 or less: the default.
	StateTTLInterval time.Duration
	// Now is the clock of idle passivation (when an entity was last used, how long
	// ago), of MemoryLimit's least recently used choice, of the dead letter log's rate
	// limit and of the durations sharding measures (queue time, activation, handoff).
	// Deadlines (an ask's, ResolveTimeout, RequestTimeout) follow contexts and timers,
	// in real time. Default time.Now; tests give a simulated clock.
	Now func() time.Time
	// Logger receives sharding's logs. Nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of messages (tell, ask, handle), activations,
	// passivations, state store calls, shard home resolution, buffering and handoffs.
	// Nil: none.
	TracerProvider trace.TracerProvider
	// MeterProvider records sharding's metrics (messages handled, activations,
	// passivations, active entities, shards, handoffs, buffered messages, dead letters,
	// state store operations). Nil: none.
	MeterProvider metric.MeterProvider
}

// DefaultConfig returns the defaults described on Config (dependencies unset).
func DefaultConfig() Config {
	return Config{
		BufferSize:        100_000,
		MailboxSize:       10_000,
		RequestTimeout:    3 * time.Second,
		ResolveTimeout:    10 * time.Second,
		AskTimeout:        10 * time.Second,
		ReconcileInterval: time.Second,
		StateTTLInterval:  time.Minute,
		RebalanceInterval: 10 * time.Second,
		DownRemovalMargin: 5 * time.Second,

		MaxSimultaneousRebalance: 3,
	}
}

// CoordinatorTimeout is how long a region waits for the coordinator's answer to where
// a shard lives: two RequestTimeouts, as the coordinator may first wait one
// RequestTimeout for the region it chose to host the shard.
func (c Config) CoordinatorTimeout() time.Duration { return 2 * c.RequestTimeout }

// HandOffTimeout bounds a region's handoff of one shard: one RequestTimeout for the
// other regions to acknowledge BeginHandOff, one for the coordinator to acknowledge
// ShardStopped, and ResolveTimeout for the shard's entities to finish what they
// received and save their state (a save retries while the store is unavailable).
func (c Config) HandOffTimeout() time.Duration { return 2*c.RequestTimeout + c.ResolveTimeout }

// HandOffRequestTimeout is how long the coordinator waits for a region to answer a
// HandOff (a rebalance): HandOffTimeout and one RequestTimeout more for the message
// and its answer, so that a region that finishes in time is heard.
func (c Config) HandOffRequestTimeout() time.Duration { return c.HandOffTimeout() + c.RequestTimeout }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Membership == nil || c.Messenger == nil || c.Types == nil || c.Factory == nil:
		return errors.New("sharding: Membership, Messenger, Types and Factory are required")
	case c.BufferSize <= 0 || c.MailboxSize <= 0:
		return errors.New("sharding: buffer and mailbox sizes must be positive")
	case c.MemoryLimit < 0:
		return fmt.Errorf("sharding: memory limit %d bytes must not be negative", c.MemoryLimit)
	case c.RequestTimeout <= 0 || c.ResolveTimeout <= 0 || c.AskTimeout <= 0 || c.ReconcileInterval <= 0 ||
		c.RebalanceInterval <= 0 || c.MaxSimultaneousRebalance <= 0:
		return errors.New("sharding: timeouts and intervals must be positive")
	case c.DownRemovalMargin > 0 && c.HostingLease >= c.DownRemovalMargin:
		return fmt.Errorf("sharding: the hosting lease (%v) must be shorter than the down-removal margin (%v)",
			c.HostingLease, c.DownRemovalMargin)
	}
	return nil
}

// hostingLease is the lease in effect (HostingLease with its default); 0: none.
func (c Config) hostingLease() time.Duration {
	switch {
	case c.DownRemovalMargin <= 0 || c.HostingLease < 0:
		return 0
	case c.HostingLease == 0:
		return c.DownRemovalMargin / 2
	}
	return c.HostingLease
}
