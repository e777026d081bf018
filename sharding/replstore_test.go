package sharding_test

// Tests of sharding over package replstore's store, one per member. They are the only
// place package sharding meets replstore: sharding never imports it (host chooses the
// store), so they live in this external test package, and reach the harness through
// the exported helpers of its test files.

import (
	"testing"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// replicatedStores gives each member a replstore.Store (three replicas, the local
// profile) on its own membership and messenger.
func replicatedStores(tb testing.TB, ms *cluster.Membership, msgr *cluster.Messenger, dir string) (sharding.StateStore, func() error) {
	cfg := replstore.DefaultLocalConfig()
	cfg.Membership, cfg.Messenger, cfg.Dir = ms, msgr, dir
	cfg.Logger = sharding.QuietLogger
	s, err := replstore.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s, s.Close
}

func TestANewOwnersFirstReadFencesTheFormerOwnerReplicated(t *testing.T) {
	sharding.RunNewOwnersFirstReadFences(t, replicatedStores)
}

// BenchmarkReminderSteadyStateReplicated is BenchmarkReminderSteadyState (its flags
// alike) with the built-in replicated store on each member: the firings' reads, journal
// records and write backs fsynced on a majority of each shard's three replicas, the
// due reminders read through the replicas' index on due times.
func BenchmarkReminderSteadyStateReplicated(b *testing.B) {
	sharding.RunReminderSteadyState(b, replicatedStores)
}
