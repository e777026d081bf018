// Package host is one shardhost process: a Node joins the cluster (package cluster),
// runs cluster sharding (package sharding) and distributed data (package ddata), and
// runs each entity as a sandboxed wasm instance on wazero, behind the host functions of
// the ABI (package abi). It serves the management API (HTTP), the web console and the
// metrics, and keeps deployed modules and the catalog of entity types.
//
// Design: docs/design.md; the guest contract: abi/SPEC.md; how to run it: README.md.
//
// # What an embedder uses
//
// Start with a Config (DefaultConfig) returns a running Node: Deploy and Undeploy,
// Sharding (Tell and Ask to entities), Replicator, Ready, the API's Handler, Close (a
// graceful leave) and Kill. The API's types
// (DeployResult, TypeInfo, ShardsReport, Readiness, ...) are its JSON replies, and
// APIConfig, APITokens and Role secure it. The errors (ErrInvalidModule, GuestError,
// EntityError, ...) keep their meaning through the API's error codes.
//
// Runtime, Module and Instance run one wasm module on their own, without a cluster:
// for tests and benchmarks of entity modules (NewRuntime, Runtime.Compile,
// Module.Instantiate).
// Snapshot and its parts are the format of a saved entity state (abi/SPEC.md,
// "Snapshots"), public so that tools can read saved states. Digest, TokenDigest,
// ValidateTypeName and NodeHeader are what the shardhost command shares with the node.
// The catalog, the module store, the ABI's host functions and the console are
// unexported.
package host
