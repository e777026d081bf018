package host

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// Canary rollouts (docs/sharding.md, "Canary rollouts"). A deploy with a canary makes the
// new module the type's newest version (TypeInfo.Version, Digest) with a Rollout in
// flight: the entity IDs in the canary (a stable share by hash, or listed IDs) activate
// on it, the others on the stable version (targetOf). The rollout is part of the
// catalog entry, so it gossips as deployments do; its changes (promote) bump
// TypeInfo.RolloutRev, which orders entries of one version.
//
// Promote drops the rollout: the newest version is the current one for every entity.
// Rollback writes a new version whose module is the stable one's (a redeploy of it,
// under the next number, with the ended rollout kept for status), so that every
// activation takes it again, and then moves the canary's active entities back as
// shardhost upgrade --now does: an entity with explicit state goes back with its state
// when the stable module accepts it (its shardhost_migrate, or shardhost_restore);
// one whose state is a transparent snapshot, or whose state the stable module refuses,
// stays on the canary, and the result says which and why.
//
// Each member counts the guest outcomes of its entities by module (rolloutStats); with
// a maximum failure rate, a member whose canary entities failed more than that share
// of their messages over the window (at least MinMessages of them) rolls back by itself.

// Rollout states.
const (
	RolloutCanary     = "canary"
	RolloutRolledBack = "rolled_back"
)

// canaryScale is the unit of Rollout.Share: hundredths of a percent.
const canaryScale = 10_000

// Defaults of a canary's failure watch.
const (
	defaultCanaryWindow      = time.Minute
	defaultCanaryMinMessages = 10
)

// Rollout is a canary rollout of an entity type's newest version (TypeInfo.Rollout).
type Rollout struct {
	State string `cbor:"1,keyasint" json:"state"`
	// Stable is the version the entities outside the canary stay on; StableDigest its
	// module.
	Stable       uint64 `cbor:"2,keyasint" json:"stable"`
	StableDigest string `cbor:"3,keyasint" json:"stable_digest"`
	// Canary is the version on trial; CanaryDigest its module.
	Canary       uint64 `cbor:"4,keyasint" json:"canary"`
	CanaryDigest string `cbor:"5,keyasint" json:"canary_digest"`
	// Share is the part of the entity IDs on the canary, in hundredths of a percent
	// (1 to 10,000), by a hash of the type and ID; 0 when IDs lists them instead.
	Share int      `cbor:"6,keyasint,omitempty" json:"share,omitempty"`
	IDs   []string `cbor:"7,keyasint,omitempty" json:"ids,omitempty"`
	// MaxFailureRate, when not 0, is the share (0 to 1) of the canary's messages that
	// may fail (a trap, a deadline, a guest error) over WindowMs before a member rolls
	// back by itself, once MinMessages messages ran in the window.
	MaxFailureRate float64 `cbor:"8,keyasint,omitempty" json:"max_failure_rate,omitempty"`
	WindowMs       int64   `cbor:"9,keyasint,omitempty" json:"window_ms,omitempty"`
	MinMessages    int     `cbor:"10,keyasint,omitempty" json:"min_messages,omitempty"`
	StartedAt      int64   `cbor:"11,keyasint" json:"started_at_unix_nano"`
	// EndedAt and Reason say when and why it was rolled back, and by whom (By: a
	// member's address).
	EndedAt int64  `cbor:"12,keyasint,omitempty" json:"ended_at_unix_nano,omitempty"`
	Reason  string `cbor:"13,keyasint,omitempty" json:"reason,omitempty"`
	By      string `cbor:"14,keyasint,omitempty" json:"by,omitempty"`
}

// inFlight reports whether r is a canary in flight.
func (r *Rollout) inFlight() bool { return r != nil && r.State == RolloutCanary }

// window returns the failure watch's window.
func (r *Rollout) window() time.Duration {
	if r.WindowMs <= 0 {
		return defaultCanaryWindow
	}
	return time.Duration(r.WindowMs) * time.Millisecond
}

// inCanary reports whether the entity id of the type typ is in the canary r.
func (r *Rollout) inCanary(typ, id string) bool {
	if len(r.IDs) > 0 {
		return slices.Contains(r.IDs, id)
	}
	return canaryBucket(typ, id) < r.Share
}

// canaryBucket maps an entity to one of canaryScale buckets: FNV-1a of "TYPE\x00ID".
// The same entity is in the same bucket on every member and at every rollout of its
// type, so a canary of share s holds the entities of buckets below s.
func canaryBucket(typ, id string) int {
	h := fnv.New64a()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return int(h.Sum64() % canaryScale)
}

// targetOf returns the module digest the entity id of info's type activates on: the
// stable version's outside a canary in flight, the current one otherwise.
func targetOf(info TypeInfo, id string) string {
	if r := info.Rollout; r.inFlight() && !r.inCanary(info.Name, id) {
		return r.StableDigest
	}
	return info.Digest
}

// CanaryOptions are a canary deploy's (DeployCanary).
type CanaryOptions struct {
	// Share is the canary's share of entity IDs as ParseCanaryShare reads it ("10%");
	// IDs lists the entity IDs instead. One of them is required.
	Share string
	IDs   []string
	// MaxFailureRate (0 to 1; 0: no watch), Window (default 1m) and MinMessages
	// (default 10): see Rollout.
	MaxFailureRate float64
	Window         time.Duration
	MinMessages    int
}

// ParseCanaryShare reads a canary's share of entity IDs, "10%" or "10" (a percentage,
// above 0 and at most 100, in steps of 0.01), and returns it in hundredths of a
// percent. Errors: ErrBadRequest.
func ParseCanaryShare(s string) (int, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	p, err := strconv.ParseFloat(t, 64)
	if err != nil || p != p || p <= 0 || p > 100 {
		return 0, fmt.Errorf("%w: canary share %q (want a percentage above 0 and at most 100, such as 10%%)", ErrBadRequest, s)
	}
	share := int(p*100 + 0.5)
	if share < 1 {
		return 0, fmt.Errorf("%w: canary share %q is below 0.01%%", ErrBadRequest, s)
	}
	return share, nil
}

// rollout checks o and returns the rollout it describes, of the canary version
// canary over prev's current one. Errors: ErrBadRequest.
func (o CanaryOptions) rollout(prev TypeInfo, exists bool, digest string) (*Rollout, error) {
	r := &Rollout{State: RolloutCanary, MaxFailureRate: o.MaxFailureRate, WindowMs: o.Window.Milliseconds(),
		MinMessages: o.MinMessages, StartedAt: time.Now().UnixNano()}
	switch {
	case (o.Share == "") == (len(o.IDs) == 0):
		return nil, fmt.Errorf("%w: a canary takes a share of entity IDs or a list of IDs, one of them", ErrBadRequest)
	case o.Share != "":
		share, err := ParseCanaryShare(o.Share)
		if err != nil {
			return nil, err
		}
		r.Share = share
	default:
		for _, id := range o.IDs {
			if id == "" || len(id) > 256 {
				return nil, fmt.Errorf("%w: canary entity ID %q (want 1 to 256 bytes)", ErrBadRequest, id)
			}
		}
		if len(o.IDs) > 1000 {
			return nil, fmt.Errorf("%w: %d canary entity IDs, at most 1000", ErrBadRequest, len(o.IDs))
		}
		r.IDs = slices.Clone(o.IDs)
		slices.Sort(r.IDs)
		r.IDs = slices.Compact(r.IDs)
	}
	switch {
	case o.MaxFailureRate != o.MaxFailureRate || o.MaxFailureRate < 0 || o.MaxFailureRate >= 1:
		return nil, fmt.Errorf("%w: canary maximum failure rate %v (want 0 to below 1, such as 0.05; 0: no watch)", ErrBadRequest, o.MaxFailureRate)
	case o.Window < 0 || (o.Window > 0 && o.Window < time.Second):
		return nil, fmt.Errorf("%w: canary window %v (want at least 1s)", ErrBadRequest, o.Window)
	case o.MinMessages < 0:
		return nil, fmt.Errorf("%w: canary minimum of messages %d", ErrBadRequest, o.MinMessages)
	case o.MaxFailureRate == 0 && (o.Window != 0 || o.MinMessages != 0):
		return nil, fmt.Errorf("%w: a canary window or minimum of messages without a maximum failure rate", ErrBadRequest)
	}
	if !exists {
		return nil, fmt.Errorf("%w: a canary needs a version to compare with: %s has none deployed", ErrBadRequest, prev.Name)
	}
	stable := prev
	if prev.Rollout.inFlight() {
		// A canary over a canary: the stable version stays.
		stable.Version, stable.Digest = prev.Rollout.Stable, prev.Rollout.StableDigest
	}
	if stable.Digest == digest {
		return nil, fmt.Errorf("%w: %s runs this module already (version %d): a canary needs another one", ErrBadRequest, prev.Name, stable.Version)
	}
	r.Stable, r.StableDigest = stable.Version, stable.Digest
	r.CanaryDigest = digest
	return r, nil
}

// DeployCanary deploys a new version of the existing entity type st.Name as Deploy
// does, as a canary: the entity IDs of o's share or list activate on it, the others
// stay on the type's current version (a canary in flight: its stable one), until
// RolloutPromote or RolloutRollback. The canary's active entities with explicit state
// move to it at once (DeployResult.CanaryMoved). Errors: those of Deploy; ErrBadRequest for
// options that do not parse, a type with no version deployed, or the module the
// type's stable version runs; nothing is deployed then.
func (n *Node) DeployCanary(ctx context.Context, wasm []byte, st sharding.TypeSettings, o CanaryOptions) (DeployResult, error) {
	res, err := n.deploy(ctx, wasm, st, &o)
	if err != nil {
		return res, err
	}
	// The canary's active entities move to it now, as shardhost upgrade --now moves
	// them; the others stay where they are.
	r := res.Type.Rollout
	moved, err := n.Upgrade(ctx, st.Name, UpgradeOptions{Now: true, only: func(id, _ string) bool { return r.inCanary(st.Name, id) }})
	if err != nil {
		return res, err
	}
	res.CanaryMoved = &moved
	return res, nil
}

// RolloutStatus is a type's rollout, with what its versions did (RolloutStatusOf).
type RolloutStatus struct {
	Type string `json:"type"`
	// Version is the type's newest version; Rollout its rollout (nil: none, the
	// newest version is current for every entity).
	Version uint64   `json:"version"`
	Rollout *Rollout `json:"rollout,omitempty"`
	// Canary and Stable are the outcomes of the messages each version's entities
	// handled over the rollout's window, summed over the members that answered.
	Canary VersionOutcomes `json:"canary"`
	Stable VersionOutcomes `json:"stable"`
	// Entities lists the active entities on the canary version (at most 1,000).
	Entities []string `json:"entities"`
	// Usage is the type's entities by version (VersionUsage, without the state scan).
	Usage  TypeUsage `json:"usage"`
	Errors []string  `json:"errors,omitempty"`
}

// VersionOutcomes counts the guest outcomes of messages on one module over a window:
// OK ones, and Failed ones (a trap, the deadline, a guest error); Rate is Failed over
// both (0 with none).
type VersionOutcomes struct {
	OK     int64   `json:"ok"`
	Failed int64   `json:"failed"`
	Rate   float64 `json:"failure_rate"`
}

func (v *VersionOutcomes) add(o versionOutcome) {
	v.OK += o.OK
	v.Failed += o.Failed
	if t := v.OK + v.Failed; t > 0 {
		v.Rate = float64(v.Failed) / float64(t)
	}
}

// RolloutStatusOf returns the rollout of the entity type name: its state, the
// outcomes of its canary and stable versions, the canary's active entities. Errors:
// ErrUnknownEntityType. Members that do not answer are named in Errors.
func (n *Node) RolloutStatusOf(ctx context.Context, name string) (RolloutStatus, error) {
	info, ok := n.catalog.get(name)
	if !ok {
		return RolloutStatus{}, n.unknownType(name)
	}
	st := RolloutStatus{Type: name, Version: info.Version, Rollout: info.Rollout, Entities: []string{}}
	r := info.Rollout
	if r == nil {
		if us := n.VersionUsage(ctx, false, name); len(us) == 1 {
			st.Usage = us[0]
		}
		return st, nil
	}
	replies, errs, _ := n.askVersions(ctx, versionsRequest{Types: []string{name}, List: r.inFlight(), Outcomes: true},
		map[string]TypeInfo{name: info})
	st.Errors = errs
	for _, rep := range replies {
		for _, o := range rep.Outcomes {
			switch {
			case o.Type != name:
			case o.Digest == r.CanaryDigest:
				st.Canary.add(o)
			case o.Digest == r.StableDigest:
				st.Stable.add(o)
			}
		}
		for _, ev := range rep.Entities {
			if ev.Type == name && ev.Active && ev.Digest == r.CanaryDigest && len(st.Entities) < 1000 {
				st.Entities = append(st.Entities, ev.ID)
			}
		}
	}
	sort.Strings(st.Entities)
	if us := n.VersionUsage(ctx, false, name); len(us) == 1 {
		st.Usage = us[0]
	}
	return st, nil
}

// RolloutPromote makes the canary in flight of the entity type name its current version
// for every entity: the others take it at their next activation (shardhost upgrade
// brings that forward). It returns the type's new entry. Errors: ErrUnknownEntityType;
// ErrBadRequest when no canary is in flight (nothing changes).
func (n *Node) RolloutPromote(ctx context.Context, name string) (TypeInfo, error) {
	info, ok := n.catalog.get(name)
	if !ok {
		return TypeInfo{}, n.unknownType(name)
	}
	if !info.Rollout.inFlight() {
		return TypeInfo{}, fmt.Errorf("%w: %s has no canary in flight to promote", ErrBadRequest, name)
	}
	next := info
	next.Rollout = nil
	next.RolloutRev++
	if err := n.prepare(ctx, next); err != nil {
		return TypeInfo{}, err
	}
	n.tellEveryMember(ctx, next, nil)
	n.log.InfoContext(ctx, "canary promoted", "type", name, "version", next.Version)
	return next, nil
}

// RollbackResult is what RolloutRollback did.
type RollbackResult struct {
	// Type is the type's new entry: a version whose module is the stable one's.
	Type TypeInfo `json:"type"`
	// Moved is the move of the canary's active entities back (Upgrade, with Now):
	// Upgraded counts those that went back with their state; Failed and Cannot list
	// those that stay on the canary, with why.
	Moved UpgradeResult `json:"moved"`
}

// RolloutRollback ends the canary in flight of the entity type name: new activations
// take the stable version's module again (as a new version, see above), and the
// canary's active entities go back to it with their state where the stable module
// accepts it; reason says why (logged, and kept in the rollout). Errors:
// ErrUnknownEntityType; ErrBadRequest when no canary is in flight (nothing changes).
func (n *Node) RolloutRollback(ctx context.Context, name, reason string) (RollbackResult, error) {
	info, ok := n.catalog.get(name)
	if !ok {
		return RollbackResult{}, n.unknownType(name)
	}
	if !info.Rollout.inFlight() {
		return RollbackResult{}, fmt.Errorf("%w: %s has no canary in flight to roll back", ErrBadRequest, name)
	}
	r := *info.Rollout
	var stable ModuleVersion
	for _, v := range info.Previous {
		if v.Digest == r.StableDigest {
			stable = v
			break
		}
	}
	if stable.Digest == "" {
		return RollbackResult{}, fmt.Errorf("%w: the stable version %d of %s is no longer in its history", ErrBadRequest, r.Stable, name)
	}
	next := n.catalog.next(info.Settings(), stable.Digest, stable.Size, stable.DeployedBy, func(string) bool { return true })
	r.State, r.EndedAt, r.Reason, r.By = RolloutRolledBack, time.Now().UnixNano(), reason, n.membership.Self().Address
	next.Rollout = &r
	if err := n.prepare(ctx, next); err != nil {
		return RollbackResult{}, err
	}
	n.tellEveryMember(ctx, next, nil)
	n.log.WarnContext(ctx, "canary rolled back", "type", name, "canary", r.Canary, "stable", r.Stable, "version", next.Version, "reason", reason)
	res := RollbackResult{Type: next}
	moved, err := n.Upgrade(ctx, name, UpgradeOptions{Now: true, only: func(_, digest string) bool { return digest == r.CanaryDigest }})
	if err != nil {
		return res, err
	}
	res.Moved = moved
	return res, nil
}

// versionOutcome is one member's count of the outcomes of one module's messages over
// its type's rollout window (versionsReply.Outcomes).
type versionOutcome struct {
	Type   string `cbor:"1,keyasint"`
	Digest string `cbor:"2,keyasint"`
	OK     int64  `cbor:"3,keyasint,omitempty"`
	Failed int64  `cbor:"4,keyasint,omitempty"`
}

// rolloutBuckets is the number of buckets a window is counted in.
const rolloutBuckets = 10

// outcomeWindow counts outcomes in rolloutBuckets buckets over a window.
type outcomeWindow struct {
	width   int64 // a bucket's, in nanoseconds
	buckets [rolloutBuckets]struct{ slot, ok, failed int64 }
}

func (w *outcomeWindow) add(now int64, failed bool) {
	slot := now / w.width
	b := &w.buckets[slot%rolloutBuckets]
	if b.slot != slot {
		b.slot, b.ok, b.failed = slot, 0, 0
	}
	if failed {
		b.failed++
	} else {
		b.ok++
	}
}

func (w *outcomeWindow) sum(now int64) (ok, failed int64) {
	slot := now / w.width
	for _, b := range w.buckets {
		if b.slot > slot-rolloutBuckets && b.slot <= slot {
			ok += b.ok
			failed += b.failed
		}
	}
	return ok, failed
}

// rolloutStats counts, on one member, the guest outcomes of the messages of the types
// with a canary in flight, by module, and starts the automatic rollback. Safe for
// concurrent use.
type rolloutStats struct {
	mu      sync.Mutex
	windows map[[2]string]*outcomeWindow // by type and digest
	// rev is the rollout each type's windows count for (its canary's digest and start);
	// rolling is set once this member started a type's automatic rollback.
	rev     map[string]int64
	rolling map[string]bool
}

func newRolloutStats() *rolloutStats {
	return &rolloutStats{windows: map[[2]string]*outcomeWindow{}, rev: map[string]int64{}, rolling: map[string]bool{}}
}

// record counts a message's outcome on the module digest of info's type, whose
// rollout r is in flight, and reports whether the canary passed its maximum failure
// rate on this member, the first time.
func (s *rolloutStats) record(info TypeInfo, digest string, failed bool) bool {
	r := info.Rollout
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev[info.Name] != r.StartedAt {
		// Another rollout: its counts start afresh.
		for k := range s.windows {
			if k[0] == info.Name {
				delete(s.windows, k)
			}
		}
		s.rev[info.Name], s.rolling[info.Name] = r.StartedAt, false
	}
	k := [2]string{info.Name, digest}
	w := s.windows[k]
	if w == nil {
		w = &outcomeWindow{width: max(1, int64(r.window())/rolloutBuckets)}
		s.windows[k] = w
	}
	w.add(now, failed)
	if !failed || digest != r.CanaryDigest || r.MaxFailureRate <= 0 || s.rolling[info.Name] {
		return false
	}
	ok, bad := w.sum(now)
	minMessages := int64(r.MinMessages)
	if minMessages <= 0 {
		minMessages = defaultCanaryMinMessages
	}
	if ok+bad < minMessages || float64(bad)/float64(ok+bad) <= r.MaxFailureRate {
		return false
	}
	s.rolling[info.Name] = true
	return true
}

// outcomes returns this member's counts over the window of the types in types.
func (s *rolloutStats) outcomes(types []string) []versionOutcome {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []versionOutcome
	for k, w := range s.windows {
		if len(types) > 0 && !slices.Contains(types, k[0]) {
			continue
		}
		ok, failed := w.sum(now)
		out = append(out, versionOutcome{Type: k[0], Digest: k[1], OK: ok, Failed: failed})
	}
	return out
}

// rolloutOutcome counts a message's guest outcome (err: nil or a guest error) on the
// module digest, when the type typ has a canary in flight, and starts the automatic
// rollback when the canary failed too often here.
func (n *Node) rolloutOutcome(typ, digest string, err error) {
	if n.catalog.canaries.Load() == 0 {
		return
	}
	info, ok := n.catalog.get(typ)
	if !ok || !info.Rollout.inFlight() {
		return
	}
	if !n.rollouts.record(info, digest, err != nil) {
		return
	}
	r := info.Rollout
	reason := fmt.Sprintf("the canary's failure rate on %s passed %v over %v", n.membership.Self().Address, r.MaxFailureRate, r.window())
	n.owner.Go(func() {
		ctx, cancel := context.WithTimeout(n.owner.Context(), 2*time.Minute)
		defer cancel()
		if cur, ok := n.catalog.get(typ); !ok || !cur.Rollout.inFlight() || cur.Rollout.StartedAt != r.StartedAt {
			return // promoted or rolled back meanwhile
		}
		res, err := n.RolloutRollback(ctx, typ, reason)
		if err != nil {
			if cur, ok := n.catalog.get(typ); ok && !cur.Rollout.inFlight() {
				return // another member rolled it back first, or an operator ended it
			}
			n.log.Warn("canary not rolled back", "type", typ, "err", err)
			return
		}
		n.log.Warn("canary rolled back by itself", "type", typ, "reason", reason, "moved", res.Moved.Upgraded,
			"stayed", len(res.Moved.Failed)+len(res.Moved.Cannot))
	})
}
