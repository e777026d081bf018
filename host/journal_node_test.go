package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// TestJournalKeepsWhatAKilledMemberAcknowledged: a wasm entity (abitest) with the
// default settings on the third of three members handles counts, a random read, a tell
// and a timer; the member is killed (no leave, no save). The entity comes back on
// another member from its journal: its count, the random bytes it drew (the replay
// gives the recorded ones), its timer (re-armed from the record), and the tell went
// out once. Its history lists every message.
func TestJournalKeepsWhatAKilledMemberAcknowledged(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	ctx := context.Background()
	if _, err := nodes[0].Deploy(ctx, testwasm.Bytes(t, "abitest"), sharding.TypeSettings{Name: "abitest"}); err != nil {
		t.Fatal(err)
	}
	if info, _ := nodes[0].catalog.get("abitest"); info.Settings().Checkpoint != "" && info.Settings().Checkpoint != sharding.CheckpointJournal {
		t.Fatalf("the default checkpoint policy is %q", info.Settings().Checkpoint)
	}
	id := entityOn(t, nodes[0], nodes[2], "abitest", "count")   // count 1
	other := entityOn(t, nodes[0], nodes[1], "abitest", "echo") // lives on: the tell's target
	ask := func(msg string) string {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := nodes[0].Sharding().Ask(actx, "abitest", id, []byte(msg))
		if err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		return string(r.Payload)
	}
	ask("count")
	if got := ask("count"); got != "3" {
		t.Fatalf("count %s, want 3", got)
	}
	ask("random 16")
	// The tell makes the other entity start a timer that fires at once: its events
	// then hold the firing, once per tell.
	ask("tell abitest/" + other + " timer x 0 0 hello")
	ask("timer t1 600000 0 ping")
	testutil.EventuallyNil(t, 30*time.Second, "the tell delivered", func() error {
		r, err := nodes[0].Sharding().Ask(ctx, "abitest", other, []byte("events"))
		if err != nil || !strings.Contains(string(r.Payload), "1 x hello") {
			return fmt.Errorf("events of %s: %q %v", other, r.Payload, err)
		}
		return nil
	})

	if err := nodes[2].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	// The entity answers again once its shard has a new home.
	testutil.EventuallyNil(t, 60*time.Second, "the entity served after the kill", func() error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := nodes[0].Sharding().Ask(actx, "abitest", id, []byte("echo up"))
		if err != nil {
			return err
		}
		if r.Node == nodes[2].Self().Address {
			return fmt.Errorf("answered by the killed member")
		}
		return nil
	})
	if got := ask("count"); got != "4" {
		t.Fatalf("count after the kill %s, want 4 (three acknowledged before it)", got)
	}
	if got := ask("cancel t1"); got != "1" {
		t.Fatalf("the timer set before the kill: cancel says %s, want 1 (running)", got)
	}
	// The tell went out once: the replay answered it from the record.
	r, err := nodes[0].Sharding().Ask(ctx, "abitest", other, []byte("events"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(r.Payload), "1 x hello"); n != 1 {
		t.Fatalf("the tell arrived %d times, want once: %q", n, r.Payload)
	}
	page, err := nodes[1].History(ctx, "abitest", id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k, rec := range page.Records {
		if rec.Seq != uint64(k+1) {
			t.Fatalf("history record %d has seq %d", k, rec.Seq)
		}
		if !strings.HasPrefix(rec.Preview, "echo") { // the probes: entityOn's, and one or more after the kill
			got = append(got, rec.Preview)
		}
	}
	want := []string{"count", "count", "count", "random 16", "tell abitest/" + other + " timer x 0 0 hello", "timer t1 600000 0 ping",
		"count", "cancel t1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history %q, want %q", got, want)
	}
}

// The API's Idempotency-Key: a retry gets the first reply; a key over the cap is
// refused, naming it, and changes nothing.
func TestAPIIdempotencyKey(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/abitest", testwasm.Bytes(t, "abitest")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	keyed := func(key string) apiResult {
		t.Helper()
		req, err := http.NewRequest("POST", c.base+"/v1/ask?type=abitest&id=k", strings.NewReader("count"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(IdempotencyKeyHeader, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res := apiResult{status: resp.StatusCode, body: b}
		if resp.StatusCode >= 400 {
			json.Unmarshal(b, &res.err)
		}
		return res
	}
	for range 3 {
		if r := keyed("once"); r.status != 200 || string(r.body) != "1" {
			t.Fatalf("count with a key: %d %s, want 1", r.status, r.body)
		}
	}
	r := keyed(strings.Repeat("k", 257))
	if r.status != 400 || r.err.Code != "bad-request" || !strings.Contains(r.err.Error, "at most 256") {
		t.Fatalf("a key of 257 bytes: %d %+v", r.status, r.err)
	}
	if r := c.ask("abitest", "k", "count"); r.status != 200 || string(r.body) != "2" {
		t.Fatalf("count without a key: %d %s, want 2", r.status, r.body)
	}
}

// A tell that keeps trapping pauses its wasm entity: asks get 503 entity-paused until
// the message is skipped (shardhost skip), after which the entity answers again.
func TestAPIPausedEntityResumesAfterASkip(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	if r := c.ask("faulty", "x", "echo ok"); r.status != 200 {
		t.Fatalf("ok: %d %s", r.status, r.body)
	}
	if r := c.tell("faulty", "x", "trap"); r.status != 202 {
		t.Fatalf("tell trap: %d %s", r.status, r.body)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the entity paused", func() error {
		if r := c.ask("faulty", "x", "echo ok"); r.status != 503 || r.err.Code != "entity-paused" {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	if r := c.do("POST", "/v1/entities/faulty/x/resume", nil); r.status != 200 || !strings.Contains(string(r.body), `"resumed"`) {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	testutil.EventuallyNil(t, 30*time.Second, "paused again", func() error {
		if r := c.ask("faulty", "x", "echo ok"); r.status != 503 || r.err.Code != "entity-paused" {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	if r := c.do("POST", "/v1/entities/faulty/x/skip", nil); r.status != 200 || !strings.Contains(string(r.body), `"skipped"`) {
		t.Fatalf("skip: %d %s", r.status, r.body)
	}
	if r := c.ask("faulty", "x", "echo ok"); r.status != 200 {
		t.Fatalf("ok after the skip: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/entities/faulty/x/skip", nil); r.status != 200 || !strings.Contains(string(r.body), `"not-paused"`) {
		t.Fatalf("skip of an entity not paused: %d %s", r.status, r.body)
	}
	// The operator's pause: asks refused, tells queued, until a resume.
	if r := c.do("POST", "/v1/entities/faulty/x/pause", nil); r.status != 200 || !strings.Contains(string(r.body), `"paused"`) {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/entities/faulty/x/pause", nil); r.status != 200 || !strings.Contains(string(r.body), `"already-paused"`) {
		t.Fatalf("pause of a paused entity: %d %s", r.status, r.body)
	}
	if r := c.ask("faulty", "x", "echo ok"); r.status != 503 || r.err.Code != "entity-paused" || !strings.Contains(r.err.Error, "paused by an operator") {
		t.Fatalf("ask of an entity paused by the operator: %d %s", r.status, r.body)
	}
	if r := c.tell("faulty", "x", "echo queued"); r.status != 202 {
		t.Fatalf("tell to a paused entity: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/entities/faulty/x/resume", nil); r.status != 200 || !strings.Contains(string(r.body), `"resumed"`) {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if r := c.ask("faulty", "x", "echo ok"); r.status != 200 {
		t.Fatalf("ok after the resume: %d %s", r.status, r.body)
	}
	if r := c.do("POST", "/v1/entities/nosuch/x/pause", nil); r.status != 404 {
		t.Fatalf("pause of an unknown type: %d %s", r.status, r.body)
	}
}

func TestParseHistory(t *testing.T) {
	for _, c := range []struct {
		in      string
		records int
		age     time.Duration
	}{{"1000", 1000, 0}, {"0", -1, 0}, {"none", -1, 0}, {"90m", 0, 90 * time.Minute}} {
		n, d, err := parseHistory(c.in)
		if err != nil || n != c.records || d != c.age {
			t.Errorf("%q: %d records, %v, %v; want %d, %v", c.in, n, d, err, c.records, c.age)
		}
	}
	for _, bad := range []string{"", "-5", "-1h", "lots", "0s"} {
		if _, _, err := parseHistory(bad); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "neither a number of records") {
			t.Errorf("%q: %v, want ErrBadRequest", bad, err)
		}
	}
}
