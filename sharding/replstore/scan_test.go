package replstore

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster/clustertest"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
)

// LocalStates: across the members, every saved state of a type, and every entity with
// journal records but no state, is listed once, by the first replica of its shard; other
// types are not; a stop from fn ends the listing.
func TestLocalStatesListsEachShardOnce(t *testing.T) {
	c := newSSCluster(t, 4, clustertest.Tolerant(), nil)
	want := map[string]string{}
	for i := 0; i < 12; i++ {
		key := sharding.EntityKey{Type: "counter", Shard: i % 6, ID: fmt.Sprint("e-", i)}
		state := []byte(fmt.Sprint("state ", i))
		ssSave(t, c.nodes[i%4], key, 1, state)
		c.waitPlaced(key, state)
		want[key.ID] = string(state)
	}
	jkey := sharding.EntityKey{Type: "counter", Shard: 2, ID: "journal-only"}
	ssAppend(t, c.nodes[0], jkey, 1, jrecs(jkey, 1, 3, "m")...)
	want[jkey.ID] = "<none>"
	other := sharding.EntityKey{Type: "cart", Shard: 2, ID: "x"}
	ssSave(t, c.nodes[1], other, 1, []byte("cart"))
	c.waitPlaced(other, []byte("cart"))

	// Appends return at a majority: the first replica may get the records last.
	var got map[string]string
	testutil.EventuallyNil(t, 60*time.Second, "every entity listed once", func() error {
		got = map[string]string{}
		var dup []string
		for _, n := range c.nodes {
			err := n.store.LocalStates("counter", func(shard int, id string, state []byte) bool {
				s := string(state)
				if state == nil {
					s = "<none>"
				}
				if _, ok := got[id]; ok {
					dup = append(dup, id)
				}
				got[id] = s
				return true
			})
			if err != nil {
				return err
			}
		}
		if len(dup) > 0 {
			return fmt.Errorf("listed twice: %v", dup)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("listed %v, want %v", got, want)
		}
		return nil
	})
	listed := 0
	for _, n := range c.nodes {
		calls := 0
		if err := n.store.LocalStates("counter", func(int, string, []byte) bool { calls++; return false }); err != nil {
			t.Fatal(err)
		}
		listed += calls
		if calls > 1 {
			t.Fatalf("%s went on after fn said stop: %d calls", n.transport, calls)
		}
	}
	if listed == 0 {
		t.Fatal("no member listed anything")
	}
	ids := make([]string, 0, len(got))
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if strings.Contains(strings.Join(ids, ","), "x") {
		t.Fatalf("another type's entity listed: %v", ids)
	}
}
