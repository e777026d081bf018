package faults

import (
	"testing"
	"time"
)

// The schedules below are the failing ones as a soak drew them, written out: the kinds
// drawn by default changed since (ClockDrift joined them), so their seeds now draw other
// schedules. Each bug also has a deterministic test where the code allows, named in its
// comment; these rerun the schedule that found it (under the race detector, its fault at
// keep on 3 members: underRace).

func millis(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// Seed 10011 lost 3 acknowledged increments: the coordinator's member, whose clock had
// been skewed 30 s forward, was killed and restarted within DownRemovalMargin, and the
// coordinator handed the new process its previous incarnation's shards at their old
// epochs; the state store ordered the new process's saves below the old ones by their
// hybrid clock. Fixed: a replaced process's allocations are forgotten at once
// (sharding's TestARestartedMemberGetsItsShardsAtNewEpochs).
func TestSeed10011RestartedMemberGetsNewEpochs(t *testing.T) {
	s := Schedule{Seed: 10011, Members: 3, Gap: millis(500), Faults: []Fault{
		{Kind: ClockSkew, Pick: 3, Skew: 30 * time.Second, For: millis(2339)},
		{Kind: KillCoordinator, Pick: 1, Delay: millis(440), For: millis(2524)},
		{Kind: Partition, Pick: 4, Side: 1, For: millis(1795)},
	}}
	regression(t, underRace(s, 1), 2)
}

// Seed 11214 lost an acknowledged write of a register: a member paused past the failure
// detector was downed, and when it resumed the others still answered its heartbeats, so
// its hosting lease was held again and it served a write before it learnt it was out.
// Fixed: a downed member gets no heartbeat answers (cluster's
// TestSimDownedMemberGetsNoMajorityContact), and a new owner fences the shard's state
// with its epoch before it first reads it (sharding's
// TestANewOwnersFirstReadFencesTheFormerOwner).
func TestSeed11214ResumedDownedMemberServesNothing(t *testing.T) {
	s := Schedule{Seed: 11214, Members: 5, Gap: millis(500), Faults: []Fault{
		{Kind: ClockSkew, Pick: 1, Skew: 35 * time.Second, For: millis(2089)},
		{Kind: ClockSkew, Pick: 4, Skew: -29 * time.Second, For: millis(1807)},
		{Kind: Pause, Pick: 1, For: millis(2639)},
	}}
	regression(t, underRace(s, 2), 2)
}

// Seed 11053 read two counters back from nothing: a bridge partition of 6 members
// ({0}|4|{1,2,3,5}) downed every member, and the first restarted formed a new cluster
// alone. Fixed: the split brain resolver leaves out the observations of members the
// deciding member cannot reach (cluster's TestSimBridgePartitionKeepsTheMajority), and
// the state store's ring survives restarts (replstore's
// TestRetainedMembersSurviveAWholeClusterRestart). Under the race detector, the bridge
// on 3 members.
func TestSeed11053BridgePartitionKeepsTheMajority(t *testing.T) {
	s := Schedule{Seed: 11053, Members: 6, Gap: millis(500), Faults: []Fault{
		{Kind: Lossy, Pick: 0, Loss: 0.02, NetDelay: millis(7), For: millis(2858)},
		{Kind: ClockSkew, Pick: 0, Skew: 27 * time.Second, For: millis(2286)},
		{Kind: Bridge, Pick: 4, Side: 1, For: millis(1997)},
	}}
	regression(t, underRace(s, 2), 2)
}

// Seed 13364 found two lives of a register after the cluster was downed and restarted
// several times: a member restarted alone took in gossip from a process of the old
// cluster and saw its own previous incarnation up beside it, and the coordinator, taking
// that for a successor, moved the member's shards while it ran them. Fixed: gossip from
// a process the state does not hold is ignored (cluster's
// TestSimGossipFromAnotherClusterIsIgnored), and allocations go only once their process
// no longer hosts.
func TestSeed13364OneLifeThroughWholeClusterRestarts(t *testing.T) {
	s := Schedule{Seed: 13364, Members: 4, Gap: millis(500), Faults: []Fault{
		{Kind: Crash, Pick: 6, Wipe: true, For: millis(1528)},
		{Kind: ClockSkew, Pick: 5, Skew: 10 * time.Second, For: millis(1936)},
	}}
	regression(t, underRace(s, 0), 2)
}

// Seed 20271 found two lives of a counter: a member whose host-shard request timed out
// at the coordinator went on hosting the shard at its epoch while the coordinator gave it
// to another member, and activated the entity for messages that reached it. Fixed: a
// region fences a shard's state with its epoch before its first read there, and a fence
// or save refused as stale drops the shard (sharding's
// TestANewOwnersFirstReadFencesTheFormerOwner, TestASaveRefusedAsStaleDropsTheShard).
func TestSeed20271StaleShardCopyActivatesNothing(t *testing.T) {
	s := Schedule{Seed: 20271, Members: 6, Gap: millis(500), Faults: []Fault{
		{Kind: Partition, Pick: 2, Side: 1, For: millis(2632)},
		{Kind: ClockDrift, Pick: 6, Rate: 1.029, For: millis(2005)},
		{Kind: Crash, Pick: 5, Wipe: true, For: millis(620)},
	}}
	regression(t, underRace(s, 0), 2)
}

// Seed 73128 found two lives of a counter: two bridge partitions of 6 members downed
// members on both sides; one, restarted at its address, was sent a HostShard meant for
// its previous process (the coordinator had not seen the new one join), hosted the
// shard, and the coordinator, recording the allocation as the previous process's,
// forgot it when that process was downed and gave the shard to another member while
// the new process ran it. Fixed: a HostShard names the process it is for, and another
// process at the address refuses it (sharding's TestAHostShardForAnEarlierProcessIsRefused).
func TestSeed73128HostShardReachesOnlyItsProcess(t *testing.T) {
	s := Schedule{Seed: 73128, Members: 6, Gap: millis(499), Faults: []Fault{
		{Kind: Bridge, Pick: 3, Side: 1, For: millis(2049)},
		{Kind: Bridge, Pick: 4, Side: 1, For: millis(2295)},
		{Kind: Lossy, Pick: 3, Loss: 0.014, NetDelay: millis(2), For: millis(2958)},
	}}
	regression(t, underRace(s, 1), 2)
}

// Seeds 2172 and 2365 (-max-side=2, 6 schedules at once on a loaded machine) found two
// lives of an entity each, where a member was restarted at its address and the
// coordinator, which names regions by address, confused its two processes. Seed 2172:
// the new coordinator gave the restarted member a shard, then handled the removal of its
// previous incarnation some 40 ms late and forgot every allocation at the address, the
// new process's too, while it hosted the shard. Fixed: a removal forgets only the
// allocations of the process removed (sharding's
// TestSeed2172LateRemovalOfAPreviousIncarnationKeepsTheNewOnesShards). Seed 2365 is bug
// 9 (seed 73128, above): a HostShard meant for the previous process reached the new
// one; the coordinator now also records the process that confirmed a HostShard,
// forgetting the allocations of the one it replaced (TestProcessAtChoosesTheOneProcessThatCanHost).
func TestSeed2172RemovalOfAPreviousProcessKeepsTheNewOnesShards(t *testing.T) {
	s := Schedule{Seed: 2172, Members: 4, Gap: millis(737), Faults: []Fault{
		{Kind: KillCoordinator, Pick: 6, Delay: millis(11), For: millis(1617)},
		{Kind: Bridge, Pick: 2, Side: 1, For: millis(1512)},
		{Kind: OneWay, Pick: 1, Side: 1, For: millis(2618)},
	}}
	regression(t, underRace(s, 0), 2)
}

// Seed 2365: an allocation made to a member's previous process, reaching its
// successor, is refused (above).
func TestSeed2365AllocationToAPreviousProcessHostsNothing(t *testing.T) {
	s := Schedule{Seed: 2365, Members: 3, Gap: millis(745), Faults: []Fault{
		{Kind: ClockSkew, Pick: 3, Skew: 54 * time.Second, For: millis(1635)},
		{Kind: Bridge, Pick: 1, Side: 2, For: millis(2995)},
		{Kind: Leave, Pick: 3, For: millis(1498)},
	}}
	regression(t, underRace(s, 1), 2)
}

// Seed 2204 (-max-side=2, on a machine at load 20: the members missed their failure
// detectors' deadlines and were downed and restarted piecemeal) found two lives of a
// counter: two coordinators were active for a moment, and the one about to be downed
// allocated a shard, at the epoch the other had given it before, to the region that had
// handed it off since; the region's memo of its fence at that epoch survived the
// handoff, so it read the entity without fencing again while the new owner had fenced a
// newer epoch, and activated it. Fixed: a shard hosted anew is fenced anew (sharding's
// TestSeed2204AShardHostedAgainIsFencedAgain); and two coordinators at once no longer
// give one epoch twice (sharding's TestSeed2204TwoActiveCoordinatorsGiveTwoEpochs).
func TestSeed2204AShardHostedAgainIsFencedAgain(t *testing.T) {
	s := Schedule{Seed: 2204, Members: 3, Gap: millis(309), Faults: []Fault{
		{Kind: Bridge, Pick: 5, Side: 1, For: millis(1869)},
		{Kind: ClockSkew, Pick: 2, Skew: 21 * time.Second, For: millis(2190)},
	}}
	regression(t, underRace(s, 1), 2)
}

// Seed 2443 (-max-side=2) found two lives of a register: a member downed by a one-way
// partition was restarted at its address and asked for a shard's home before the
// coordinator had forgotten its previous process's allocations; the answer named its
// own address, and it hosted the shard at the previous process's epoch, while the
// coordinator, once it forgot that allocation, gave the shard to another member. Fixed:
// the coordinator's answer names the process the allocation is for, and another process
// at the address does not take it (sharding's
// TestSeed2443AHomeAllocatedToAPreviousProcessIsNotTaken).
func TestSeed2443AHomeOfAPreviousProcessIsNotTaken(t *testing.T) {
	s := Schedule{Seed: 2443, Members: 6, Gap: millis(585), Faults: []Fault{
		{Kind: Pause, Pick: 2, For: millis(2991)},
		{Kind: OneWay, Pick: 3, Side: 1, For: millis(2093)},
	}}
	regression(t, underRace(s, 1), 2)
}

// Seed 2227 (-max-side=2, 7 members, a loaded machine) read a counter back older than
// acknowledged: the cluster's first member, stopped before its first handover round
// admitted the members that had joined it, came back first and alone once every member
// had been downed, and from its saved ring of itself took itself for the whole cluster.
// Fixed: a ring is saved with its joining members, and a ring of one restored alone
// waits for them (faults/doc.go, bug 16; replstore's
// TestSeed2227AFirstMemberBackAloneWaitsForTheMembersThatJoinedIt). The schedule found
// it only at load 20, where members were downed and restarted piecemeal.
func TestSeed2227AFirstMemberBackAloneWaitsForTheMembersThatJoinedIt(t *testing.T) {
	s := Schedule{Seed: 2227, Members: 7, Gap: millis(694), Faults: []Fault{
		{Kind: Bridge, Pick: 2, Side: 1, For: millis(1733)},
		{Kind: Leave, For: millis(857)},
		{Kind: ClockSkew, Pick: 6, Skew: -57 * time.Second, For: millis(2687)},
	}}
	regression(t, underRace(s, 0), 2)
}

// Seed 82074 (6 members, a machine at load 12) read counters and a register back from
// nothing: its one fault, a crash, found no member running, as the load had downed
// every member over and over; two members that had never saved a ring came back first,
// admitted each other and served their entities as new. Fixed: a ring started from a
// view is unconfirmed, and admits nobody until a member with a confirmed ring is up
// (faults/doc.go, bug 17; replstore's TestSeed82074MembersWithoutARingDoNotFormOne).
// The schedule finds it only on a loaded machine.
func TestSeed82074MembersWithoutARingDoNotFormOne(t *testing.T) {
	s := Schedule{Seed: 82074, Members: 6, Gap: millis(609), Faults: []Fault{
		{Kind: Crash, Pick: 1, For: millis(557)},
	}}
	regression(t, underRace(s, 0), 2)
}

// Seeds 74059 and 74065 lost acknowledged writes (a counter's increment, a register's
// write) with no data directory wiped: on a machine loaded past the failure detectors'
// deadlines (load average 20 on 2 cores), members were downed and restarted over and
// over, and members not yet up dropped shards they did not rank for by the view's
// guess, each after another member, which then dropped its own copy the same way,
// acknowledged holding it. Fixed: a shard is dropped only by a started, settled ring
// (replstore's TestNoShardIsDroppedByAnUnsettledRing).
func TestSeed74059And74065NoShardDroppedByAnUnsettledRing(t *testing.T) {
	for _, s := range []Schedule{
		{Seed: 74059, Members: 6, Gap: millis(400), Faults: []Fault{
			{Kind: Lossy, Pick: 5, Loss: 0.008, For: millis(2569)},
			{Kind: Leave, Pick: 3, For: millis(1131)},
		}},
		{Seed: 74065, Members: 5, Gap: millis(622), Faults: []Fault{
			{Kind: Pause, Pick: 5, For: millis(1999)},
		}},
	} {
		regression(t, underRace(s, 0), 1)
	}
}

// Seeds 75005 and 75012 lost acknowledged increments when a member came back alone
// (every member downed on a loaded machine): in 75005 from a saved ring of two that
// the other member had shrunk to itself while this one was gone (acknowledging writes
// alone since), which it shrank to itself in turn; in 75012 from a directory whose
// ring had never started, taking itself for a new cluster. Fixed: a restored ring does
// not admit its own member even alone, and a member alone admits itself only on a
// directory it made (replstore's TestAMemberBackAloneDoesNotTakeItselfForTheCluster).
func TestSeed75005And75012AMemberBackAloneWaits(t *testing.T) {
	for _, s := range []Schedule{
		{Seed: 75005, Members: 4, Gap: millis(668), Faults: []Fault{
			{Kind: ClockSkew, Pick: 2, Skew: 14 * time.Second, For: millis(2819)},
			{Kind: KillCoordinator, Pick: 4, Delay: millis(309), For: millis(1836)},
			{Kind: KillCoordinator, Pick: 4, Delay: millis(395), For: millis(1957)},
		}},
		{Seed: 75012, Members: 5, Gap: millis(693), Faults: []Fault{
			{Kind: Pause, Pick: 6, For: millis(2763)},
			{Kind: Lossy, Pick: 6, Loss: 0.008, NetDelay: millis(3), For: millis(2121)},
		}},
	} {
		regression(t, underRace(s, 1), 1)
	}
}

// Seed 240900 ran a cluster of 3 as two: the paused member, cut off from both others,
// heard from one of them through a response already on its way and, as the leader of
// what it took for a majority of two, downed the third, while the two downed it. Each
// side went on alone, with its own copy of every entity. Fixed: the resolver decides
// only on a state every member it counts on its side has seen, and gossip goes to the
// members a member itself reaches (cluster's
// TestSeed240900ALeaderDecidesOnlyOnAStateItsSideHasSeen, which makes the late response
// deterministic). This reruns the shrunk schedule.
func TestSeed240900ACutOffMemberDoesNotDownTheMajority(t *testing.T) {
	regression(t, underRace(Generate(240900, nil, 1).Keep([]int{0, 1, 2}), 0), 1)
}

// Seed 300850 found a counter alive on two members: the coordinator's HostShard timed
// out, its answer lost while the coordinator's member was paused, and the coordinator
// gave the shard to itself while the region hosted it. Fixed: an unanswered HostShard
// leaves the shard allocated to its region (sharding's
// TestSeed300850AnUnansweredHostShardKeepsTheShardThere). This reruns the shrunk
// schedule.
func TestSeed300850AnUnansweredHostShardKeepsTheShardThere(t *testing.T) {
	regression(t, underRace(Generate(300850, nil, 1).Keep([]int{0, 1}), 0), 1)
}
