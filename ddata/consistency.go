package ddata

import (
	"fmt"
	"strconv"
	"strings"
)

type level uint8

const (
	levelLocal level = iota
	levelN
	levelMajority
	levelAll
)

// consistency is the shared part of read and write consistency levels.
type consistency struct {
	level      level
	n          int // for levelN: replicas including the local one
	additional int // for levelMajority: majority-plus
	minCap     int // for levelMajority
}

// needed returns how many replicas (the local one included) must answer, out of
// members, as the reference defines: N/2+1 for majority, raised to minCap (at most N),
// plus additional for majority-plus (at most N); all is N; n is at most N.
func (c consistency) needed(members int) int {
	switch c.level {
	case levelLocal:
		return 1
	case levelN:
		return min(c.n, members)
	case levelMajority:
		m := members/2 + 1
		if c.minCap > m {
			m = min(c.minCap, members)
		}
		return min(m+c.additional, members)
	}
	return members
}

func (c consistency) String(verb string) string {
	switch c.level {
	case levelLocal:
		return "local"
	case levelN:
		return fmt.Sprintf("%s %d", verb, c.n)
	case levelMajority:
		s := "majority"
		if c.additional > 0 {
			s = fmt.Sprintf("majority plus %d", c.additional)
		}
		if c.minCap > 0 {
			s += fmt.Sprintf(" (min %d)", c.minCap)
		}
		return s
	}
	return "all"
}

// ReadConsistency says how many replicas a Get reads and merges.
type ReadConsistency struct{ c consistency }

// WriteConsistency says how many replicas must have an update before Update returns.
type WriteConsistency struct{ c consistency }

// ReadLocal reads the local replica only: it never fails, and may be stale.
func ReadLocal() ReadConsistency { return ReadConsistency{} }

// ReadFrom reads and merges n replicas, the local one included.
func ReadFrom(n int) ReadConsistency { return ReadConsistency{consistency{level: levelN, n: n}} }

// ReadMajority reads a majority (N/2+1 of the N members), at least minCap (0: none).
func ReadMajority(minCap int) ReadConsistency {
	return ReadConsistency{consistency{level: levelMajority, minCap: minCap}}
}

// ReadMajorityPlus reads a majority plus additional members (at most all).
func ReadMajorityPlus(additional, minCap int) ReadConsistency {
	return ReadConsistency{consistency{level: levelMajority, additional: additional, minCap: minCap}}
}

// ReadAll reads every member.
func ReadAll() ReadConsistency { return ReadConsistency{consistency{level: levelAll}} }

// WriteLocal writes the local replica only; gossip spreads it later.
func WriteLocal() WriteConsistency { return WriteConsistency{} }

// WriteTo writes n replicas, the local one included, before returning.
func WriteTo(n int) WriteConsistency { return WriteConsistency{consistency{level: levelN, n: n}} }

// WriteMajority writes a majority (N/2+1 of the N members), at least minCap (0: none).
func WriteMajority(minCap int) WriteConsistency {
	return WriteConsistency{consistency{level: levelMajority, minCap: minCap}}
}

// WriteMajorityPlus writes a majority plus additional members (at most all).
func WriteMajorityPlus(additional, minCap int) WriteConsistency {
	return WriteConsistency{consistency{level: levelMajority, additional: additional, minCap: minCap}}
}

// WriteAll writes every member.
func WriteAll() WriteConsistency { return WriteConsistency{consistency{level: levelAll}} }

func (r ReadConsistency) String() string  { return r.c.String("from") }
func (w WriteConsistency) String() string { return w.c.String("to") }

// ParseReadConsistency reads "local", "majority", "majority+K", "all" or "N" (read from
// N replicas); a "/minCap" suffix sets majority's minimum, e.g. "majority/5".
func ParseReadConsistency(s string) (ReadConsistency, error) {
	c, err := parseConsistency(s)
	return ReadConsistency{c}, err
}

// ParseWriteConsistency reads the same forms as ParseReadConsistency.
func ParseWriteConsistency(s string) (WriteConsistency, error) {
	c, err := parseConsistency(s)
	return WriteConsistency{c}, err
}

func parseConsistency(s string) (consistency, error) {
	bad := fmt.Errorf("ddata: consistency %q: want local, majority, majority+K, all or a number of replicas (majority may end in /MINCAP)", s)
	body, capStr, hasCap := strings.Cut(s, "/")
	minCap := 0
	if hasCap {
		v, err := strconv.Atoi(capStr)
		if err != nil || v < 1 || !strings.HasPrefix(body, "majority") {
			return consistency{}, bad
		}
		minCap = v
	}
	switch {
	case body == "local":
		return consistency{}, nil
	case body == "all":
		return consistency{level: levelAll}, nil
	case body == "majority":
		return consistency{level: levelMajority, minCap: minCap}, nil
	case strings.HasPrefix(body, "majority+"):
		v, err := strconv.Atoi(strings.TrimPrefix(body, "majority+"))
		if err != nil || v < 0 {
			return consistency{}, bad
		}
		return consistency{level: levelMajority, additional: v, minCap: minCap}, nil
	}
	v, err := strconv.Atoi(body)
	if err != nil || v < 1 {
		return consistency{}, bad
	}
	return consistency{level: levelN, n: v}, nil
}
