// Package host is one shardhost process: a Node joins the cluster (package cluster),
// runs cluster sharding (package sharding) and distributed data (package ddata), and
// runs each entity as a sandboxed wasm instance on wazero, behind the host functions of
// the ABI (package abi). It serves the management API (HTTP), the web console and the
// metrics, and keeps deployed modules and the catalog of entity types.
//
// Design: docs/design.md; the guest contract: abi/SPEC.md; how to run it: README.md;
// where each part lives: ARCHITECTURE.md.
//
// # What an embedder uses
//
// Every exported name of the package is named here; anything else is unexported or under
// host/internal (the module checks and rewrites, host/internal/wasmbin).
//
// A node: Start with a Config (DefaultConfig; a ConfigError names a field that cannot
// work) returns a running Node: Deploy and Undeploy, Sharding (Tell and Ask to
// entities), Replicator, Ready, the API's Handler, Close (a graceful leave) and Kill.
// Config.Runtime is a RuntimeConfig (the wasm sandbox: memory cap, deadlines, message
// size; the instance pool, DefaultInstancePoolBytes, 1/DefaultInstancePoolFraction of
// physical memory); Config.API an APIConfig (DefaultAPIConfig), with APITokens (LoadAPITokens,
// which fails with ErrBadTokens) and a Role for each caller (ParseRole: RoleNone,
// RoleRead, RoleClient, RoleAdmin); Config.StateStore names a StateStoreKind
// (ParseStateStore: StateStoreBuiltin, StateStorePostgres).
//
// What the node's methods return, and the API's JSON replies: DeployResult (with a
// MemberDeployment per member and the type's Setting list), UndeployResult, TypeInfo (a
// type as the catalog holds it, with each ModuleVersion), ModuleInfo, the versions in
// view (VersionUsage, TypeReport's TypeStatus with its TypeUsage, ModuleReport: each
// version's active and passivated entities), Upgrade's UpgradeResult (with its
// UpgradeOptions and each UpgradeEntity), the canary rollouts of DeployCanary
// (CanaryOptions, ParseCanaryShare, a TypeInfo's Rollout in state RolloutCanary or
// RolloutRolledBack; RolloutStatusOf's RolloutStatus with each version's
// VersionOutcomes, RolloutPromote, RolloutRollback's RollbackResult), ShardsReport (a
// RegionReport per member, a ShardReport per shard), Readiness (GET /ready), DDataEntry
// (a key of the replicator), ForgetResult (the reply of ForgetStateMember's route), and
// History's HistoryPage of HistoryRecord values (an entity's journal, read without
// activating it), TimeTravelResult (a revert's or a fork's). Query answers a read-only question on a
// throwaway instance of an entity's saved state (POST /v1/query). IdempotencyKeyHeader names the header of an ask's or a tell's
// idempotency key.
//
// Errors keep their meaning through the API's error codes and across members
// (sharding.CodedError). A message that failed inside the guest is a *GuestError
// (ErrGuestTrap, or ErrGuestDeadline), an entity's own refusal an *EntityError; an
// entity that keeps failing answers ErrEntityBackoff. A deploy fails with
// ErrBadRequest, ErrModuleTooLarge, ErrInvalidModule, ErrShardsChanged or
// ErrModuleUnavailable; an undeploy with ErrCannotDeleteState, ForgetStateMember with
// ErrNoStateRing. An ask fails with ErrMessageTooLarge or ErrReplyTooLarge past the
// size cap, with ErrInstanceClosed or ErrRuntimeClosed while the node stops, and with
// ErrBadSnapshot, ErrRestoreFailed (which matches ErrSnapshotFailed) or
// ErrNotSnapshottable when a saved state does not restore or cannot be taken; a move to
// a new module version whose shardhost_migrate fails, with ErrMigrationFailed (the
// entity stays on its version); a transparent state's move by a replay of its journal
// (under sharding.HistoryAll) that does not match it, with ErrReplayUpgrade, a
// *ReplayDivergence saying where.
//
// Entity logs (docs/observability.md, "Entity logs"): an entity's stdout, stderr and
// log calls are EntityLogLine values, kept in a ring per entity (DefaultEntityLogLines,
// up to MaxEntityLogLines per type; DefaultEntityLogRate, DefaultEntityLogBytes bound
// them); EntityLogs reads and FollowEntityLogs follows those a LogQuery selects, at a
// level ParseLogLevel reads.
//
// Local replay (the shardhost replay command): the API gives out an entity's EntityBase
// (its saved state, and the module that runs it), its journal as JournalPage values of
// RawRecord, and module bytes; ReplayJournal runs a ReplayInput (those, or another
// module: a trial upgrade) in a runtime of its own, outside any node, and returns a
// ReplayReport: a ReplayedRecord per message beside its record, and ReplayDebug where a
// replay stopped for a debugger.
//
// Durable reminders (abi/SPEC.md, "v1: reminders"): the API lists an entity's
// reminders as EntityReminders (the shardhost reminders command). Scheduled messages
// (docs/sharding.md, "Scheduled messages"): POST /v1/tell with deliver_at (ParseDeliverAt)
// or deliver_in answers ScheduledTellResult, GET /v1/scheduled a ScheduledList of
// ScheduledInfo (DefaultScheduledListLimit, MaxScheduledListLimit), DELETE
// /v1/scheduled/{id} a ScheduledCancelResult.
//
// What the shardhost command shares with the node: TokenDigest (the form of a token in
// a tokens file), ValidateTypeName, and NodeHeader (the response header that names the
// member that answered).
//
// The wasm engine (the runtime, its modules and instances, transparent snapshots and
// their encoding, abi/SPEC.md "State: snapshots"), the catalog, the module store, the
// ABI's host functions and the console are unexported: the API and the ABI are the
// supported ways in.
package host
