// Command bank is an account per entity ID, with a cluster-wide total: the entity of the
// "What a failure loses" in docs/sharding.md, and of the e2e bank scenario (e2e/bank_test.go).
//
// Messages (replies are decimal text):
//
//	deposit N    adds N (> 0) to the balance and to the PNCounter "bank-total", written
//	             at majority; replies with the new balance
//	withdraw N   takes N (> 0) off, or fails with "insufficient funds" and changes nothing
//	balance      replies with the balance
//	trap         panics (a trap); loop runs forever (the message deadline); spin calls
//	             the host until the host call budget is spent
//
// Anything else fails with an error that quotes the message: a message near the size
// cap makes a reply over the cap.
//
// Built with -tags banklimit, the bank refuses deposits over 1,000 (limit_on.go): a
// changed version to try on an account's real history with shardhost replay --module
// (docs/cli.md, "Replay and trial upgrades").
//
// Built with -tags banktrap (trap_on.go), every deposit traps: a broken version, the
// canary that e2e/bank_upgrade_test.go rolls back.
//
// The balance changes only after bank-total took the amount, so the two agree as long
// as no acknowledged message is lost.
//
// The account is explicit state (state.go): accountState, saved as bytes that a
// redeploy's new code loads at the entity's next activation. Built with -tags
// transparent (state_transparent.go), the host snapshots the instance's memory instead,
// and the entity stays on the module its state was made by (docs/state.md).
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o bank.wasm .
// or, with Go's port, GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o bank.wasm .
package main

import (
	"errors"
	"strconv"
	"strings"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// TotalKey is the distributed data key of the sum of all balances.
const TotalKey = "bank-total"

// accountState is what an account keeps across incarnations.
type accountState struct {
	balance int64
	ops     int64 // deposits and withdrawals done
}

// stateVersion is the first field of the encoded state: version 1 is the balance and
// the ops, as signed varints after it.
const stateVersion = 1

// MarshalBinary encodes the state (shardhost.StateWriter).
func (s *accountState) MarshalBinary() ([]byte, error) {
	var w shardhost.StateWriter
	w.Uint64(stateVersion)
	w.Int64(s.balance)
	w.Int64(s.ops)
	return w.Bytes(), nil
}

// UnmarshalBinary decodes a state MarshalBinary gave; an unknown version or a bad
// encoding is an error, which fails the activation and keeps the state.
func (s *accountState) UnmarshalBinary(b []byte) error {
	r := shardhost.NewStateReader(b)
	if v := r.Uint64(); r.Err() == nil && v != stateVersion {
		return errors.New("bank: unknown state version " + strconv.FormatUint(v, 10))
	}
	s.balance, s.ops = r.Int64(), r.Int64()
	return r.Done()
}

func (acc *account) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	a := acc.state()
	f := strings.Fields(string(msg))
	switch {
	case len(f) == 1 && f[0] == "balance":
	case len(f) == 2 && (f[0] == "deposit" || f[0] == "withdraw"):
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n <= 0 {
			return nil, errors.New("bank: " + f[0] + " wants a positive integer, got " + strconv.Quote(f[1]))
		}
		if f[0] == "deposit" && maxDeposit > 0 && n > maxDeposit {
			return nil, errors.New("bank: a deposit is at most " + strconv.FormatInt(maxDeposit, 10))
		}
		total := ctx.PNCounter(TotalKey)
		if f[0] == "deposit" {
			if trapDeposits {
				panic("bank: this build traps on every deposit")
			}
			if _, err := total.Incr(n, shardhost.Majority); err != nil {
				return nil, errors.New("bank: " + TotalKey + " not updated: " + err.Error())
			}
			a.balance += n
		} else {
			if n > a.balance {
				return nil, errors.New("bank: insufficient funds: the balance is " + strconv.FormatInt(a.balance, 10))
			}
			if _, err := total.Decr(n, shardhost.Majority); err != nil {
				return nil, errors.New("bank: " + TotalKey + " not updated: " + err.Error())
			}
			a.balance -= n
		}
		a.ops++
	case len(f) == 1 && f[0] == "trap":
		panic("bank: trap requested")
	case len(f) == 1 && f[0] == "loop":
		for {
		}
	case len(f) == 1 && f[0] == "spin":
		var t time.Time
		for {
			t = ctx.Now()
			_ = t
		}
	default:
		return nil, errors.New("bank: unknown message " + strconv.Quote(string(msg)) + " (want deposit N, withdraw N or balance)")
	}
	return strconv.AppendInt(nil, a.balance, 10), nil
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &account{} })
}

func main() {}
