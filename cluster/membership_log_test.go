package cluster

import (
	"fmt"
	"testing"
)

// TestMemberEventLogAttrs: a member event's log record names its member; a change to no
// leader says leader=none rather than print a zero Member (an empty address, UID
// 0000000000000000, status(0)).
func TestMemberEventLogAttrs(t *testing.T) {
	up := Member{Address: "127.0.0.1:7946", UID: 0x59fa1c138628fd0d, Status: StatusUp}
	for _, c := range []struct {
		e    MemberEvent
		want string
	}{
		{MemberEvent{Kind: MemberUp, Member: up}, "[member 127.0.0.1:7946 uid 59fa1c138628fd0d status up]"},
		{MemberEvent{Kind: LeaderChanged, Member: up}, "[member 127.0.0.1:7946 uid 59fa1c138628fd0d status up]"},
		{MemberEvent{Kind: LeaderChanged}, "[leader none]"},
	} {
		if got := fmt.Sprint(memberEventAttrs(c.e)); got != c.want {
			t.Errorf("%s: %s, want %s", c.e.Kind, got, c.want)
		}
	}
}
