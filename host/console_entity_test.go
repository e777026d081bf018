package host

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// consoleLogIn logs the browser in to the console at base with token.
func consoleLogIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible("#login"),
		chromedp.SendKeys(`input[name=token]`, token), chromedp.Submit("#login"), chromedp.WaitVisible("#members")); err != nil {
		t.Fatalf("login: %v", err)
	}
}

// TestConsoleEntityPageInABrowser drives an entity's page: reached from the entities
// page, it describes the counter, answers a read-only query through its form (which
// changes nothing), lists the journal's records and reverts to one of them (the next
// query sees the reverted count), forks the entity, and follows another entity's log
// lines live as the entity prints them.
func TestConsoleEntityPageInABrowser(t *testing.T) {
	chromiumPath(t)
	nodes := startNodes(t, 2, func(c *Config) { c.API.Tokens = testTokens(t) })
	bg := context.Background()
	for _, typ := range []string{"counter", "faulty"} {
		if _, err := nodes[0].Deploy(bg, testwasm.Bytes(t, typ), sharding.TypeSettings{Name: typ, NumberOfShards: 4}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := nodes[1].Sharding().Ask(bg, "counter", "c1", []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	// The browser's time (browser) starts after the modules' compilation, which takes
	// minutes on a loaded machine.
	ctx := browser(t)
	base := "http://" + nodes[0].APIAddr()
	consoleLogIn(t, ctx, base, "admin-token-0123456789")

	// From the listing to the entity's page.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/entities?type=counter"), chromedp.WaitVisible("#entities"),
		chromedp.Click(`a[href="/ui/entities/counter/c1"]`), chromedp.WaitVisible("#describe")); err != nil {
		t.Fatalf("the entity page from the listing: %v", err)
	}
	desc := pageText(t, ctx, "#describe")
	for _, want := range []string{"status\tactive", "messages handled\t3", "journal records\t3", "member\t127.0.0.1:"} {
		if !strings.Contains(desc, want) {
			t.Errorf("the description lacks %q:\n%s", want, desc)
		}
	}

	query := func(payload string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.SetValue(`#query input[name=payload]`, payload), chromedp.Submit("#query"),
			chromedp.WaitVisible("#query-reply")); err != nil {
			t.Fatalf("query %q: %v", payload, err)
		}
		return pageText(t, ctx, "#query-reply")
	}
	if got := query("get"); got != "3" {
		t.Fatalf("query get: %q, want 3", got)
	}
	if got := query("inc"); !strings.Contains(got, `unknown query "inc"`) {
		t.Fatalf("query inc: %q, want the guest's refusal", got)
	}
	if got := query("get"); got != "3" {
		t.Fatalf("query get after a refused query: %q, want 3 (a query changes nothing)", got)
	}
	screenshot(t, ctx, "console-entity")

	// The history: three inc records; revert to the first (through its confirmation).
	hist := pageText(t, ctx, "#history")
	if n := strings.Count(hist, "inc"); n != 3 {
		t.Fatalf("the history shows %d inc records, want 3:\n%s", n, hist)
	}
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.confirm = function (m) { window.confirmed = m; return true; }`),
		chromedp.Click(`#history form[action="/ui/entities/counter/c1/revert"]:has(input[name=to][value="1"]) button`),
		chromedp.WaitVisible("#flash")); err != nil {
		t.Fatalf("revert: %v", err)
	}
	if flash := pageText(t, ctx, "#flash"); !strings.Contains(flash, "revert counter/c1 to record 1: done (record 4)") {
		t.Fatalf("after the revert: %q", flash)
	}
	if got := query("get"); got != "1" {
		t.Fatalf("query get after the revert to record 1: %q, want 1", got)
	}
	if hist := pageText(t, ctx, "#history"); !strings.Contains(hist, "revert") {
		t.Fatalf("the history lacks the revert's record:\n%s", hist)
	}
	// A fork of the entity at record 2 has the count 2.
	if err := chromedp.Do(ctx, chromedp.SendKeys(`#fork input[name=new]`, "c2"), chromedp.SendKeys(`#fork input[name=at]`, "2"),
		chromedp.Submit("#fork"), chromedp.WaitVisible("#flash")); err != nil {
		t.Fatalf("fork: %v", err)
	}
	if flash := pageText(t, ctx, "#flash"); !strings.Contains(flash, "fork counter/c1 as counter/c2: done") {
		t.Fatalf("after the fork: %q", flash)
	}
	if got := query("get"); got != "2" {
		t.Fatalf("query get of the fork at record 2: %q, want 2", got)
	}

	// Live logs: lines printed after the page opened appear on it.
	if _, err := nodes[1].Sharding().Ask(bg, "faulty", "x", []byte("print before")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/entities/faulty/x"), chromedp.WaitVisible("#logs"),
		chromedp.Poll[chromedp.Void](`document.getElementById("logs").textContent.includes("before")`)); err != nil {
		t.Fatalf("the kept log lines: %v", err)
	}
	for _, msg := range []string{"print live-one", "log warn live-two"} {
		if _, err := nodes[1].Sharding().Ask(bg, "faulty", "x", []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("logs").textContent.includes("live-two")`,
		chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("the live log lines: %v", err)
	}
	logs := pageText(t, ctx, "#logs")
	if !strings.Contains(logs, "info stdout") || !strings.Contains(logs, "live-one") || !strings.Contains(logs, "warn log") {
		t.Fatalf("the followed log lines:\n%s", logs)
	}
	screenshot(t, ctx, "console-entity-logs")

	// The charts: once a member sampled the counter's messages, its line is drawn.
	testutil.Eventually(t, time.Minute, "a sample with counter messages", func() bool {
		for _, n := range nodes {
			for _, s := range n.samples.samples() {
				for _, ts := range s.Types {
					if ts.Type == "counter" && ts.Handled > 0 {
						return true
					}
				}
			}
		}
		return false
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/charts"), chromedp.WaitVisible("#chart-rate")); err != nil {
		t.Fatalf("charts: %v", err)
	}
	for id, want := range map[string]string{"#chart-rate": "counter", "#chart-active": nodes[1].Self().Address, "#chart-shards": nodes[0].Self().Address} {
		if text := pageText(t, ctx, id); !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", id, want, text)
		}
	}
	screenshot(t, ctx, "console-charts")
	// Leave the page: its event stream ends with it.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/members"), chromedp.WaitVisible("#members")); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleEntityPageRoles: the read role sees an entity's description and may query
// it, but not its logs or history (client, as their API routes), nor actions (admin);
// a bad entity is named; an entity never seen says so.
func TestConsoleEntityPageRoles(t *testing.T) {
	nodes := startNodes(t, 1, func(c *Config) { c.API.Tokens = testTokens(t) })
	bg := context.Background()
	if _, err := nodes[0].Deploy(bg, testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter", NumberOfShards: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].Sharding().Ask(bg, "counter", "c1", []byte("inc")); err != nil {
		t.Fatal(err)
	}
	get := func(method, path, token, form string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+nodes[0].APIAddr()+path, strings.NewReader(form))
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: consoleCookie, Value: token})
		if form != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusSeeOther {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const read, client, admin = "read-token-0123456789", "client-token-0123456789", "admin-token-0123456789"
	status, page := get("GET", "/ui/entities/counter/c1", read, "")
	if status != 200 || !strings.Contains(page, `id="describe"`) || !strings.Contains(page, `id="query"`) {
		t.Fatalf("read: %d\n%s", status, page)
	}
	for _, hidden := range []string{`id="logs"`, `id="history"`, `/revert`, `/passivate`} {
		if strings.Contains(page, hidden) {
			t.Errorf("the read role's page shows %s", hidden)
		}
	}
	if status, page = get("POST", "/ui/entities/counter/c1/query", read, "payload=get"); status != 200 || !strings.Contains(page, `<pre id="query-reply" class="out">1</pre>`) {
		t.Fatalf("read's query: %d\n%s", status, page)
	}
	if status, _ = get("GET", "/ui/entities/counter/c1/logs", read, ""); status != http.StatusForbidden {
		t.Errorf("read's logs: %d, want 403", status)
	}
	if status, _ = get("POST", "/ui/entities/counter/c1/revert", read, "to=1&from=entity"); status != http.StatusForbidden {
		t.Errorf("read's revert: %d, want 403", status)
	}
	status, page = get("GET", "/ui/entities/counter/c1", client, "")
	if status != 200 || !strings.Contains(page, `id="logs"`) || !strings.Contains(page, `id="history"`) || strings.Contains(page, "/revert") {
		t.Fatalf("client: %d\n%s", status, page)
	}
	if _, page = get("GET", "/ui/entities/counter/c1", admin, ""); !strings.Contains(page, "/revert") || !strings.Contains(page, "/passivate") {
		t.Fatalf("the admin's page lacks the actions:\n%s", page)
	}
	// Bad input: each named, nothing done.
	if _, page = get("GET", "/ui/entities/counter/never", read, ""); !strings.Contains(page, "Never seen") {
		t.Errorf("an entity never seen:\n%s", page)
	}
	if _, page = get("GET", "/ui/entities/nosuch/c1", read, ""); !strings.Contains(page, `class="flash err"`) || !strings.Contains(page, "nosuch") {
		t.Errorf("an unknown type:\n%s", page)
	}
	for form, want := range map[string]string{"to=x&from=entity": "is+not+a+journal+record+number", "to=99&from=entity": "99"} {
		status, to := get("POST", "/ui/entities/counter/c1/revert", admin, form)
		if status != http.StatusSeeOther || !strings.HasPrefix(to, "/ui/entities/counter/c1?") || !strings.Contains(to, "err=1") || !strings.Contains(to, want) {
			t.Fatalf("revert %s: %d to %s, want an error naming %s", form, status, to, want)
		}
	}
	if out, err := nodes[0].Query(bg, "counter", "c1", []byte("get")); err != nil || string(out) != "1" {
		t.Fatalf("after refused reverts: %q %v, want 1", out, err)
	}
	// Pause (admin): the page offers it, the entity is then paused and offers resume.
	if status, _ = get("POST", "/ui/entities/counter/c1/pause", read, "from=entity"); status != http.StatusForbidden {
		t.Errorf("read's pause: %d, want 403", status)
	}
	if _, page = get("GET", "/ui/entities/counter/c1", admin, ""); !strings.Contains(page, `action="/ui/entities/counter/c1/pause"`) {
		t.Fatalf("the admin's page lacks pause:\n%s", page)
	}
	if status, to := get("POST", "/ui/entities/counter/c1/pause", admin, "from=entity"); status != http.StatusSeeOther || strings.Contains(to, "err=1") || !strings.Contains(to, "done") {
		t.Fatalf("pause: %d to %s", status, to)
	}
	if _, err := nodes[0].Sharding().Ask(bg, "counter", "c1", []byte("inc")); sharding.ErrorCode(err) != sharding.CodeEntityPaused {
		t.Fatalf("ask after the console's pause: %v, want entity-paused", err)
	}
	if _, page = get("GET", "/ui/entities/counter/c1", admin, ""); !strings.Contains(page, `action="/ui/entities/counter/c1/resume"`) || strings.Contains(page, `/c1/pause"`) {
		t.Fatalf("a paused entity's page offers resume, not pause:\n%s", page)
	}
	if status, to := get("POST", "/ui/entities/counter/c1/pause", admin, "from=entity"); status != http.StatusSeeOther || !strings.Contains(to, "already+paused") {
		t.Fatalf("pause again: %d to %s", status, to)
	}
	if status, to := get("POST", "/ui/entities/counter/c1/resume", admin, "from=entity"); status != http.StatusSeeOther || strings.Contains(to, "err=1") {
		t.Fatalf("resume: %d to %s", status, to)
	}
	if out, err := nodes[0].Sharding().Ask(bg, "counter", "c1", []byte("inc")); err != nil || string(out.Payload) != "2" {
		t.Fatalf("ask after the resume: %q %v, want 2", out, err)
	}
}
