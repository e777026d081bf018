package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// listAll reads every page of q, checking that the rows come in order and once.
func listAll(t *testing.T, s *Sharding, q ListQuery) []EntityRow {
	t.Helper()
	var all []EntityRow
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the listing does not end")
		}
		p, err := s.ListEntities(context.Background(), q)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		if len(p.Errors) > 0 {
			t.Fatalf("members did not answer: %v", p.Errors)
		}
		if q.Limit > 0 && len(p.Rows) > q.Limit {
			t.Fatalf("a page of %d rows for a limit of %d", len(p.Rows), q.Limit)
		}
		all = append(all, p.Rows...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].key().compare(all[i].key()) >= 0 {
			t.Fatalf("rows out of order or twice: %+v then %+v", all[i-1].key(), all[i].key())
		}
	}
	return all
}

func rowIDs(rows []EntityRow) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// Listing reads the members' live tables and the store's index: every entity once,
// page by page, with its status and counters, the filters keep what they say, and no
// entity is activated by it. Describe tells one entity, and "never seen" of another.
func TestListAndDescribeEntities(t *testing.T) {
	tc := newTestCluster(t, 3, withSharedStateStore())
	n := tc.nodes[0]
	ctx := context.Background()
	var want []string
	for i := range 30 {
		id := fmt.Sprintf("e%02d", i)
		want = append(want, id)
		mustAsk(t, tc.nodes[i%3], "counter", id, "inc")
	}
	if _, err := ask(t, n, "counter", "e05", "fail"); err == nil {
		t.Fatal("fail did not fail")
	}
	for _, id := range []string{"e01", "e02"} {
		if ok, err := n.sharding.Passivate(ctx, "counter", id); err != nil || !ok {
			t.Fatalf("passivate %s: %v %v", id, ok, err)
		}
	}
	// An entity only the store knows (no member hosts its type).
	if err := tc.states.Save(ctx, EntityKey{Type: "other", Shard: abiShard("g1", 7), ID: "g1"}, 1, []byte("boo")); err != nil {
		t.Fatal(err)
	}
	tc.acts.mu.Lock()
	activations := len(tc.acts.log)
	tc.acts.mu.Unlock()

	all := listAll(t, n.sharding, ListQuery{Type: "counter", Limit: 7})
	if got := rowIDs(all); !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for _, r := range all {
		if r.ID == "e01" || r.ID == "e02" {
			// Its member may have forgotten it since (the idle sweep): then the
			// store's index alone tells it.
			if r.Status != StatusPassivated || !r.Stored {
				t.Errorf("row %+v: want passivated, in the store", r)
			}
			continue
		}
		wantStatus := StatusActive
		if r.Status != wantStatus || r.Type != "counter" || r.Member == "" || r.MessagesHandled != 1 || r.ActivatedAt.IsZero() || r.LastMessage.IsZero() {
			t.Errorf("row %+v: want status %s, a member, 1 message handled, times", r, wantStatus)
		}
		if r.Shard != abiShard(r.ID, defaultShardsForTest(t, n)) {
			t.Errorf("row %s in shard %d", r.ID, r.Shard)
		}
	}
	// Every type: those deployed here (with a region); another by its name.
	if every := listAll(t, n.sharding, ListQuery{Limit: 4}); len(every) != 30 {
		t.Fatalf("every type: %d rows", len(every))
	}
	other := listAll(t, n.sharding, ListQuery{Type: "other", Limit: 4})
	if len(other) != 1 || other[0].ID != "g1" || other[0].Status != StatusPassivated || !other[0].Stored || other[0].StateBytes != 3 {
		t.Fatalf("type other: %+v", other)
	}

	for _, c := range []struct {
		q    ListQuery
		want []string
	}{
		{ListQuery{Type: "counter", Status: StatusPassivated}, []string{"e01", "e02"}},
		{ListQuery{Type: "counter", Prefix: "e1", Limit: 3}, []string{"e10", "e11", "e12", "e13", "e14", "e15", "e16", "e17", "e18", "e19"}},
		{ListQuery{Type: "counter", FailedSince: time.Hour}, []string{"e05"}},
		{ListQuery{Type: "counter", Status: StatusPaused}, nil},
		{ListQuery{Type: "counter", IdleLonger: time.Hour}, nil},
		{ListQuery{Type: "counter", Version: 7}, nil},
	} {
		if got := rowIDs(listAll(t, n.sharding, c.q)); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.q, got, c.want)
		}
	}
	active := 0
	for _, m := range tc.nodes {
		active += len(listAll(t, n.sharding, ListQuery{Type: "counter", Member: m.addr(), Limit: 5}))
	}
	if active != 28 {
		t.Errorf("the members' filters found %d active entities, want 28", active)
	}

	// Bad filters and cursors: clear errors.
	p, err := n.sharding.ListEntities(ctx, ListQuery{Type: "counter", Limit: 2})
	if err != nil || p.Next == "" {
		t.Fatalf("first page: %v %q", err, p.Next)
	}
	for _, c := range []struct {
		q    ListQuery
		want string
	}{
		{ListQuery{Status: "sleeping"}, `status "sleeping": want active, passivated or paused`},
		{ListQuery{StateLarger: -1}, "negative"},
		{ListQuery{Limit: MaxListLimit + 1}, "limit"},
		{ListQuery{Type: "counter", Prefix: "e1", Cursor: p.Next}, "another query"},
		{ListQuery{Type: "counter", Cursor: "garbage!"}, "not one a listing gave"},
	} {
		if _, err := n.sharding.ListEntities(ctx, c.q); !errors.Is(err, ErrInvalidListQuery) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.q, err, c.want)
		}
	}

	d, err := tc.nodes[1].sharding.DescribeEntity(ctx, "counter", "e05")
	if err != nil || !d.Seen || d.Status != StatusActive || d.MessagesHandled != 1 || d.MessagesFailed != 1 || !strings.Contains(d.LastError, "entity says no") || d.LastFailure.IsZero() || d.JournalRecords == 0 {
		t.Fatalf("describe e05: %+v %v", d, err)
	}
	if d, err = n.sharding.DescribeEntity(ctx, "counter", "e01"); err != nil || !d.Seen || d.Status != StatusPassivated || !d.Stored || d.StateBytes == 0 && d.JournalRecords == 0 {
		t.Fatalf("describe e01: %+v %v", d, err)
	}
	if d, err = n.sharding.DescribeEntity(ctx, "other", "g1"); err != nil || !d.Seen || d.Status != StatusPassivated || d.StateBytes != 3 || d.Member != "" {
		t.Fatalf("describe other/g1: %+v %v", d, err)
	}
	if d, err = n.sharding.DescribeEntity(ctx, "counter", "nobody"); err != nil || d.Seen {
		t.Fatalf("describe counter/nobody: %+v %v", d, err)
	}

	tc.acts.mu.Lock()
	defer tc.acts.mu.Unlock()
	if len(tc.acts.log) != activations {
		t.Fatalf("listing and describing activated %v", tc.acts.log[activations:])
	}
}

func defaultShardsForTest(t *testing.T, n *testNode) int {
	t.Helper()
	st, err := n.sharding.cfg.Types.EntityType(context.Background(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	return st.NumberOfShards
}
