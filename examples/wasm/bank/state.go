//go:build !transparent

package main

import shardhost "github.com/shardhost/shardhost/guest-sdk/go"

// account is one bank account. Its state is explicit: the SDK saves State through its
// MarshalBinary when the host asks for a snapshot, and loads it into the next
// incarnation, whichever version of the code that runs.
type account struct {
	shardhost.Stateful[accountState, *accountState]
}

// state is the account's state.
func (a *account) state() *accountState { return &a.State }
