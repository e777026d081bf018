// Command bank-v2 is the second version of the bank example (examples/wasm/bank): the
// same messages and replies, one more message, and a new encoding of the account's
// state, with the migration that converts version 1's. It is what a redeploy of a
// running type looks like (docs/state.md, "Changing the state's encoding"):
//
//	shardhost deploy --type bank bin/wasm/v2/bank.wasm
//	shardhost upgrade --type bank --now
//
// Messages: as version 1's (deposit N, withdraw N, balance, trap, loop, spin), and
// "version", which replies "bank 2" (version 1 refuses it as an unknown message).
//
// The state's encoding: version 1 wrote the format number 1, then the balance and the
// number of operations, in that order. Version 2 writes the format number 2, then a map
// of named integers ("balance", "ops"), to which later versions can add names without
// another format. Its UnmarshalBinary reads format 2 only; when the host moves an
// account from an older version of the module, it calls Migrate (shardhost.Migrator),
// which reads either format. Version 1's code refuses format 2, so moving an account
// back to version 1 fails, and the account stays on version 2 with its balance.
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o bank.wasm .
// (make examples writes bin/wasm/v2/bank.wasm).
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

// The formats of the encoded state, its first field.
const (
	formatV1 = 1 // the balance and the ops, as signed varints
	formatV2 = 2 // a map of named integers: "balance", "ops"
)

// MarshalBinary encodes the state in format 2.
func (s *accountState) MarshalBinary() ([]byte, error) {
	var w shardhost.StateWriter
	w.Uint64(formatV2)
	w.Int64Map(map[string]int64{"balance": s.balance, "ops": s.ops})
	return w.Bytes(), nil
}

// UnmarshalBinary decodes a state MarshalBinary gave (format 2); any other format, or
// a bad encoding, is an error, which fails the activation and keeps the state.
func (s *accountState) UnmarshalBinary(b []byte) error {
	return s.decode(b, false)
}

// decode decodes format 2, and with v1 format 1 too.
func (s *accountState) decode(b []byte, v1 bool) error {
	r := shardhost.NewStateReader(b)
	switch f := r.Uint64(); {
	case r.Err() != nil:
		return r.Err()
	case f == formatV2:
		m := r.Int64Map()
		if err := r.Done(); err != nil {
			return err
		}
		balance, ok := m["balance"]
		if !ok || balance < 0 {
			return errors.New("bank: a state without a balance, or a negative one")
		}
		s.balance, s.ops = balance, m["ops"]
		return nil
	case f == formatV1 && v1:
		balance, ops := r.Int64(), r.Int64()
		if err := r.Done(); err != nil {
			return err
		}
		s.balance, s.ops = balance, ops
		return nil
	default:
		return errors.New("bank: unknown state format " + strconv.FormatUint(f, 10))
	}
}

// account is one bank account, its state explicit.
type account struct {
	shardhost.Stateful[accountState, *accountState]
}

// Migrate takes up a state that another version of the module saved (shardhost.Migrator):
// format 1 (version 1's) converted, or format 2. fromVersion is the type's version
// number of that module, which says nothing of the format: the format is read from the
// state.
func (a *account) Migrate(fromVersion uint64, state []byte) error {
	var s accountState
	if err := s.decode(state, true); err != nil {
		return errors.New("bank: the state of version " + strconv.FormatUint(fromVersion, 10) + ": " + err.Error())
	}
	a.State = s
	return nil
}

func (acc *account) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	a := &acc.State
	f := strings.Fields(string(msg))
	switch {
	case len(f) == 1 && f[0] == "balance":
	case len(f) == 1 && f[0] == "version":
		return []byte("bank 2"), nil
	case len(f) == 2 && (f[0] == "deposit" || f[0] == "withdraw"):
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n <= 0 {
			return nil, errors.New("bank: " + f[0] + " wants a positive integer, got " + strconv.Quote(f[1]))
		}
		total := ctx.PNCounter(TotalKey)
		if f[0] == "deposit" {
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
		return nil, errors.New("bank: unknown message " + strconv.Quote(string(msg)) + " (want deposit N, withdraw N, balance or version)")
	}
	return strconv.AppendInt(nil, a.balance, 10), nil
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &account{} })
}

func main() {}
