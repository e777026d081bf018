package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

// profileConfig returns the host configuration a command whose flags default to profile
// makes, with args on its command line.
func profileConfig(t *testing.T, profile string, args ...string) (host.Config, error) {
	t.Helper()
	var nf nodeFlags
	cmd := &cobra.Command{Use: "x"}
	nf.add(cmd, profile)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return nf.config(slog.New(slog.DiscardHandler))
}

// hostingLease is the lease a member of cfg holds: host makes the resolver's
// stable-after sharding's down-removal margin, and the lease is half of it unless set.
func hostingLease(cfg host.Config) time.Duration {
	if cfg.Sharding.HostingLease != 0 {
		return cfg.Sharding.HostingLease
	}
	return cfg.Lifecycle.SBRStableAfter / 2
}

// TestDevProfileOutlastsPauses: dev's members ride out a pause of several seconds, on
// the failure detector and on the hosting lease (which counts from the start of the
// newest heartbeat round trip, so it outlasts a pause of about itself less one
// interval), where local's last well under a second.
func TestDevProfileOutlastsPauses(t *testing.T) {
	const several = 4 * time.Second
	dev, err := profileConfig(t, profileDev)
	if err != nil {
		t.Fatal(err)
	}
	lc := dev.Lifecycle
	if pause := lc.FailureDetector.AcceptableHeartbeatPause; pause < several {
		t.Errorf("dev's acceptable heartbeat pause is %v, want at least %v", pause, several)
	}
	if outlasts := hostingLease(dev) - lc.HeartbeatInterval; outlasts < several {
		t.Errorf("dev's hosting lease (%v, heartbeats every %v) outlasts pauses of %v, want at least %v",
			hostingLease(dev), lc.HeartbeatInterval, outlasts, several)
	}
	if lc.SBRStableAfter <= hostingLease(dev) {
		t.Errorf("dev's resolver acts after %v, before its lease (%v) lapses", lc.SBRStableAfter, hostingLease(dev))
	}

	local, err := profileConfig(t, profileLocal)
	if err != nil {
		t.Fatal(err)
	}
	if hostingLease(local) >= time.Second || local.Lifecycle.HeartbeatInterval >= lc.HeartbeatInterval {
		t.Errorf("local is no longer the fast profile: lease %v, heartbeats every %v", hostingLease(local), local.Lifecycle.HeartbeatInterval)
	}
	if local.GossipProfile != "local" || dev.GossipProfile != "lan" {
		t.Errorf("memberlist timings: local %q, dev %q; want local, lan", local.GossipProfile, dev.GossipProfile)
	}

	// A flag still sets its timing over the profile's.
	tuned, err := profileConfig(t, profileDev, "--sbr-stable-after", "20s")
	if err != nil || tuned.Lifecycle.SBRStableAfter != 20*time.Second {
		t.Errorf("--sbr-stable-after 20s: %v, %v", tuned.Lifecycle.SBRStableAfter, err)
	}
	if _, err := profileConfig(t, profileDev, "--gossip-profile", "wan"); err == nil || !strings.Contains(err.Error(), "want lan, local or dev") {
		t.Errorf("--gossip-profile wan: %v, want a refusal naming the profiles", err)
	}
}
