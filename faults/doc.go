// Package faults is a fault-schedule harness for shardhost, after Jepsen: several
// members in one process on the in-memory transport and gossip network
// (cluster.InmemNetwork, cluster.InmemGossipNetwork), each running membership, the
// distributed data replicator, the replicated entity state store (bbolt files in a data
// directory per member) and cluster sharding with in-memory Go entities. A seed draws a
// schedule of faults (partitions, crashes and restarts, pauses, a lossy network, leaves
// and joins, the coordinator's member killed during a handoff, a member's clock stepped
// or drifting); clients record a history of asks and distributed data operations while
// the faults happen; the history is then checked:
//
//   - every entity's history is linearizable (github.com/anishathalye/porcupine), with
//     timeouts and other failed calls modelled as ambiguous (they may or may not have
//     happened);
//   - a majority read of distributed data sees every majority write acknowledged before
//     it started;
//   - no two lives of one entity overlap, by a registry of the activations and stops
//     the members' entity factories see (Akka's sharding spec's GlobalRegistry).
//
// Time. Each member has a simulated clock (memberClock, clock.go): real time moved by an
// offset (ClockSkew steps it) and running at a rate (ClockDrift, 0.9 to 1.1: a lease
// tolerates a bounded drift, schedule.go says why). Every component of the member that
// reads time through a hook reads it: the membership core (cluster.MembershipConfig.Now:
// its ticks, the arrival of messages and heartbeat responses, which the failure
// detector measures, the majority contact, the resolver's stable-after), on which
// sharding measures its hosting lease and DownRemovalMargin (Membership.Now); sharding's
// idle passivation and the coordinator's timestamps (sharding.Config.Now); the state
// store's hybrid clock; and the distributed data replicator's rounds and expiry. The
// core is passed the clock's advances only (a clock set back would stall its heartbeats
// and stretch the lease; time.Now's monotonic reading never goes back), so a step
// forward reaches it as a pause of that length, and one back as nothing.
//
// Still on real time: memberlist's own probes, suspicion timers and push-pull, the
// transports (in-memory delays and holds), every goroutine's ticker (the core is ticked
// every 100 ms of real time, whatever its clock reads), and every timeout and context
// deadline (requests, asks, the harness's waits). So the simulated clock moves what
// the members measure, not when they run.
//
// The schedule is a pure function of the seed; the run is not: goroutines are
// scheduled by the runtime, and the timers above, the transports and memberlist fire on
// the machine's clock, whose pace a loaded machine changes; the simulated clocks read
// real time too. So a failing seed is rerun, and shrunk by dropping faults one at a time
// while it still fails. The package only serves tests: `go test ./faults -seeds N`
// (make soak) runs the schedules (faults_test.go says how to rerun one). ClockDrift
// joined the default kinds after seeds 7000-7039 (-kinds=clock-skew,clock-drift) and
// 7100-7159 (all) passed; it changed the faults of some seeds drawn before (seed
// 1449's first fault is now kill-coordinator, not join).
//
// Open failures. About 1 schedule in 100 failed on a loaded 2-core machine, a different
// handful of seeds each run of 200: counters whose histories are not linearizable (seeds
// 10, 40, 45, 106 in three runs) and two overlapping lives of one entity (seeds 68, 84,
// 112), mostly with pauses past the failure detector, clock skew and bridge partitions.
// A soak of 1,500 schedules (cutting off one member at most) failed 14 times, each with
// a bridge or a one-way partition among its faults: a member cut off from the majority
// (behind a bridge member, or unable to answer) went on hosting while the majority
// downed it and, after DownRemovalMargin, moved its shards (known bugs 2 and 3, fixed
// below). On a machine loaded several times over its cores (load average above 20 on
// 2 cores), runs of 2 schedules at once still fail a few in 100, with the cluster
// falling apart into members downed and restarted for tens of seconds and counters
// read back from nothing (seeds 21, 22, 59 of one run of 60, before known bug 1 was
// fixed; each passes alone). Until they are found and fixed, make test does not run the
// schedules (TestFaultSchedules skips without -seeds).
//
// Bugs found here (each has a test named after its seed; those not fixed yet run with
// -known-bugs):
//
//  1. Fixed. The replicated state store read a shard from the first K members up of
//     its priority order. When members were downed, that set changed, and the new set
//     could hold none of the last acknowledged writes (they were on the downed
//     members, and anti-entropy had not copied them yet): the entity's next activation
//     lost them. A partition that cuts off two members can hold two of a shard's three
//     replicas. The store now keeps gone members in its ring, with joint quorums of
//     the old and new replicas, until every member up has handed their shards over
//     (sharding/statestore_ring.go); with two of three replicas gone, the shard is
//     unavailable until they return with their data, as the harness restarts them.
//     The ring was kept in memory until it was saved in the state file: when every
//     member had been downed (seed 2006's bridges, before the resolver's fix in
//     2ad2128), the harness restarted them one by one, and the first, with no member
//     running to join, formed a new cluster alone and served every shard from its own
//     disk until it learnt the retained members (TestRetainedMembersSurviveAWholeClusterRestart
//     in sharding). Exited members also went on gossiping until their restart, carrying
//     the old cluster's state into the new one, which downed itself again (23
//     whole-cluster restarts in one run of seed 2006); they now stop as the host's
//     process does (Cluster.watchExit).
//     Seed 64: sharding's TestReplicaSetChangeLosesNoAcknowledgedWrite reproduces it
//     deterministically; TestSeed64ReplicaSetChangeLosesNoAcknowledgedWrite still runs
//     with -known-bugs, its one-way partition meeting bug 3 too. On real processes,
//     e2e's TestDockerPartitionUnderLoad met it too, as the two members of a 2|3
//     partition came back (a counter went back from 39 acknowledged incs to 33). With
//     -max-side=2, seeds 2000-2149 (two at once, a loaded machine) failed 18 times
//     before the fix and 9 after: 5 with a bridge or one-way partition, 2 with the
//     coordinator's member killed, and 2 (a crash, a leave) that passed when rerun.
//  2. Fixed. Bridge partitions (seed 1161): the member cut off from the majority but
//     not from the bridge member hosted and saved on, through the bridge, past the
//     margin (the soak's 12 failures above).
//  3. Fixed. One-way partitions (seeds 1449, 1315): the member that could not answer
//     kept its entity past the margin (the soak's 2 failures above).
//
// Both are fixed by sharding's hosting lease (sharding.Config.HostingLease, half the
// margin): a member that has had no heartbeat round trip with a majority of the
// members within the lease (cluster.View.MajorityContact, dated from when the
// heartbeat was sent, on the monotonic clock) stops its entities without saving, and
// activates, handles and saves nothing until it has the contact back in a converged
// view. And a downed member's idle entities stop as soon as it aborts, not once all
// its goroutines have ended. Their tests run in make test (under the race detector, on
// 3 members: underRace in faults_test.go says why).
//
// Design: docs/design.md ("Invariants").
package faults
