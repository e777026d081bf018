package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// MemberStatus is a member's place in the lifecycle of the cluster specification:
// joining → up → leaving → exiting → removed, and down. Unreachability is a separate
// flag (Member.Reachable), not a status.
type MemberStatus uint8

const (
	StatusJoining MemberStatus = iota + 1
	StatusUp
	StatusLeaving
	StatusExiting
	StatusDown
	StatusRemoved
)

var statusNames = [...]string{"", "joining", "up", "leaving", "exiting", "down", "removed"}

func (s MemberStatus) String() string {
	if int(s) < len(statusNames) && s != 0 {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// MarshalText writes the status's name ("up", "leaving", ...).
func (s MemberStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status's name.
func (s *MemberStatus) UnmarshalText(b []byte) error {
	for i, name := range statusNames {
		if i > 0 && name == string(b) {
			*s = MemberStatus(i)
			return nil
		}
	}
	return fmt.Errorf("cluster: unknown member status %q", b)
}

// Member is one host process in the cluster.
type Member struct {
	// Address is the member's gossip address, host:port (its --bind address).
	Address string `json:"address"`
	// UID is chosen at random when the process starts: a restarted process on the same
	// address is a new member.
	UID UID `json:"uid"`
	// TransportAddr is where the member receives node-to-node frames, host:port.
	TransportAddr string `json:"transport"`
	// APIAddr is the member's management API, host:port (empty if it serves none).
	APIAddr string `json:"api,omitempty"`
	// Name is the member's stable name, given at start (MembershipConfig.Name), kept
	// across its restarts at other addresses: a StatefulSet pod's DNS name, say. Empty:
	// none; what ranks replicas by member (the built-in state store's ring) then uses
	// Address.
	Name string `json:"name,omitempty"`
	// Roles are the member's roles.
	Roles []string `json:"roles"`
	// Status is the member's lifecycle status.
	Status MemberStatus `json:"status"`
	// UpNumber orders members by age: the leader numbers members as it moves them to
	// up. 0 while joining.
	UpNumber int `json:"up_number"`
	// Reachable is false while a member's failure detector finds it unreachable.
	Reachable bool `json:"reachable"`
	// Leader is true for the member that is the leader in the view that listed it.
	Leader bool `json:"leader"`
}

// UID identifies one incarnation of a member. Its text form is 16 hex digits.
type UID uint64

func (u UID) String() string {
	var b [16]byte
	u.appendHex(b[:0])
	return string(b[:])
}

// appendHex appends the 16 hex digits of u to b (String without fmt: the vector clock
// and the heartbeat ring name members by it on every change, docs/scale.md).
func (u UID) appendHex(b []byte) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(uint64(u)>>shift)&0xf])
	}
	return b
}

// MarshalText writes the UID as 16 hex digits.
func (u UID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads a UID written by MarshalText.
func (u *UID) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil || len(b) != 16 {
		return fmt.Errorf("cluster: bad UID %q (want 16 hex digits)", b)
	}
	*u = UID(v)
	return nil
}

// UniqueAddress identifies one incarnation of a member: "address#uid" with the UID in hex.
func (m Member) UniqueAddress() string { return uniqueAddress(m.Address, m.UID) }

func uniqueAddress(addr string, uid UID) string { return addr + "#" + uid.String() }

// IsOlderThan reports whether m became up before o (Akka's Member.isOlderThan): lower
// up-number first, members not yet up after all others; ties by address, then UID, so
// that every member orders the same set the same way.
func (m Member) IsOlderThan(o Member) bool {
	if m.UpNumber != o.UpNumber {
		if m.UpNumber == 0 || o.UpNumber == 0 {
			return m.UpNumber != 0
		}
		return m.UpNumber < o.UpNumber
	}
	if m.Address != o.Address {
		return m.Address < o.Address
	}
	return m.UID < o.UID
}

// Node returns the member's unique address.
func (m Member) Node() UniqueAddress { return UniqueAddress{Address: m.Address, UID: m.UID} }

// Oldest returns the oldest of members (see IsOlderThan), and false for none.
func Oldest(members []Member) (Member, bool) {
	var oldest Member
	found := false
	for _, m := range members {
		if !found || m.IsOlderThan(oldest) {
			oldest, found = m, true
		}
	}
	return oldest, found
}

// String describes a member on one line, for logs.
func (m Member) String() string {
	return fmt.Sprintf("%s (uid %s, %s, transport %s, roles [%s])", m.Address, m.UID, m.Status,
		m.TransportAddr, strings.Join(m.Roles, ","))
}
