package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/sharding"
)

// TypeInfo describes a deployed entity type: its module and its settings.
type TypeInfo struct {
	Name string `cbor:"1,keyasint" json:"name"`
	// Digest is the hex SHA-256 of the module (see moduleDigest).
	Digest string `cbor:"2,keyasint" json:"digest"`
	// Size is the module's size in bytes.
	Size int `cbor:"3,keyasint" json:"size"`
	// NumberOfShards is fixed for the life of the cluster.
	NumberOfShards int `cbor:"4,keyasint" json:"shards"`
	// Version counts the deployments of the type, from 1.
	Version uint64 `cbor:"5,keyasint" json:"version"`
	// DeployedAt is when the deployment happened (Unix nanoseconds on the deploying member).
	DeployedAt int64 `cbor:"6,keyasint" json:"deployed_at_unix_nano"`
	// DeployedBy is the address of the member that took the deployment: it has the module.
	DeployedBy string `cbor:"7,keyasint" json:"deployed_by"`
	// The type's sharding settings (sharding.TypeSettings).
	Role             string `cbor:"8,keyasint,omitempty" json:"role,omitempty"`
	Allocation       string `cbor:"9,keyasint,omitempty" json:"allocation"`
	PassivateAfterMs int64  `cbor:"10,keyasint,omitempty" json:"passivate_after_ms,omitempty"`
	MaxActive        int    `cbor:"11,keyasint,omitempty" json:"max_active,omitempty"`
	Checkpoint       string `cbor:"12,keyasint,omitempty" json:"checkpoint"`
	RememberEntities bool   `cbor:"13,keyasint,omitempty" json:"remember_entities"`
	// Previous are the type's earlier versions, newest first (at most maxPrevious):
	// entities still running one move to this version at their next activation.
	Previous []ModuleVersion `cbor:"14,keyasint,omitempty" json:"previous,omitempty"`
	// Removed marks an undeployed type (shardhost undeploy): a tombstone that gossips
	// like a deployment, so that every member stops the type. It keeps the removed
	// version's number, module and history (Versions lists them as they were), and is
	// newer than the deployment it removes by newerThan's order; a later deploy of the
	// name takes the next number.
	Removed bool `cbor:"15,keyasint,omitempty" json:"removed,omitempty"`
	// StateDeletedAt, when not 0, is when the type's state was deleted (undeploy
	// --delete-state; Unix nanoseconds, the built-in store's deletion mark). Later
	// entries of the name keep it: a member that learns of the type applies the
	// deletion to its own replica first (replstore.Store.ForgetType), so that a
	// member that was away cannot bring the old state back.
	StateDeletedAt int64 `cbor:"16,keyasint,omitempty" json:"state_deleted_at_unix_nano,omitempty"`
	// DeployTrace is the deploying request's span as a W3C traceparent
	// ("00-TRACEID-SPANID-FLAGS"), when it was sampled: a member that learns of the
	// deployment by gossip rather than by the prepare request links its "prepare" span
	// to it. Empty with tracing off.
	DeployTrace string `cbor:"17,keyasint,omitempty" json:"-"`
	// History is how many journal records a base leaves behind
	// (sharding.TypeSettings.History; 0: the default).
	History int `cbor:"18,keyasint,omitempty" json:"history,omitempty"`
	// IdempotencyRetentionMs is how long an entity remembers a message's idempotency key
	// (sharding.TypeSettings.IdempotencyRetention; 0: the default).
	IdempotencyRetentionMs int64 `cbor:"19,keyasint,omitempty" json:"idempotency_retention_ms,omitempty"`
	// MaxRetries is how many times a message no one waits for may fail before its
	// entity pauses (sharding.TypeSettings.MaxRetries; 0: the default, -1: never).
	MaxRetries int `cbor:"20,keyasint,omitempty" json:"max_retries,omitempty"`
	// HistoryAgeMs, when not 0, is how long journal records stay behind a base
	// (sharding.TypeSettings.HistoryAge), in place of History.
	HistoryAgeMs int64 `cbor:"21,keyasint,omitempty" json:"history_age_ms,omitempty"`
	// Outbound HTTP (sharding.TypeSettings.EgressAllow and the others; egress.go):
	// the allowlist of scheme://host[:port] patterns (empty: entities reach nothing),
	// the timeout of one request in milliseconds, the response cap in bytes and the
	// requests per second per entity (0: the defaults).
	Egress            []string `cbor:"26,keyasint,omitempty" json:"egress,omitempty"`
	EgressTimeoutMs   int64    `cbor:"27,keyasint,omitempty" json:"egress_timeout_ms,omitempty"`
	EgressMaxResponse int64    `cbor:"28,keyasint,omitempty" json:"egress_max_response,omitempty"`
	EgressRate        float64  `cbor:"29,keyasint,omitempty" json:"egress_rate,omitempty"`
	// HTTP routes to the type's entities (sharding.TypeSettings.HTTPRoutes and the
	// others; routes.go): the path patterns, those of them served without
	// authentication, the request body cap in bytes and the requests per second each
	// member admits per route (0: the defaults).
	HTTPRoutes  []string `cbor:"30,keyasint,omitempty" json:"http_routes,omitempty"`
	HTTPPublic  []string `cbor:"31,keyasint,omitempty" json:"http_public,omitempty"`
	HTTPMaxBody int64    `cbor:"32,keyasint,omitempty" json:"http_max_body,omitempty"`
	HTTPRate    float64  `cbor:"33,keyasint,omitempty" json:"http_rate,omitempty"`
	// PassivationStrategy chooses whom MaxActive passivates
	// (sharding.TypeSettings.PassivationStrategy; empty: lru).
	PassivationStrategy string `cbor:"40,keyasint,omitempty" json:"passivation_strategy,omitempty"`
	// Delivery is how the type's entities send to other entities
	// (sharding.TypeSettings.Delivery; empty: effectively-once).
	Delivery string `cbor:"44,keyasint,omitempty" json:"delivery,omitempty"`
	// LogLines is how many log lines each entity of the type keeps
	// (sharding.TypeSettings.LogLines; 0: DefaultEntityLogLines).
	LogLines int `cbor:"50,keyasint,omitempty" json:"log_lines,omitempty"`
	// StateTTLMs, when not 0, deletes the state of an entity idle this long, in
	// milliseconds (sharding.TypeSettings.StateTTL).
	StateTTLMs int64 `cbor:"51,keyasint,omitempty" json:"state_ttl_ms,omitempty"`
	// RolloutRev counts the changes of the version's rollout (a promotion): at one
	// version, the higher wins (newerThan).
	RolloutRev uint64 `cbor:"60,keyasint,omitempty" json:"rollout_rev,omitempty"`
	// Rollout, when not nil, is the version's canary rollout: in flight, or rolled
	// back (this version then runs the stable version's module again; rollout.go).
	Rollout *Rollout `cbor:"61,keyasint,omitempty" json:"rollout,omitempty"`
}

// ModuleVersion is one deployed version of an entity type's module.
type ModuleVersion struct {
	Version    uint64 `cbor:"1,keyasint" json:"version"`
	Digest     string `cbor:"2,keyasint" json:"digest"`
	Size       int    `cbor:"3,keyasint" json:"size"`
	DeployedAt int64  `cbor:"4,keyasint" json:"deployed_at_unix_nano"`
	DeployedBy string `cbor:"5,keyasint" json:"deployed_by"`
}

// maxPrevious bounds the versions a type's history keeps.
const maxPrevious = 16

// Versions returns every known version of the type, the current one first.
func (t TypeInfo) Versions() []ModuleVersion {
	cur := ModuleVersion{Version: t.Version, Digest: t.Digest, Size: t.Size, DeployedAt: t.DeployedAt, DeployedBy: t.DeployedBy}
	return append([]ModuleVersion{cur}, t.Previous...)
}

// Settings returns the type's sharding settings.
func (t TypeInfo) Settings() sharding.TypeSettings {
	return sharding.TypeSettings{Name: t.Name, NumberOfShards: t.NumberOfShards, Role: t.Role, Allocation: t.Allocation,
		PassivateAfter: time.Duration(t.PassivateAfterMs) * time.Millisecond, MaxActive: t.MaxActive,
		Checkpoint: t.Checkpoint, RememberEntities: t.RememberEntities, History: t.History,
		HistoryAge:           time.Duration(t.HistoryAgeMs) * time.Millisecond,
		IdempotencyRetention: time.Duration(t.IdempotencyRetentionMs) * time.Millisecond, MaxRetries: t.MaxRetries,
		EgressAllow: t.Egress, EgressTimeout: time.Duration(t.EgressTimeoutMs) * time.Millisecond,
		EgressMaxResponse: t.EgressMaxResponse, EgressRate: t.EgressRate,
		HTTPRoutes: t.HTTPRoutes, HTTPPublic: t.HTTPPublic, HTTPMaxBody: t.HTTPMaxBody, HTTPRate: t.HTTPRate,
		PassivationStrategy: t.PassivationStrategy, LogLines: t.LogLines, Delivery: t.Delivery,
		StateTTL: time.Duration(t.StateTTLMs) * time.Millisecond}
}

// newerThan orders the catalog entries of one type: higher version; at one version, a
// removal before the deployment it removes, and a removal that deleted the state (the
// later deletion first) before one that did not; then the later rollout change
// (RolloutRev); then later time, then digest, so that
// every member picks the same winner.
func (t TypeInfo) newerThan(o TypeInfo) bool {
	if t.Version != o.Version {
		return t.Version > o.Version
	}
	if t.Removed != o.Removed {
		return t.Removed
	}
	if t.StateDeletedAt != o.StateDeletedAt {
		return t.StateDeletedAt > o.StateDeletedAt
	}
	if t.RolloutRev != o.RolloutRev {
		return t.RolloutRev > o.RolloutRev
	}
	if t.DeployedAt != o.DeployedAt {
		return t.DeployedAt > o.DeployedAt
	}
	return t.Digest > o.Digest
}

var typeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidateTypeName checks an entity type name: 1 to 64 characters of letters, digits,
// '_', '.' and '-', starting with a letter or digit.
func ValidateTypeName(name string) error {
	if !typeNameRE.MatchString(name) {
		return fmt.Errorf("%w: entity type name %q (want 1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit)", ErrBadRequest, name)
	}
	return nil
}

// catalog is the cluster-wide map of entity types: a last-writer-wins map (by
// TypeInfo.newerThan), gossiped by memberlist's push-pull and broadcasts. Merging is
// commutative, associative and idempotent, so every member converges to the same map.
// Each member keeps a copy in its data directory, so that deployed types survive a
// restart of the whole cluster.
type catalog struct {
	mu    sync.Mutex
	types map[string]TypeInfo
	// changed is called, without the lock, with each entry that a merge added or
	// replaced. It must not block.
	changed func(TypeInfo)
	// path is the file the catalog is kept in ("" for none); saveMu orders writes.
	path   string
	log    *slog.Logger
	saveMu sync.Mutex
	// canaries counts the deployed types with a canary in flight (rollout.go): the
	// cost of a message of a member without any is one atomic load.
	canaries atomic.Int32
}

func newCatalog(changed func(TypeInfo), path string, log *slog.Logger) *catalog {
	return &catalog{types: map[string]TypeInfo{}, changed: changed, path: path, log: log}
}

// load merges the catalog's file, if there is one, as merge does (changed is called
// with each type). Errors: the file cannot be read or decoded.
func (c *catalog) load() error {
	if c.path == "" {
		return nil
	}
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("host: type catalog: %w", err)
	}
	var entries []TypeInfo
	if err := catalogDecMode.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("host: type catalog %s: %w", c.path, err)
	}
	c.merge(entries)
	return nil
}

// save writes the catalog to its file (write, sync, rename). A failure is logged: the
// cluster still has the types, only a full restart would miss them.
func (c *catalog) save() {
	if c.path == "" {
		return
	}
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	b, err := catalogEncMode.Marshal(c.all())
	if err == nil {
		err = writeFileAtomic(c.path, b)
	}
	if err != nil {
		c.log.Warn("type catalog not saved", "path", c.path, "err", err)
	}
}

// writeFileAtomic replaces path with b: a reader sees the old or the new file, whole.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// get returns the deployed type name; ok is false for an unknown or removed one.
func (c *catalog) get(name string) (TypeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.types[name]
	return t, ok && !t.Removed
}

// entry returns the catalog's entry for name, a removal included.
func (c *catalog) entry(name string) (TypeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.types[name]
	return t, ok
}

// list returns the deployed types, by name.
func (c *catalog) list() []TypeInfo {
	out := c.all()
	kept := out[:0]
	for _, t := range out {
		if !t.Removed {
			kept = append(kept, t)
		}
	}
	return kept
}

// all returns every entry, removals included (what is saved and gossiped), by name.
func (c *catalog) all() []TypeInfo {
	c.mu.Lock()
	out := make([]TypeInfo, 0, len(c.types))
	for _, t := range c.types {
		out = append(out, t)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// references reports whether an entry, a removal included, names the module with the
// digest among its versions.
func (c *catalog) references(digest string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.types {
		if t.Digest == digest {
			return true
		}
		for _, v := range t.Previous {
			if v.Digest == digest {
				return true
			}
		}
	}
	return false
}

// removal returns the entry that removes the deployed type name, and false if it is not
// deployed. It keeps the deployment's version, module and history (TypeInfo.Removed):
// the removed version stays among the versions the next deployment lists, under its
// own number.
func (c *catalog) removal(name string) (TypeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.types[name]
	if !ok || t.Removed {
		return TypeInfo{}, false
	}
	t.Removed = true
	return t, true
}

// next returns the entry a new deployment of name would write, with settings st. Its
// history keeps the newest maxPrevious versions, and any older one whose module keep
// reports as still needed (nil: none).
func (c *catalog) next(st sharding.TypeSettings, digest string, size int, by string, keep func(digest string) bool) TypeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.types[st.Name]
	var previous []ModuleVersion
	if ok {
		previous = prev.Versions()
		if len(previous) > maxPrevious {
			kept := previous[:maxPrevious:maxPrevious]
			for _, v := range previous[maxPrevious:] {
				if keep != nil && keep(v.Digest) {
					kept = append(kept, v)
				}
			}
			previous = kept
		}
	}
	return TypeInfo{Name: st.Name, Digest: digest, Size: size, NumberOfShards: st.NumberOfShards,
		Version: prev.Version + 1, DeployedAt: time.Now().UnixNano(), DeployedBy: by,
		Role: st.Role, Allocation: st.Allocation, PassivateAfterMs: st.PassivateAfter.Milliseconds(),
		MaxActive: st.MaxActive, PassivationStrategy: st.PassivationStrategy, Checkpoint: st.Checkpoint, RememberEntities: st.RememberEntities,
		History: st.History, HistoryAgeMs: st.HistoryAge.Milliseconds(), IdempotencyRetentionMs: st.IdempotencyRetention.Milliseconds(), MaxRetries: st.MaxRetries,
		Previous: previous, StateDeletedAt: prev.StateDeletedAt,
		Egress: st.EgressAllow, EgressTimeoutMs: st.EgressTimeout.Milliseconds(), EgressMaxResponse: st.EgressMaxResponse,
		EgressRate: st.EgressRate, LogLines: st.LogLines, StateTTLMs: st.StateTTL.Milliseconds(),
		HTTPRoutes: st.HTTPRoutes, HTTPPublic: st.HTTPPublic, HTTPMaxBody: st.HTTPMaxBody, HTTPRate: st.HTTPRate, Delivery: st.Delivery}
}

// stateDeleted returns the entry that records the deletion, at at, of the removed type
// name's state.
func (c *catalog) stateDeleted(name string, at int64) (TypeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.types[name]
	if !ok || !t.Removed || at <= t.StateDeletedAt {
		return TypeInfo{}, false
	}
	t.StateDeletedAt = at
	return t, true
}

// merge adds entries that are newer than what the catalog holds, and reports them to
// the changed callback.
func (c *catalog) merge(entries []TypeInfo) {
	changed := c.apply(entries)
	if c.changed != nil {
		for _, t := range changed {
			c.changed(t)
		}
	}
}

// apply adds entries that are newer than what the catalog holds, and returns them,
// without calling the changed callback: for a caller that makes them ready itself.
func (c *catalog) apply(entries []TypeInfo) []TypeInfo {
	var changed []TypeInfo
	c.mu.Lock()
	for _, t := range entries {
		st := t.Settings()
		if ValidateTypeName(t.Name) != nil || !validDigest(t.Digest) || st.Validate() != nil ||
			(t.Rollout != nil && (!validDigest(t.Rollout.StableDigest) || !validDigest(t.Rollout.CanaryDigest))) {
			continue // not something a member writes: ignore it
		}
		if cur, ok := c.types[t.Name]; !ok || t.newerThan(cur) {
			c.types[t.Name] = t
			changed = append(changed, t)
		}
	}
	if len(changed) > 0 {
		n := int32(0)
		for _, t := range c.types {
			if !t.Removed && t.Rollout.inFlight() {
				n++
			}
		}
		c.canaries.Store(n)
	}
	c.mu.Unlock()
	if len(changed) > 0 {
		c.save()
	}
	return changed
}

// LocalState implements cluster.StateDelegate.
func (c *catalog) LocalState() []byte {
	b, err := catalogEncMode.Marshal(c.all())
	if err != nil {
		panic(err) // a slice of plain structs always encodes
	}
	return b
}

// MergeRemoteState implements cluster.StateDelegate; malformed state is ignored.
func (c *catalog) MergeRemoteState(b []byte) {
	var entries []TypeInfo
	if err := catalogDecMode.Unmarshal(b, &entries); err != nil {
		return
	}
	c.merge(entries)
}

var (
	catalogEncMode = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	catalogDecMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{MaxNestedLevels: 6, MaxArrayElements: 10_000, MaxMapPairs: 64}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)
