package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// A canary's share is by a hash of the type and ID: the same on every call, nested
// (a 10% canary's entities are in a 20% one), near its share, and another type's
// canary takes other entities.
func TestCanaryShareIsStable(t *testing.T) {
	r10 := &Rollout{State: RolloutCanary, Share: 1000}
	r20 := &Rollout{State: RolloutCanary, Share: 2000}
	in10, same := 0, 0
	for i := range 10_000 {
		id := fmt.Sprintf("user-%d", i)
		a := r10.inCanary("bank", id)
		if a != r10.inCanary("bank", id) {
			t.Fatalf("%s: the canary share changes between calls", id)
		}
		if a && !r20.inCanary("bank", id) {
			t.Fatalf("%s is in the 10%% canary and not in the 20%% one", id)
		}
		if a {
			in10++
			if r10.inCanary("other", id) {
				same++
			}
		}
	}
	if in10 < 800 || in10 > 1200 {
		t.Fatalf("a 10%% canary holds %d of 10000 entities", in10)
	}
	if same > in10/2 {
		t.Fatalf("another type's 10%% canary shares %d of %d entities", same, in10)
	}
	ids := &Rollout{State: RolloutCanary, IDs: []string{"a", "c"}}
	if !ids.inCanary("bank", "a") || ids.inCanary("bank", "b") {
		t.Fatal("a canary of listed IDs")
	}
	info := TypeInfo{Name: "bank", Digest: "new", Rollout: &Rollout{State: RolloutCanary, IDs: []string{"a"}, StableDigest: "old"}}
	if targetOf(info, "a") != "new" || targetOf(info, "b") != "old" {
		t.Fatal("targetOf with a canary in flight")
	}
	info.Rollout.State = RolloutRolledBack
	if targetOf(info, "b") != "new" {
		t.Fatal("targetOf after a rollback: the entry's module is the stable one's")
	}
	for _, bad := range []string{"", "0%", "0", "150%", "-1%", "abc", "10%%", "NaN", "0.001%"} {
		if _, err := ParseCanaryShare(bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ParseCanaryShare(%q): %v, want ErrBadRequest", bad, err)
		}
	}
	for s, want := range map[string]int{"10%": 1000, "10": 1000, " 0.5 %": 50, "100%": 10000} {
		if got, err := ParseCanaryShare(s); err != nil || got != want {
			t.Errorf("ParseCanaryShare(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
}

// rolloutOf returns typ's rollout as GET /v1/types/{name}/rollout reports it.
func rolloutOf(t *testing.T, c apiClient, typ string) RolloutStatus {
	t.Helper()
	r := c.do("GET", "/v1/types/"+typ+"/rollout", nil)
	var st RolloutStatus
	if err := json.Unmarshal(r.body, &st); r.status != 200 || err != nil {
		t.Fatalf("rollout status: %d %s", r.status, r.body)
	}
	return st
}

// A canary: its share of the entities activates on the new version with their state,
// the others stay; a rollback takes the canary's entities back with their state, and
// new activations go to the old version; a promotion makes the new version every
// entity's. Bad input changes nothing.
func TestCanaryRolloutAndRollback(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[0])
	ask := func(id, msg string) string {
		t.Helper()
		r := c.ask("bank", id, msg)
		if r.status != 200 {
			t.Fatalf("%s bank/%s: %d %s", msg, id, r.status, r.body)
		}
		return string(r.body)
	}
	v1, v2 := versioned(t, "v1", "explicit"), versioned(t, "v2", "explicit")
	// A canary on a type with no version: refused, nothing deployed.
	if r := c.do("POST", "/v1/types/bank?canary=10%25", v1); r.status != 400 || !strings.Contains(string(r.body), "none deployed") {
		t.Fatalf("a canary of a new type: %d %s", r.status, r.body)
	}
	if r := c.do("GET", "/v1/types/bank/rollout", nil); r.status != 404 {
		t.Fatalf("the refused canary deployed the type: %d %s", r.status, r.body)
	}
	deployAs(t, c, "bank", v1, nil)
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%d", i)
		ask(ids[i], "inc")
		ask(ids[i], "inc")
	}
	// Bad input: each refused, the type stays at version 1 with no rollout.
	for _, q := range []string{"canary=0%25", "canary=150%25", "canary=abc", "canary=10%25&canary_ids=a",
		"canary=10%25&canary_max_failure_rate=2", "canary=10%25&canary_window=1m", "canary_ids="} {
		if r := c.do("POST", "/v1/types/bank?"+q, v2); r.status != 400 {
			t.Fatalf("deploy ?%s: %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := c.do("POST", "/v1/types/bank?canary=10%25", v1); r.status != 400 || !strings.Contains(string(r.body), "runs this module already") {
		t.Fatalf("a canary of the running module: %d %s", r.status, r.body)
	}
	for _, op := range []string{"promote", "rollback"} {
		if r := c.do("POST", "/v1/types/bank/rollout/"+op, nil); r.status != 400 || !strings.Contains(string(r.body), "no canary in flight") {
			t.Fatalf("%s with nothing in flight: %d %s", op, r.status, r.body)
		}
	}
	if st := rolloutOf(t, c, "bank"); st.Version != 1 || st.Rollout != nil {
		t.Fatalf("bad input changed the type: %+v", st)
	}

	res := deployAs(t, c, "bank", v2, url.Values{"canary": {"25%"}})
	r := res.Type.Rollout
	if res.Type.Version != 2 || !r.inFlight() || r.Stable != 1 || r.Canary != 2 || r.Share != 2500 {
		t.Fatalf("canary deploy: %+v %+v", res.Type, r)
	}
	canary := map[string]bool{}
	for _, id := range ids {
		want := "v1 2"
		if r.inCanary("bank", id) {
			canary[id] = true
			want = "v2 2"
		}
		if got := ask(id, "get"); got != want {
			t.Fatalf("bank/%s on a 25%% canary: %q, want %q", id, got, want)
		}
	}
	if len(canary) == 0 || len(canary) == len(ids) {
		t.Fatalf("a 25%% canary holds %d of %d entities", len(canary), len(ids))
	}
	// Every member routes the same: ask through the other one.
	other := client(t, nodes[1])
	for _, id := range ids[:5] {
		want := map[bool]string{true: "v2 2", false: "v1 2"}[canary[id]]
		if got := other.ask("bank", id, "get"); string(got.body) != want {
			t.Fatalf("bank/%s through the other member: %q, want %q", id, got.body, want)
		}
	}
	st := rolloutOf(t, c, "bank")
	if len(st.Entities) != len(canary) || st.Canary.OK == 0 || st.Stable.OK == 0 || st.Canary.Failed != 0 {
		t.Fatalf("status of the canary (%d entities): %+v", len(canary), st)
	}
	for _, id := range st.Entities {
		if !canary[id] {
			t.Fatalf("status lists %s, not in the canary", id)
		}
	}
	for id := range canary {
		ask(id, "inc") // state the canary made
	}

	// Rollback: the canary's entities go back with their state.
	rr := c.do("POST", "/v1/types/bank/rollout/rollback", nil)
	var rb RollbackResult
	if err := json.Unmarshal(rr.body, &rb); rr.status != 200 || err != nil {
		t.Fatalf("rollback: %d %s", rr.status, rr.body)
	}
	if rb.Type.Version != 3 || rb.Type.Digest != r.StableDigest || rb.Type.Rollout.State != RolloutRolledBack ||
		rb.Moved.Upgraded != len(canary) || len(rb.Moved.Failed) != 0 {
		t.Fatalf("rollback: %+v; moved %+v", rb.Type, rb.Moved)
	}
	for _, id := range ids {
		want := "v1 2"
		if canary[id] {
			want = "v1 3"
		}
		if got := ask(id, "get"); got != want {
			t.Fatalf("bank/%s after the rollback: %q, want %q", id, got, want)
		}
	}
	if got := ask("new-after-rollback", "inc"); got != "v1 1" {
		t.Fatalf("a new entity after the rollback: %q", got)
	}
	if r := c.do("POST", "/v1/types/bank/rollout/promote", nil); r.status != 400 {
		t.Fatalf("promote after a rollback: %d %s", r.status, r.body)
	}

	// Promote: every entity takes the new version.
	deployAs(t, c, "bank", v2, url.Values{"canary_ids": {"acct-0,acct-1"}})
	if got := ask("acct-0", "get"); !strings.HasPrefix(got, "v2 ") {
		t.Fatalf("listed canary entity: %q", got)
	}
	if got := ask("acct-2", "get"); !strings.HasPrefix(got, "v1 ") {
		t.Fatalf("entity outside the listed canary: %q", got)
	}
	pr := c.do("POST", "/v1/types/bank/rollout/promote", nil)
	var promoted TypeInfo
	if err := json.Unmarshal(pr.body, &promoted); pr.status != 200 || err != nil || promoted.Rollout != nil || promoted.Version != 4 {
		t.Fatalf("promote: %d %s", pr.status, pr.body)
	}
	if got := ask("never-seen", "inc"); got != "v2 1" {
		t.Fatalf("a new entity after the promotion: %q", got)
	}
	if r := c.do("POST", "/v1/types/bank/upgrade?now=true", nil); r.status != 200 {
		t.Fatalf("upgrade: %d %s", r.status, r.body)
	}
	stay := ""
	for _, id := range ids[2:] {
		if !canary[id] {
			stay = id
			break
		}
	}
	if got := ask(stay, "get"); got != "v2 2" {
		t.Fatalf("an entity after the promotion and an upgrade: %q", got)
	}
	if st := rolloutOf(t, other, "bank"); st.Rollout != nil || st.Version != 4 {
		t.Fatalf("the other member's view after the promotion: %+v", st)
	}
}

// A rollback leaves the canary's entities whose state the old version refuses on the
// canary, and says which and why.
func TestCanaryRollbackRefusedState(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := client(t, nodes[0])
	// Version 1 refuses every other version's state (its shardhost_migrate fails).
	deployAs(t, c, "bank", testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.version=v1 -X main.migrate=fail"), nil)
	c.ask("bank", "a", "inc")
	deployAs(t, c, "bank", versioned(t, "v2", "explicit"), url.Values{"canary_ids": {"a"}})
	if r := c.ask("bank", "a", "inc"); string(r.body) != "v2 2" {
		t.Fatalf("canary entity: %d %s", r.status, r.body)
	}
	rr := c.do("POST", "/v1/types/bank/rollout/rollback", nil)
	var rb RollbackResult
	if err := json.Unmarshal(rr.body, &rb); rr.status != 200 || err != nil {
		t.Fatalf("rollback: %d %s", rr.status, rr.body)
	}
	if rb.Moved.Upgraded != 0 || len(rb.Moved.Failed) != 1 || rb.Moved.Failed[0].ID != "a" ||
		!strings.Contains(rb.Moved.Failed[0].Reason, "no migration from version 2") {
		t.Fatalf("rollback with a refused state: %+v", rb.Moved)
	}
	if r := c.ask("bank", "a", "get"); string(r.body) != "v2 2" {
		t.Fatalf("the entity whose state v1 refuses: %d %s", r.status, r.body)
	}
	if r := c.ask("bank", "b", "inc"); string(r.body) != "v1 1" {
		t.Fatalf("a new entity after the rollback: %d %s", r.status, r.body)
	}
}

// A canary whose version traps rolls back by itself once its failure rate over the
// window passes the maximum, and its entities answer from the old version with their
// state.
func TestCanaryAutomaticRollback(t *testing.T) {
	rolledBack := make(chan slog.Record, 1)
	nodes := startNodes(t, 1, func(c *Config) {
		c.Logger = slog.New(&recordsOf{msg: "canary rolled back by itself", to: rolledBack, Handler: c.Logger.Handler()})
	})
	c := client(t, nodes[0])
	deployAs(t, c, "bank", versioned(t, "v1", "explicit"), nil)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, id := range ids {
		c.ask("bank", id, "inc")
	}
	trapping := testwasm.GuestBytes(t, "versioned", "-ldflags=-X main.version=v2 -X main.receive=trap")
	deployAs(t, c, "bank", trapping, url.Values{"canary_ids": {strings.Join(ids[:6], ",")},
		"canary_max_failure_rate": {"0.5"}, "canary_window": {"10m"}, "canary_min_messages": {"4"}})
	// Three failures are below the minimum of messages: still in flight.
	for _, id := range ids[:3] {
		if r := c.ask("bank", id, "inc"); r.status == 200 {
			t.Fatalf("the trapping canary answered: %s", r.body)
		}
	}
	if st := rolloutOf(t, c, "bank"); !st.Rollout.inFlight() || st.Canary.Failed != 3 {
		t.Fatalf("below the minimum of messages: %+v", st)
	}
	if r := c.ask("bank", "g", "get"); string(r.body) != "v1 1" {
		t.Fatalf("an entity outside the canary: %d %s", r.status, r.body)
	}
	c.ask("bank", ids[3], "inc") // the fourth: the rate passes 0.5
	select {
	case rec := <-rolledBack:
		t.Logf("%s", rec.Message)
	case <-time.After(2 * time.Minute):
		t.Fatalf("no automatic rollback: %+v", rolloutOf(t, c, "bank"))
	}
	info, _ := nodes[0].catalog.get("bank")
	if info.Version != 3 || info.Rollout == nil || info.Rollout.State != RolloutRolledBack || !strings.Contains(info.Rollout.Reason, "failure rate") {
		t.Fatalf("automatic rollback: %+v %+v", info, info.Rollout)
	}
	for _, id := range ids {
		if r := c.ask("bank", id, "inc"); r.status != 200 || string(r.body) != "v1 2" {
			t.Fatalf("bank/%s after the automatic rollback: %d %s", id, r.status, r.body)
		}
	}
}

// recordsOf is a log handler that sends the records with the message msg to to (those
// that do not fit are dropped), and passes every record on to Handler.
type recordsOf struct {
	slog.Handler
	msg string
	to  chan slog.Record
}

func (h *recordsOf) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.to <- r.Clone():
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

// A rollout gossips with its entry: it survives the catalog's encoding, a promotion
// (RolloutRev) wins over the canary at one version in any order, a rollback (the next
// version) over both, and an entry whose rollout names a bad digest is ignored.
func TestCatalogRolloutMerge(t *testing.T) {
	r := &Rollout{State: RolloutCanary, Stable: 1, StableDigest: digest("aa"), Canary: 2, CanaryDigest: digest("bb"),
		IDs: []string{"a", "b"}, MaxFailureRate: 0.1, WindowMs: 60_000, StartedAt: 7}
	canary := TypeInfo{Name: "bank", Digest: digest("bb"), Version: 2, DeployedAt: 5, NumberOfShards: 10, Rollout: r}
	promoted := canary
	promoted.Rollout, promoted.RolloutRev = nil, 1
	back := *r
	back.State, back.Reason = RolloutRolledBack, "why"
	rolledBack := TypeInfo{Name: "bank", Digest: digest("aa"), Version: 3, DeployedAt: 6, NumberOfShards: 10, Rollout: &back}
	for _, order := range [][]TypeInfo{{canary, promoted}, {promoted, canary}} {
		c := newCatalog(nil, "", nil)
		for _, e := range order {
			c.merge([]TypeInfo{e})
		}
		if got, _ := c.get("bank"); got.Rollout != nil || got.RolloutRev != 1 || c.canaries.Load() != 0 {
			t.Fatalf("order %v: %+v", order, got)
		}
	}
	src := newCatalog(nil, "", nil)
	src.merge([]TypeInfo{canary})
	if src.canaries.Load() != 1 {
		t.Fatal("a canary in flight is not counted")
	}
	dst := newCatalog(nil, "", nil)
	dst.MergeRemoteState(src.LocalState())
	if got, _ := dst.get("bank"); !reflect.DeepEqual(got, canary) {
		t.Fatalf("the rollout did not round-trip: %+v %+v", got, got.Rollout)
	}
	dst.merge([]TypeInfo{rolledBack, promoted})
	if got, _ := dst.get("bank"); got.Version != 3 || got.Rollout.State != RolloutRolledBack || dst.canaries.Load() != 0 {
		t.Fatalf("after a rollback: %+v", got)
	}
	bad := canary
	bad.Name = "other"
	bad.Rollout = &Rollout{State: RolloutCanary, StableDigest: "../x", CanaryDigest: digest("bb")}
	dst.merge([]TypeInfo{bad})
	if _, ok := dst.get("other"); ok {
		t.Fatal("an entry whose rollout names a bad digest was kept")
	}
}
