package shardhost_test

import (
	"fmt"
	"strconv"

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
