// Package abi is the contract between a shardhost host and the wasm modules it runs:
// the ABI version, the names and signatures of the exports a module provides and of the
// host functions it may import, their encodings and error codes, and the stable shard
// hash that hosts and guest SDKs share. SPEC.md in this directory is the normative text;
// this package holds the same facts as Go constants.
//
// The package uses the standard library only, so that guest SDKs built with TinyGo or
// Go's wasip1 port can depend on it.
//
// # What an embedder uses
//
// All of it: the package is the contract, and guest SDKs and hosts alike use every
// name in it.
package abi
