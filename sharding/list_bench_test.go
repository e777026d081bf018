package sharding

import (
	"strconv"
	"testing"
	"time"
)

// listingMember makes a member's live table of typ with the entities of the shards
// i%members == member owns: ids entity IDs over shards shards, every one active, with
// counters as a member keeps them. No cluster, no goroutines: the table alone.
func listingMember(typ string, member, members, shards, ids int) *Sharding {
	s := &Sharding{self: "member-" + strconv.Itoa(member), regions: map[string]*shardRegion{}}
	r := &shardRegion{s: s, settings: TypeSettings{Name: typ, NumberOfShards: shards}, slots: map[int]*shardSlot{}}
	s.regions[typ] = r
	now := time.Now().UnixNano()
	for i := member; i < ids; i += members {
		id := "user-" + strconv.Itoa(i)
		sh := i % shards
		sl := r.slots[sh]
		if sl == nil {
			sl = &shardSlot{hosted: &shard{id: sh, epoch: 1, entities: map[string]*entity{}}}
			r.slots[sh] = sl
		}
		e := newEntity(r, sh, id, 1)
		e.live = true
		e.stats.activatedAt.Store(now)
		e.stats.lastMessage.Store(now)
		e.stats.handled.Store(3)
		e.stats.stateBytes.Store(512)
		e.stats.memoryBytes.Store(192 << 10)
		e.stats.version.Store(1)
		sl.hosted.entities[id] = e
	}
	return s
}

// BenchmarkListEntities lists 1,000,000 active entities of one type over 3 members'
// live tables (1,000 shards), 1,000 per page: each member's page (liveRows), its CBOR
// round trip as between members, and the merge, the first page (first) and one from a
// cursor in the middle (middle). Allocations per page are the page's, whatever the
// table's size. The members' requests run one after another here; in a cluster they
// run at once, over the network.
func BenchmarkListEntities(b *testing.B) {
	const ids, members, shards, limit = 1_000_000, 3, 1_000, 1_000
	ms := make([]*Sharding, members)
	for m := range ms {
		ms[m] = listingMember("counter", m, members, shards, ids)
	}
	q := ListQuery{Type: "counter", Limit: limit}
	page := func(q ListQuery) EntityPage {
		cur, hasAfter, err := decodeCursor(q)
		if err != nil {
			b.Fatal(err)
		}
		req := listRequest{Type: q.Type, After: cur.After, HasAfter: hasAfter, Limit: limit}
		replies := make([]listReply, members)
		for m, s := range ms {
			if err := decode(encode(s.liveRows(req)), &replies[m]); err != nil {
				b.Fatal(err)
			}
		}
		return mergeListing(q, limit, replies, nil, false, time.Now())
	}
	first := page(q)
	if len(first.Rows) != limit || first.Next == "" {
		b.Fatalf("first page: %d rows, next %q", len(first.Rows), first.Next)
	}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			page(q)
		}
	})
	// A cursor half way: shard 500's first entity.
	mid := q
	mid.Cursor = encodeCursor(listCursor{Query: q.fingerprint(), After: listKey{Type: "counter", Shard: shards / 2}})
	if p := page(mid); len(p.Rows) != limit || p.Rows[0].Shard != shards/2 {
		b.Fatalf("middle page: %d rows from shard %d", len(p.Rows), p.Rows[0].Shard)
	}
	b.Run("middle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			page(mid)
		}
	})
}
