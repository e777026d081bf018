// Command room is an example entity: a chat room per entity ID, which keeps its members
// and the last lines said, takes its topic from distributed data, and lets idle members
// go with a timer. README.md lists its messages.
//
// It shows the v1 parts of the Go SDK: guest-level state with shardhost.Stateful, a
// subscription to a distributed data key (the LWWMap room-topics) taken up from the
// Changed messages, an update with a write consistency, a repeating timer, and the host's
// clock.
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o room.wasm .
// or, with Go's port, GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o room.wasm .
// (make examples writes bin/wasm/room.wasm)
package main

import (
	"errors"
	"sort"
	"strings"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

const (
	// TopicsKey is the LWWMap of every room's topic, by room ID.
	TopicsKey = "room-topics"
	// ExpireTimer is the name of the repeating timer that lets idle members go.
	ExpireTimer = "expire"
	// HistoryLines is how many lines a room keeps.
	HistoryLines = 50
	// DefaultExpireAfter is how long a member may stay idle before the room lets it go.
	DefaultExpireAfter = 60 * time.Second
	// MinExpireInterval is the shortest interval of the expire timer.
	MinExpireInterval = 100 * time.Millisecond
)

// roomState is what a room keeps across incarnations.
type roomState struct {
	members     map[string]int64 // name -> the wall time of its last join or say (Unix ns)
	history     []string         // "NAME: TEXT", oldest first, at most HistoryLines
	topic       string
	expireAfter time.Duration
}

// stateVersion is the first field of the encoded state.
const stateVersion = 1

func (s *roomState) MarshalBinary() ([]byte, error) {
	var w shardhost.StateWriter
	w.Uint64(stateVersion)
	w.Int64Map(s.members)
	w.Strings(s.history)
	w.String(s.topic)
	w.Int64(int64(s.expireAfter))
	return w.Bytes(), nil
}

func (s *roomState) UnmarshalBinary(b []byte) error {
	r := shardhost.NewStateReader(b)
	if v := r.Uint64(); r.Err() == nil && v != stateVersion {
		return errors.New("room: unknown state version")
	}
	s.members, s.history, s.topic = r.Int64Map(), r.Strings(), r.String()
	s.expireAfter = time.Duration(r.Int64())
	return r.Done()
}

type room struct {
	shardhost.Stateful[roomState, *roomState]
	// expiring is whether this incarnation runs the expire timer. It is not part of the
	// state: OnActivate starts the timer anew.
	expiring bool
}

var (
	_ shardhost.Entity      = (*room)(nil)
	_ shardhost.Activator   = (*room)(nil)
	_ shardhost.Snapshotter = (*room)(nil)
)

func newRoom(string) shardhost.Entity {
	r := &room{}
	r.State = roomState{members: map[string]int64{}, expireAfter: DefaultExpireAfter}
	return r
}

var ok = []byte("ok")

// OnActivate subscribes to the topics and keeps the expire timer running while the room
// has members.
func (r *room) OnActivate(ctx *shardhost.Context) error {
	if err := ctx.Subscribe(TopicsKey); err != nil {
		return err
	}
	return r.armExpiry(ctx, true)
}

func (r *room) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	s := &r.State
	switch ctx.Kind() {
	case shardhost.KindChanged:
		if ctx.Sender() == TopicsKey {
			topics, err := shardhost.ParseStringMap(msg)
			if err != nil {
				return nil, err
			}
			s.topic = topics[ctx.EntityID()]
		}
		return nil, nil
	case shardhost.KindTimer:
		if ctx.Sender() == ExpireTimer {
			return nil, r.expire(ctx)
		}
		return nil, nil
	}

	verb, rest, _ := strings.Cut(strings.TrimSpace(string(msg)), " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "join":
		if !oneWord(rest) {
			return nil, errors.New("room: join NAME (one word)")
		}
		s.members[rest] = ctx.Now().UnixNano()
		return ok, r.armExpiry(ctx, false)
	case "say":
		name, text, _ := strings.Cut(rest, " ")
		text = strings.TrimSpace(text)
		if !oneWord(name) || text == "" {
			return nil, errors.New("room: say NAME TEXT")
		}
		if _, member := s.members[name]; !member {
			return nil, errors.New("room: " + name + " is not a member (join first)")
		}
		s.members[name] = ctx.Now().UnixNano()
		s.history = append(s.history, name+": "+text)
		if n := len(s.history); n > HistoryLines {
			s.history = append(s.history[:0:0], s.history[n-HistoryLines:]...)
		}
		return ok, nil
	case "leave":
		if !oneWord(rest) {
			return nil, errors.New("room: leave NAME (one word)")
		}
		delete(s.members, rest)
		return ok, r.armExpiry(ctx, false)
	case "members":
		if rest == "" {
			return shardhost.EncodeStrings(r.memberNames()), nil
		}
	case "history":
		if rest == "" {
			return shardhost.EncodeStrings(s.history), nil
		}
	case "topic":
		if rest == "" {
			return []byte(s.topic), nil
		}
	case "set-topic":
		topics, err := ctx.LWWMap(TopicsKey).Put(ctx.EntityID(), rest, shardhost.Majority)
		if err != nil && !errors.Is(err, shardhost.ErrTimeout) {
			return nil, err
		}
		if topics != nil {
			s.topic = topics[ctx.EntityID()]
		} else {
			s.topic = rest // written locally, not yet confirmed by a majority
		}
		if err != nil {
			return nil, errors.New("room: the topic is written here but a majority did not confirm it in time: " + err.Error())
		}
		return ok, nil
	case "expire-after":
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return nil, errors.New("room: expire-after DURATION (a positive Go duration such as 90s)")
		}
		s.expireAfter = d
		return ok, r.armExpiry(ctx, true)
	}
	return nil, errors.New("room: unknown message " + quote(string(msg)) +
		" (want join, say, leave, members, history, topic, set-topic or expire-after)")
}

// expire lets the members go that were idle longer than expireAfter.
func (r *room) expire(ctx *shardhost.Context) error {
	s := &r.State
	now := ctx.Now().UnixNano()
	for name, last := range s.members {
		if now-last > int64(s.expireAfter) {
			delete(s.members, name)
			ctx.Log(shardhost.LevelInfo, "room "+ctx.EntityID()+": "+name+" left (idle)")
		}
	}
	return r.armExpiry(ctx, false)
}

// armExpiry runs the expire timer while the room has members and stops it when it has
// none (a timer would keep an empty room from passivating). restart starts it anew, for
// a new interval or a new incarnation; otherwise a running timer is left alone.
func (r *room) armExpiry(ctx *shardhost.Context, restart bool) error {
	s := &r.State
	if len(s.members) == 0 {
		if r.expiring || restart {
			ctx.CancelTimer(ExpireTimer)
			r.expiring = false
		}
		return nil
	}
	if r.expiring && !restart {
		return nil
	}
	interval := s.expireAfter / 4
	if interval < MinExpireInterval {
		interval = MinExpireInterval
	}
	if err := ctx.StartRepeatingTimer(ExpireTimer, nil, interval, interval); err != nil {
		return err
	}
	r.expiring = true
	return nil
}

func (r *room) memberNames() []string {
	names := make([]string, 0, len(r.State.members))
	for name := range r.State.members {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func oneWord(s string) bool { return s != "" && !strings.ContainsAny(s, " \t\r\n") }

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}

func init() { shardhost.Register(newRoom) }

func main() {}
