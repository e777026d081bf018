package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The entity types of a run. The counter has the default durability, the journal (each
// message's record durable before its reply; a crash replays the records after the last
// base); the register saves a snapshot before every reply. Both keep every acknowledged
// write through a crash, which the checks hold them to.
const (
	// typeCounter: "inc" adds one and replies the count, "get" replies it. Its shards
	// are placed by the priority strategy, so a joining member takes some over.
	typeCounter = "counter"
	// typeRegister: "write V" sets the value and replies "ok", "read" replies it.
	// Least-shard allocation.
	typeRegister = "register"
	// typeAccount: the transfer workload's (transfer.go). "send ID" moves one unit to
	// account ID: it counts one sent and tells "credit" to it from its outbox
	// (effectively once, the default delivery); "credit" counts one received; "get"
	// replies "SENT RECEIVED". Journaled.
	typeAccount = "account"
	// typeInbox: "deliver X" (a scheduled message, scheduled.go) counts X, "seen"
	// replies "X=N ..." sorted by X. The journal, as the counter.
	typeInbox = "inbox"
)

// types is the TypeResolver of every member.
type types struct{}

func (types) EntityType(ctx context.Context, name string) (sharding.TypeSettings, error) {
	switch name {
	case typeCounter:
		return sharding.TypeSettings{Name: name, NumberOfShards: 12, Allocation: sharding.AllocationPriority,
			Checkpoint: sharding.CheckpointJournal}, nil
	case typeRegister:
		return sharding.TypeSettings{Name: name, NumberOfShards: 12, Checkpoint: sharding.CheckpointEveryMessage}, nil
	case typeAccount:
		return sharding.TypeSettings{Name: name, NumberOfShards: 12, Checkpoint: sharding.CheckpointJournal}, nil
	case typeInbox:
		return sharding.TypeSettings{Name: name, NumberOfShards: 6, Checkpoint: sharding.CheckpointJournal}, nil
	}
	return sharding.TypeSettings{}, fmt.Errorf("%w: %q", sharding.ErrUnknownEntityType, name)
}

// codedErr is an entity error with a code that survives the network.
type codedErr struct{ code, msg string }

func (e *codedErr) Error() string     { return e.msg }
func (e *codedErr) ErrorCode() string { return e.code }

// factory makes the entities of one member and tells the registry of their lives.
type factory struct {
	member string
	reg    *Registry
}

var _ sharding.EntityFactory = (*factory)(nil)

func (f *factory) NewEntity(ctx context.Context, typ, id string, state []byte) (sharding.Entity, error) {
	e := &entity{typ: typ, value: string(state)}
	if typ == typeAccount {
		a := &account{}
		if state != nil {
			if _, err := fmt.Sscanf(string(state), "%d %d", &a.sent, &a.received); err != nil {
				return nil, &codedErr{sharding.CodeActivationError, "bad account state " + strconv.Quote(string(state))}
			}
		}
		a.life = f.reg.Activate(f.member, typ+"/"+id)
		return a, nil
	}
	if typ == typeCounter && state != nil {
		n, err := strconv.Atoi(string(state))
		if err != nil {
			return nil, &codedErr{sharding.CodeActivationError, "bad counter state " + strconv.Quote(string(state))}
		}
		e.n = n
	}
	if typ == typeInbox {
		e.seen = map[string]int{}
		for _, kv := range strings.Fields(string(state)) {
			x, n, _ := strings.Cut(kv, "=")
			c, err := strconv.Atoi(n)
			if err != nil {
				return nil, &codedErr{sharding.CodeActivationError, "bad inbox state " + strconv.Quote(string(state))}
			}
			e.seen[x] = c
		}
	}
	e.life = f.reg.Activate(f.member, typ+"/"+id)
	return e, nil
}

// entity is a counter or a register.
type entity struct {
	typ   string
	n     int
	value string
	seen  map[string]int // an inbox's deliveries
	life  *Life
}

var _ sharding.Entity = (*entity)(nil)

func (e *entity) Receive(ctx context.Context, payload []byte) ([]byte, error) {
	msg := string(payload)
	switch {
	case e.typ == typeCounter && msg == "inc":
		e.n++
		return []byte(strconv.Itoa(e.n)), nil
	case e.typ == typeCounter && msg == "get":
		return []byte(strconv.Itoa(e.n)), nil
	case e.typ == typeRegister && strings.HasPrefix(msg, "write "):
		e.value = strings.TrimPrefix(msg, "write ")
		return []byte("ok"), nil
	case e.typ == typeRegister && msg == "read":
		return []byte(e.value), nil
	case e.typ == typeInbox && strings.HasPrefix(msg, "deliver "):
		e.seen[strings.TrimPrefix(msg, "deliver ")]++
		return nil, nil
	case e.typ == typeInbox && msg == "seen":
		return []byte(inboxText(e.seen)), nil
	}
	return nil, &codedErr{sharding.CodeEntityError, "unknown message " + strconv.Quote(msg)}
}

func (e *entity) Snapshot(ctx context.Context) ([]byte, error) {
	if e.typ == typeCounter {
		return []byte(strconv.Itoa(e.n)), nil
	}
	if e.typ == typeInbox {
		return []byte(inboxText(e.seen)), nil
	}
	return []byte(e.value), nil
}

func (e *entity) Stop(ctx context.Context) { e.life.End() }

// Life is one incarnation of an entity on a member, from its activation to its stop (or
// its member's crash).
type Life struct {
	reg          *Registry
	Member       string
	Key          string
	Began, Ended time.Duration // since the run started; Ended 0 while it lives
	ended        bool
}

// Registry is the global registry of entity lives, fed by every member's entity factory
// (activation) and its entities' Stop: a new activation of an entity while another life
// of it has not ended is a double activation. A crashed member's lives end at the crash.
type Registry struct {
	start time.Time
	mu    sync.Mutex
	open  map[string][]*Life // by entity key
	all   int
	// Doubles are the double activations seen.
	doubles []string
}

func newRegistry(start time.Time) *Registry {
	return &Registry{start: start, open: map[string][]*Life{}}
}

// Activate records a new life of key on member.
func (r *Registry) Activate(member, key string) *Life {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Since(r.start)
	l := &Life{reg: r, Member: member, Key: key, Began: now}
	for _, o := range r.open[key] {
		r.doubles = append(r.doubles, fmt.Sprintf("double activation of %s: on %s at %v while its life on %s since %v had not ended",
			key, member, now.Round(time.Millisecond), o.Member, o.Began.Round(time.Millisecond)))
	}
	r.open[key] = append(r.open[key], l)
	r.all++
	return l
}

// End ends the life (idempotent).
func (l *Life) End() {
	r := l.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLocked(l)
}

func (r *Registry) endLocked(l *Life) {
	if l.ended {
		return
	}
	l.ended, l.Ended = true, time.Since(r.start)
	lives := r.open[l.Key]
	for i, o := range lives {
		if o == l {
			r.open[l.Key] = append(lives[:i:i], lives[i+1:]...)
			break
		}
	}
}

// Crash ends every life on member: its process is gone.
func (r *Registry) Crash(member string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, lives := range r.open {
		for _, l := range append([]*Life(nil), lives...) {
			if l.Member == member {
				r.endLocked(l)
			}
		}
	}
}

// Doubles returns the double activations seen, and how many lives there were.
func (r *Registry) Doubles() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.doubles...), r.all
}

// account is an entity of typeAccount.
type account struct {
	sent, received int
	held           []sharding.Message // the tells of the message under way
	life           *Life
}

var _ sharding.OutboxEntity = (*account)(nil)

func (a *account) Receive(ctx context.Context, payload []byte) ([]byte, error) {
	msg := string(payload)
	info, _ := sharding.MessageInfoFrom(ctx)
	switch {
	case strings.HasPrefix(msg, "send "):
		a.sent++
		if !info.Replay { // a replayed message's tells are in its record, for the outbox
			a.held = append(a.held, sharding.Message{EntityType: typeAccount, EntityID: strings.TrimPrefix(msg, "send "),
				Payload: []byte("credit"), Sender: typeAccount + "/" + a.life.Key[len(typeAccount)+1:]})
		}
		return []byte("ok"), nil
	case msg == "credit":
		a.received++
		return []byte("ok"), nil
	case msg == "get":
		return []byte(fmt.Sprintf("%d %d", a.sent, a.received)), nil
	}
	return nil, &codedErr{sharding.CodeEntityError, "unknown message " + strconv.Quote(msg)}
}

// TakeTells implements sharding.OutboxEntity.
func (a *account) TakeTells() []sharding.Message {
	t := a.held
	a.held = nil
	return t
}

func (a *account) Snapshot(ctx context.Context) ([]byte, error) {
	return []byte(fmt.Sprintf("%d %d", a.sent, a.received)), nil
}

func (a *account) Stop(ctx context.Context) { a.life.End() }

// inboxText is an inbox's deliveries as "X=N ...", sorted by X.
func inboxText(seen map[string]int) string {
	keys := make([]string, 0, len(seen))
	for x := range seen {
		keys = append(keys, x)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, x := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x + "=" + strconv.Itoa(seen[x]))
	}
	return b.String()
}
