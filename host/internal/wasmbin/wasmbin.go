// Package wasmbin checks and rewrites an entity module's binary at deploy, before wazero
// compiles it. It reads and writes the WebAssembly binary format itself (the standard
// library, the abi constants and the value types of wazero's api package, nothing else),
// and every function is a pure function of the bytes it is given: every member that
// deploys the same module compiles the same binary.
//
// What it does, in the order the host's runtime does it when it loads a module (Rewrite
// does all but the first):
//
//   - CheckBounds: every vector count a module states fits in its bytes, before wazero
//     decodes it (wazero allocates by the counts), and its tables' elements stay under a
//     cap (bounds.go).
//   - export every mutable global, so that a transparent snapshot reaches the guest's
//     whole state (globals.go);
//   - loop checks that let the host stop a guest at its deadline, and the one export,
//     shardhost_dispatch, through which the host calls every other (deadline.go,
//     dispatch.go);
//   - coalesce Go's tens of thousands of data segments into a few (data.go);
//   - cap the tables' maximum, so that table.grow keeps to the cap too (bounds.go).
//
// RestoreImage derives the module a transparent snapshot is restored into (globals.go).
//
// Why each rewrite exists, and what it costs, is written at the top of its file. The
// exports the rewrites add and reserve are part of the guest contract (abi/SPEC.md,
// "Exports" and "State: snapshots"); ARCHITECTURE.md places this package in host, and
// docs/design.md (invariant 8) names the bounds check among what keeps bad input from
// taking a host down.
package wasmbin

import "errors"

// ErrInvalidModule marks a module refused by a check or a rewrite: every error this
// package returns wraps it. host re-exports it as host.ErrInvalidModule (whose text
// this is), the error a deploy of such a module fails with.
var ErrInvalidModule = errors.New("host: invalid module")

// Rewritten is a module as the host compiles it, and what the rewrites found in it.
type Rewritten struct {
	// Wasm is the rewritten binary.
	Wasm []byte
	// Globals are the module's mutable globals, in index order, each with the name of
	// an export of it in Wasm.
	Globals []Global
	// Ops are the exports shardhost_dispatch calls (those the module exports with the
	// ABI's type).
	Ops Ops
}

// Rewrite rewrites a module binary for the host: every mutable global exported, the
// deadline's loop checks and shardhost_dispatch added (its start section becomes an
// export: the host runs it after instantiation, under the activation deadline), the
// data segments coalesced, and the tables' maximum capped. Call CheckBounds first: the
// rewrites read the module, and wazero reads what they make of it. Errors wrap
// ErrInvalidModule and say what is malformed; the function never panics, whatever the
// input.
func Rewrite(wasm []byte) (Rewritten, error) {
	out, globals, _, err := rewriteGlobals(wasm)
	if err != nil {
		return Rewritten{}, err
	}
	out, dr, err := addDeadlineChecks(out)
	if err != nil {
		return Rewritten{}, err
	}
	out, _ = coalesceData(out)
	out = capTables(out)
	return Rewritten{Wasm: out, Globals: globals, Ops: dr.ops}, nil
}
