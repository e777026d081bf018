//go:build !transparent

package main

import shardhost "github.com/shardhost/shardhost/guest-sdk/go"

// count is the counter's explicit state: the SDK saves its State (a signed varint) when
// the host asks for a snapshot and loads it into the next incarnation, whichever version
// of the code that runs.
type count struct {
	shardhost.Stateful[shardhost.Int64, *shardhost.Int64]
}

// n is the count.
func (c *count) n() *int64 { return (*int64)(&c.State) }
