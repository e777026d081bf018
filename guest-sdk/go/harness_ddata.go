package shardhost

import (
	"sort"
	"strconv"
	"strings"
)

// memData is the Harness's replica of one distributed data key. It simulates the types
// the typed helpers use; the others are refused with CodeBadRequest.
type memData struct {
	typ     string
	deleted bool
	n       int64  // pncounter
	u       uint64 // gcounter
	set     map[string]bool
	m       map[string]string
	reg     *string
	flag    bool
}

// json renders the value as SPEC.md says.
func (d *memData) json() []byte {
	switch d.typ {
	case TypeGCounter:
		return strconv.AppendUint(nil, d.u, 10)
	case TypePNCounter:
		return strconv.AppendInt(nil, d.n, 10)
	case TypeGSet, TypeORSet:
		elems := make([]string, 0, len(d.set))
		for x := range d.set {
			elems = append(elems, x)
		}
		sort.Strings(elems)
		return EncodeStrings(elems)
	case TypeLWWMap:
		return EncodeStringMap(d.m)
	case TypeLWWRegister:
		if d.reg == nil {
			return []byte("null")
		}
		return AppendJSONString(nil, *d.reg)
	case TypeFlag:
		return []byte(strconv.FormatBool(d.flag))
	}
	return []byte("null")
}

// validConsistency reports whether s is a consistency SPEC.md allows: "" (local),
// "local", "majority", "majority+K", "all" or a positive number of replicas.
func validConsistency(s string) bool {
	switch s {
	case "", "local", "majority", "all":
		return true
	}
	digits := strings.TrimPrefix(s, "majority+")
	n, err := strconv.ParseUint(digits, 10, 31)
	return err == nil && (digits != s || n > 0)
}

func (h *Harness) dataGet(key string) (Code, []byte) {
	d := h.data[key]
	switch {
	case d == nil:
		return CodeNotFound, []byte("key " + quote(key) + " not found")
	case d.deleted:
		return CodeDeleted, []byte("key " + quote(key) + " was deleted")
	}
	return CodeOK, d.json()
}

// dataUpdate applies op to key as ddata.ParseOp reads it: the verb, then one word for a
// map key, then the rest of the text for an element or a value.
func (h *Harness) dataUpdate(key, typ, op, cons string) (Code, []byte) {
	bad := func(text string) (Code, []byte) { return CodeBadRequest, []byte(text) }
	if key == "" {
		return bad("empty key")
	}
	if !validConsistency(cons) {
		return bad("bad consistency " + quote(cons))
	}
	switch typ {
	case TypeGCounter, TypePNCounter, TypeGSet, TypeORSet, TypeLWWMap, TypeLWWRegister, TypeFlag:
	case TypeORMap, TypeORMultiMap, TypePNCounterMap:
		return bad("the harness does not simulate " + typ)
	default:
		return bad("unknown data type " + quote(typ))
	}
	d := h.data[key]
	switch {
	case d != nil && d.deleted:
		return CodeDeleted, []byte("key " + quote(key) + " was deleted")
	case d != nil && d.typ != typ:
		return CodeTypeMismatch, []byte("key " + quote(key) + " holds a " + d.typ + ", not a " + typ)
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(op), " ")
	rest = strings.TrimLeft(rest, " ")
	count := func() (uint64, bool) {
		if rest == "" {
			return 1, true
		}
		n, err := strconv.ParseUint(rest, 10, 64)
		return n, err == nil
	}
	next := memData{typ: typ}
	if d != nil {
		next = *d
	}
	copySet := func() {
		s := make(map[string]bool, len(next.set)+1)
		for k := range next.set {
			s[k] = true
		}
		next.set = s
	}
	switch typ {
	case TypeGCounter:
		n, ok := count()
		if verb != "incr" || !ok {
			return bad("gcounter: want incr [N], got " + quote(op))
		}
		next.u += n
	case TypePNCounter:
		n, ok := count()
		switch {
		case !ok:
			return bad("pncounter: want incr [N] or decr [N], got " + quote(op))
		case verb == "incr":
			next.n += int64(n)
		case verb == "decr":
			next.n -= int64(n)
		default:
			return bad("pncounter: want incr [N] or decr [N], got " + quote(op))
		}
	case TypeGSet:
		if verb != "add" || rest == "" {
			return bad("gset: want add X, got " + quote(op))
		}
		copySet()
		next.set[rest] = true
	case TypeORSet:
		copySet()
		switch {
		case verb == "add" && rest != "":
			next.set[rest] = true
		case verb == "remove" && rest != "":
			delete(next.set, rest)
		case verb == "clear" && rest == "":
			next.set = map[string]bool{}
		default:
			return bad("orset: want add X, remove X or clear, got " + quote(op))
		}
	case TypeFlag:
		if verb != "enable" || rest != "" {
			return bad("flag: want enable, got " + quote(op))
		}
		next.flag = true
	case TypeLWWRegister:
		if verb != "set" {
			return bad("lwwregister: want set V, got " + quote(op))
		}
		v := rest
		next.reg = &v
	case TypeLWWMap:
		k, v, _ := strings.Cut(rest, " ")
		v = strings.TrimLeft(v, " ")
		m := make(map[string]string, len(next.m)+1)
		for mk, mv := range next.m {
			m[mk] = mv
		}
		switch {
		case k != "" && verb == "put":
			m[k] = v
		case k != "" && verb == "remove" && v == "":
			delete(m, k)
		default:
			return bad("lwwmap: want put K V or remove K, got " + quote(op))
		}
		next.m = m
	}
	h.data[key] = &next
	return CodeOK, next.json()
}
