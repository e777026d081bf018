//go:build transparent

package main

// account is one bank account, its state in a plain field: the entity does not
// implement shardhost.Snapshotter, so the host snapshots the instance's memory, and the
// entity stays on the module its state was made by (docs/state.md, "Transparent state").
type account struct{ s accountState }

// state is the account's state.
func (a *account) state() *accountState { return &a.s }
