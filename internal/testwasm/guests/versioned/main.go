// Command versioned is a test guest of module upgrades: a counter that says which
// version of its module answers. Variables set at build time make its versions:
//
//	-ldflags='-X main.version=v2'        the version it names in its replies (default v1)
//	-ldflags='-X main.state=transparent' its state is a transparent snapshot of its
//	                                     memory instead of explicit (Stateful)
//	-ldflags='-X main.step=10'           what "inc" adds (default 1)
//	-ldflags='-X main.migrate=x100'      explicit state only: a Migrator that takes up
//	                                     another version's count times 100 ("fail":
//	                                     refuses it, "trap": panics, "garbage": accepts
//	                                     it and is left with a state it cannot save)
//	-ldflags='-X main.receive=trap'      "inc" traps (a broken version)
//	-ldflags='-X main.build=two'         what "build" replies (default one): a module
//	                                     whose other replies are its version's
//
// Messages: "inc" adds step, "get" reads; both reply "VERSION COUNT". "build" replies
// build and changes nothing.
//
// Build (testwasm.GuestPath does): GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
// -ldflags='-X main.version=v2' -o versioned.wasm ./versioned
package main

import (
	"errors"
	"strconv"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

var (
	version = "v1"
	state   = "explicit"
	step    = "1"
	migrate = ""
	receive = ""
	build   = "one"
)

// inc is what "inc" adds: step, parsed; it traps with receive=trap.
func inc() int64 {
	if receive == "trap" {
		panic("versioned: inc traps in this version")
	}
	n, err := strconv.ParseInt(step, 10, 64)
	if err != nil {
		panic("versioned: step " + step)
	}
	return n
}

func reply(n int64, msg []byte) ([]byte, error) {
	return []byte(version + " " + strconv.FormatInt(n, 10)), nil
}

var errUnknown = errors.New("versioned: want inc, get or build")

// explicit keeps its count in explicit state.
type explicit struct {
	shardhost.Stateful[shardhost.Int64, *shardhost.Int64]
}

func (e *explicit) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	switch string(msg) {
	case "inc":
		e.State += shardhost.Int64(inc())
	case "get":
	case "build":
		return []byte(build), nil
	default:
		return nil, errUnknown
	}
	return reply(int64(e.State), msg)
}

// migrating is explicit with a Migrator (migrate); garbage: its state cannot be saved.
type migrating struct {
	explicit
	garbage bool
}

func (m *migrating) Migrate(from uint64, state []byte) error {
	switch migrate {
	case "fail":
		return errors.New("versioned: no migration from version " + strconv.FormatUint(from, 10))
	case "trap":
		panic("versioned: migration trap")
	case "garbage":
		m.garbage = true
		return nil
	}
	if err := m.State.UnmarshalBinary(state); err != nil {
		return err
	}
	m.State *= 100
	return nil
}

// Snapshot fails after a "garbage" migration.
func (m *migrating) Snapshot() ([]byte, error) {
	if m.garbage {
		return nil, errors.New("versioned: the migrated state is garbage")
	}
	return m.explicit.Snapshot()
}

// transparent keeps its count in a plain field: its state is a memory snapshot.
type transparent struct{ n int64 }

func (t *transparent) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	switch string(msg) {
	case "inc":
		t.n += inc()
	case "get":
	case "build":
		return []byte(build), nil
	default:
		return nil, errUnknown
	}
	return reply(t.n, msg)
}

func init() {
	if state == "transparent" {
		shardhost.Register(func(string) shardhost.Entity { return &transparent{} })
		return
	}
	if migrate != "" {
		shardhost.Register(func(string) shardhost.Entity { return &migrating{} })
		return
	}
	shardhost.Register(func(string) shardhost.Entity { return &explicit{} })
}

func main() {}
