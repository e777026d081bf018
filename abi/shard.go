package abi

// DefaultNumberOfShards is the number of shards of an entity type unless its deployment
// says otherwise. The cluster sharding notes advise about ten shards per planned member.
const DefaultNumberOfShards = 100

// FNV-1a 64-bit parameters (Fowler, Noll, Vo; IETF draft-eastlake-fnv).
const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

// ShardID returns the shard of an entity: the 64-bit FNV-1a hash of the entity ID's UTF-8
// bytes, as an unsigned integer, modulo numberOfShards. The result is in
// [0, numberOfShards). It is fixed for the life of a cluster: every host and every guest
// SDK computes it the same way (testdata/shard_ids.txt holds vectors they all check).
// numberOfShards must be positive; ShardID panics otherwise.
func ShardID(entityID string, numberOfShards int) int {
	if numberOfShards <= 0 {
		panic("abi: number of shards must be positive")
	}
	h := fnvOffset64
	for i := 0; i < len(entityID); i++ {
		h ^= uint64(entityID[i])
		h *= fnvPrime64
	}
	return int(h % uint64(numberOfShards))
}
