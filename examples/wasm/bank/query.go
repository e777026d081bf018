package main

import (
	"errors"
	"strconv"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// Query answers "get" (or "balance") with the balance, and "ops" with the deposits and
// withdrawals done, without a message (shardhost query bank/ID get): the host runs it on
// a throwaway copy of the account's saved state, so it never waits behind the account's
// messages and changes nothing (shardhost.Querier).
func (acc *account) Query(ctx *shardhost.Context, payload []byte) ([]byte, error) {
	a := acc.state()
	switch string(payload) {
	case "get", "balance":
		return strconv.AppendInt(nil, a.balance, 10), nil
	case "ops":
		return strconv.AppendInt(nil, a.ops, 10), nil
	}
	return nil, errors.New("bank: unknown query " + strconv.Quote(string(payload)) + " (want get, balance or ops)")
}
