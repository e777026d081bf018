package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shardhost/shardhost/internal/telemetry"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// chromiumPath returns the path of Debian's chromium (or another Chrome), or skips the
// test without one (fails it with SHARDHOST_REQUIRE_CHROMIUM=1, as CI sets): a test
// calls it before a slow setup that browser follows.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SHARDHOST_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is required (SHARDHOST_REQUIRE_CHROMIUM=1): apt-get install chromium")
	}
	t.Skip("no chromium: the console's browser test is skipped (apt-get install chromium)")
	return ""
}

// browser returns a chromedp context on a headless Debian chromium, or skips the test
// without one (chromiumPath). The context ends 8 minutes after this call: a deploy
// through a form compiles the module, which takes minutes on a loaded machine.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 8*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// screenshot saves the page as NAME.png in $SHARDHOST_SCREENSHOTS, or the test's
// temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SHARDHOST_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pageText returns the text of the element sel selects.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	text, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return text
}

// TestConsoleInABrowser drives the web console in a real browser: it logs in with the
// API's admin token, loads every page, deploys a module through the form, sends asks
// through the API, and finds the new entities on the shards page and their messages on
// the activity page; a paused entity on the entities page, resumed from there.
func TestConsoleInABrowser(t *testing.T) {
	ctx := browser(t)
	m, err := telemetry.NewMetrics(context.Background(), "console-test")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	nodes := startNodes(t, 2, func(c *Config) {
		c.API.Tokens = testTokens(t)
		if c.MeterProvider == nil {
			c.MeterProvider, c.MetricsHandler = m.Provider, m.Handler
		}
	})
	base := "http://" + nodes[0].APIAddr()
	// Without a token the console sends the browser to its login page, from /ui/ (the
	// trailing slash a person types) too, and offers no logging out to a visitor.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#login")); err != nil {
		t.Fatalf("/ui/ without a token: %v", err)
	}
	if logout(t, ctx) {
		t.Fatal("the login page offers a visitor who is not logged in a Log out button")
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`input[name=token]`, "admin-token-0123456789"),
		chromedp.Submit("#login"),
		chromedp.WaitVisible("#members"),
	); err != nil {
		t.Fatalf("login: %v", err)
	}
	if !logout(t, ctx) {
		t.Fatal("a logged-in page has no Log out button")
	}
	// Logged in, /ui/ is the console.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#members")); err != nil {
		t.Fatalf("/ui/ logged in: %v", err)
	}
	text := pageText(t, ctx, "#members")
	for _, n := range nodes {
		if !strings.Contains(text, n.Self().Address) {
			t.Errorf("the members page lacks %s:\n%s", n.Self().Address, text)
		}
	}
	screenshot(t, ctx, "console-members")

	// Deploy through the form.
	module := filepath.Join(t.TempDir(), "abitest.wasm")
	if err := os.WriteFile(module, testwasm.Bytes(t, "abitest"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/types"),
		chromedp.WaitVisible("#deploy"),
		chromedp.SendKeys(`input[name=type]`, "abitest"),
		chromedp.SetUploadFiles(`input[name=module]`, []string{module}),
		chromedp.Submit("#deploy"),
		chromedp.WaitVisible("#flash"),
	); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	flash, text := pageText(t, ctx, "#flash"), pageText(t, ctx, "#types")
	if !strings.Contains(flash, "deployed abitest version 1") || !strings.Contains(text, "abitest") {
		t.Fatalf("after the deploy: flash %q, types %q", flash, text)
	}
	screenshot(t, ctx, "console-types")

	// Asks through the API, then the shards page shows the new entities.
	const entities = 12
	for i := range entities {
		if status, e := authRequest(t, nodes[1], "POST", askPath("abitest", "web-"+strconv.Itoa(i)), "client-token-0123456789", []byte("count")); status != 200 {
			t.Fatalf("ask: %d %+v", status, e)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/shards"), chromedp.WaitVisible("table.shards")); err != nil {
		t.Fatalf("shards: %v", err)
	}
	text = pageText(t, ctx, "main")
	total := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "abitest" {
			n, _ := strconv.Atoi(f[2])
			total += n
		}
	}
	if total != entities {
		t.Errorf("the shards page shows %d active abitest entities, want %d:\n%s", total, entities, text)
	}
	screenshot(t, ctx, "console-shards")

	// A tell that traps every time pauses its entity (after its retries); the entities
	// page lists it as paused, with the actions that resume it.
	tell := "/v1/tell?type=abitest&id=poison"
	if status, e := authRequest(t, nodes[1], "POST", tell, "client-token-0123456789", []byte("trap")); status != 202 && status != 200 {
		t.Fatalf("tell: %d %+v", status, e)
	}
	testutil.Eventually(t, 2*time.Minute, "abitest/poison paused", func() bool {
		page, err := nodes[0].Sharding().ListEntities(context.Background(), sharding.ListQuery{Type: "abitest", Status: sharding.StatusPaused})
		return err == nil && len(page.Rows) == 1 && page.Rows[0].ID == "poison"
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/entities?type=abitest&status=paused"), chromedp.WaitVisible("#entities")); err != nil {
		t.Fatalf("entities: %v", err)
	}
	text = pageText(t, ctx, "#entities")
	if !strings.Contains(text, "abitest/poison") || !strings.Contains(text, "paused") || strings.Contains(text, "web-0") {
		t.Fatalf("the paused entities page:\n%s", text)
	}
	screenshot(t, ctx, "console-entities")
	if err := chromedp.Do(ctx, chromedp.Click(`form[action="/ui/entities/abitest/poison/resume"] button`), chromedp.WaitVisible("#flash")); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if flash := pageText(t, ctx, "#flash"); !strings.Contains(flash, "resume abitest/poison: done") {
		t.Fatalf("after resume: %q", flash)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/entities?type=abitest&status=active"), chromedp.WaitVisible("#entities")); err != nil {
		t.Fatalf("entities: %v", err)
	}
	if text = pageText(t, ctx, "#entities"); !strings.Contains(text, "abitest/web-0") {
		t.Fatalf("the active entities page lacks abitest/web-0:\n%s", text)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/activity"), chromedp.WaitVisible("#events")); err != nil {
		t.Fatalf("activity: %v", err)
	}
	text = pageText(t, ctx, "main")
	if !strings.Contains(text, "abitest") || !strings.Contains(text, "entity type deployed") {
		t.Errorf("the activity page shows no abitest messages or no deploy event:\n%s", text)
	}
	screenshot(t, ctx, "console-activity")
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/data"), chromedp.WaitVisible("#data")); err != nil {
		t.Fatalf("data: %v", err)
	}
	screenshot(t, ctx, "console-data")

	// Logging out leads to the login page, which has no Log out button again.
	if err := chromedp.Do(ctx, chromedp.Click(`form[action="/ui/logout"] button`), chromedp.WaitVisible("#login")); err != nil {
		t.Fatalf("log out: %v", err)
	}
	if logout(t, ctx) {
		t.Fatal("the login page after logging out offers Log out")
	}
}

// logout reports whether the page shows the Log out button.
func logout(t *testing.T, ctx context.Context) bool {
	t.Helper()
	present, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('form[action="/ui/logout"]') !== null`))
	if err != nil {
		t.Fatalf("looking for Log out: %v", err)
	}
	return present
}
