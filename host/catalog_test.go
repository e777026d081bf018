package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

func TestCatalogMergeIsOrderIndependentAndIdempotent(t *testing.T) {
	a := TypeInfo{Name: "counter", Digest: digest("aa"), Version: 1, DeployedAt: 10, NumberOfShards: 10}
	b := TypeInfo{Name: "counter", Digest: digest("bb"), Version: 2, DeployedAt: 5, NumberOfShards: 10}
	c := TypeInfo{Name: "counter", Digest: digest("cc"), Version: 2, DeployedAt: 5, NumberOfShards: 10} // ties b but for the digest
	d := TypeInfo{Name: "room", Digest: digest("dd"), Version: 1, NumberOfShards: 10}
	orders := [][]TypeInfo{{a, b, c, d}, {d, c, b, a}, {b, d, a, c, c, a}}
	for _, order := range orders {
		cat := newCatalog(nil, "", nil)
		for _, e := range order {
			cat.merge([]TypeInfo{e})
		}
		list := cat.list()
		if len(list) != 2 || !reflect.DeepEqual(list[0], c) || !reflect.DeepEqual(list[1], d) {
			t.Fatalf("order %v gave %v", order, list)
		}
	}
}

func TestCatalogStateRoundTripAndBadState(t *testing.T) {
	var changed []string
	src := newCatalog(nil, "", nil)
	src.merge([]TypeInfo{{Name: "a", Digest: digest("1"), Version: 1, NumberOfShards: 1}, {Name: "b", Digest: digest("2"), Version: 3, NumberOfShards: 2}})
	dst := newCatalog(func(t TypeInfo) { changed = append(changed, t.Name) }, "", nil)
	dst.MergeRemoteState(src.LocalState())
	if len(dst.list()) != 2 || len(changed) != 2 {
		t.Fatalf("merged %v, changed %v", dst.list(), changed)
	}
	dst.MergeRemoteState(src.LocalState()) // idempotent: nothing changes
	dst.MergeRemoteState([]byte("not cbor"))
	if len(changed) != 2 || len(dst.list()) != 2 {
		t.Fatalf("after re-merge and garbage: %v %v", dst.list(), changed)
	}
}

// digest makes a valid-looking digest from a short hex prefix.
func digest(prefix string) string { return prefix + strings.Repeat("0", 64-len(prefix)) }

func TestCatalogIgnoresEntriesNoMemberWrites(t *testing.T) {
	c := newCatalog(nil, "", nil)
	c.merge([]TypeInfo{
		{Name: "ok", Digest: digest("a"), Version: 1, NumberOfShards: 3},
		{Name: "path", Digest: "../../../../../../../../../../../../../../../../../../../etc/passwd", Version: 1, NumberOfShards: 3},
		{Name: "zero", Digest: digest("b"), Version: 1},
		{Name: "bad name", Digest: digest("c"), Version: 1, NumberOfShards: 3},
	})
	if l := c.list(); len(l) != 1 || l[0].Name != "ok" {
		t.Fatalf("catalog kept %v", l)
	}
}

func TestModuleStoreRefusesBadDigests(t *testing.T) {
	s, err := newModuleStore(nil, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", "../x", digest("A"), strings.Repeat("../", 21) + "x"} {
		if _, err := s.bytes(d); !errors.Is(err, ErrBadRequest) {
			t.Errorf("bytes(%q): %v", d, err)
		}
		if _, err := s.get(context.Background(), d, nil); !errors.Is(err, ErrModuleUnavailable) {
			t.Errorf("get(%q): %v", d, err)
		}
	}
}

func TestValidateTypeName(t *testing.T) {
	for _, ok := range []string{"counter", "a", "Cart_v2.1-x"} {
		if err := ValidateTypeName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", "ü", string(make([]byte, 65))} {
		if err := ValidateTypeName(bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzCatalogMergeRemoteState(f *testing.F) {
	c := newCatalog(nil, "", nil)
	c.merge([]TypeInfo{{Name: "a", Digest: digest("1"), Version: 1, NumberOfShards: 10}})
	f.Add(c.LocalState())
	f.Add([]byte{0x81, 0xa1, 0x01, 0x61, 0x61})
	f.Fuzz(func(t *testing.T, b []byte) {
		newCatalog(func(TypeInfo) {}, "", nil).MergeRemoteState(b)
	})
}

func TestCatalogIsKeptOnDisk(t *testing.T) {
	path := t.TempDir() + "/types.cbor"
	a := newCatalog(nil, path, testLogger())
	if err := a.load(); err != nil {
		t.Fatalf("no file yet: %v", err)
	}
	entries := []TypeInfo{{Name: "a", Digest: digest("1"), Version: 1, NumberOfShards: 1, RememberEntities: true},
		{Name: "b", Digest: digest("2"), Version: 3, NumberOfShards: 2}}
	a.merge(entries)
	var changed []string
	b := newCatalog(func(t TypeInfo) { changed = append(changed, t.Name) }, path, testLogger())
	if err := b.load(); err != nil {
		t.Fatal(err)
	}
	if l := b.list(); len(l) != 2 || !reflect.DeepEqual(l[0], entries[0]) || !reflect.DeepEqual(l[1], entries[1]) || len(changed) != 2 {
		t.Fatalf("loaded %v, changed %v", l, changed)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := newCatalog(nil, path, testLogger()).load(); err == nil || !strings.Contains(err.Error(), "type catalog") {
		t.Fatalf("garbage file: %v", err)
	}
}

// Each deployment records the versions before it, newest first, and the history is
// bounded.
func TestCatalogKeepsModuleVersions(t *testing.T) {
	cat := newCatalog(nil, "", nil)
	st := sharding.TypeSettings{Name: "cart", NumberOfShards: 10}
	for i := 1; i <= maxPrevious+3; i++ {
		cat.merge([]TypeInfo{cat.next(st, digest(strconv.Itoa(i)), i, "m1", nil)})
	}
	cur, _ := cat.get("cart")
	vs := cur.Versions()
	if cur.Version != maxPrevious+3 || len(vs) != maxPrevious+1 {
		t.Fatalf("version %d with %d versions", cur.Version, len(vs))
	}
	for i, v := range vs {
		if want := uint64(maxPrevious + 3 - i); v.Version != want || v.Digest != digest(strconv.Itoa(int(want))) || v.Size != int(want) {
			t.Fatalf("versions[%d] = %+v, want version %d", i, v, want)
		}
	}
	// The history survives the catalog's encoding (gossip and the file).
	var back []TypeInfo
	if err := catalogDecMode.Unmarshal(mustEncodeTypes([]TypeInfo{cur}), &back); err != nil || !reflect.DeepEqual(back[0], cur) {
		t.Fatalf("round trip: %v", err)
	}
}

// An undeploy keeps the version it removes: deploy v1, deploy v2, undeploy, deploy v2
// again lists versions 3, 2 and 1, the removed v2 under its own number. The removal
// wins over the deployment it removes on every member, whatever order they learn them
// in, and a redeploy wins over the removal.
func TestCatalogUndeployKeepsTheRemovedVersion(t *testing.T) {
	cat := newCatalog(nil, "", nil)
	st := sharding.TypeSettings{Name: "todo", NumberOfShards: 10}
	v1 := cat.next(st, digest("a1"), 100, "m1", nil)
	cat.merge([]TypeInfo{v1})
	v2 := cat.next(st, digest("b2"), 200, "m1", nil)
	cat.merge([]TypeInfo{v2})
	gone, ok := cat.removal("todo")
	if !ok || !gone.Removed {
		t.Fatalf("removal: %+v %v", gone, ok)
	}
	cat.merge([]TypeInfo{gone})
	if _, ok := cat.get("todo"); ok {
		t.Fatal("a removed type is still deployed")
	}
	if _, ok := cat.removal("todo"); ok {
		t.Fatal("a removed type was removed again")
	}
	// Any order of learning the three entries ends with the removal.
	for _, order := range [][]TypeInfo{{v1, v2, gone}, {gone, v2, v1}, {v2, gone, v1}} {
		other := newCatalog(nil, "", nil)
		for _, e := range order {
			other.merge([]TypeInfo{e})
		}
		if e, _ := other.entry("todo"); !reflect.DeepEqual(e, gone) {
			t.Fatalf("order %v ended with %+v", order, e)
		}
	}
	again := cat.next(st, digest("b2"), 200, "m2", nil)
	cat.merge([]TypeInfo{again})
	cur, ok := cat.get("todo")
	if !ok || cur.Version != 3 {
		t.Fatalf("redeploy: %+v %v, want version 3", cur, ok)
	}
	var got []string
	for _, v := range cur.Versions() {
		got = append(got, strconv.FormatUint(v.Version, 10)+":"+v.Digest[:2])
	}
	if want := []string{"3:b2", "2:b2", "1:a1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	// A state deletion of a removal wins over the removal, and keeps its versions.
	gone2, _ := cat.removal("todo")
	cat.merge([]TypeInfo{gone2})
	deleted, ok := cat.stateDeleted("todo", 42)
	if !ok {
		t.Fatal("stateDeleted refused")
	}
	for _, order := range [][]TypeInfo{{gone2, deleted}, {deleted, gone2}} {
		other := newCatalog(nil, "", nil)
		other.merge(order)
		if e, _ := other.entry("todo"); e.StateDeletedAt != 42 || !e.Removed || len(e.Versions()) != 3 {
			t.Fatalf("order %v ended with %+v", order, e)
		}
	}
}

// A version past the history's bound stays while its module is still needed (an
// entity runs it, or a saved state names it), and goes once it is not.
func TestCatalogKeepsVersionsStillNeeded(t *testing.T) {
	cat := newCatalog(nil, "", nil)
	st := sharding.TypeSettings{Name: "cart", NumberOfShards: 10}
	d := func(i int) string { return digest(fmt.Sprintf("%02xf", i)) } // distinct for every i
	needed := map[string]bool{d(1): true, d(3): true}
	keep := func(d string) bool { return needed[d] }
	for i := 1; i <= maxPrevious+4; i++ {
		cat.merge([]TypeInfo{cat.next(st, d(i), i, "m1", keep)})
	}
	cur, _ := cat.get("cart")
	var old []uint64
	for _, v := range cur.Versions()[maxPrevious+1:] {
		old = append(old, v.Version)
	}
	if !reflect.DeepEqual(old, []uint64{3, 1}) || len(cur.Versions()) != maxPrevious+3 {
		t.Fatalf("kept %v past the bound, %d versions", old, len(cur.Versions()))
	}
	delete(needed, d(3))
	cat.merge([]TypeInfo{cat.next(st, d(99), 1, "m1", keep)})
	cur, _ = cat.get("cart")
	vs := cur.Versions()
	if last := vs[len(vs)-1]; last.Version != 1 || vs[len(vs)-2].Version == 3 || len(vs) != maxPrevious+2 {
		t.Fatalf("after version 3 is no longer needed: %d versions, last %d", len(vs), last.Version)
	}
}
