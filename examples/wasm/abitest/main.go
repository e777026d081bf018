// Command abitest is the Go ABI conformance module: its text commands exercise every host
// function of ABI version 1, and the host's tests send the same commands to it and to its
// Rust twin (examples/wasm/abitest-rust) and compare the replies.
//
// Each command's reply is text; an error reply is an entity error with the text given.
// A host function's failure is the error "code N: TEXT" (N its code, TEXT its result).
//
//	echo X                       X
//	whoami                       TYPE/ID
//	source                       KIND SOURCE (the current message's kind 0/1/2 and sender)
//	tell TYPE/ID MSG...          ok
//	ask TYPE/ID MSG...           the reply
//	askms MS TYPE/ID MSG...      the reply, asked with a timeout of MS milliseconds
//	askself                      asks itself "echo x": the error code N: TEXT (5 expected)
//	tellkey KEY TYPE/ID MSG...   ok, after a tell with the idempotency key KEY
//	askkey KEY TYPE/ID MSG...    the reply to an ask with the idempotency key KEY
//	fwd TYPE/ID REST...          to itself: "got REST... from SENDER"; otherwise forwards
//	                             the message to TYPE/ID and replies nothing
//	ddget KEY CONS               the value JSON (CONS local, majority, ...; - is empty)
//	ddup KEY TYPE CONS OP...     the new value JSON
//	dddel KEY CONS               ok
//	sub KEY / unsub KEY          ok
//	timer NAME DELAYMS INTERVALMS MSG...   ok
//	cancel NAME                  1 or 0
//	remind NAME INMS INTERVALMS MSG...     ok, after a durable reminder due INMS from now
//	unremind NAME                1 or 0
//	reminders                    the lines "NAME DUEMS INTERVALMS PAYLOAD", by name
//	events                       the lines "KIND SOURCE PAYLOAD" of the timer (1),
//	                             changed (2) and reminder (10) messages received, joined
//	                             by \n; a reminder's line ends with " due=DUEMS"
//	                             (its due time, Unix milliseconds); a scheduled
//	                             message (from outside, with a due time) is not a
//	                             command either: its line is "0 scheduled PAYLOAD
//	                             due=DUEMS"
//	now                          WALL MONO (nanoseconds, decimal)
//	random N                     N random bytes in lowercase hex
//	trace X                      ok, after a trace event X
//	count                        the counter, incremented
//	hooks                        activations=A passivations=P
//	passivate                    ok, after asking to be passivated
//	budget N                     ok, after N calls of the host's now
//	trap / loop / grow           panics / never returns / allocates memory without end
//	anything else                the error "unknown command"
//
// Messages of kind 1 (timer) and 2 (changed) are recorded for events and get no reply.
// The counter, the events and the hook counts are guest-level state.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o abitest.wasm .
// or tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o abitest.wasm .
// (the conformance suite runs both, and abitest-rust).
package main

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// abiState is what the module keeps across incarnations.
type abiState struct {
	count        int64
	events       []string
	activations  int64
	passivations int64
}

func (s *abiState) MarshalBinary() ([]byte, error) {
	var w shardhost.StateWriter
	w.Int64(s.count)
	w.Strings(s.events)
	w.Int64(s.activations)
	w.Int64(s.passivations)
	return w.Bytes(), nil
}

func (s *abiState) UnmarshalBinary(b []byte) error {
	r := shardhost.NewStateReader(b)
	s.count, s.events, s.activations, s.passivations = r.Int64(), r.Strings(), r.Int64(), r.Int64()
	return r.Done()
}

type abitest struct {
	shardhost.Stateful[abiState, *abiState]
	hoard [][]byte
}

var (
	_ shardhost.Entity      = (*abitest)(nil)
	_ shardhost.Activator   = (*abitest)(nil)
	_ shardhost.Passivator  = (*abitest)(nil)
	_ shardhost.Snapshotter = (*abitest)(nil)
)

func (a *abitest) OnActivate(*shardhost.Context) error {
	a.State.activations++
	return nil
}

func (a *abitest) OnPassivate(*shardhost.Context) { a.State.passivations++ }

var (
	errUnknown = errors.New("unknown command")
	ok         = []byte("ok")
	sink       int
)

// codeErr turns a host function's error into the reply "code N: TEXT".
func codeErr(err error) error {
	if err == nil {
		return nil
	}
	var he *shardhost.HostError
	if errors.As(err, &he) {
		return errors.New("code " + strconv.Itoa(int(he.Code)) + ": " + he.Text)
	}
	return err
}

// target splits "TYPE/ID" at the first slash.
func target(s string) (typ, id string) {
	typ, id, _ = strings.Cut(s, "/")
	return typ, id
}

// cons reads a consistency argument: "-" is the empty string.
func cons(s string) shardhost.Consistency {
	if s == "-" {
		s = ""
	}
	return shardhost.ConsistencyOf(s)
}

// words splits s into n words and the rest; ok is false if there are fewer than n.
func words(s string, n int) (w []string, rest string, ok bool) {
	for i := 0; i < n; i++ {
		word, r, found := strings.Cut(s, " ")
		if word == "" {
			return nil, "", false
		}
		w = append(w, word)
		s = r
		if !found {
			s = ""
			if i < n-1 {
				return nil, "", false
			}
		}
	}
	return w, s, true
}

func (a *abitest) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	s := &a.State
	if kind := ctx.Kind(); kind != shardhost.KindMessage {
		line := strconv.Itoa(int(kind)) + " " + ctx.Sender() + " " + string(msg)
		if due, ok := ctx.ReminderDue(); ok {
			line += " due=" + strconv.FormatInt(due.UnixMilli(), 10)
		}
		s.events = append(s.events, line)
		return nil, nil
	}
	if due, ok := ctx.ScheduledDue(); ok {
		// A scheduled message: kept as an event with its due time, not run.
		s.events = append(s.events, "0 scheduled "+string(msg)+" due="+strconv.FormatInt(due.UnixMilli(), 10))
		return nil, nil
	}
	verb, rest, _ := strings.Cut(string(msg), " ")
	switch verb {
	case "echo":
		return []byte(rest), nil
	case "whoami":
		return []byte(ctx.EntityType() + "/" + ctx.EntityID()), nil
	case "source":
		return []byte(strconv.Itoa(int(ctx.Kind())) + " " + ctx.Sender()), nil
	case "tell":
		w, m, ok2 := words(rest, 1)
		if !ok2 {
			break
		}
		typ, id := target(w[0])
		if err := ctx.Tell(typ, id, []byte(m)); err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "ask":
		w, m, ok2 := words(rest, 1)
		if !ok2 {
			break
		}
		typ, id := target(w[0])
		out, err := ctx.Ask(typ, id, []byte(m), 0)
		return out, codeErr(err)
	case "askms":
		w, m, ok2 := words(rest, 2)
		if !ok2 {
			break
		}
		ms, err := strconv.ParseInt(w[0], 10, 32)
		if err != nil {
			break
		}
		typ, id := target(w[1])
		out, err := ctx.Ask(typ, id, []byte(m), time.Duration(ms)*time.Millisecond)
		return out, codeErr(err)
	case "tellkey", "askkey":
		w, m, ok2 := words(rest, 2)
		if !ok2 {
			break
		}
		typ, id := target(w[1])
		if verb == "askkey" {
			out, err := ctx.AskWithKey(typ, id, []byte(m), w[0], 0)
			return out, codeErr(err)
		}
		if err := ctx.TellWithKey(typ, id, []byte(m), w[0]); err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "askself":
		out, err := ctx.Ask(ctx.EntityType(), ctx.EntityID(), []byte("echo x"), 0)
		if err == nil {
			return nil, errors.New("code 0: " + string(out))
		}
		return nil, codeErr(err)
	case "fwd":
		w, m, ok2 := words(rest, 1)
		if !ok2 {
			break
		}
		typ, id := target(w[0])
		if typ == ctx.EntityType() && id == ctx.EntityID() {
			return []byte("got " + m + " from " + ctx.Sender()), nil
		}
		return nil, codeErr(ctx.Forward(typ, id))
	case "ddget":
		w, _, ok2 := words(rest, 2)
		if !ok2 {
			break
		}
		out, err := ctx.DDataGet(w[0], cons(w[1]), 0)
		return out, codeErr(err)
	case "ddup":
		w, op, ok2 := words(rest, 3)
		if !ok2 {
			break
		}
		out, err := ctx.DDataUpdate(w[0], w[1], op, cons(w[2]), 0)
		return out, codeErr(err)
	case "dddel":
		w, _, ok2 := words(rest, 2)
		if !ok2 {
			break
		}
		if err := ctx.DDataDelete(w[0], cons(w[1]), 0); err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "sub", "unsub":
		f := ctx.Subscribe
		if verb == "unsub" {
			f = ctx.Unsubscribe
		}
		if err := f(rest); err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "timer":
		w, m, ok2 := words(rest, 3)
		if !ok2 {
			break
		}
		delay, err1 := strconv.ParseInt(w[1], 10, 64)
		interval, err2 := strconv.ParseInt(w[2], 10, 64)
		if err1 != nil || err2 != nil {
			break
		}
		var err error
		if interval > 0 {
			err = ctx.StartRepeatingTimer(w[0], []byte(m), time.Duration(delay)*time.Millisecond, time.Duration(interval)*time.Millisecond)
		} else {
			err = ctx.StartTimer(w[0], []byte(m), time.Duration(delay)*time.Millisecond)
		}
		if err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "cancel":
		if ctx.CancelTimer(rest) {
			return []byte("1"), nil
		}
		return []byte("0"), nil
	case "remind":
		w, m, ok2 := words(rest, 3)
		if !ok2 {
			break
		}
		in, err1 := strconv.ParseInt(w[1], 10, 64)
		interval, err2 := strconv.ParseInt(w[2], 10, 64)
		if err1 != nil || err2 != nil {
			break
		}
		if err := ctx.SetReminder(w[0], ctx.Now().Add(time.Duration(in)*time.Millisecond), time.Duration(interval)*time.Millisecond, []byte(m)); err != nil {
			return nil, codeErr(err)
		}
		return ok, nil
	case "unremind":
		found, err := ctx.CancelReminder(rest)
		if err != nil {
			return nil, codeErr(err)
		}
		if found {
			return []byte("1"), nil
		}
		return []byte("0"), nil
	case "reminders":
		rs, err := ctx.Reminders()
		if err != nil {
			return nil, codeErr(err)
		}
		var lines []string
		for _, r := range rs {
			lines = append(lines, r.Name+" "+strconv.FormatInt(r.Due.UnixMilli(), 10)+" "+strconv.FormatInt(r.Interval.Milliseconds(), 10)+" "+string(r.Payload))
		}
		return []byte(strings.Join(lines, "\n")), nil
	case "events":
		if rest == "" {
			return []byte(strings.Join(s.events, "\n")), nil
		}
	case "now":
		if rest == "" {
			wall := ctx.Now().UnixNano()
			mono := int64(ctx.Monotonic())
			return []byte(strconv.FormatInt(wall, 10) + " " + strconv.FormatInt(mono, 10)), nil
		}
	case "random":
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			break
		}
		b := make([]byte, n)
		ctx.Random(b)
		return []byte(hex.EncodeToString(b)), nil
	case "trace":
		ctx.TraceEvent(rest)
		return ok, nil
	case "count":
		if rest == "" {
			s.count++
			return []byte(strconv.FormatInt(s.count, 10)), nil
		}
	case "hooks":
		if rest == "" {
			return []byte("activations=" + strconv.FormatInt(s.activations, 10) +
				" passivations=" + strconv.FormatInt(s.passivations, 10)), nil
		}
	case "passivate":
		if rest == "" {
			ctx.Passivate()
			return ok, nil
		}
	case "budget":
		n, err := strconv.Atoi(rest)
		if err != nil {
			break
		}
		for i := 0; i < n; i++ {
			ctx.Monotonic()
		}
		return ok, nil
	case "trap":
		if rest == "" {
			panic("abitest: trap requested")
		}
	case "loop":
		if rest == "" {
			for i := 0; ; i++ {
				sink += i
			}
		}
	case "grow":
		if rest == "" {
			for {
				b := make([]byte, 1<<20)
				for i := 0; i < len(b); i += 4096 {
					b[i] = 1
				}
				a.hoard = append(a.hoard, b)
			}
		}
	}
	return nil, errUnknown
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &abitest{} })
}

func main() {}
