package host

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// versioned builds the test guest versioned at a version, with explicit or
// transparent state.
func versioned(t *testing.T, version, state string) []byte {
	t.Helper()
	return testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.version="+version+" -X main.state="+state)
}

// deployAs deploys wasm as typ with the query's settings, through nodes' API.
func deployAs(t *testing.T, c apiClient, typ string, wasm []byte, q url.Values) DeployResult {
	t.Helper()
	r := c.do("POST", "/v1/types/"+typ+"?"+q.Encode(), wasm)
	var res DeployResult
	if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
		t.Fatalf("deploy %s: %d %s", typ, r.status, r.body)
	}
	return res
}

// usageOf returns the versions of typ as GET /v1/types reports them, by version.
func usageOf(t *testing.T, c apiClient, typ string) (TypeUsage, map[uint64]VersionUsage) {
	t.Helper()
	r := c.do("GET", "/v1/types", nil)
	var types []TypeStatus
	if err := json.Unmarshal(r.body, &types); r.status != 200 || err != nil {
		t.Fatalf("types: %d %s", r.status, r.body)
	}
	for _, ts := range types {
		if ts.Name == typ {
			out := map[uint64]VersionUsage{}
			for _, v := range ts.Usage.Versions {
				out[v.Version] = v
			}
			return ts.Usage, out
		}
	}
	t.Fatalf("no type %s in %s", typ, r.body)
	return TypeUsage{}, nil
}

// A deploy says which entities stay on older versions and why; types and modules count
// each version's active and passivated entities, across the members; an explicit
// state takes the new version at its next activation and a transparent one keeps its
// module; and the version a transparent state needs stays listed.
func TestVersionsInView(t *testing.T) {
	nodes := startNodes(t, 2, func(c *Config) { withMetrics(t, c) })
	c := client(t, nodes[0])
	other := client(t, nodes[1])
	passivation := url.Values{"checkpoint": {"passivation"}}
	deployAs(t, c, "exp", versioned(t, "v1", "explicit"), passivation)
	deployAs(t, c, "tra", versioned(t, "v1", "transparent"), passivation)
	ask := func(c apiClient, typ, id, msg, want string) {
		t.Helper()
		if r := c.ask(typ, id, msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s %s/%s: %d %s, want %q", msg, typ, id, r.status, r.body, want)
		}
	}
	passivate := func(typ, id string) {
		t.Helper()
		if r := other.do("POST", "/v1/passivate?type="+typ+"&id="+id, nil); r.status != 200 {
			t.Fatalf("passivate %s/%s: %d %s", typ, id, r.status, r.body)
		}
	}
	for _, typ := range []string{"exp", "tra"} {
		for _, id := range []string{"a", "b", "c"} {
			ask(c, typ, id, "inc", "v1 1")
		}
		passivate(typ, "c")
	}
	u, vs := usageOf(t, other, "exp")
	if v := vs[1]; u.PassivatedUnknown || len(u.Errors) > 0 || !v.Current || v.Active != 2 || v.ActiveTransparent != 0 || v.Passivated != 1 {
		t.Fatalf("exp before the deploy: %+v", u)
	}
	u, vs = usageOf(t, other, "tra")
	if v := vs[1]; u.PassivatedUnknown || v.Active != 2 || v.ActiveTransparent != 2 || v.Passivated != 1 || v.PassivatedTransparent != 1 {
		t.Fatalf("tra before the deploy: %+v", u)
	}

	// Version 2: the deploy says who stays behind.
	res := deployAs(t, other, "exp", versioned(t, "v2", "explicit"), passivation)
	if len(res.Older) != 1 || res.Older[0].Version != 1 || res.Older[0].Active != 2 || res.Older[0].ActiveTransparent != 0 ||
		res.Older[0].Passivated != 0 || len(res.OlderErrors) > 0 {
		t.Fatalf("exp deploy's older versions: %+v %v", res.Older, res.OlderErrors)
	}
	res = deployAs(t, other, "tra", versioned(t, "v2", "transparent"), passivation)
	if len(res.Older) != 1 || res.Older[0].Version != 1 || res.Older[0].Active != 2 || res.Older[0].ActiveTransparent != 2 ||
		res.Older[0].Passivated != 1 || res.Older[0].PassivatedTransparent != 1 {
		t.Fatalf("tra deploy's older versions: %+v %v", res.Older, res.OlderErrors)
	}
	// Active entities answer from v1 until their next activation; new ones from v2.
	ask(c, "exp", "a", "inc", "v1 2")
	ask(c, "exp", "new", "inc", "v2 1")
	// The explicit state takes v2 at its next activation, with its count.
	ask(c, "exp", "c", "inc", "v2 2")
	passivate("exp", "a")
	ask(c, "exp", "a", "inc", "v2 3")
	// The transparent state keeps v1's module.
	ask(c, "tra", "c", "inc", "v1 2")
	passivate("tra", "a")
	ask(c, "tra", "a", "inc", "v1 2")

	u, vs = usageOf(t, c, "exp")
	if v1, v2 := vs[1], vs[2]; v1.Active != 1 || v1.Passivated != 0 || v2.Active != 3 || v2.Passivated != 0 || !v2.Current {
		t.Fatalf("exp after the deploy: %+v", u)
	}
	u, vs = usageOf(t, c, "tra")
	if v1, v2 := vs[1], vs[2]; v1.Active != 3 || v1.ActiveTransparent != 3 || v2.Active != 0 {
		t.Fatalf("tra after the deploy: %+v", u)
	}
	passivate("tra", "b")
	u, vs = usageOf(t, c, "tra")
	if v1 := vs[1]; v1.Active != 2 || v1.Passivated != 1 || v1.PassivatedTransparent != 1 {
		t.Fatalf("tra after b's passivation: %+v", u)
	}

	// modules carries the same counts, on each version's row.
	r := c.do("GET", "/v1/modules", nil)
	var mods []ModuleInfo
	if err := json.Unmarshal(r.body, &mods); r.status != 200 || err != nil {
		t.Fatalf("modules: %d %s", r.status, r.body)
	}
	got := map[string]string{}
	for _, m := range mods {
		got[fmt.Sprintf("%s/%d", m.Type, m.Version)] = fmt.Sprintf("%d/%d %d/%d", m.Active, m.ActiveTransparent, m.Passivated, m.PassivatedTransparent)
	}
	want := map[string]string{"exp/2": "3/0 0/0", "exp/1": "1/0 0/0", "tra/2": "0/0 0/0", "tra/1": "2/2 1/1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("modules' counts %v, want %v", got, want)
	}

	// The metrics carry the version: each member's active entities, summed.
	active := map[string]float64{}
	for _, n := range nodes {
		fams := scrape(t, n)
		for _, k := range []struct{ typ, version, state string }{
			{"exp", "1", "explicit"}, {"exp", "2", "explicit"}, {"tra", "1", "transparent"}, {"tra", "2", "transparent"},
		} {
			v, _ := sample(fams, "shardhost_module_entities_active", map[string]string{"shardhost_entity_type": k.typ,
				"shardhost_module_version": k.version, "shardhost_entity_state": k.state})
			active[k.typ+"/"+k.version+"/"+k.state] += v
		}
	}
	wantActive := map[string]float64{"exp/1/explicit": 1, "exp/2/explicit": 3, "tra/1/transparent": 2, "tra/2/transparent": 0}
	if fmt.Sprint(active) != fmt.Sprint(wantActive) {
		t.Fatalf("shardhost.module.entities.active %v, want %v", active, wantActive)
	}
}

// Under the journal, an entity's records after its base are replayed at its next
// activation on the module that made them: a redeploy that changes what a message
// does changes neither the past of an entity with explicit state, which then takes the
// new version, nor that of one with transparent state, which keeps its module.
func TestRedeployReplaysRecordsOnTheirModule(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	ask := func(typ, id, msg, want string) {
		t.Helper()
		if r := c.ask(typ, id, msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s %s/%s: %d %s, want %q", msg, typ, id, r.status, r.body, want)
		}
	}
	passivate := func(typ, id string) {
		t.Helper()
		if r := client(t, nodes[1]).do("POST", "/v1/passivate?type="+typ+"&id="+id, nil); r.status != 200 {
			t.Fatalf("passivate %s/%s: %d %s", typ, id, r.status, r.body)
		}
	}
	for _, state := range []string{"explicit", "transparent"} {
		deployAs(t, c, state, versioned(t, "v1", state), nil)
		for _, want := range []string{"v1 1", "v1 2", "v1 3"} {
			ask(state, "a", "inc", want)
		}
		// Version 2 adds 10.
		deployAs(t, c, state, testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.version=v2 -X main.state="+state+" -X main.step=10"), nil)
		passivate(state, "a")
	}
	ask("explicit", "a", "inc", "v2 13")
	ask("transparent", "a", "inc", "v1 4")
	// Again: the records of both versions, each replayed on its own.
	passivate("explicit", "a")
	passivate("transparent", "a")
	ask("explicit", "a", "get", "v2 13")
	ask("transparent", "a", "get", "v1 4")
}

// shardhost upgrade: --dry-run lists who cannot upgrade and why, and changes nothing;
// an upgrade moves the active entities with explicit state to the current version
// with their state, a shard at a time, while asks to them go on without failing.
func TestUpgradeMovesRunningEntities(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	ask := func(typ, id, msg, want string) {
		t.Helper()
		if r := c.ask(typ, id, msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s %s/%s: %d %s, want %q", msg, typ, id, r.status, r.body, want)
		}
	}
	upgrade := func(typ, query string) UpgradeResult {
		t.Helper()
		r := client(t, nodes[1]).do("POST", "/v1/types/"+typ+"/upgrade?"+query, nil)
		var res UpgradeResult
		if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
			t.Fatalf("upgrade %s?%s: %d %s", typ, query, r.status, r.body)
		}
		return res
	}
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, state := range []string{"explicit", "transparent"} {
		deployAs(t, c, state, versioned(t, "v1", state), nil)
		for _, id := range ids {
			ask(state, id, "inc", "v1 1")
		}
		deployAs(t, c, state, versioned(t, "v2", state), nil)
	}
	if r := c.do("POST", "/v1/types/explicit/upgrade?dry_run=maybe", nil); r.status != 400 {
		t.Fatalf("dry_run=maybe: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/types/nope/upgrade", nil); r.status != 404 {
		t.Fatalf("an unknown type: %d %s", r.status, r.body)
	}
	res := upgrade("transparent", "dry_run=true")
	if res.Upgradable != 0 || len(res.Cannot) != len(ids) || res.Cannot[0].ID != "a" || res.Cannot[0].Version != 1 ||
		!res.Cannot[0].Active || res.Cannot[0].Reason == "" {
		t.Fatalf("transparent dry run: %+v", res)
	}
	res = upgrade("explicit", "dry_run=true")
	if res.Upgradable != len(ids) || len(res.Cannot) != 0 || res.Upgraded != 0 {
		t.Fatalf("explicit dry run: %+v", res)
	}
	ask("explicit", "a", "inc", "v1 2") // the dry run moved nothing

	// Asks go on during the upgrade, and none fails.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	failures, asks := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Not apiClient: it fails the test from this goroutine.
			resp, err := http.Post("http://"+nodes[1].APIAddr()+"/v1/ask?type=explicit&id=b", "", strings.NewReader("get"))
			if err != nil {
				failures++
			} else {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failures++
				}
			}
			asks++
		}
	}()
	res = upgrade("explicit", "now=true")
	close(stop)
	wg.Wait()
	if failures > 0 {
		t.Fatalf("%d of %d asks failed during the upgrade", failures, asks)
	}
	if res.Upgradable != len(ids) || res.Upgraded != len(ids) || len(res.Failed) > 0 {
		t.Fatalf("upgrade: %+v", res)
	}
	vs := map[uint64]VersionUsage{}
	for _, v := range res.Remaining.Versions {
		vs[v.Version] = v
	}
	if vs[1].Active != 0 || vs[2].Active != len(ids) {
		t.Fatalf("after the upgrade, by version: %+v", res.Remaining)
	}
	ask("explicit", "a", "get", "v2 2")
	ask("explicit", "f", "inc", "v2 2")
	if res := upgrade("explicit", ""); res.Upgradable != 0 || res.Upgraded != 0 {
		t.Fatalf("a second upgrade: %+v", res)
	}
}

// A module that exports shardhost_migrate takes up an older version's state converted;
// a migration that fails (refused, or a trap) leaves the entity on its old version with
// its state, counted there, and upgrade reports why; it never keeps half a conversion.
func TestMigrationAtUpgrade(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	ask := func(id, msg, want string) {
		t.Helper()
		if r := c.ask("bank", id, msg); r.status != 200 || string(r.body) != want {
			t.Fatalf("%s bank/%s: %d %s, want %q", msg, id, r.status, r.body, want)
		}
	}
	upgrade := func() UpgradeResult {
		t.Helper()
		r := c.do("POST", "/v1/types/bank/upgrade?now=true", nil)
		var res UpgradeResult
		if err := json.Unmarshal(r.body, &res); r.status != 200 || err != nil {
			t.Fatalf("upgrade: %d %s", r.status, r.body)
		}
		return res
	}
	guest := func(version, migrate string) []byte {
		return testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.version="+version+" -X main.migrate="+migrate)
	}
	deployAs(t, c, "bank", versioned(t, "v1", "explicit"), nil)
	ask("a", "inc", "v1 1")
	ask("a", "inc", "v1 2")
	ask("b", "inc", "v1 1")

	// Version 2's migration fails (refused, a trap, or accepted into a state that cannot
	// be saved): both stay on version 1 with their state.
	for _, failing := range []string{"fail", "trap", "garbage"} {
		deployAs(t, c, "bank", guest("v2-"+failing, failing), nil)
		res := upgrade()
		if res.Upgradable != 2 || res.Upgraded != 0 || len(res.Failed) != 2 || !strings.Contains(res.Failed[0].Reason, "stays on version 1") {
			t.Fatalf("upgrade to a failing migration (%s): %+v", failing, res)
		}
		if failing == "fail" && !strings.Contains(res.Failed[0].Reason, "no migration from version 1") ||
			failing == "garbage" && (!strings.Contains(res.Failed[0].Reason, "cannot be saved") || !strings.Contains(res.Failed[0].Reason, "the migrated state is garbage")) {
			t.Fatalf("the guest's failure is not reported: %+v", res.Failed)
		}
		vs := map[uint64]VersionUsage{}
		for _, v := range res.Remaining.Versions {
			vs[v.Version] = v
		}
		if vs[1].Active != 2 {
			t.Fatalf("after a failed migration (%s), by version: %+v", failing, res.Remaining)
		}
		ask("a", "get", "v1 2")
	}
	// Version 5 converts: the entities reach it with their state converted.
	deployAs(t, c, "bank", guest("v5", "x100"), nil)
	res := upgrade()
	if res.Upgraded != 2 || len(res.Failed) != 0 {
		t.Fatalf("upgrade to a converting migration: %+v", res)
	}
	ask("a", "get", "v5 200")
	ask("b", "inc", "v5 101")
	// Its records replay on their own modules: passivated and active again, the same.
	if r := c.do("POST", "/v1/passivate?type=bank&id=a", nil); r.status != 200 {
		t.Fatalf("passivate: %d %s", r.status, r.body)
	}
	ask("a", "get", "v5 200")
}
