package main

import (
	"errors"
	"strconv"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// Query answers "get" with the count without a message (shardhost query counter/ID get):
// the host runs it on a throwaway copy of the entity's saved state, so it never waits
// behind the counter's messages and changes nothing (shardhost.Querier).
func (c *counter) Query(ctx *shardhost.Context, payload []byte) ([]byte, error) {
	if string(payload) != "get" {
		return nil, errors.New("counter: unknown query " + strconv.Quote(string(payload)) + " (want get)")
	}
	return strconv.AppendInt(nil, *c.n(), 10), nil
}
