// Membership's side of memberlist: user messages, shared state, broadcasts (delegate).

package cluster

import (
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/hashicorp/memberlist"
)

// User messages on memberlist: a kind byte, then CBOR.
const (
	userMsgMembership byte = 'M'
	userMsgState      byte = 'S'
)

func encodeUserMsg(kind byte, v any) ([]byte, error) {
	b, err := cbor.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{kind}, b...), nil
}

// gossipDecMode decodes what arrives by gossip, with limits.
var gossipDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{MaxNestedLevels: 12, MaxArrayElements: 1 << 16, MaxMapPairs: 1 << 16}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

type namedState struct {
	Name  string `cbor:"1,keyasint"`
	State []byte `cbor:"2,keyasint"`
}

// delegate adapts Membership to memberlist.Delegate. memberlist calls it from its own
// goroutines; it never blocks (the inbox drops when full).
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte { return nil }

func (d *delegate) NotifyMsg(b []byte) {
	m := (*Membership)(d)
	if len(b) < 2 {
		return
	}
	switch b[0] {
	case userMsgMembership:
		msg, err := DecodeMessage(b[1:])
		if err != nil {
			m.log.Debug("dropping a malformed membership message", "err", err)
			return
		}
		select {
		case m.inbox <- msg:
		default:
			m.log.Debug("membership inbox full: message dropped")
		}
	case userMsgState:
		var ns namedState
		if err := gossipDecMode.Unmarshal(b[1:], &ns); err != nil {
			m.log.Debug("dropping a malformed state broadcast", "err", err)
			return
		}
		if ns.Name == membershipState {
			var w gossipWire
			if err := gossipDecMode.Unmarshal(ns.State, &w); err == nil {
				select {
				case m.inbox <- Message{Kind: msgGossip, Gossip: &w}:
				default:
				}
			}
			return
		}
		m.statesMu.Lock()
		sd := m.states[ns.Name]
		m.statesMu.Unlock()
		if sd != nil {
			sd.MergeRemoteState(ns.State)
		}
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

// membershipState is the push-pull name of the membership state itself.
const membershipState = "cluster.membership"

func (d *delegate) LocalState(join bool) []byte {
	m := (*Membership)(d)
	m.statesMu.Lock()
	states := make(map[string]StateDelegate, len(m.states))
	for k, v := range m.states {
		states[k] = v
	}
	m.statesMu.Unlock()
	all := make(map[string][]byte, len(states)+1)
	for name, sd := range states {
		all[name] = sd.LocalState()
	}
	if w := m.wire.Load(); w != nil {
		if b, err := cbor.Marshal(w); err == nil {
			all[membershipState] = b
		}
	}
	b, err := cbor.Marshal(all)
	if err != nil {
		m.log.Error("encoding local state", "err", err)
		return nil
	}
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	m := (*Membership)(d)
	if len(buf) == 0 {
		return
	}
	var all map[string][]byte
	if err := gossipDecMode.Unmarshal(buf, &all); err != nil {
		m.log.Debug("dropping malformed remote state", "err", err)
		return
	}
	for name, state := range all {
		if name == membershipState {
			var w gossipWire
			if err := gossipDecMode.Unmarshal(state, &w); err == nil {
				select {
				case m.inbox <- Message{Kind: msgGossip, Gossip: &w}:
				default:
				}
			}
			continue
		}
		m.statesMu.Lock()
		sd := m.states[name]
		m.statesMu.Unlock()
		if sd != nil {
			sd.MergeRemoteState(state)
		}
	}
}

// broadcast is one queued named state.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*broadcast)
	return ok && o.name == b.name
}
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}

// oneLineErr is err's text on one line (memberlist's join errors are multi-line lists).
func oneLineErr(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
