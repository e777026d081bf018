package statestoretest

import (
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

func TestMemoryStateStoreContract(t *testing.T) {
	Run(t, func(t *testing.T) []sharding.StateStore {
		s := sharding.NewMemoryStateStore()
		return []sharding.StateStore{s, s}
	})
}

// The replicated store on three members: each handle is one member's store, so what
// one writes the others read through the replicas.
func TestReplicatedStateStoreContract(t *testing.T) {
	Run(t, func(t *testing.T) []sharding.StateStore { return Replicated(t, 3, nil) })
}
