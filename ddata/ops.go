package ddata

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadOp is returned for an operation text that does not parse for its type.
var ErrBadOp = errors.New("ddata: bad operation")

// Empty returns the empty value of a data type. ORMap needs its value type: use
// EmptyORMap. Errors wrap ErrUnknownType.
func Empty(t DataType) (ReplicatedData, error) {
	switch t {
	case TypeGCounter:
		return GCounter{}, nil
	case TypePNCounter:
		return PNCounter{}, nil
	case TypeGSet:
		return GSet{}, nil
	case TypeORSet:
		return ORSet{}, nil
	case TypeORMap:
		return ORMap{}, nil
	case TypeORMultiMap:
		return NewORMultiMap(), nil
	case TypeLWWMap:
		return LWWMap{}, nil
	case TypePNCounterMap:
		return PNCounterMap{}, nil
	case TypeLWWRegister:
		return LWWRegister{}, nil
	case TypeFlag:
		return Flag{}, nil
	case TypeEpochMap:
		return EpochMap{}, nil
	}
	return nil, fmt.Errorf("%w: %q (want gcounter, pncounter, gset, orset, ormap, ormultimap, lwwmap, pncountermap, lwwregister, flag or epochmap)", ErrUnknownType, t)
}

// Op is a parsed textual update, as the CLI and the management API take them:
//
//	gcounter      incr [N]
//	pncounter     incr [N] | decr [N]
//	gset          add X
//	orset         add X | remove X | clear
//	flag          enable
//	lwwregister   set V
//	lwwmap        put K V | remove K
//	pncountermap  incr K [N] | decr K [N] | remove K
//	ormultimap    add K V | remove K V | delete K
//	ormap         update K TYPE OP... | remove K
//
// N is a non-negative decimal integer (default 1); X and V are the rest of the text, so
// they may contain spaces; K is one word.
type Op struct {
	typ  DataType
	verb string
	key  string
	arg  string
	n    uint64
	sub  *Op // ormap: the operation on the entry's value
}

// ParseOp parses text as an update of type t. Errors wrap ErrBadOp or ErrUnknownType.
func ParseOp(t DataType, text string) (Op, error) {
	if _, err := Empty(t); err != nil {
		return Op{}, err
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	rest = strings.TrimLeft(rest, " ")
	op := Op{typ: t, verb: verb}
	bad := func(want string) (Op, error) {
		return Op{}, fmt.Errorf("%w: %q for %s (want %s)", ErrBadOp, text, t, want)
	}
	count := func(s string) (uint64, bool) {
		if s == "" {
			return 1, true
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil
	}
	word := func() (string, string) {
		k, r, _ := strings.Cut(rest, " ")
		return k, strings.TrimLeft(r, " ")
	}
	switch t {
	case TypeEpochMap:
		return Op{}, fmt.Errorf("%w: %s takes no textual operation (the shard coordinator writes it)", ErrBadOp, t)
	case TypeGCounter, TypePNCounter:
		n, ok := count(rest)
		if !ok || !(verb == "incr" || verb == "decr" && t == TypePNCounter) {
			return bad(map[DataType]string{TypeGCounter: "incr [N]", TypePNCounter: "incr [N] or decr [N]"}[t])
		}
		op.n = n
	case TypeGSet:
		if verb != "add" || rest == "" {
			return bad("add X")
		}
		op.arg = rest
	case TypeORSet:
		switch {
		case (verb == "add" || verb == "remove") && rest != "":
			op.arg = rest
		case verb == "clear" && rest == "":
		default:
			return bad("add X, remove X or clear")
		}
	case TypeFlag:
		if verb != "enable" || rest != "" {
			return bad("enable")
		}
	case TypeLWWRegister:
		if verb != "set" {
			return bad("set V")
		}
		op.arg = rest
	case TypeLWWMap:
		op.key, op.arg = word()
		if op.key == "" || verb != "put" && verb != "remove" || verb == "remove" && op.arg != "" {
			return bad("put K V or remove K")
		}
	case TypePNCounterMap:
		k, r := word()
		n, ok := count(r)
		if k == "" || !ok || verb != "incr" && verb != "decr" && verb != "remove" || verb == "remove" && r != "" {
			return bad("incr K [N], decr K [N] or remove K")
		}
		op.key, op.n = k, n
	case TypeORMultiMap:
		op.key, op.arg = word()
		switch {
		case op.key == "":
			return bad("add K V, remove K V or delete K")
		case (verb == "add" || verb == "remove") && op.arg != "":
		case verb == "delete" && op.arg == "":
		default:
			return bad("add K V, remove K V or delete K")
		}
	case TypeORMap:
		op.key, op.arg = word()
		switch {
		case verb == "remove" && op.key != "" && op.arg == "":
		case verb == "update" && op.key != "":
			vt, vop, _ := strings.Cut(op.arg, " ")
			if vt == string(TypeORMap) {
				return bad("a value type other than ormap")
			}
			sub, err := ParseOp(DataType(vt), vop)
			if err != nil {
				return Op{}, err
			}
			op.sub = &sub
		default:
			return bad("update K TYPE OP or remove K")
		}
	}
	return op, nil
}

// Type returns the data type the operation applies to.
func (o Op) Type() DataType { return o.typ }

// Modify returns the function that applies the operation as node, for Replicator.Update;
// now gives the time in Unix milliseconds for registers (nil: the wall clock).
func (o Op) Modify(node NodeID, now func() int64) func(ReplicatedData) (ReplicatedData, ReplicatedData, error) {
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	return func(d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
		return o.apply(node, now, d)
	}
}

func (o Op) apply(node NodeID, now func() int64, d ReplicatedData) (ReplicatedData, ReplicatedData, error) {
	if d == nil || d.Type() != o.typ {
		return nil, nil, fmt.Errorf("%w: %s operation on %v", ErrTypeMismatch, o.typ, typeOf(d))
	}
	clock := DefaultClock(now)
	switch v := d.(type) {
	case GCounter:
		return pair(v.Increment(node, o.n))
	case PNCounter:
		if o.verb == "decr" {
			return pair(v.Decrement(node, o.n))
		}
		return pair(v.Increment(node, o.n))
	case GSet:
		return pair(v.Add(o.arg))
	case ORSet:
		switch o.verb {
		case "add":
			return pair(v.Add(node, o.arg))
		case "remove":
			return pair(v.Remove(node, o.arg))
		}
		return pair(v.Clear(node))
	case Flag:
		return pair(v.SwitchOn())
	case LWWRegister:
		return pair(v.Set(node, []byte(o.arg), clock))
	case LWWMap:
		if o.verb == "remove" {
			return pair(v.Remove(node, o.key))
		}
		return pair(v.Put(node, o.key, []byte(o.arg), clock))
	case PNCounterMap:
		switch o.verb {
		case "incr":
			return pair(v.Increment(node, o.key, o.n))
		case "decr":
			return pair(v.Decrement(node, o.key, o.n))
		}
		return pair(v.Remove(node, o.key))
	case ORMultiMap:
		switch o.verb {
		case "add":
			return pair(v.AddBinding(node, o.key, o.arg))
		case "remove":
			return pair(v.RemoveBinding(node, o.key, o.arg))
		}
		return pair(v.Remove(node, o.key))
	case ORMap:
		if o.verb == "remove" {
			return pair(v.Remove(node, o.key))
		}
		initial, err := Empty(o.sub.typ)
		if err != nil {
			return nil, nil, err
		}
		next, delta, err := v.Update(node, o.key, initial, func(cur ReplicatedData) (ReplicatedData, ReplicatedData, error) {
			return o.sub.apply(node, now, cur)
		})
		return next, delta, err
	}
	return nil, nil, fmt.Errorf("%w: %s", ErrUnknownType, o.typ)
}

// pair adapts a typed (value, delta) update to ReplicatedData.
func pair[T ReplicatedData](next, delta T) (ReplicatedData, ReplicatedData, error) {
	return next, delta, nil
}
