// Command subscription is an example entity that bills itself: a subscription per entity
// ID, which a durable interval reminder wakes every period, even passivated or after its
// member died, to send one charge to a ledger entity (examples/wasm/ledger).
//
// Messages: "start PERIOD_MS AMOUNT LEDGER_ID" sets the reminder "bill", due PERIOD_MS
// (at least 1000) from now and every PERIOD_MS after, and replies "ok"; a start that
// repeats the running one's arguments is "ok" too (a client's retry), other arguments
// while running are an error. At each firing the subscription counts one more period
// billed, N, and tells ledger/LEDGER_ID "charge ID N AMOUNT" (AMOUNT a positive 64-bit
// integer). "status" replies the periods billed, "stop" cancels the reminder and replies
// them too. Replies are decimal text; anything else is an error quoting the message.
//
// Effectively once: the tell is an entity-to-entity send, sent once the firing's journal
// record is durable and retried until the ledger acknowledges it (docs/delivery.md), and
// a firing repeated after a crash carries the due time already billed, which the
// subscription skips (it keeps the last one), so the periods billed and the charges the
// ledger counts agree whichever member crashes. Missed intervals (the cluster was down)
// are skipped, not billed late: a period is one firing.
//
// Build: as examples/wasm/counter (make examples writes bin/wasm/subscription.wasm).
package main

import (
	"errors"
	"strconv"
	"strings"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// LedgerType is the entity type the charges go to.
const LedgerType = "ledger"

// reminderName is the name of the billing reminder.
const reminderName = "bill"

// stateVersion is the first field of the state's encoding.
const stateVersion = 1

// subState is what a subscription keeps across incarnations.
type subState struct {
	active   bool
	periodMS int64
	amount   int64
	ledger   string
	// billed is the number of periods billed; lastDue the due time (Unix ms) of the
	// firing that billed the last one.
	billed  int64
	lastDue int64
}

func (s *subState) MarshalBinary() ([]byte, error) {
	var w shardhost.StateWriter
	w.Uint64(stateVersion)
	w.Bool(s.active)
	w.Int64(s.periodMS)
	w.Int64(s.amount)
	w.String(s.ledger)
	w.Int64(s.billed)
	w.Int64(s.lastDue)
	return w.Bytes(), nil
}

func (s *subState) UnmarshalBinary(b []byte) error {
	r := shardhost.NewStateReader(b)
	if v := r.Uint64(); r.Err() == nil && v != stateVersion {
		return errors.New("subscription: unknown state version " + strconv.FormatUint(v, 10))
	}
	s.active, s.periodMS, s.amount, s.ledger = r.Bool(), r.Int64(), r.Int64(), r.String()
	s.billed, s.lastDue = r.Int64(), r.Int64()
	return r.Done()
}

type subscription struct {
	shardhost.Stateful[subState, *subState]
}

func (e *subscription) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	s := &e.State
	if ctx.Kind() == shardhost.KindReminder {
		return nil, e.bill(ctx)
	}
	if ctx.Kind() != shardhost.KindMessage {
		return nil, nil
	}
	f := strings.Fields(string(msg))
	switch {
	case len(f) == 1 && f[0] == "status":
	case len(f) == 4 && f[0] == "start":
		period, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || period < shardhost.MinReminderInterval.Milliseconds() {
			return nil, errors.New("subscription: start wants PERIOD_MS, an integer of at least " +
				strconv.FormatInt(shardhost.MinReminderInterval.Milliseconds(), 10) + ", got " + strconv.Quote(f[1]))
		}
		amount, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || amount <= 0 {
			return nil, errors.New("subscription: start wants AMOUNT, a positive integer, got " + strconv.Quote(f[2]))
		}
		if s.active {
			if s.periodMS == period && s.amount == amount && s.ledger == f[3] {
				return []byte("ok"), nil
			}
			return nil, errors.New("subscription: already started (every " + strconv.FormatInt(s.periodMS, 10) +
				" ms, " + strconv.FormatInt(s.amount, 10) + " to " + LedgerType + "/" + s.ledger + "): stop it first")
		}
		every := time.Duration(period) * time.Millisecond
		if err := ctx.SetReminder(reminderName, ctx.Now().Add(every), every, nil); err != nil {
			return nil, errors.New("subscription: the reminder was not set: " + err.Error())
		}
		s.active, s.periodMS, s.amount, s.ledger = true, period, amount, f[3]
		return []byte("ok"), nil
	case len(f) == 1 && f[0] == "stop":
		if s.active {
			if _, err := ctx.CancelReminder(reminderName); err != nil {
				return nil, errors.New("subscription: the reminder was not cancelled: " + err.Error())
			}
			s.active = false
		}
	default:
		return nil, errors.New("subscription: unknown message " + strconv.Quote(string(msg)) +
			" (want start PERIOD_MS AMOUNT LEDGER_ID, status or stop)")
	}
	return strconv.AppendInt(nil, s.billed, 10), nil
}

// bill handles a firing of the reminder: one period more, and its charge told to the
// ledger. A firing after stop (one under way when it was cancelled) or one whose due
// time was billed already (a repeat after a crash) changes nothing.
func (e *subscription) bill(ctx *shardhost.Context) error {
	s := &e.State
	due, ok := ctx.ReminderDue()
	if !s.active || ctx.Sender() != reminderName || !ok || due.UnixMilli() <= s.lastDue {
		return nil
	}
	n := s.billed + 1
	charge := "charge " + ctx.EntityID() + " " + strconv.FormatInt(n, 10) + " " + strconv.FormatInt(s.amount, 10)
	// The tell first: if it fails, nothing was billed.
	if err := ctx.Tell(LedgerType, s.ledger, []byte(charge)); err != nil {
		return errors.New("subscription: period " + strconv.FormatInt(n, 10) + " not billed: " + err.Error())
	}
	s.billed, s.lastDue = n, due.UnixMilli()
	return nil
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &subscription{} })
}

func main() {}
