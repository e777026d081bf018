package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// The two-phase deploy protocol: Deploy and Undeploy on the member that the API call
// reached, and the handlers of the host/* topics through which the other members stage,
// discard, prepare and fetch a module (Node.Deploy says how the steps fit together).

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

// deployUsageTimeout bounds a deploy's count of the type's entities by version.
const deployUsageTimeout = 5 * time.Second

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
	// Older lists, by version, the entities that stay on earlier versions of the
	// module, counted as the deploy began (VersionUsage; versions without any are left
	// out): active ones (Active) run theirs until their next activation, when those
	// with explicit state take the new version and those whose state is a transparent
	// snapshot (ActiveTransparent) keep their module; passivated ones whose state is a
	// transparent snapshot (Passivated, PassivatedTransparent) keep theirs too. Empty
	// for a new type.
	Older []VersionUsage `json:"older,omitempty"`
	// OlderErrors says why Older may be partial (members that did not answer, a state
	// store that cannot list its states: passivated entities are not counted).
	OlderErrors []string `json:"older_errors,omitempty"`
	// CanaryMoved, for a canary deploy (DeployCanary), is the move of the canary's
	// active entities to it.
	CanaryMoved *UpgradeResult `json:"canary_moved,omitempty"`
	// Activation says how new instances of the module are made, the same on every
	// member: "pre-initialized image" (its state after _initialize, written into each
	// new instance; "pre-initialized image, mapped copy-on-write" when new instances
	// map it from a file shared by all of them and keep only the pages they write), or "initialised at each activation (REASON)" when its
	// initialisation is not the same for every instance (it calls host functions of
	// the shardhost module or writes output) or its code may change tables or data
	// segments.
	Activation string `json:"activation,omitempty"`
}

// olderVersions returns the versions of usage, counted before a deploy of the module
// current, that entities stay on after it (DeployResult.Older), and the count's errors.
func olderVersions(usage TypeUsage, current string) ([]VersionUsage, []string) {
	var out []VersionUsage
	for _, v := range usage.Versions {
		if v.Digest == current {
			continue // the new version's module: those entities run it already
		}
		// Passivated with explicit state: they take the new version.
		v.Passivated, v.Current = v.PassivatedTransparent, false
		if v.Active > 0 || v.Passivated > 0 {
			out = append(out, v)
		}
	}
	errs := usage.Errors
	if usage.Type != "" && usage.PassivatedUnknown && len(errs) == 0 {
		errs = []string{"passivated entities not counted"}
	}
	return out, errs
}

// Setting is one setting of an entity type, named as the deploy flag and rendered as
// the flag takes it (durations as Go durations, "0" for none).
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SettingList returns the type's settings, by deploy flag: shards, allocation, checkpoint,
// history, idempotency-retention, max-retries, passivate-after, max-active,
// passivation-strategy, remember-entities, role, log-lines, egress, egress-timeout,
// egress-max-response, egress-rate, delivery, http-route, public, http-max-body,
// http-rate and state-ttl.
func (t TypeInfo) SettingList() []Setting {
	checkpoint := t.Checkpoint
	if checkpoint == "" {
		checkpoint = sharding.CheckpointJournal
	}
	history := strconv.Itoa(t.History)
	switch {
	case t.HistoryAgeMs > 0:
		history = (time.Duration(t.HistoryAgeMs) * time.Millisecond).String()
	case t.History == 0:
		history = strconv.Itoa(sharding.DefaultHistory)
	case t.History == sharding.HistoryAll:
		history = "all"
	case t.History < 0:
		history = "0"
	}
	retention := time.Duration(t.IdempotencyRetentionMs) * time.Millisecond
	if retention == 0 {
		retention = sharding.DefaultIdempotencyRetention
	}
	strategy := t.PassivationStrategy
	if strategy == "" {
		strategy = sharding.PassivationLRU
	}
	allocation := t.Allocation
	if allocation == "" {
		allocation = sharding.AllocationLeastShard
	}
	delivery := t.Delivery
	if delivery == "" {
		delivery = sharding.DeliveryEffectivelyOnce
	}
	list := []Setting{
		{"shards", strconv.Itoa(t.NumberOfShards)},
		{"allocation", allocation},
		{"checkpoint", checkpoint},
		{"history", history},
		{"idempotency-retention", retention.String()},
		{"max-retries", maxRetriesSetting(t.MaxRetries)},
		{"passivate-after", (time.Duration(t.PassivateAfterMs) * time.Millisecond).String()},
		{"max-active", strconv.Itoa(t.MaxActive)},
		{"passivation-strategy", strategy},
		{"remember-entities", strconv.FormatBool(t.RememberEntities)},
		{"role", t.Role},
		{"log-lines", strconv.Itoa(cmp.Or(t.LogLines, DefaultEntityLogLines))},
	}
	list = append(list, egressSettingList(t)...)
	list = append(list, Setting{"delivery", delivery})
	list = append(list, httpRouteSettingList(t)...)
	return append(list, Setting{"state-ttl", (time.Duration(t.StateTTLMs) * time.Millisecond).String()})
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
// wazero's interpreter (wasmRuntime.Load), stored it durably and started the type's region:
// its entities answer from then on, on the interpreter, while each member compiles the
// module in the background (wasmModule.CompileInBackground); new activations use the
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
	return n.deploy(ctx, wasm, st, nil)
}

// deploy is Deploy, and with canary DeployCanary.
func (n *Node) deploy(ctx context.Context, wasm []byte, st sharding.TypeSettings, canary *CanaryOptions) (res DeployResult, err error) {
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
	if err := validateEgress(st); err != nil {
		return DeployResult{}, err
	}
	if err := n.checkHTTPRoutes(st); err != nil {
		return DeployResult{}, err
	}
	self := n.membership.Self()
	digest := moduleDigest(wasm)
	var rollout *Rollout
	if canary != nil {
		if prev.Name == "" {
			prev.Name = name
		}
		if rollout, err = canary.rollout(prev, exists, digest); err != nil {
			return DeployResult{}, err
		}
	}
	if exists && rollout == nil && prev.Digest == digest && len(settingChanges(prev, n.catalog.next(st, prev.Digest, prev.Size, self.Address, nil))) == 0 {
		// The same module with the same settings: nothing to deploy, no new version.
		span.SetAttributes(attrModuleVer.Int64(int64(prev.Version)), attrModuleDigest.String(prev.Digest))
		return DeployResult{Type: prev, Unchanged: true, Members: []MemberDeployment{}, Settings: prev.SettingList()}, nil
	}
	// The type's entities by version, counted while the module is validated: what
	// stays on older versions, and which old versions the history must keep.
	var usage TypeUsage
	var counted sync.WaitGroup
	if exists {
		counted.Add(1)
		go func() { // no owner: the call waits for it on every path (the defer)
			defer counted.Done()
			// Bounded: a member that does not answer makes the count partial (and
			// keeps every old version), not the deploy slow.
			uctx, cancel := context.WithTimeout(ctx, deployUsageTimeout)
			defer cancel()
			if us := n.VersionUsage(uctx, true, name); len(us) == 1 {
				usage = us[0]
			}
		}()
	}
	defer counted.Wait()
	staging := n.stageEverywhere(ctx, digest, wasm)
	mod, _, err := n.modules.put(ctx, digest, wasm)
	if err != nil {
		n.discardStaged(ctx, digest, staging())
		return DeployResult{}, err
	}
	counted.Wait()
	// An old version goes from the history only when no entity runs it and no saved
	// state needs it, as far as the count knows: when it is partial, none goes.
	keep := func(d string) bool {
		return usage.Type == "" || usage.PassivatedUnknown || usage.uses(d) || (rollout != nil && d == rollout.StableDigest)
	}
	info := n.catalog.next(st, mod.Digest, mod.Size, self.Address, keep)
	if rollout != nil {
		rollout.Canary = info.Version
		info.Rollout = rollout
	}
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
	res = DeployResult{Type: info, Members: n.tellEveryMember(ctx, info, staged), Settings: info.SettingList(),
		Activation: mod.Activation()}
	// Compiled once every member has validated it, so that on a shared machine the
	// compilations do not slow the others' validations; asks run on the interpreter
	// meanwhile.
	mod.CompileInBackground()
	if exists {
		res.Changed = settingChanges(prev, info)
		res.Older, res.OlderErrors = olderVersions(usage, info.Digest)
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
	var deleter sharding.TypeStateDeleter
	if deleteState {
		var ok bool
		if deleter, ok = sharding.StateStoreAs[sharding.TypeStateDeleter](n.states); !ok {
			return UndeployResult{}, fmt.Errorf("%w (%T)", ErrCannotDeleteState, n.states)
		}
	}
	info, ok := n.catalog.removal(name)
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
	if marked, ok := n.catalog.stateDeleted(name, at); ok {
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
		// No owner: each lives one request, and the function returned waits for it
		// (deploy calls it on every path).
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
		go func() { // no owner: it lives one request, which the call waits for
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
		go func() { // no owner: it lives one request, which the call waits for
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
	if r := cur.Rollout; r != nil && r.State == RolloutRolledBack {
		// The canary's failures were its module's: its entities start afresh on the
		// stable one (backoff).
		prefix := cur.Name + "/"
		n.backoff.forget(func(entity string) bool {
			id, ok := strings.CutPrefix(entity, prefix)
			return ok && r.inCanary(cur.Name, id)
		})
	}
	if _, err := n.modules.get(ctx, cur.Digest, n.moduleSources(cur)); err != nil {
		return err
	}
	n.rt.logs.setTypeLines(cur.Name, cur.LogLines)
	err = n.sharding.StartType(cur.Settings())
	return err
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
			if n.owner.Context().Err() != nil {
				// The node is stopping: an expected end, not a failure.
				n.log.Info("entity type not prepared: the node is stopping", "type", info.Name)
				return
			}
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
		if !validDigest(digest) || moduleDigest(wasm) != digest {
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

// maxRetriesSetting renders TypeInfo.MaxRetries as the deploy flag takes it: the
// default's value for 0, and 0 for never (-1).
func maxRetriesSetting(v int) string {
	switch v {
	case 0:
		return strconv.Itoa(sharding.DefaultMaxRetries)
	case -1:
		return "0"
	}
	return strconv.Itoa(v)
}
