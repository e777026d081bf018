package host

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/sharding"
)

// Upgrading running entities (shardhost upgrade; docs/sharding.md, "Upgrading running
// entities"). An entity with explicit state takes the type's current version at its
// next activation (journal.go, "Module versions"); Upgrade brings that activation
// forward for the active ones that run an older version: it passivates them, a shard
// at a time, and with Now activates each again at once. A passivation is the graceful
// one: messages that arrive meanwhile wait in the entity's buffers, and no ask fails.
// An entity whose state is a transparent snapshot cannot move: its state belongs to its
// module; Upgrade lists it with the reason.

// upgradeParallel bounds the entities of one shard that Upgrade passivates at once.
const upgradeParallel = 8

// UpgradeOptions are Upgrade's options.
type UpgradeOptions struct {
	// DryRun lists what an upgrade would do, and does nothing.
	DryRun bool
	// Now activates each passivated entity again at once (on the current version),
	// instead of at its next message.
	Now bool
	// only, when set, limits the upgrade to the entities it reports (by ID and the
	// module digest they run): a canary's (rollout.go).
	only func(id, digest string) bool
}

// UpgradeResult is what Upgrade did, or with DryRun would do.
type UpgradeResult struct {
	Type    string `json:"type"`
	Version uint64 `json:"version"`
	DryRun  bool   `json:"dry_run,omitempty"`
	// Upgradable counts the active entities on older versions that can move (with
	// explicit state, or a transparent one under --history all): those the upgrade
	// passivates.
	Upgradable int `json:"upgradable"`
	// Upgraded counts those it passivated (with Now: and activated again); Failed
	// lists those it could not, with why (they stay as they were).
	Upgraded int             `json:"upgraded"`
	Failed   []UpgradeEntity `json:"failed,omitempty"`
	// Cannot lists the entities that cannot upgrade, with the reason: those whose
	// state is a transparent snapshot of an older module, active ones and (from the
	// state store, at most 1,000 per member) passivated ones; under --history all,
	// those whose journal does not replay on the new module (for active ones, in a
	// dry run only: an upgrade reports them in Failed), with where it differs.
	Cannot []UpgradeEntity `json:"cannot"`
	// Remaining is the type's entities by version after the upgrade (VersionUsage).
	Remaining TypeUsage `json:"remaining"`
	// Errors names the members that did not answer (their entities are left out).
	Errors []string `json:"errors,omitempty"`
}

// UpgradeEntity is one entity in an UpgradeResult, with its module version and why it
// did not upgrade.
type UpgradeEntity struct {
	ID      string `json:"id"`
	Version uint64 `json:"version"`
	Digest  string `json:"digest"`
	Active  bool   `json:"active"`
	Reason  string `json:"reason"`
}

// Upgrade moves the active entities of the type name that have explicit state and run
// an older version to its current version (see above), a shard at a time, and lists
// the entities that cannot move. Errors: ErrUnknownEntityType. A member that does not
// answer, or an entity that fails to passivate or activate, is reported in the result,
// not returned.
func (n *Node) Upgrade(ctx context.Context, name string, opts UpgradeOptions) (UpgradeResult, error) {
	info, ok := n.catalog.get(name)
	if !ok {
		return UpgradeResult{}, n.unknownType(name)
	}
	versionOf := map[string]uint64{}
	all := info.Versions()
	for i := len(all) - 1; i >= 0; i-- {
		versionOf[all[i].Digest] = all[i].Version
	}
	replies, errs, _ := n.askVersions(ctx, versionsRequest{Types: []string{name}, Scan: true, List: true},
		map[string]TypeInfo{name: info})
	res := UpgradeResult{Type: name, Version: info.Version, DryRun: opts.DryRun, Cannot: []UpgradeEntity{}, Errors: errs}
	allHistory := info.Settings().KeepsAllHistory()
	byShard := map[int][]string{}
	for _, r := range replies {
		for _, ev := range r.Entities {
			if ev.Type != name || ev.Digest == targetOf(info, ev.ID) || ev.Digest == "" ||
				(opts.only != nil && !opts.only(ev.ID, ev.Digest)) {
				continue
			}
			if ev.Transparent {
				// Under --history all, a replay of its journal on the new module moves
				// it (replayupgrade.go): tried here first for a dry run, and for a
				// passivated entity, which moves at its next activation.
				reason := ""
				switch {
				case !allHistory:
					reason = "its state is a transparent snapshot of its module's memory, which another module cannot read " +
						"(a type that keeps every journal record, deploy --history all, upgrades it by a replay)"
				case opts.DryRun || !ev.Active:
					if err := n.trialReplayUpgrade(ctx, name, ev.ID, targetOf(info, ev.ID)); err != nil {
						reason = fmt.Sprintf("its journal does not replay on version %d's module: %v", info.Version, err)
					}
				}
				if reason != "" {
					res.Cannot = append(res.Cannot, UpgradeEntity{ID: ev.ID, Version: versionOf[ev.Digest], Digest: ev.Digest, Active: ev.Active,
						Reason: reason})
					continue
				}
			}
			if ev.Active {
				res.Upgradable++
				shard := abi.ShardID(ev.ID, info.NumberOfShards)
				byShard[shard] = append(byShard[shard], ev.ID)
			}
		}
	}
	sort.Slice(res.Cannot, func(i, j int) bool { return res.Cannot[i].ID < res.Cannot[j].ID })
	if !opts.DryRun {
		shards := make([]int, 0, len(byShard))
		for sh := range byShard {
			shards = append(shards, sh)
		}
		sort.Ints(shards)
		for _, sh := range shards {
			if ctx.Err() != nil {
				break
			}
			ids := byShard[sh]
			sort.Strings(ids)
			failed := n.upgradeShard(ctx, name, ids, opts.Now)
			res.Upgraded += len(ids) - len(failed)
			res.Failed = append(res.Failed, failed...)
		}
		if err := ctx.Err(); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("stopped before every shard: %v", err))
		}
	}
	if us := n.VersionUsage(ctx, true, name); len(us) == 1 {
		res.Remaining = us[0]
	}
	n.log.InfoContext(ctx, "entity type upgraded", "type", name, "version", info.Version, "dry_run", opts.DryRun,
		"upgradable", res.Upgradable, "upgraded", res.Upgraded, "failed", len(res.Failed), "cannot", len(res.Cannot))
	return res, nil
}

// upgradeShard passivates the entities ids of one shard (upgradeParallel at once), and
// with now activates each again; it returns those that failed.
func (n *Node) upgradeShard(ctx context.Context, typ string, ids []string, now bool) []UpgradeEntity {
	var mu sync.Mutex
	var failed []UpgradeEntity
	sem := make(chan struct{}, upgradeParallel)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // no owner: the call waits for it
			defer wg.Done()
			defer func() { <-sem }()
			if err := n.upgradeEntity(ctx, typ, id, now); err != nil {
				mu.Lock()
				failed = append(failed, UpgradeEntity{ID: id, Active: true, Reason: err.Error()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(failed, func(i, j int) bool { return failed[i].ID < failed[j].ID })
	return failed
}

// upgradeEntity passivates the entity typ/id and, with now, activates it again: a
// message no guest sees (a timer message that names no timer: the host drops it after
// the activation, and the journal keeps no record of it).
func (n *Node) upgradeEntity(ctx context.Context, typ, id string, now bool) error {
	actx, cancel := context.WithTimeout(ctx, n.cfg.Sharding.AskTimeout)
	defer cancel()
	if _, err := n.sharding.Passivate(actx, typ, id); err != nil {
		return fmt.Errorf("passivation: %w", err)
	}
	if !now {
		return nil
	}
	r, err := n.sharding.AskMessage(actx, sharding.Message{EntityType: typ, EntityID: id, Kind: sharding.KindTimer, Sender: upgradeWake})
	if err != nil {
		return fmt.Errorf("activation: %w", err)
	}
	digest, why, _ := strings.Cut(string(r.Payload), "\n")
	if cur, ok := n.catalog.get(typ); ok && digest != targetOf(cur, id) {
		if why == "" {
			why = "it runs another module"
		}
		return fmt.Errorf("stays on version %d: %s", n.versionOf(typ, digest), why)
	}
	return nil
}

// upgradeWake names the timer of Upgrade's activations: Tag 0, which no timer has
// (timerGen starts at 1), so the entity drops it.
const upgradeWake = "shardhost.upgrade"
