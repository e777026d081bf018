package shardhost

import (
	"strings"
	"time"
)

// Consistency is the read or write consistency of a distributed data operation: how many
// replicas must answer (Akka's ReadMajority, WriteAll and so on). The zero value is Local.
type Consistency struct{ s string }

var (
	// Local reads or writes this member's replica only.
	Local = Consistency{"local"}
	// Majority reads or writes N/2+1 of the N members.
	Majority = Consistency{"majority"}
	// All reads or writes every member.
	All = Consistency{"all"}
)

// MajorityPlus reads or writes a majority plus n members (at most all).
func MajorityPlus(n int) Consistency { return Consistency{"majority+" + itoa(int64(n))} }

// Replicas reads or writes n members (at most all).
func Replicas(n int) Consistency { return Consistency{itoa(int64(n))} }

// ConsistencyOf returns the consistency whose text, as SPEC.md writes it, is s, without
// checking it: the host refuses a bad one with ErrBadRequest. The empty string is Local.
func ConsistencyOf(s string) Consistency { return Consistency{s} }

// String returns the consistency as SPEC.md writes it: "local", "majority",
// "majority+K", "all" or a number of replicas.
func (c Consistency) String() string {
	if c.s == "" {
		return "local"
	}
	return c.s
}

// The distributed data types (SPEC.md, "v1: distributed data").
const (
	TypeGCounter     = "gcounter"
	TypePNCounter    = "pncounter"
	TypeGSet         = "gset"
	TypeORSet        = "orset"
	TypeORMap        = "ormap"
	TypeORMultiMap   = "ormultimap"
	TypeLWWMap       = "lwwmap"
	TypePNCounterMap = "pncountermap"
	TypeLWWRegister  = "lwwregister"
	TypeFlag         = "flag"
)

// DDataGet reads key with the read consistency, waiting at most timeout (0: the host's
// default, 5 s) and never past the message's deadline, and returns its value as JSON (a
// counter is a number, a set a sorted array of strings, a register a string or null, a
// flag a boolean, a map an object of its values; ParseInt, ParseStrings, ParseStringMap,
// ParseString and ParseBool read them). Errors are *HostError: ErrNotFound, ErrDeleted,
// ErrTimeout (the consistency was not reached), ErrBadRequest.
func (c *Context) DDataGet(key string, cons Consistency, timeout time.Duration) ([]byte, error) {
	code, res := c.h.ddataGet(key, cons.s, millis32(timeout))
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	return res, nil
}

// DDataUpdate applies the operation op (text, such as "incr 5" or "put K V") to key,
// creating it empty of type typ if it does not exist, with the write consistency, and
// returns the new local value as JSON. ErrTimeout means the write is applied locally but
// was not acknowledged by enough replicas in time; ErrDeleted, ErrTypeMismatch (the key
// holds another type) and ErrBadRequest (a bad type, operation or consistency) mean it
// was not applied.
func (c *Context) DDataUpdate(key, typ, op string, cons Consistency, timeout time.Duration) ([]byte, error) {
	code, res := c.h.ddataUpdate(key, typ, op, cons.s, millis32(timeout))
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	return res, nil
}

// DDataDelete deletes key for good: it can never be used again (ErrDeleted afterwards).
// ErrTimeout means the delete was not acknowledged by enough replicas in time.
func (c *Context) DDataDelete(key string, cons Consistency, timeout time.Duration) error {
	code, res := c.h.ddataDelete(key, cons.s, millis32(timeout))
	return codeError(code, res)
}

// Subscribe delivers the value of key as a message of KindChanged (Sender is the key, the
// message its value as JSON) whenever it changes, and once soon after subscribing if the
// key exists. The subscription belongs to the entity: it is saved with its state and
// renewed by the next incarnation (a passivated entity receives no changes; the next
// incarnation gets the current value).
func (c *Context) Subscribe(key string) error {
	code, res := c.h.ddataSubscribe(key)
	return codeError(code, res)
}

// Unsubscribe ends the subscription to key; a nil error either way.
func (c *Context) Unsubscribe(key string) error {
	code, res := c.h.ddataUnsubscribe(key)
	return codeError(code, res)
}

// The typed helpers below read and update one key of one type with the host's default
// timeout. Their reads treat a key that does not exist as the type's empty value (0, an
// empty set or map, an unset register, a disabled flag); other errors are *HostError.

// GCounter is a grow-only counter key: Context.GCounter(key).
type GCounter struct {
	c   *Context
	key string
}

// GCounter returns the grow-only counter under key.
func (c *Context) GCounter(key string) GCounter { return GCounter{c, key} }

// Incr adds n and returns the new value.
func (g GCounter) Incr(n uint64, cons Consistency) (uint64, error) {
	v, err := g.c.DDataUpdate(g.key, TypeGCounter, "incr "+utoa(n), cons, 0)
	if err != nil {
		return 0, err
	}
	return ParseUint(v)
}

// Value reads the counter.
func (g GCounter) Value(cons Consistency) (uint64, error) {
	v, err := g.c.get(g.key, cons)
	if v == nil || err != nil {
		return 0, err
	}
	return ParseUint(v)
}

// PNCounter is a counter key that goes up and down: Context.PNCounter(key).
type PNCounter struct {
	c   *Context
	key string
}

// PNCounter returns the counter under key.
func (c *Context) PNCounter(key string) PNCounter { return PNCounter{c, key} }

// Incr adds n (a negative n subtracts) and returns the new value.
func (p PNCounter) Incr(n int64, cons Consistency) (int64, error) {
	op := "incr "
	u := uint64(n)
	if n < 0 {
		op, u = "decr ", uint64(-n) // -MinInt64 wraps to itself, which as uint64 is right
	}
	v, err := p.c.DDataUpdate(p.key, TypePNCounter, op+utoa(u), cons, 0)
	if err != nil {
		return 0, err
	}
	return ParseInt(v)
}

// Decr subtracts n and returns the new value.
func (p PNCounter) Decr(n int64, cons Consistency) (int64, error) {
	if n < 0 {
		v, err := p.c.DDataUpdate(p.key, TypePNCounter, "incr "+utoa(uint64(-n)), cons, 0)
		if err != nil {
			return 0, err
		}
		return ParseInt(v)
	}
	v, err := p.c.DDataUpdate(p.key, TypePNCounter, "decr "+utoa(uint64(n)), cons, 0)
	if err != nil {
		return 0, err
	}
	return ParseInt(v)
}

// Value reads the counter.
func (p PNCounter) Value(cons Consistency) (int64, error) {
	v, err := p.c.get(p.key, cons)
	if v == nil || err != nil {
		return 0, err
	}
	return ParseInt(v)
}

// GSet is a grow-only set of strings: Context.GSet(key).
type GSet struct {
	c   *Context
	key string
}

// GSet returns the grow-only set under key.
func (c *Context) GSet(key string) GSet { return GSet{c, key} }

// Add adds x (it must not be empty) and returns the new elements, sorted.
func (s GSet) Add(x string, cons Consistency) ([]string, error) {
	return s.c.updateStrings(s.key, TypeGSet, "add "+x, cons)
}

// Elements reads the set's elements, sorted.
func (s GSet) Elements(cons Consistency) ([]string, error) { return s.c.getStrings(s.key, cons) }

// ORSet is an observed-remove set of strings: Context.ORSet(key).
type ORSet struct {
	c   *Context
	key string
}

// ORSet returns the observed-remove set under key.
func (c *Context) ORSet(key string) ORSet { return ORSet{c, key} }

// Add adds x (it must not be empty) and returns the new elements, sorted.
func (s ORSet) Add(x string, cons Consistency) ([]string, error) {
	return s.c.updateStrings(s.key, TypeORSet, "add "+x, cons)
}

// Remove removes x and returns the new elements, sorted.
func (s ORSet) Remove(x string, cons Consistency) ([]string, error) {
	return s.c.updateStrings(s.key, TypeORSet, "remove "+x, cons)
}

// Clear removes every element.
func (s ORSet) Clear(cons Consistency) error {
	_, err := s.c.DDataUpdate(s.key, TypeORSet, "clear", cons, 0)
	return err
}

// Elements reads the set's elements, sorted.
func (s ORSet) Elements(cons Consistency) ([]string, error) { return s.c.getStrings(s.key, cons) }

// LWWMap is a map of strings to strings, last writer wins per entry: Context.LWWMap(key).
type LWWMap struct {
	c   *Context
	key string
}

// LWWMap returns the last-writer-wins map under key.
func (c *Context) LWWMap(key string) LWWMap { return LWWMap{c, key} }

// Put sets the entry k (one word: no spaces, not empty) to v and returns the new entries.
func (m LWWMap) Put(k, v string, cons Consistency) (map[string]string, error) {
	if err := mapKey(k); err != nil {
		return nil, err
	}
	return m.c.updateMap(m.key, "put "+k+" "+v, cons)
}

// Remove removes the entry k and returns the new entries.
func (m LWWMap) Remove(k string, cons Consistency) (map[string]string, error) {
	if err := mapKey(k); err != nil {
		return nil, err
	}
	return m.c.updateMap(m.key, "remove "+k, cons)
}

// Get reads the entry k; ok is false if there is none.
func (m LWWMap) Get(k string, cons Consistency) (v string, ok bool, err error) {
	all, err := m.Entries(cons)
	if err != nil {
		return "", false, err
	}
	v, ok = all[k]
	return v, ok, nil
}

// Entries reads every entry.
func (m LWWMap) Entries(cons Consistency) (map[string]string, error) {
	v, err := m.c.get(m.key, cons)
	if v == nil || err != nil {
		return map[string]string{}, err
	}
	return ParseStringMap(v)
}

// LWWRegister is a string register, last writer wins: Context.LWWRegister(key).
type LWWRegister struct {
	c   *Context
	key string
}

// LWWRegister returns the last-writer-wins register under key.
func (c *Context) LWWRegister(key string) LWWRegister { return LWWRegister{c, key} }

// Set sets the register to v.
func (r LWWRegister) Set(v string, cons Consistency) error {
	_, err := r.c.DDataUpdate(r.key, TypeLWWRegister, "set "+v, cons, 0)
	return err
}

// Get reads the register; ok is false if it was never set.
func (r LWWRegister) Get(cons Consistency) (v string, ok bool, err error) {
	b, err := r.c.get(r.key, cons)
	if b == nil || err != nil {
		return "", false, err
	}
	return ParseString(b)
}

// Flag is a boolean that can only be switched on: Context.Flag(key).
type Flag struct {
	c   *Context
	key string
}

// Flag returns the flag under key.
func (c *Context) Flag(key string) Flag { return Flag{c, key} }

// Enable switches the flag on.
func (f Flag) Enable(cons Consistency) error {
	_, err := f.c.DDataUpdate(f.key, TypeFlag, "enable", cons, 0)
	return err
}

// Enabled reads the flag.
func (f Flag) Enabled(cons Consistency) (bool, error) {
	b, err := f.c.get(f.key, cons)
	if b == nil || err != nil {
		return false, err
	}
	return ParseBool(b)
}

// get reads key; a key that does not exist gives nil and no error.
func (c *Context) get(key string, cons Consistency) ([]byte, error) {
	code, res := c.h.ddataGet(key, cons.s, 0)
	if code == CodeNotFound {
		return nil, nil
	}
	if err := codeError(code, res); err != nil {
		return nil, err
	}
	if res == nil {
		res = []byte{}
	}
	return res, nil
}

func (c *Context) getStrings(key string, cons Consistency) ([]string, error) {
	v, err := c.get(key, cons)
	if v == nil || err != nil {
		return nil, err
	}
	return ParseStrings(v)
}

func (c *Context) updateStrings(key, typ, op string, cons Consistency) ([]string, error) {
	v, err := c.DDataUpdate(key, typ, op, cons, 0)
	if err != nil {
		return nil, err
	}
	return ParseStrings(v)
}

func (c *Context) updateMap(key, op string, cons Consistency) (map[string]string, error) {
	v, err := c.DDataUpdate(key, TypeLWWMap, op, cons, 0)
	if err != nil {
		return nil, err
	}
	return ParseStringMap(v)
}

// mapKey checks an LWWMap entry key: the operation text takes it as one word.
func mapKey(k string) error {
	if k == "" || strings.ContainsAny(k, " \t\n\r") {
		return &HostError{Code: CodeBadRequest, Text: "lwwmap: an entry key is one word, got " + quote(k)}
	}
	return nil
}

// utoa formats n in decimal.
func utoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}
