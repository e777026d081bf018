//go:build transparent

package main

// count is the counter's state in a plain field: the entity does not implement
// shardhost.Snapshotter, so the host snapshots the instance's memory, and the entity
// stays on the module its state was made by (docs/state.md, "Transparent state").
type count struct{ v int64 }

// n is the count.
func (c *count) n() *int64 { return &c.v }
