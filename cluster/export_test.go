package cluster

// TicksOf returns how many ticks of its core m has run and published the view of, for
// the tests of the cluster_test package: a test that wants something not to happen
// (the leader's actions, the resolver's) waits for ticks after the state it needs, then
// looks, rather than sleeping.
func TicksOf(m *Membership) uint64 { return m.ticks.Load() }
