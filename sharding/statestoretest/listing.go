package statestoretest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// listerOf returns the store as a StateLister; a store without an index skips the
// listing's part of the contract (listings then show only the members' live tables).
func listerOf(t *testing.T, s sharding.StateStore) sharding.StateLister {
	t.Helper()
	l, ok := sharding.StateStoreAs[sharding.StateLister](s)
	if !ok {
		t.Skipf("%T keeps no index of its entities (not a sharding.StateLister)", s)
	}
	return l
}

// listAll reads every page of q (q.Limit each) from l.
func listAll(t *testing.T, l sharding.StateLister, q sharding.StateListing) []sharding.StoredEntity {
	t.Helper()
	var all []sharding.StoredEntity
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("the listing does not end")
		}
		got, more, err := l.ListStates(ctxOf(t), q)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		if len(got) > q.Limit {
			t.Fatalf("%d entities for a limit of %d", len(got), q.Limit)
		}
		all = append(all, got...)
		if !more {
			return all
		}
		if len(got) == 0 {
			t.Fatal("more, and an empty page")
		}
		k := got[len(got)-1].Key
		q.After = &k
	}
}

func keysOf(es []sharding.StoredEntity) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s/%d/%s", e.Key.Type, e.Key.Shard, e.Key.ID))
	}
	return out
}

// listing: a StateLister lists the entities with a snapshot or journal records, in
// order of type, shard and ID, page by page from any handle, without the host's delta
// records; StatOne tells one, or ErrNoState.
func listing(t *testing.T, h []sharding.StateStore) {
	l0, l1 := listerOf(t, h[0]), listerOf(t, h[1])
	key := func(typ string, shard int, id string) sharding.EntityKey {
		return sharding.EntityKey{Type: typ, Shard: shard, ID: id}
	}
	mustSave(t, h[0], key("lst", 2, "b"), 1, []byte("bb"))
	mustSave(t, h[0], key("lst", 0, "z"), 1, []byte("z"))
	mustSave(t, h[0], key("lst", 0, "a"), 1, []byte("aaa"))
	mustSave(t, h[1], key("lst", 1, "ab"), 1, []byte("abab"))
	mustSave(t, h[0], key("lst", 1, sharding.DeltaIDPrefix+"ab"), 1, []byte("delta"))
	mustSave(t, h[0], key("zz", 0, "other"), 1, []byte("o"))
	mustAppend(t, h[0], key("lst", 1, "j"), 1, Record(key("lst", 1, "j"), 1, "one"), Record(key("lst", 1, "j"), 2, "two"))

	want := []string{"lst/0/a", "lst/0/z", "lst/1/ab", "lst/1/j", "lst/2/b"}
	for _, l := range []sharding.StateLister{l0, l1} {
		if got := keysOf(listAll(t, l, sharding.StateListing{Type: "lst", Limit: 2, Shards: 3})); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("listed %v, want %v", got, want)
		}
	}
	// Every type: a store that lists them all at once, or one type after the other.
	all, _, err := l1.ListStates(ctxOf(t), sharding.StateListing{Limit: 10})
	if err != nil {
		all = append(listAll(t, l1, sharding.StateListing{Type: "lst", Limit: 10, Shards: 3}),
			listAll(t, l1, sharding.StateListing{Type: "zz", Limit: 10, Shards: 1})...)
	}
	if got := keysOf(all); fmt.Sprint(got) != fmt.Sprint(append(want, "zz/0/other")) {
		t.Fatalf("every type: %v", got)
	}
	sizes := map[string]int64{"lst/0/a": 3, "lst/0/z": 1, "lst/1/ab": 4, "lst/1/j": 0, "lst/2/b": 2, "zz/0/other": 1}
	for i, e := range all {
		if e.Bytes != sizes[keysOf(all)[i]] {
			t.Errorf("%v: %d bytes, want %d", e.Key, e.Bytes, sizes[keysOf(all)[i]])
		}
	}
	if got := keysOf(listAll(t, l0, sharding.StateListing{Type: "lst", Prefix: "a", Limit: 1, Shards: 3})); fmt.Sprint(got) != "[lst/0/a lst/1/ab]" {
		t.Fatalf("prefix a: %v", got)
	}
	after := key("lst", 1, "ab")
	if got := keysOf(listAll(t, l0, sharding.StateListing{Type: "lst", After: &after, Limit: 5, Shards: 3})); fmt.Sprint(got) != "[lst/1/j lst/2/b]" {
		t.Fatalf("after lst/1/ab: %v", got)
	}
	if got, more, err := l0.ListStates(ctxOf(t), sharding.StateListing{Type: "none", Limit: 5, Shards: 4}); err != nil || more || len(got) != 0 {
		t.Fatalf("a type with nothing: %v %v %v", got, more, err)
	}
	if _, _, err := l0.ListStates(ctxOf(t), sharding.StateListing{Type: "lst", Shards: 3}); err == nil {
		t.Fatal("a listing of limit 0 was taken")
	}

	// A store that counts journals says 2; one that does not, 0.
	e, err := l1.StatOne(ctxOf(t), key("lst", 1, "j"))
	if err != nil || e.Key != key("lst", 1, "j") || e.Bytes != 0 || e.JournalRecords != 2 && e.JournalRecords != 0 {
		t.Fatalf("stat lst/j: %+v %v", e, err)
	}
	if e, err = l0.StatOne(ctxOf(t), key("lst", 1, "ab")); err != nil || e.Key != key("lst", 1, "ab") || e.Bytes != 4 {
		t.Fatalf("stat lst/ab: %+v %v", e, err)
	}
	for _, k := range []sharding.EntityKey{key("lst", 1, "nobody"), key("lst", 1, "a"), key("lst", 0, "ab")} {
		if _, err := l0.StatOne(ctxOf(t), k); !errors.Is(err, sharding.ErrNoState) {
			t.Fatalf("stat %v: %v", k, err)
		}
	}
}
