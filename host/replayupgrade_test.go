package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// Under --history all, an entity with transparent state upgrades by a replay of its
// journal on the new module: one whose every message does on it what its record says
// moves, with the state the replay built; one whose replay differs stays on version 1
// with its state, and the dry run, the upgrade and the usage by version say so, with
// the message where it differed. Without --history all, a transparent state cannot
// move, as before.
func TestTransparentUpgradeByReplay(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	ask := func(id, msg, want string) {
		t.Helper()
		if r := c.ask("tr", id, msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s tr/%s: %d %s, want %q", msg, id, r.status, r.body, want)
		}
	}
	upgrade := func(query string) UpgradeResult {
		t.Helper()
		r := client(t, nodes[1]).do("POST", "/v1/types/tr/upgrade?"+query, nil)
		var res UpgradeResult
		if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
			t.Fatalf("upgrade tr?%s: %d %s", query, r.status, r.body)
		}
		return res
	}
	passivate := func(id string) {
		t.Helper()
		if r := client(t, nodes[1]).do("POST", "/v1/passivate?type=tr&id="+id, nil); r.status != 200 {
			t.Fatalf("passivate tr/%s: %d %s", id, r.status, r.body)
		}
	}
	v1 := testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.state=transparent")
	// Version 2 answers "build" with "two", and its "inc" adds 10: the replay of a
	// history with an inc differs at that inc; one of gets alone does not.
	v2 := testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.state=transparent -X main.build=two -X main.step=10")
	if r := c.do("POST", "/v1/types/tr?history=everything", v1); r.status != 400 || !strings.Contains(string(r.body), "all keeps every one") {
		t.Fatalf("history=everything: %d %s", r.status, r.body)
	}
	res := deployAs(t, c, "tr", v1, url.Values{"history": {"all"}})
	if !strings.Contains(func() string { b, _ := json.Marshal(res.Type.SettingList()); return string(b) }(), `"all"`) {
		t.Fatalf("the settings of a deploy with history=all: %+v", res.Type.SettingList())
	}
	// a: get, inc, inc (diverges at message 2); b: get, get, get (replays the same).
	ask("a", "get", "v1 0")
	ask("a", "inc", "v1 1")
	ask("a", "inc", "v1 2")
	ask("b", "get", "v1 0")
	ask("b", "get", "v1 0")
	// b's journal must not start after its first message: passivations keep it whole.
	passivate("b")
	ask("b", "get", "v1 0")
	deployAs(t, c, "tr", v2, nil)

	dry := upgrade("dry_run=true")
	if dry.Upgradable != 1 || len(dry.Cannot) != 1 || dry.Cannot[0].ID != "a" || dry.Cannot[0].Version != 1 ||
		!strings.Contains(dry.Cannot[0].Reason, `message 2 (journal record 2, "inc")`) || !strings.Contains(dry.Cannot[0].Reason, "reply") {
		t.Fatalf("dry run: %+v", dry)
	}
	if !strings.Contains(dry.Cannot[0].Reason, `answered "v1 10"`) {
		t.Fatalf("the dry run's reason does not quote the new module's reply: %s", dry.Cannot[0].Reason)
	}

	up := upgrade("now=true")
	if up.Upgradable != 2 || up.Upgraded != 1 || len(up.Failed) != 1 || up.Failed[0].ID != "a" ||
		!strings.Contains(up.Failed[0].Reason, "stays on version 1") || !strings.Contains(up.Failed[0].Reason, "message 2 (journal record 2") {
		t.Fatalf("upgrade: %+v", up)
	}
	vs := map[uint64]VersionUsage{}
	for _, v := range up.Remaining.Versions {
		vs[v.Version] = v
	}
	if vs[1].Active != 1 || vs[2].Active != 1 {
		t.Fatalf("after the upgrade, by version: %+v", up.Remaining)
	}
	// b runs version 2 with its state; a runs version 1 with its own.
	ask("b", "build", "two")
	ask("b", "inc", "v1 10")
	ask("a", "build", "one")
	ask("a", "inc", "v1 3")
	// b's state is version 2's from now on: a passivation saves it, and the next
	// activation restores it on version 2, its journal after it replayed there.
	passivate("b")
	ask("b", "get", "v1 10")
	ask("b", "build", "two")
	ask("b", "inc", "v1 20")
	passivate("b")
	passivate("a")
	ask("b", "get", "v1 20")
	ask("a", "get", "v1 3")
	ask("a", "build", "one")

	// Without --history all, a transparent state cannot move, and the dry run says so.
	deployAs(t, c, "tr2", v1, nil)
	ask2 := func(msg, want string) {
		t.Helper()
		if r := c.ask("tr2", "c", msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s tr2/c: %d %s, want %q", msg, r.status, r.body, want)
		}
	}
	ask2("get", "v1 0")
	deployAs(t, c, "tr2", v2, nil)
	r := client(t, nodes[1]).do("POST", "/v1/types/tr2/upgrade?dry_run=true", nil)
	var res2 UpgradeResult
	if err := json.Unmarshal(r.body, &res2); err != nil || len(res2.Cannot) != 1 || !strings.Contains(res2.Cannot[0].Reason, "--history all") {
		t.Fatalf("tr2 dry run: %d %s", r.status, r.body)
	}
	ask2("build", "one")
}

// An entity whose transparent state moved by replay and then handled messages on the
// new module comes back after its member is killed (no stop, no base of the new
// module): its activation restores the old module's state, and the records made on the
// new module switch it there by the same replay, so it answers from the new module with
// every acknowledged message.
func TestTransparentReplayUpgradeSurvivesAKill(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := client(t, nodes[0])
	v1 := testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.state=transparent")
	v2 := testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.state=transparent -X main.build=two -X main.step=10")
	deployAs(t, c, "tr", v1, url.Values{"history": {"all"}})
	id := entityOn(t, nodes[0], nodes[2], "tr", "get")
	ask := func(msg, want string) {
		t.Helper()
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := nodes[0].Sharding().Ask(actx, "tr", id, []byte(msg))
		if err != nil || string(r.Payload) != want {
			t.Fatalf("%s tr/%s: %q %v, want %q", msg, id, r.Payload, err, want)
		}
	}
	ask("get", "v1 0")
	deployAs(t, c, "tr", v2, nil)
	r := c.do("POST", "/v1/types/tr/upgrade?now=true", nil)
	var res UpgradeResult
	if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil || len(res.Failed) != 0 || res.Upgraded == 0 {
		t.Fatalf("upgrade: %d %s", r.status, r.body)
	}
	ask("inc", "v1 10")
	ask("inc", "v1 20")
	ask("build", "two")
	if err := nodes[2].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the entity served after the kill", func() error {
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := nodes[0].Sharding().Ask(actx, "tr", id, []byte("get"))
		switch {
		case err != nil:
			return err
		case r.Node == nodes[2].Self().Address:
			return fmt.Errorf("answered by the killed member")
		case string(r.Payload) != "v1 20":
			return fmt.Errorf("get: %q, want v1 20", r.Payload)
		}
		return nil
	})
	ask("build", "two")
	ask("inc", "v1 30")
}
