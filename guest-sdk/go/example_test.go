package shardhost_test

import (
	"fmt"
	"strconv"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

// visits counts the messages it got. It keeps its state as a Snapshotter, so the count
// survives a redeploy with new code; "done" asks the host to passivate it.
type visits struct{ n int }

func (v *visits) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	v.n++
	if string(msg) == "done" {
		ctx.Passivate()
	}
	return strconv.AppendInt(nil, int64(v.n), 10), nil
}

func (v *visits) Snapshot() ([]byte, error) { return strconv.AppendInt(nil, int64(v.n), 10), nil }

func (v *visits) Restore(state []byte) error {
	n, err := strconv.Atoi(string(state))
	v.n = n
	return err
}

// A test passivates an entity and starts its next incarnation with two harnesses.
func ExampleHarness_Restore() {
	newVisits := func(string) shardhost.Entity { return &visits{} }

	h := shardhost.NewHarness("visits", "v-1", newVisits)
	h.Send([]byte("hello"))
	out, _ := h.Send([]byte("done"))
	fmt.Println(string(out), h.Passivated())
	state, ok, err := h.Snapshot()
	fmt.Println(string(state), ok, err)

	next := shardhost.NewHarness("visits", "v-1", newVisits)
	if err := next.Restore(state); err != nil {
		fmt.Println(err)
	}
	out, _ = next.Send([]byte("hello again"))
	fmt.Println(string(out), next.Passivated())
	// Output:
	// 2 true
	// 2 true <nil>
	// 3 false
}

// greeter keeps the names it greeted in a ready state type: Stateful makes it a
// Snapshotter, so the names survive passivation and redeploys. It counts greetings in
// distributed data and says goodbye with a timer.
type greeter struct {
	shardhost.Stateful[shardhost.Strings, *shardhost.Strings]
}

func (g *greeter) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	if ctx.Kind() == shardhost.KindTimer {
		return nil, ctx.Tell("mailer", "m-1", []byte("goodbye "+string(msg)))
	}
	g.State = append(g.State, string(msg))
	n, err := ctx.PNCounter("greetings").Incr(1, shardhost.Majority)
	if err != nil {
		return nil, err
	}
	if err := ctx.StartTimer("bye-"+string(msg), msg, time.Minute); err != nil {
		return nil, err
	}
	return []byte(fmt.Sprintf("hello %s, greeting %d", msg, n)), nil
}

// A test drives the v1 host functions through the Harness: distributed data, timers on
// a clock it moves, recorded tells, and a restart that keeps the state.
func ExampleHarness_FireDue() {
	h := shardhost.NewHarness("greeter", "g-1", func(string) shardhost.Entity { return &greeter{} })
	out, _ := h.Send([]byte("ann"))
	fmt.Println(string(out))
	out, _ = h.Send([]byte("bob"))
	fmt.Println(string(out))

	h.Advance(time.Minute)
	fired, _ := h.FireDue()
	fmt.Println(fired)
	for _, m := range h.Tells {
		fmt.Printf("%s told %s/%s %q\n", m.Sender, m.Type, m.ID, m.Msg)
	}

	if err := h.Restart(); err != nil {
		fmt.Println(err)
	}
	out, _ = h.Send([]byte("cy"))
	fmt.Println(string(out))
	state, _, _ := h.Snapshot()
	var names shardhost.Strings
	names.UnmarshalBinary(state)
	fmt.Println(names)
	// Output:
	// hello ann, greeting 1
	// hello bob, greeting 2
	// [bye-ann bye-bob]
	// greeter/g-1 told mailer/m-1 "goodbye ann"
	// greeter/g-1 told mailer/m-1 "goodbye bob"
	// hello cy, greeting 3
	// [ann bob cy]
}
