package host

import (
	"context"
	"strconv"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// The counter example on a cluster of three, built by TinyGo and by Go's port: counts
// asked through every member, then kept through a member's graceful leave, which hands
// its shards off with the entities' transparent snapshots (memory and globals).
func TestCounterExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testCounterExample(t, c.Bytes(t, "counter")) })
	}
}

func testCounterExample(t *testing.T, counter []byte) {
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, counter, sharding.TypeSettings{Name: "counter", NumberOfShards: 12}); err != nil {
		t.Fatal(err)
	}
	ask := func(via *Node, id, msg string) sharding.Reply {
		t.Helper()
		r, err := via.Sharding().Ask(ctx, "counter", id, []byte(msg))
		if err != nil {
			t.Fatalf("counter/%s %q via %s: %v", id, msg, via.Self().Address, err)
		}
		return r
	}
	leaving := nodes[2]
	want := map[string]int{}
	moved := 0
	for i := 0; i < 24 || moved == 0; i++ {
		id := "k" + strconv.Itoa(i)
		ask(nodes[i%3], id, "inc "+strconv.Itoa(i+1))
		r := ask(nodes[(i+1)%3], id, "inc")
		if got := string(r.Payload); got != strconv.Itoa(i+2) {
			t.Fatalf("counter/%s: %s, want %d", id, got, i+2)
		}
		want[id] = i + 2
		if r.Node == leaving.Self().Address {
			moved++
		}
	}
	if err := leaving.Close(); err != nil {
		t.Fatal(err)
	}
	for id, n := range want {
		if got := string(ask(nodes[0], id, "get").Payload); got != strconv.Itoa(n) {
			t.Fatalf("counter/%s after %s left: %s, want %d", id, leaving.Self().Address, got, n)
		}
	}
	t.Logf("%d of %d counters moved with the leaving member's shards", moved, len(want))
}
