// Command querier is a test guest of read-only queries (abi/SPEC.md, "Queries"): a
// count in a plain field (a transparent state) that "inc" adds one to, and a Query
// that answers "get" and tries, for the other queries, what a query may not do.
package main

import (
	"errors"
	"strconv"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

type querier struct{ n int64 }

func (q *querier) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	if string(msg) != "inc" {
		return nil, errors.New("querier: unknown message " + strconv.Quote(string(msg)))
	}
	q.n++
	return strconv.AppendInt(nil, q.n, 10), nil
}

func (q *querier) Query(ctx *shardhost.Context, payload []byte) ([]byte, error) {
	var err error
	switch string(payload) {
	case "get":
		return strconv.AppendInt(nil, q.n, 10), nil
	case "bump": // changes the throwaway copy only
		q.n += 100
		return strconv.AppendInt(nil, q.n, 10), nil
	case "tell":
		err = ctx.Tell("querier", "other", []byte("inc"))
	case "ask":
		_, err = ctx.Ask("querier", "other", []byte("inc"), 0)
	case "timer":
		err = ctx.StartTimer("t", []byte("inc"), time.Millisecond)
	case "update":
		_, err = ctx.DDataUpdate("q", shardhost.TypeGCounter, "incr", shardhost.Local, 0)
	case "trap":
		panic("querier: trap in a query")
	default:
		return nil, errors.New("querier: unknown query " + strconv.Quote(string(payload)))
	}
	if err == nil {
		return []byte("done"), nil
	}
	if !errors.Is(err, shardhost.ErrReadOnly) {
		return nil, errors.New("not read-only: " + err.Error())
	}
	return []byte(err.Error()), nil
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &querier{} })
}

func main() {}
