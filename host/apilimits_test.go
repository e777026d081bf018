package host

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/sharding"
)

// TestAPIRequestCap: past MaxConcurrentRequests requests in progress, a request is
// answered 503 with Retry-After at once, the probes still answer, and once the request
// in progress ends the next one is served.
func TestAPIRequestCap(t *testing.T) {
	n := startNode(t, nil, func(c *Config) { c.API.MaxConcurrentRequests = 1 })
	// A deploy whose body never ends holds the only slot while its handler reads it.
	var feed *io.PipeWriter
	var held chan int
	hold := func() {
		var body *io.PipeReader
		body, feed = io.Pipe()
		held = make(chan int, 1)
		go func(held chan int) {
			req, _ := http.NewRequest("POST", "http://"+n.APIAddr()+"/v1/types/slow", body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}(held)
		feed.Write([]byte("\x00asm"))
	}
	hold()
	c := client(t, n)
	testutil.EventuallyNil(t, 15*time.Second, "a second request refused with 503", func() error {
		select {
		case s := <-held:
			// The probe below took the slot first (a loaded machine) and the deploy
			// was refused: hold the slot again.
			hold()
			return fmt.Errorf("the deploy meant to hold the slot ended first: %d", s)
		default:
		}
		// A cheap route: a probe that took the slot gives it back soon.
		req, _ := http.NewRequest("GET", "http://"+n.APIAddr()+"/v1/members", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 503 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		if resp.Header.Get("Retry-After") != "1" {
			t.Errorf("503 with Retry-After %q", resp.Header.Get("Retry-After"))
		}
		return nil
	})
	if r := c.do("GET", "/v1/members", nil); r.status != 503 || r.err.Code != sharding.CodeOverloaded {
		t.Errorf("over the cap: %d %+v", r.status, r.err)
	}
	for _, p := range []string{"/alive", "/v1/health"} {
		if r := c.do("GET", p, nil); r.status != 200 {
			t.Errorf("GET %s over the cap: %d", p, r.status)
		}
	}
	feed.Close() // the deploy ends (an invalid module) and frees its slot
	if s := <-held; s != 400 {
		t.Errorf("the held deploy: %d, want 400", s)
	}
	if r := c.do("GET", "/v1/members", nil); r.status != 200 {
		t.Errorf("after the slot is free: %d", r.status)
	}
}

// TestAPIInputLimits: an entity ID over maxEntityIDLength or not UTF-8, a bad type name
// and a query over maxQueryLength are refused with clear errors, and the node goes on.
func TestAPIInputLimits(t *testing.T) {
	n := startNode(t, nil, nil)
	deployOn(t, n, "abitest")
	c := client(t, n)
	long := strings.Repeat("x", maxEntityIDLength+1)
	for _, tc := range []struct {
		path   string
		status int
		text   string
	}{
		{"/v1/ask?type=abitest&id=" + long, 400, "over the cap of 512"},
		{"/v1/tell?type=abitest&id=" + long, 400, "over the cap of 512"},
		{"/v1/ask?type=abitest&id=%FF%FE", 400, "not UTF-8"},
		{"/v1/ask?type=" + url.QueryEscape("bad type!") + "&id=a", 400, "entity type name"},
		{"/v1/ask?type=" + strings.Repeat("t", 65) + "&id=a", 400, "entity type name"},
		{"/v1/ask?type=abitest&id=a&pad=" + strings.Repeat("p", maxQueryLength), 414, "query has"},
		{"/v1/types/" + strings.Repeat("t", 65), 400, "entity type name"},
	} {
		r := c.do("POST", tc.path, []byte("count"))
		if r.status != tc.status || !strings.Contains(r.err.Error, tc.text) {
			t.Errorf("POST %.60s...: %d %+v, want %d with %q", tc.path, r.status, r.err, tc.status, tc.text)
		}
	}
	if r := c.ask("abitest", strings.Repeat("y", maxEntityIDLength), "count"); r.status != 200 {
		t.Errorf("an ID of exactly the cap: %d %+v", r.status, r.err)
	}
	// A header block over MaxHeaderBytes: 431 from the server.
	req, _ := http.NewRequest("GET", "http://"+n.APIAddr()+"/v1/types", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 80<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("80 KiB of headers: %d", resp.StatusCode)
	}
	if r := c.ask("abitest", "after", "count"); r.status != 200 {
		t.Errorf("the node after bad requests: %d %+v", r.status, r.err)
	}
}
