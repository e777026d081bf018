package host

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

// Versions in view: which module version each entity runs, or will run at its next
// activation (docs/sharding.md, "Module versions of entities").
//
// Active entities are counted by each member as they activate and stop (activeVersions),
// by entity type, module digest and state kind: an entity whose state is a transparent
// snapshot keeps the module its state was made by (restoreState), one with explicit
// state (shardhost_snapshot) takes the current version at its next activation.
// Passivated entities are counted from the state store: each member lists the saved
// states of the shards it is the first replica of (replstore.Store.LocalStates), less
// the entities active somewhere (ClusterShardingState), and reads from each state only
// its header: a transparent snapshot names its module's digest, an explicit state names
// none and counts towards the current version. A store that cannot list its states
// (PostgreSQL) gives no passivated counts (VersionUsage.PassivatedUnknown).

// topicVersions is the host's member-to-member request for a member's counts: body
// versionsRequest, reply versionsReply (CBOR).
const topicVersions = "host/versions"

// activeKey names a group of a member's active entities.
type activeKey struct {
	typ, digest string
	transparent bool // the entity's state is a transparent snapshot
}

// activeVersions counts a member's active entities by activeKey, and knows each one's
// (for shardhost upgrade). Safe for concurrent use.
type activeVersions struct {
	mu       sync.Mutex
	n        map[activeKey]int
	entities map[string]activeKey // by entity ID, "TYPE\x00ID"
}

func newActiveVersions() *activeVersions {
	return &activeVersions{n: map[activeKey]int{}, entities: map[string]activeKey{}}
}

// move counts the entity id (of from's or to's type) out of from (if had) and into to
// (if has).
func (a *activeVersions) move(id string, from activeKey, had bool, to activeKey, has bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if had {
		if a.n[from]--; a.n[from] <= 0 {
			delete(a.n, from)
		}
		delete(a.entities, from.typ+"\x00"+id)
	}
	if has {
		a.n[to]++
		a.entities[to.typ+"\x00"+id] = to
	}
}

// list returns the active entities of type typ with their groups, by ID.
func (a *activeVersions) list(typ string) map[string]activeKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]activeKey{}
	for k, v := range a.entities {
		if v.typ == typ {
			out[k[len(typ)+1:]] = v
		}
	}
	return out
}

// counts returns a copy of the counts.
func (a *activeVersions) counts() map[activeKey]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[activeKey]int, len(a.n))
	for k, v := range a.n {
		out[k] = v
	}
	return out
}

// countAs counts the entity as active on the module digest, with a transparent or an
// explicit state.
func (e *wasmEntity) countAs(digest string, transparent bool) {
	k := activeKey{typ: e.typ, digest: digest, transparent: transparent}
	if e.counted && e.ver == k {
		return
	}
	e.n.active.move(e.id, e.ver, e.counted, k, true)
	e.ver, e.counted = k, true
}

// uncount counts the entity out of the active ones.
func (e *wasmEntity) uncount() {
	if e.counted {
		e.n.active.move(e.id, e.ver, true, activeKey{}, false)
		e.counted = false
	}
}

// versionCount is one member's count of one group of entities.
type versionCount struct {
	Type string `cbor:"1,keyasint"`
	// Digest is the module's; "" for saved explicit states, which name none.
	Digest      string `cbor:"2,keyasint,omitempty"`
	Transparent bool   `cbor:"3,keyasint,omitempty"`
	Active      int    `cbor:"4,keyasint,omitempty"`
	Passivated  int    `cbor:"5,keyasint,omitempty"`
}

// versionsRequest asks a member for its counts of the entity types Types (all: none
// listed); with Scan, also of the saved states it lists, less the entities in Active
// (IDs by type: those active somewhere in the cluster).
type versionsRequest struct {
	Types  []string            `cbor:"1,keyasint,omitempty"`
	Scan   bool                `cbor:"2,keyasint,omitempty"`
	Active map[string][]string `cbor:"3,keyasint,omitempty"`
	// List asks for the entities too (versionsReply.Entities): the active ones of
	// Types, and with Scan the passivated ones whose state is transparent.
	List bool `cbor:"4,keyasint,omitempty"`
	// Outcomes asks for the message outcomes of canaries in flight
	// (versionsReply.Outcomes; rollout.go).
	Outcomes bool `cbor:"5,keyasint,omitempty"`
}

// entityVersion is one entity in a versionsReply's list.
type entityVersion struct {
	Type        string `cbor:"1,keyasint"`
	ID          string `cbor:"2,keyasint"`
	Digest      string `cbor:"3,keyasint,omitempty"`
	Transparent bool   `cbor:"4,keyasint,omitempty"`
	Active      bool   `cbor:"5,keyasint,omitempty"`
}

// maxListedPassivated caps the passivated entities a member lists in a reply.
const maxListedPassivated = 1000

// versionsReply is a member's answer: its counts, and why it could not list its saved
// states (ScanError; empty when it did, or was not asked to).
type versionsReply struct {
	Counts    []versionCount `cbor:"1,keyasint,omitempty"`
	ScanError string         `cbor:"2,keyasint,omitempty"`
	// Entities is the list of versionsRequest.List (passivated ones: at most
	// maxListedPassivated).
	Entities []entityVersion `cbor:"3,keyasint,omitempty"`
	// Outcomes are the member's counts of versionsRequest.Outcomes.
	Outcomes []versionOutcome `cbor:"4,keyasint,omitempty"`
}

// versionsDecMode decodes versions requests and replies: lists of entity IDs, bounded
// by the transport's frame size.
var versionsDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{MaxNestedLevels: 6, MaxArrayElements: 1 << 24, MaxMapPairs: 1 << 16}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// localStateLister is a state store that lists what this member's replica holds
// (replstore.Store.LocalStates).
type localStateLister interface {
	LocalStates(typ string, fn func(shard int, id string, state []byte) bool) error
}

// errCannotListStates: the state store cannot list its states.
var errCannotListStates = errors.New("the state store cannot list its entity states")

// localVersions answers a versionsRequest from this member's own counts.
func (n *Node) localVersions(req versionsRequest) versionsReply {
	want := func(typ string) bool { return len(req.Types) == 0 || slices.Contains(req.Types, typ) }
	counts := map[activeKey]*versionCount{}
	at := func(k activeKey) *versionCount {
		c := counts[k]
		if c == nil {
			c = &versionCount{Type: k.typ, Digest: k.digest, Transparent: k.transparent}
			counts[k] = c
		}
		return c
	}
	for k, v := range n.active.counts() {
		if want(k.typ) {
			at(k).Active += v
		}
	}
	var rep versionsReply
	if req.Outcomes {
		rep.Outcomes = n.rollouts.outcomes(req.Types)
	}
	if req.List {
		for _, typ := range req.Types {
			for id, k := range n.active.list(typ) {
				rep.Entities = append(rep.Entities, entityVersion{Type: typ, ID: id, Digest: k.digest, Transparent: k.transparent, Active: true})
			}
		}
	}
	listed := 0
	if req.Scan {
		lister, ok := sharding.StateStoreAs[localStateLister](n.states)
		types := req.Types
		if len(types) == 0 {
			for _, t := range n.catalog.list() {
				types = append(types, t.Name)
			}
		}
		var errs []error
		for _, typ := range types {
			if !ok {
				errs = append(errs, fmt.Errorf("%w (%T)", errCannotListStates, n.states))
				break
			}
			active := map[string]bool{}
			for _, id := range req.Active[typ] {
				active[id] = true
			}
			err := lister.LocalStates(typ, func(_ int, id string, state []byte) bool {
				if strings.HasPrefix(id, deltaIDPrefix) || active[id] {
					return true // a delta (its base names the module), or an active entity
				}
				digest, transparent := savedModule(state)
				if info, ok := n.catalog.get(typ); digest == "" && ok && info.Rollout.inFlight() {
					digest = targetOf(info, id) // an explicit state takes its entity's version of the canary
				}
				at(activeKey{typ: typ, digest: digest, transparent: transparent}).Passivated++
				if req.List && transparent && listed < maxListedPassivated {
					listed++
					rep.Entities = append(rep.Entities, entityVersion{Type: typ, ID: id, Digest: digest, Transparent: true})
				}
				return true
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", typ, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			rep.ScanError = err.Error()
		}
	}
	for _, c := range counts {
		rep.Counts = append(rep.Counts, *c)
	}
	return rep
}

// savedModule reads, from an entity's saved state as the store holds it (with the
// journal's base framing or without), the module a transparent snapshot was made by;
// an explicit state, or one that does not decode, names none ("", false).
func savedModule(state []byte) (digest string, transparent bool) {
	b, err := sharding.DecodeBase(state)
	if err != nil {
		return "", false
	}
	kind, payload, _, err := decodeState(b.State)
	if err != nil {
		return "", false
	}
	switch kind {
	case stateInstance:
	case stateBase:
		if _, payload, err = splitBase(payload); err != nil {
			return "", false
		}
	default:
		return "", false
	}
	// The snapshot's header: magic, uvarint(format version), the 32-byte digest.
	if len(payload) < len(snapshotMagic) || string(payload[:len(snapshotMagic)]) != snapshotMagic {
		return "", false
	}
	rest := payload[len(snapshotMagic):]
	_, k := binary.Uvarint(rest)
	if k <= 0 || len(rest)-k < 32 {
		return "", false
	}
	return hex.EncodeToString(rest[k : k+32]), true
}

func (n *Node) handleVersions(req *cluster.Request) {
	var vr versionsRequest
	if err := versionsDecMode.Unmarshal(req.Body, &vr); err != nil {
		req.Reply(nil, fmt.Errorf("%w: malformed versions request", ErrBadRequest))
		return
	}
	n.owner.Go(func() {
		b, err := catalogEncMode.Marshal(n.localVersions(vr))
		req.Reply(b, err)
	})
}

// VersionUsage counts the entities of one version of an entity type's module, over the
// members that answered (TypeUsage.Errors names the others).
type VersionUsage struct {
	// Version is the version's number; 0 for a module the type's history no longer
	// lists.
	Version uint64 `json:"version"`
	Digest  string `json:"digest"`
	// Current: the version new activations use.
	Current bool `json:"current,omitempty"`
	// Active counts the entities running this module now; ActiveTransparent those of
	// them whose state is a transparent snapshot: they keep this module at their next
	// activation. The others take the current version then.
	Active            int `json:"active"`
	ActiveTransparent int `json:"active_transparent,omitempty"`
	// Passivated counts the entities not active whose saved state takes this version
	// at their next activation: transparent snapshots of this module
	// (PassivatedTransparent) and, for the current version, explicit states.
	Passivated            int `json:"passivated"`
	PassivatedTransparent int `json:"passivated_transparent,omitempty"`
}

// TypeUsage is the per-version count of an entity type's entities.
type TypeUsage struct {
	Type string `json:"type"`
	// Versions lists every version of the type's history, newest first, then any
	// module no longer in it that entities still run (Version 0).
	Versions []VersionUsage `json:"versions"`
	// PassivatedUnknown: the passivated counts are missing or partial (a member did
	// not answer, or the state store cannot list its states; Errors says which).
	PassivatedUnknown bool     `json:"passivated_unknown,omitempty"`
	Errors            []string `json:"errors,omitempty"`
}

// Older returns the entities on versions other than the current one: active, and
// passivated with a transparent state (they keep their module).
func (u TypeUsage) Older() (active, activeTransparent, passivatedTransparent int) {
	for _, v := range u.Versions {
		if v.Current {
			continue
		}
		active += v.Active
		activeTransparent += v.ActiveTransparent
		passivatedTransparent += v.PassivatedTransparent
	}
	return
}

// uses reports whether an entity runs the module digest or a saved state needs it.
func (u TypeUsage) uses(digest string) bool {
	for _, v := range u.Versions {
		if v.Digest == digest && (v.Active > 0 || v.PassivatedTransparent > 0) {
			return true
		}
	}
	return false
}

// VersionUsage returns, for each deployed entity type in types (all: none given), its
// entities by module version: active ones from every member's count, and, with scan,
// passivated ones from the state store (see TypeUsage). Members that do not answer are
// named in each TypeUsage's Errors; the call itself does not fail. Cost: with scan,
// it gathers the IDs of every active entity as `shardhost shards` does and each member
// reads the headers of the states it is the first replica of.
func (n *Node) VersionUsage(ctx context.Context, scan bool, types ...string) []TypeUsage {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	infos := map[string]TypeInfo{}
	for _, t := range n.catalog.list() {
		if len(types) == 0 || slices.Contains(types, t.Name) {
			infos[t.Name] = t
		}
	}
	replies, errs, scanFailed := n.askVersions(ctx, versionsRequest{Types: types, Scan: scan}, infos)
	out := []TypeUsage{}
	names := make([]string, 0, len(infos))
	for name := range infos {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		info := infos[name]
		u := TypeUsage{Type: name, PassivatedUnknown: !scan || scanFailed, Errors: errs}
		byDigest := map[string]int{} // the newest version listing a digest
		for k, v := range info.Versions() {
			u.Versions = append(u.Versions, VersionUsage{Version: v.Version, Digest: v.Digest, Current: k == 0})
			if _, ok := byDigest[v.Digest]; !ok {
				byDigest[v.Digest] = k
			}
		}
		for _, r := range replies {
			for _, c := range r.Counts {
				if c.Type != name {
					continue
				}
				digest := c.Digest
				if digest == "" {
					digest = info.Digest // an explicit state: the current version's
				}
				k, ok := byDigest[digest]
				if !ok {
					k = len(u.Versions)
					byDigest[digest] = k
					u.Versions = append(u.Versions, VersionUsage{Digest: digest})
				}
				v := &u.Versions[k]
				v.Active += c.Active
				v.Passivated += c.Passivated
				if c.Transparent {
					v.ActiveTransparent += c.Active
					v.PassivatedTransparent += c.Passivated
				}
			}
		}
		out = append(out, u)
	}
	return out
}

// askVersions asks every member (this one locally) for its counts, and with Scan first
// gathers the active entities' IDs of the types in infos. It returns the replies of
// the members that answered, what went wrong, and whether the passivated counts are
// partial.
func (n *Node) askVersions(ctx context.Context, req versionsRequest, infos map[string]TypeInfo) (replies []versionsReply, errs []string, scanFailed bool) {
	if req.Scan {
		states, err := n.sharding.ClusterShardingState(ctx)
		if err != nil {
			// Active entities of a member that did not answer would count as passivated.
			errs = append(errs, err.Error())
			scanFailed = true
		}
		req.Active = map[string][]string{}
		for _, st := range states {
			for _, sh := range st.Shards {
				if _, ok := infos[sh.Type]; ok {
					req.Active[sh.Type] = append(req.Active[sh.Type], sh.Entities...)
				}
			}
		}
	}
	body, err := catalogEncMode.Marshal(req)
	if err != nil {
		panic(err) // plain values
	}
	self := n.membership.Self()
	members := n.membership.Members()
	replies, rerrs := askEveryMember(members, func(m cluster.Member) (versionsReply, error) {
		if m.Address == self.Address {
			return n.localVersions(req), nil
		}
		var rep versionsReply
		b, err := n.messenger.Request(ctx, m.TransportAddr, topicVersions, body)
		if err == nil {
			err = versionsDecMode.Unmarshal(b, &rep)
		}
		if err != nil {
			return rep, fmt.Errorf("versions of %s: %w", m.Address, err)
		}
		return rep, nil
	})
	for i, r := range replies {
		if rerrs[i] != nil {
			errs = append(errs, rerrs[i].Error())
			scanFailed = true
		} else if r.ScanError != "" {
			errs = append(errs, members[i].Address+": "+r.ScanError)
			scanFailed = true
		}
	}
	return replies, errs, scanFailed
}

// registerVersionMetrics registers shardhost.module.entities.active: this member's
// active entities by type, module version and state kind.
func (n *Node) registerVersionMetrics(mp metric.MeterProvider) error {
	if mp == nil {
		return nil
	}
	m := obs.Meter(mp, "host")
	gauge, err := m.Int64ObservableGauge("shardhost.module.entities.active", metric.WithUnit("{entity}"),
		metric.WithDescription("Active entities on this member by entity type, module version (0: a module the type's history no longer lists) and whether their state is a transparent snapshot, which keeps its module at the next activation. [shardhost.entity.type, shardhost.module.version, shardhost.entity.state]"))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		type group struct {
			typ         string
			version     uint64
			transparent bool
		}
		versions := map[string]map[string]uint64{}
		groups := map[group]int64{}
		for k, v := range n.active.counts() {
			vs, ok := versions[k.typ]
			if !ok {
				vs = map[string]uint64{}
				if info, ok := n.catalog.get(k.typ); ok {
					all := info.Versions()
					for i := len(all) - 1; i >= 0; i-- { // the newest number of a digest wins
						vs[all[i].Digest] = all[i].Version
					}
				}
				versions[k.typ] = vs
			}
			groups[group{k.typ, vs[k.digest], k.transparent}] += int64(v)
		}
		for g, v := range groups {
			state := "explicit"
			if g.transparent {
				state = "transparent"
			}
			o.ObserveInt64(gauge, v, metric.WithAttributes(obs.EntityType.String(g.typ),
				attrModuleVer.Int64(int64(g.version)), attrEntityState.String(state)))
		}
		return nil
	}, gauge)
	return err
}

// attrEntityState is an entity's state kind: explicit (shardhost_snapshot) or
// transparent (a snapshot of its instance).
const attrEntityState = attribute.Key("shardhost.entity.state")
