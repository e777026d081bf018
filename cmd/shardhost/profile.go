package main

import (
	"fmt"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// Timing profiles (--gossip-profile) trade how soon a member's failure is seen against
// how long a pause of a member (a busy machine, a garbage collection, a laptop's
// scheduler) passes before the cluster acts on it. Two figures tell them apart: how long
// a silent member takes to be flagged unreachable, and the pause that a member's hosting
// lease (half the resolver's stable-after) outlasts:
//
//	lan    start's default: cluster.DefaultCoreConfig, memberlist's LAN timing.
//	       Unreachable after about 4.5 s; the lease (2.5 s) outlasts about 1.5 s.
//	local  cluster.DefaultLocalCoreConfig, memberlist's local timing: an idle machine,
//	       and tests that want speed. Unreachable after about 1 s; the lease (500 ms)
//	       outlasts about 300 ms.
//	dev    dev's default (devCoreConfig): one machine that may be busy. Unreachable
//	       after about 6 s; the lease (5 s) outlasts about 4.5 s.
//
// The profile gives the timings no flag sets (gossip and join retry intervals, the
// failure detector's first estimate and deviation floor); --heartbeat-interval,
// --acceptable-heartbeat-pause and --sbr-stable-after, whose defaults are the
// command's own profile's, set theirs.
const (
	profileLAN   = "lan"
	profileLocal = "local"
	profileDev   = "dev"
)

// lifecycleProfile returns the membership timing of a profile and the memberlist timing
// that goes with it (host.Config.GossipProfile: lan or local).
func lifecycleProfile(name string) (cluster.CoreConfig, string, error) {
	switch name {
	case profileLAN:
		return cluster.DefaultCoreConfig(), "lan", nil
	case profileLocal:
		return cluster.DefaultLocalCoreConfig(), "local", nil
	case profileDev:
		// memberlist's LAN timing: its probes (which decide only whom memberlist
		// gossips with; reachability is the failure detector's) wait 500 ms for an
		// answer where the local timing waits 200 ms.
		return devCoreConfig(), "lan", nil
	}
	return cluster.CoreConfig{}, "", fmt.Errorf("--gossip-profile %q: want lan, local or dev", name)
}

// devCoreConfig is the timing of shardhost dev's cluster: three members in one process,
// on a machine that may be busy compiling, running a browser or the race detector, where
// the scheduler can hold the process for seconds at a time. A pause there stalls all
// three members at once, and what a slow verdict costs (the shards of a crashed member
// move later) matters little: the members live and die together. So the profile leans
// to tolerance, where local, which lapsed its hosting lease a dozen times in ten seconds
// on a machine at load 3 to 5, leans to speed.
//
//   - HeartbeatInterval 500 ms (local 200 ms). The hosting lease counts from the start
//     of the newest heartbeat round trip with a majority, so a member tolerates a pause
//     of about the lease less one interval. Shorter buys a little of the lease back for
//     more heartbeats, which a loaded machine can least afford.
//   - AcceptableHeartbeatPause 5 s (local 600 ms). The failure detector flags a member
//     unreachable after about 6 s without its heartbeats. Shorter flags members of a
//     paused process; longer sees a crash later.
//   - SBRStableAfter 10 s (local 1 s). The split brain resolver downs unreachable
//     members once their set has not changed for this long, and a downed member is out
//     for good (dev does not rejoin it): this is the timing to err long on. host makes
//     it the down-removal margin too: a downed member's shards move 10 s after its
//     downing, which is the room the hosting lease has to lapse first.
//   - The hosting lease, half the down-removal margin (sharding.Config.HostingLease):
//     5 s (local 500 ms). A member hosts only while it has had a heartbeat round trip
//     with a majority within it, so pauses up to about 4.5 s pass; past it the member's
//     entities stop until the contact is back, and asks fail with a lapsed lease
//     meanwhile. Longer would leave a save in flight less of the margin.
//   - FirstHeartbeatEstimate 500 ms (one interval) and MinStdDeviation 100 ms (the
//     default's): the detector's picture before and between real samples.
//   - GossipInterval and JoinRetryInterval 200 ms, as local: a member hosts again after
//     a lapse only in a converged view, and quick gossip keeps that wait short at a
//     cost three members do not notice.
func devCoreConfig() cluster.CoreConfig {
	c := cluster.DefaultCoreConfig()
	c.HeartbeatInterval = 500 * time.Millisecond
	c.FailureDetector.AcceptableHeartbeatPause = 5 * time.Second
	c.FailureDetector.FirstHeartbeatEstimate = 500 * time.Millisecond
	c.FailureDetector.MinStdDeviation = 100 * time.Millisecond
	c.SBRStableAfter = 10 * time.Second
	c.GossipInterval = 200 * time.Millisecond
	c.JoinRetryInterval = 200 * time.Millisecond
	return c
}
