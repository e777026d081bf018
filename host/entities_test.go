package host

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// GET /v1/entities lists the entities of a type, page by page, with what their members
// know (version, memory, messages), and refuses bad filters and a cursor of another
// query; GET /v1/entities/{type}/{id} describes one, or says it was never seen.
func TestEntitiesListAndDescribeAPI(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	deployOn(t, nodes[0], "abitest")
	c := client(t, nodes[0])
	const entities = 7
	for i := range entities {
		if r := c.ask("abitest", fmt.Sprintf("u%d", i), "count"); r.status != 200 {
			t.Fatalf("ask: %d %s", r.status, r.body)
		}
	}
	seen := map[string]sharding.EntityRow{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > entities {
			t.Fatal("the listing does not end")
		}
		r := c.do("GET", "/v1/entities?type=abitest&limit=3&cursor="+url.QueryEscape(cursor), nil)
		if r.status != 200 {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var p sharding.EntityPage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		for _, row := range p.Rows {
			if _, dup := seen[row.ID]; dup {
				t.Fatalf("%s listed twice", row.ID)
			}
			seen[row.ID] = row
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(seen) != entities {
		t.Fatalf("listed %d entities, want %d: %v", len(seen), entities, seen)
	}
	for id, row := range seen {
		if row.Status != sharding.StatusActive || row.ModuleVersion != 1 || row.MemoryBytes <= 0 || row.MessagesHandled != 1 || row.Member == "" {
			t.Errorf("%s: %+v", id, row)
		}
	}
	for _, bad := range []struct{ query, want string }{
		{"status=sleeping", "want active, passivated or paused"},
		{"idle_longer=soon", "not a positive duration"},
		{"state_larger=-5", "not a number of bytes"},
		{"limit=0", "limit"},
		{"colour=blue", `unknown filter "colour"`},
		{"type=abitest&prefix=x&cursor=" + url.QueryEscape(firstCursor(t, c)), "another query"},
	} {
		r := c.do("GET", "/v1/entities?"+bad.query, nil)
		if r.status != 400 || r.err.Code != sharding.CodeBadRequest || !strings.Contains(r.err.Error, bad.want) {
			t.Errorf("%s: %d %s, want 400 with %q", bad.query, r.status, r.body, bad.want)
		}
	}
	if r := c.do("GET", "/v1/entities?type=abitets", nil); r.status != 404 || !strings.Contains(r.err.Error, `did you mean "abitest"`) {
		t.Errorf("unknown type: %d %s", r.status, r.body)
	}

	r := client(t, nodes[1]).do("GET", "/v1/entities/abitest/u3", nil)
	var d sharding.EntityDescription
	if err := json.Unmarshal(r.body, &d); r.status != 200 || err != nil || !d.Seen || d.Status != sharding.StatusActive || d.Member != seen["u3"].Member || d.MessagesHandled != 1 || d.ActivatedAt.IsZero() || d.JournalRecords < 1 {
		t.Fatalf("describe u3: %d %s", r.status, r.body)
	}
	r = c.do("GET", "/v1/entities/abitest/nobody", nil)
	if err := json.Unmarshal(r.body, &d); r.status != 200 || err != nil || d.Seen {
		t.Fatalf("describe nobody: %d %s", r.status, r.body)
	}
}

func firstCursor(t *testing.T, c apiClient) string {
	t.Helper()
	r := c.do("GET", "/v1/entities?type=abitest&limit=1", nil)
	var p sharding.EntityPage
	if err := json.Unmarshal(r.body, &p); err != nil || p.Next == "" {
		t.Fatalf("first page: %d %s", r.status, r.body)
	}
	return p.Next
}
