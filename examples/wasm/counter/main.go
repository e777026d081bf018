// Command counter is the example entity: a counter per entity ID.
//
// Messages: "inc" adds one, "inc N" adds N (a signed 64-bit integer); both reply with
// the new count. "get" replies with the count. Counts are decimal text.
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o counter.wasm .
// or, with Go's port, GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter.wasm .
// (make examples writes bin/wasm/counter.wasm). It formats its errors with strconv, not
// fmt, which would make the TinyGo module more than twice as large.
//
// Its count is explicit state (state.go): a shardhost.Int64 the SDK saves as bytes, which
// a redeploy's new code loads at the entity's next activation. Built with -tags
// transparent (state_transparent.go), it keeps the count in a plain field and the host
// snapshots the instance's memory instead: that state belongs to the module it was made
// by (docs/state.md).
package main

import (
	"errors"
	"strconv"
	"strings"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// counter keeps its count in count, whose n says where: see state.go.
type counter struct{ count }

func (c *counter) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	f := strings.Fields(string(msg))
	switch {
	case len(f) == 1 && f[0] == "get":
	case len(f) == 1 && f[0] == "inc":
		*c.n()++
	case len(f) == 2 && f[0] == "inc":
		d, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, errors.New("counter: inc wants an integer, got " + strconv.Quote(f[1]))
		}
		*c.n() += d
	default:
		return nil, errors.New("counter: unknown message " + strconv.Quote(string(msg)) + " (want inc, inc N or get)")
	}
	return strconv.AppendInt(nil, *c.n(), 10), nil
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &counter{} })
}

func main() {}
