package host

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// The ABI v1 examples on a cluster of three nodes: the Rust cart keeps the cluster-wide
// ORSet carts and PNCounter cart-items; the Go room (built by TinyGo and by Go's port)
// takes its topic from a subscription and lets idle members go with its timer. The
// counter is in counter_example_test.go.

func TestCartExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.RustBytes(t, "cart"), sharding.TypeSettings{Name: "cart", NumberOfShards: 12}); err != nil {
		t.Fatal(err)
	}
	ask := func(via int, id, msg string) string {
		t.Helper()
		r, err := nodes[via%3].Sharding().Ask(ctx, "cart", id, []byte(msg))
		if err != nil {
			t.Fatalf("cart/%s %q: %v", id, msg, err)
		}
		return string(r.Payload)
	}
	items := map[string][]string{}
	for i := 0; i < 8; i++ {
		id := "c" + strconv.Itoa(i)
		for j := 0; j <= i%3; j++ {
			item := fmt.Sprintf("item-%d", (i+j)%5)
			ask(i+j, id, "add "+item)
			ask(i+j+1, id, "add "+item) // twice: still one
			items[id] = append(items[id], item)
		}
	}
	ask(0, "c7", "remove item-2") // c7 had item-2 and item-3
	ask(0, "c7", "remove item-9") // never had it: nothing changes
	items["c7"] = []string{"item-3"}
	ask(1, "c0", "remove item-0") // c0 becomes empty
	delete(items, "c0")
	total := 0
	var carts []string
	for id, want := range items {
		sort.Strings(want)
		b, _ := json.Marshal(want)
		if got := ask(2, id, "list"); got != string(b) {
			t.Fatalf("cart/%s list = %s, want %s", id, got, b)
		}
		total += len(want)
		carts = append(carts, id)
	}
	sort.Strings(carts)
	// Written with WriteMajority: a majority read on any member sees every write.
	for _, n := range nodes {
		d, err := n.Replicator().Get(ctx, "carts", ddata.ReadMajority(0))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(d.Value()); string(got) != mustJSON(carts) {
			t.Fatalf("carts on %s = %s, want %s", n.Self().Address, got, mustJSON(carts))
		}
		d, err = n.Replicator().Get(ctx, "cart-items", ddata.ReadMajority(0))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(d.Value()); got != strconv.Itoa(total) {
			t.Fatalf("cart-items on %s = %s, want %d", n.Self().Address, got, total)
		}
	}
}

// The room built by TinyGo and by Go's port.
func TestRoomExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testRoomExample(t, c.Bytes(t, "room")) })
	}
}

func testRoomExample(t *testing.T, room []byte) {
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, room, sharding.TypeSettings{Name: "room", NumberOfShards: 12}); err != nil {
		t.Fatal(err)
	}
	ask := func(msg string) (string, error) {
		r, err := nodes[1].Sharding().Ask(ctx, "room", "lobby", []byte(msg))
		return string(r.Payload), err
	}
	must := func(msg, want string) {
		t.Helper()
		if got, err := ask(msg); err != nil || got != want {
			t.Fatalf("%q: %q %v, want %q", msg, got, err, want)
		}
	}
	must("join alice", "ok")
	must("join bob", "ok")
	must("say alice hello", "ok")
	must("members", `["alice","bob"]`)
	must("set-topic cats", "ok")
	must("topic", "cats")
	wrote := time.Now().UnixMilli()
	// A topic written elsewhere reaches the room through its subscription. (Last writer
	// wins by millisecond timestamps: a write in the same millisecond on a member that has
	// not seen "cats" yet would tie, and the tie goes by member, so wait for the next.)
	testutil.Eventually(t, time.Second, "the next millisecond", func() bool { return time.Now().UnixMilli() > wrote })
	op, _ := ddata.ParseOp(ddata.TypeLWWMap, "put lobby birds")
	if _, err := nodes[2].Replicator().Update(ctx, "room-topics", ddata.LWWMap{}, ddata.WriteAll(), op.Modify(nodes[2].Replicator().SelfNodeID(), nil)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, `the room's topic "birds"`, func() bool { got, _ := ask("topic"); return got == "birds" })
	// Idle members go: bob said nothing, alice keeps talking.
	must("expire-after 600ms", "ok")
	testutil.Eventually(t, 15*time.Second, "bob to be let go", func() bool {
		must("say alice still here", "ok")
		got, _ := ask("members")
		return got == `["alice"]`
	})
}
