// A listing of the entity states a member's replica holds, for counts that need no
// activation (the host's per-version counts of passivated entities).

package replstore

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/shardhost/shardhost/sharding"
)

// errStopScan ends a scan early without an error.
var errStopScan = errors.New("replstore: scan stopped")

// LocalStates calls fn with the shard, entity ID and saved state of each entity of type
// typ that this member's replica holds, for the shards whose first replica, in the
// ring's current priority order, is this member: across the members of a settled ring,
// each shard is listed by one member (while the ring changes, a shard may be listed by
// two, or by none). A state is the bytes Save stored (a deleted one is skipped); it
// aliases the file and is valid only during fn, which must not call the Store. An
// entity with journal records and no saved state is listed with a nil state. fn
// returning false stops the scan. It reads this member's disk only: no replica is
// asked, so a write this replica missed is not seen, nor one its disk's writer has not
// committed yet (wal.go: at most about 250 ms). Errors: sharding.ErrStoreUnavailable
// (no ring yet, or a store without a disk), the disk's.
func (s *Store) LocalStates(typ string, fn func(shard int, id string, state []byte) bool) error {
	if s.disk == nil {
		return sharding.ErrStoreUnavailable
	}
	shards, err := s.disk.shards()
	if err != nil {
		return err
	}
	v := s.ringView()
	for _, sh := range shards {
		if sh.typ != typ {
			continue
		}
		reps, err := s.replicaSetIn(v, typ, sh.shard)
		if err != nil {
			return err
		}
		if len(reps.reps) == 0 || !reps.reps[0].local {
			continue
		}
		shardPrefix := stateShardPrefix(typ, sh.shard)
		prefix := append(bytes.Clone(shardPrefix), stateKindSnapshot)
		jprefix := append(bytes.Clone(shardPrefix), stateKindJournal)
		stopped := false
		// The committed file: fn is not run on the disk's writer, and may miss the
		// writes of its last commit interval, as it may miss those this replica missed.
		err = s.disk.viewDB(func(eb, rb *bolt.Bucket) error {
			c := rb.Cursor()
			saved := map[string]bool{}
			for k, val := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, val = c.Next() {
				_, _, data, ok := decodeStateValue(val)
				if !ok || len(data) == 0 {
					continue
				}
				id := string(k[len(prefix):])
				saved[id] = true
				if !fn(sh.shard, id, data) {
					return errStopScan
				}
			}
			// Entities with journal records and no saved state: listed once, with none.
			last := ""
			for k, _ := c.Seek(jprefix); k != nil && bytes.HasPrefix(k, jprefix); k, _ = c.Next() {
				_, id, _, ok := splitStateRecordKey(shardPrefix, k)
				if !ok || id == last || saved[id] {
					continue
				}
				last = id
				if !fn(sh.shard, id, nil) {
					return errStopScan
				}
			}
			return nil
		})
		if errors.Is(err, errStopScan) {
			stopped = true
			err = nil
		}
		if err != nil || stopped {
			return err
		}
	}
	return nil
}
