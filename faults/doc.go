// Package faults is a fault-schedule harness for shardhost, after Jepsen: several
// members in one process on the in-memory transport and gossip network
// (cluster.InmemNetwork, cluster.InmemGossipNetwork), each running membership, the
// distributed data replicator, the replicated entity state store (bbolt files in a data
// directory per member) and cluster sharding with in-memory Go entities. A seed draws a
// schedule of faults (partitions, crashes and restarts, pauses, a lossy network, leaves
// and joins, the coordinator's member killed during a handoff); clients record a history
// of asks and distributed data operations while the faults happen; the history is then
// checked:
//
//   - every entity's history is linearizable (github.com/anishathalye/porcupine), with
//     timeouts and other failed calls modelled as ambiguous (they may or may not have
//     happened);
//   - a majority read of distributed data sees every majority write acknowledged before
//     it started;
//   - no two lives of one entity overlap, by a registry of the activations and stops
//     the members' entity factories see (Akka's sharding spec's GlobalRegistry).
//
// The schedule is a pure function of the seed; the run is not (goroutines and the
// failure detector follow wall time), so a failing seed is rerun, and shrunk by dropping
// faults one at a time while it still fails. The package only serves tests: `go test
// ./faults -seeds N` (make soak) runs the schedules (faults_test.go says how to rerun
// one).
//
// Open failures. About 1 schedule in 100 fails on a loaded 2-core machine, a different
// handful of seeds each run of 200: counters whose histories are not linearizable (seeds
// 10, 40, 45, 106 in three runs) and two overlapping lives of one entity (seeds 68, 84,
// 112), mostly with pauses past the failure detector, clock skew and bridge partitions.
// Until they are found and fixed, make test does not run the schedules (TestFaultSchedules
// skips without -seeds).
//
// A soak of 1,500 schedules (cutting off one member at most) on a branch with a milder
// lossy transport failed 14 times, each with a bridge or a one-way partition among its
// faults: under a bridge partition (one member sees both sides) the member cut off from
// the majority but not from the bridge goes on hosting and saving through the bridge
// while the majority downs it and, after DownRemovalMargin, moves its shards (lost
// acknowledged writes, two lives: 12 of the 318 schedules that drew a bridge); under a
// one-way partition the cut-off member's entity lived on after the majority moved its
// shard (2 of 266). These are where to start.
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
//     Seed 64: sharding's TestReplicaSetChangeLosesNoAcknowledgedWrite reproduces it
//     deterministically; TestSeed64ReplicaSetChangeLosesNoAcknowledgedWrite still runs
//     with -known-bugs, its one-way partition meeting bug 3 too. On real processes,
//     e2e's TestDockerPartitionUnderLoad met it too, as the two members of a 2|3
//     partition came back (a counter went back from 39 acknowledged incs to 33).
//  2. Bridge partitions: the soak's 12 failures above. Seed 1161.
//  3. One-way partitions: the soak's 2 failures above. Seeds 1449, 1315.
//
// Design: docs/design.md ("Invariants").
package faults
