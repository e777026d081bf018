package host

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

func TestParseDeliverAt(t *testing.T) {
	for in, want := range map[string]int64{
		"1700000000123":               1700000000123,
		"0":                           0,
		"2026-11-28T12:00:00Z":        time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixMilli(),
		"2026-11-28T13:00:00.5+01:00": time.Date(2026, 11, 28, 12, 0, 0, 5e8, time.UTC).UnixMilli(),
	} {
		if got, err := ParseDeliverAt(in); err != nil || got != want {
			t.Errorf("ParseDeliverAt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "soon", "-5", "2026-11-28", "1969-01-01T00:00:00Z", "99999999999999999999"} {
		if _, err := ParseDeliverAt(bad); err == nil || !strings.Contains(err.Error(), "deliver_at") {
			t.Errorf("ParseDeliverAt(%q) = %v, want an error naming deliver_at", bad, err)
		}
	}
}

// Through the API: a tell with deliver_at waits in the store (listed, not among the
// entity's reminders) and is cancelled by its ID; one due in the past is delivered at
// once and the reply says so; bad input is refused with a clear error and changes
// nothing.
func TestAPIScheduledTell(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	nodes := startNodes(t, 2, nil)
	c := client(t, nodes[1])
	if r := c.do("POST", "/v1/types/counter", testwasm.Bytes(t, "counter")); r.status != 200 {
		t.Fatalf("deploy counter: %d %s", r.status, r.body)
	}
	later := time.Now().Add(time.Hour).UnixMilli()
	r := c.do("POST", "/v1/tell?type=counter&id=a&deliver_at="+strconv.FormatInt(later, 10), []byte("inc"))
	var res ScheduledTellResult
	if r.status != 202 || json.Unmarshal(r.body, &res) != nil || res.Status != "scheduled" || res.PastDue ||
		!strings.HasPrefix(res.ID, "sm-") || res.DeliverAtUnixMS != later || res.Entity != "counter/a" {
		t.Fatalf("scheduled tell: %d %s", r.status, r.body)
	}
	list := func(query string) ScheduledList {
		t.Helper()
		r := c.do("GET", "/v1/scheduled"+query, nil)
		var l ScheduledList
		if r.status != 200 || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("GET /v1/scheduled%s: %d %s", query, r.status, r.body)
		}
		return l
	}
	for _, q := range []string{"", "?type=counter", "?type=counter&id=a"} {
		if l := list(q); len(l.Scheduled) != 1 || l.Scheduled[0].ID != res.ID || string(l.Scheduled[0].Payload) != "inc" || l.More {
			t.Fatalf("list%s: %+v, want %s", q, l, res.ID)
		}
	}
	if l := list("?type=counter&id=b"); len(l.Scheduled) != 0 {
		t.Fatalf("another entity's list: %+v", l)
	}
	var own EntityReminders
	if r := c.do("GET", "/v1/entities/counter/a/reminders", nil); r.status != 200 || json.Unmarshal(r.body, &own) != nil || len(own.Reminders) != 0 {
		t.Fatalf("the entity's own reminders: %d %s, want none", r.status, r.body)
	}
	path := "/v1/scheduled/" + url.PathEscape(res.ID)
	var gone ScheduledCancelResult
	if r := c.do("DELETE", path, nil); r.status != 200 || json.Unmarshal(r.body, &gone) != nil || gone.Status != "cancelled" ||
		gone.Scheduled.ID != res.ID || gone.Scheduled.DeliverAtUnixMS != later {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r := c.do("DELETE", path, nil); r.status != 404 || r.err.Code != sharding.CodeNotFound || !strings.Contains(r.err.Error, res.ID) {
		t.Fatalf("cancel again: %d %s, want 404 not-found naming the ID", r.status, r.body)
	}
	if l := list(""); len(l.Scheduled) != 0 {
		t.Fatalf("after the cancel: %+v", l)
	}

	// Due an hour ago: delivered at once, and the reply says so.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	r = c.do("POST", "/v1/tell?type=counter&id=a&deliver_at="+url.QueryEscape(past), []byte("inc"))
	res = ScheduledTellResult{}
	if r.status != 202 || json.Unmarshal(r.body, &res) != nil || !res.PastDue || !strings.Contains(res.Note, "delivered at once") {
		t.Fatalf("a tell due in the past: %d %s", r.status, r.body)
	}
	get := func() string {
		r := c.do("POST", "/v1/ask?type=counter&id=a", []byte("get"))
		if r.status != 200 {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	testutil.Eventually(t, 30*time.Second, "the overdue message", func() bool { return get() == "1" })
	testutil.Eventually(t, 30*time.Second, "its deletion", func() bool { return len(list("").Scheduled) == 0 })

	// Bad input: each refused, nothing kept.
	big := make([]byte, sharding.MaxScheduledPayload+1)
	for _, b := range []struct {
		method, path string
		body         []byte
		status       int
		code, text   string
	}{
		{"POST", "/v1/tell?type=counter&id=a&deliver_at=soon", nil, 400, "bad-request", "neither RFC 3339"},
		{"POST", "/v1/tell?type=counter&id=a&deliver_at=1&deliver_in=1s", nil, 400, "bad-request", "together"},
		{"POST", "/v1/tell?type=counter&id=a&deliver_in=-1s", nil, 400, "bad-request", "deliver_in"},
		{"POST", "/v1/tell?type=counter&id=a&deliver_in=1h", big, 400, "bad-request", "at most 65536"},
		{"POST", "/v1/tell?type=nosuch&id=a&deliver_in=1h", nil, 404, "unknown-entity-type", "nosuch"},
		{"DELETE", "/v1/scheduled/sm-nonsense", nil, 400, "bad-request", "malformed"},
		{"GET", "/v1/scheduled?id=a", nil, 400, "bad-request", "id without type"},
		{"GET", "/v1/scheduled?type=counter&limit=0", nil, 400, "bad-request", "limit"},
		{"GET", "/v1/scheduled?type=nosuch", nil, 404, "unknown-entity-type", "nosuch"},
	} {
		r := c.do(b.method, b.path, b.body)
		if r.status != b.status || r.err.Code != b.code || !strings.Contains(r.err.Error, b.text) {
			t.Errorf("%s %s: %d %s, want %d %s naming %q", b.method, b.path, r.status, r.body, b.status, b.code, b.text)
		}
	}
	if l := list(""); len(l.Scheduled) != 0 {
		t.Fatalf("after bad input: %+v", l)
	}
	if got := get(); got != "1" {
		t.Fatalf("count after bad input: %s, want 1", got)
	}
}
