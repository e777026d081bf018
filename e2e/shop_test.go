package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// shopCart is the shop's reply for a cart (examples/app/shop).
type shopCart struct {
	Order      string   `json:"order"`
	ID         string   `json:"cart"`
	Items      []string `json:"items"`
	TotalCents int      `json:"total_cents"`
	Error      string   `json:"error"`
}

// startShop builds and starts the example shop against the members' APIs, and waits
// until it answers. It is killed at the test's end.
func startShop(t *testing.T, apis []string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shop")
	build := exec.Command("go", "build", "-o", bin, "./examples/app/shop")
	build.Dir = testwasm.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the shop: %v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	cmd := exec.Command(bin, "--listen", addr, "--api", strings.Join(apis, ","), "--retries", "60", "--max-backoff", "2s")
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("log of the shop:\n%s", log)
		}
	})
	testutil.EventuallyNil(t, 30*time.Second, "the shop to answer", func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the shop exited: %v\n%s", err, log)
		default:
		}
		resp, err := http.Get("http://" + addr + "/products")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return addr
}

// shopCall sends one request to the shop and decodes its reply.
func shopCall(t *testing.T, hc *http.Client, method, url, body string) (int, shopCart) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var c shopCart
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s %s: %d %q is not the shop's JSON", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, c
}

// TestShopOverTheClientLibrary runs the example shop (examples/app/shop) against three
// members with the cart entity, deployed with its HTTP route: carts are filled, viewed
// and checked out through the shop, which calls the carts with the client library, and a
// cart the shop filled is read through the route on every member. Then the member the
// shop talks to first is SIGKILLed, and every cart, wherever it was hosted, is still
// viewed and checked out through the shop: the client library sends each message again,
// with its idempotency key, through the other members until the dead member's shards
// have moved. No request to the shop fails.
func TestShopOverTheClientLibrary(t *testing.T) {
	hosts := startCluster(t, 3, fast...)
	if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", "cart", "--http-route", "/shop/{id}/...", testwasm.RustPath(t, "cart")); !ok {
		t.Fatalf("deploy cart: %s%s", out, errText)
	}
	shop := "http://" + startShop(t, []string{hosts[0].api, hosts[1].api, hosts[2].api})
	hc := &http.Client{Timeout: 3 * time.Minute}

	for _, item := range []string{"apple", "pear", "apple"} {
		if status, c := shopCall(t, hc, "POST", shop+"/carts/alice/items", item); status != 200 {
			t.Fatalf("add %s: %d %+v", item, status, c)
		}
	}
	if status, c := shopCall(t, hc, "GET", shop+"/carts/alice", ""); status != 200 || !slices.Equal(c.Items, []string{"apple", "pear"}) || c.TotalCents != 125 {
		t.Fatalf("view alice: %d %+v, want apple and pear for 125 cents", status, c)
	}
	// The cart's own HTTP route, served by every member, shows what the shop put in it.
	for _, h := range hosts {
		if status, body, _ := routeRequest(t, h, "GET", "/shop/alice/", ""); status != 200 || body != `["apple","pear"]` {
			t.Fatalf("GET /shop/alice/ via %s: %d %s, want the shop's apple and pear", h.api, status, body)
		}
	}
	if status, c := shopCall(t, hc, "POST", shop+"/carts/alice/items", "caviar"); status != 400 || !strings.Contains(c.Error, `no product "caviar"`) {
		t.Fatalf("add an unknown product: %d %+v, want 400", status, c)
	}
	if status, c := shopCall(t, hc, "DELETE", shop+"/carts/alice/items/pear", ""); status != 200 || !slices.Equal(c.Items, []string{"apple"}) {
		t.Fatalf("remove pear: %d %+v", status, c)
	}
	status, order := shopCall(t, hc, "POST", shop+"/carts/alice/checkout", "")
	if status != 200 || order.Order == "" || !slices.Equal(order.Items, []string{"apple"}) || order.TotalCents != 50 {
		t.Fatalf("checkout alice: %d %+v, want an order of an apple for 50 cents", status, order)
	}
	if status, c := shopCall(t, hc, "GET", shop+"/carts/alice", ""); status != 200 || len(c.Items) != 0 {
		t.Fatalf("alice after the checkout: %d %+v, want empty", status, c)
	}
	if status, c := shopCall(t, hc, "POST", shop+"/carts/alice/checkout", ""); status != 409 {
		t.Fatalf("checkout of an empty cart: %d %+v, want 409", status, c)
	}

	// Carts on every member, each holding bread and tea: at least 12, and at least 3
	// on the member to be killed (hosts[0]), where the shop's first endpoint is.
	lc, err := client.New([]string{hosts[1].api})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	onVictim := 0
	for i := 0; len(ids) < 12 || onVictim < 3; i++ {
		if i == 200 {
			t.Fatalf("only %d of %d carts on %s", onVictim, i, hosts[0].bind)
		}
		id := "c" + strconv.Itoa(i)
		for _, item := range []string{"bread", "tea"} {
			if status, c := shopCall(t, hc, "POST", shop+"/carts/"+id+"/items", item); status != 200 {
				t.Fatalf("add %s to %s: %d %+v", item, id, status, c)
			}
		}
		d, err := lc.Describe(context.Background(), "cart", id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Member == hosts[0].bind {
			onVictim++
		}
		ids = append(ids, id)
	}

	hosts[0].cmd.Process.Signal(syscall.SIGKILL)
	err = <-hosts[0].done
	hosts[0].done <- err
	for _, id := range ids {
		status, c := shopCall(t, hc, "GET", shop+"/carts/"+id, "")
		if status != 200 || !slices.Equal(c.Items, []string{"bread", "tea"}) || c.TotalCents != 650 {
			t.Fatalf("view %s after a member was killed: %d %+v, want bread and tea for 650 cents", id, status, c)
		}
		status, c = shopCall(t, hc, "POST", shop+"/carts/"+id+"/checkout", "")
		if status != 200 || !slices.Equal(c.Items, []string{"bread", "tea"}) || c.TotalCents != 650 {
			t.Fatalf("checkout %s after a member was killed: %d %+v", id, status, c)
		}
		if status, c := shopCall(t, hc, "GET", shop+"/carts/"+id, ""); status != 200 || len(c.Items) != 0 {
			t.Fatalf("%s after its checkout: %d %+v, want empty", id, status, c)
		}
	}
}
