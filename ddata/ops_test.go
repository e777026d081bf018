package ddata

import (
	"encoding/json"
	"errors"
	"testing"
)

func applyOps(t *testing.T, typ DataType, ops ...string) ReplicatedData {
	t.Helper()
	d, err := Empty(typ)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1000)
	clock := func() int64 { now++; return now }
	for _, text := range ops {
		op, err := ParseOp(typ, text)
		if err != nil {
			t.Fatalf("%s %q: %v", typ, text, err)
		}
		d, _, err = op.Modify("n1:1#0000000000000001", clock)(d)
		if err != nil {
			t.Fatalf("%s %q: %v", typ, text, err)
		}
	}
	return d
}

func jsonOf(t *testing.T, d ReplicatedData) string {
	t.Helper()
	b, err := json.Marshal(d.Value())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOpsGiveTheDocumentedJSON(t *testing.T) {
	for _, c := range []struct {
		typ  DataType
		ops  []string
		want string
	}{
		{TypeGCounter, []string{"incr", "incr 41"}, `42`},
		{TypePNCounter, []string{"incr 5", "decr 7"}, `-2`},
		{TypeGSet, []string{"add b", "add a x"}, `["a x","b"]`},
		{TypeORSet, []string{"add a", "add b", "remove a"}, `["b"]`},
		{TypeORSet, []string{"add a", "clear", "add c"}, `["c"]`},
		{TypeFlag, []string{"enable"}, `true`},
		{TypeLWWRegister, []string{"set one", "set two words"}, `"two words"`},
		{TypeLWWMap, []string{"put a 1", "put b hello you", "remove a"}, `{"b":"hello you"}`},
		{TypePNCounterMap, []string{"incr a 5", "decr a", "incr b", "remove b"}, `{"a":4}`},
		{TypeORMultiMap, []string{"add k x", "add k y", "remove k x", "add j z", "delete j"}, `{"k":["y"]}`},
		{TypeORMap, []string{"update u pncounter incr 3", "update v pncounter incr 1", "remove v"}, `{"u":3}`},
	} {
		if got := jsonOf(t, applyOps(t, c.typ, c.ops...)); got != c.want {
			t.Errorf("%s %q = %s, want %s", c.typ, c.ops, got, c.want)
		}
	}
}

func TestParseOpRefusesWhatDoesNotFit(t *testing.T) {
	for typ, bads := range map[DataType][]string{
		TypeGCounter:     {"decr 1", "incr -1", "incr x", "add 1"},
		TypePNCounter:    {"incr 1 2", "set 1"},
		TypeGSet:         {"remove x", "add"},
		TypeORSet:        {"clear x", "add"},
		TypeFlag:         {"disable", "enable now"},
		TypeEpochMap:     {"put 1 2 x", ""},
		TypeLWWRegister:  {"put x"},
		TypeLWWMap:       {"put", "remove a b"},
		TypePNCounterMap: {"incr", "incr a x", "remove a 1"},
		TypeORMultiMap:   {"add k", "delete k v", "put k v"},
		TypeORMap:        {"update k", "update k ormap remove x", "update k pncounter add 1", "remove"},
	} {
		for _, text := range bads {
			if _, err := ParseOp(typ, text); err == nil {
				t.Errorf("%s %q parsed", typ, text)
			}
		}
	}
	if _, err := ParseOp("hyperloglog", "add x"); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	// An ORMap's value type is fixed by its first value.
	m := applyOps(t, TypeORMap, "update u pncounter incr 3")
	mixed, _ := ParseOp(TypeORMap, "update v orset add q")
	if _, _, err := mixed.Modify("n", nil)(m); !errors.Is(err, ErrTypeMismatch) {
		t.Errorf("orset value in a pncounter ormap: %v", err)
	}
	op, _ := ParseOp(TypeGSet, "add x")
	if _, _, err := op.Modify("n", nil)(PNCounter{}); !errors.Is(err, ErrTypeMismatch) {
		t.Errorf("gset op on a counter: %v", err)
	}
}
