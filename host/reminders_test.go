package host

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// A wasm guest sets a durable reminder, is passivated, and the reminder activates it
// again and delivers its payload with its due time (abi/SPEC.md, "v1: reminders"); the
// built-in replicated store keeps the reminder. The Go SDK built by Go and by TinyGo,
// and the Rust SDK.
func TestReminderWakesAPassivatedWasmEntity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	forEachAbitest(t, reminderWakesAPassivatedWasmEntity)
}

func reminderWakesAPassivatedWasmEntity(t *testing.T, wasm []byte) {
	nodes := startNodes(t, 2, nil)
	ctx := context.Background()
	const typ = "remind"
	if _, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: typ, NumberOfShards: 10}); err != nil {
		t.Fatal(err)
	}
	c := &conformance{t: t, nodes: nodes}
	before := time.Now().UnixMilli()
	c.want(typ, "r", "remind wake 500 0 hello", "ok")
	// Under the journal the reminder is stored once the message's record is durable.
	line := c.eventually(typ, "r", "reminders", func(s string) bool { return strings.HasPrefix(s, "wake ") })
	f := strings.Fields(line)
	due, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || due < before+500 || f[2] != "0" || f[3] != "hello" {
		t.Fatalf("reminders: %q, want wake due 500 ms after %d, no interval, hello", line, before)
	}
	if ok, err := nodes[0].Sharding().Passivate(ctx, typ, "r"); err != nil || !ok {
		t.Fatalf("passivate: %v %v", ok, err)
	}
	// Fired, then deleted from the store (a one-shot), with no message asking for it.
	testutil.EventuallyNil(t, 30*time.Second, "the one-shot reminder's deletion", func() error {
		rs, err := nodes[1].Sharding().Reminders(ctx, typ, "r")
		if err == nil && len(rs) > 0 {
			return fmt.Errorf("still %+v", rs)
		}
		return err
	})
	events := c.eventually(typ, "r", "events", func(s string) bool { return s != "" })
	want := "10 wake hello due=" + f[1]
	if events != want {
		t.Fatalf("events %q, want %q", events, want)
	}
	c.want(typ, "r", "hooks", "activations=2 passivations=1")

	// Bad input: a clear error, nothing set.
	c.wantErr(typ, "r", "remind fast 0 999 x", sharding.CodeEntityError, "code 7: sharding: invalid reminder: an interval of 999 ms (at least 1000)")
	c.wantErr(typ, "r", "remind "+strings.Repeat("n", 129)+" 0 0 x", sharding.CodeEntityError, "code 7: sharding: invalid reminder: a name of 129 bytes (at most 128)")
	c.want(typ, "r", "unremind nothing", "0")
	c.want(typ, "r", "reminders", "")

	// An interval reminder set and cancelled in one message: nothing stays.
	c.want(typ, "r", "remind tick 60000 1000 t", "ok")
	c.eventually(typ, "r", "reminders", func(s string) bool { return regexp.MustCompile(`^tick \d+ 1000 t$`).MatchString(s) })
	c.want(typ, "r", "unremind tick", "1")
	c.eventually(typ, "r", "reminders", func(s string) bool { return s == "" })
}

// A scheduled message due in the past is delivered at once with its due time, which the
// guest reads (reminder_due; the Go SDK's ScheduledDue, the Rust SDK's scheduled_due) to
// learn how late it came; an ordinary message from outside has none.
func TestScheduledMessageGivesTheGuestItsDueTime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	forEachAbitest(t, func(t *testing.T, wasm []byte) {
		nodes := startNodes(t, 2, nil)
		ctx := context.Background()
		const typ = "sched"
		if _, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: typ, NumberOfShards: 10}); err != nil {
			t.Fatal(err)
		}
		cf := &conformance{t: t, nodes: nodes}
		due := time.Now().Add(-time.Hour).UnixMilli()
		if _, _, err := nodes[1].Sharding().Schedule(ctx, typ, "s", due, []byte("late one"), ""); err != nil {
			t.Fatal(err)
		}
		events := cf.eventually(typ, "s", "events", func(s string) bool { return s != "" })
		if want := "0 scheduled late one due=" + strconv.FormatInt(due, 10); events != want {
			t.Fatalf("events %q, want %q", events, want)
		}
		// Ordinary messages from outside carry no due time: they run as commands.
		cf.want(typ, "s", "echo x", "x")
		cf.want(typ, "s", "events", "0 scheduled late one due="+strconv.FormatInt(due, 10))
	})
}

// forEachAbitest runs f as a subtest on the abitest module built by Go, by TinyGo (skipped
// without it) and from its Rust twin.
func forEachAbitest(t *testing.T, f func(t *testing.T, wasm []byte)) {
	for _, c := range []struct {
		name   string
		tinygo bool
		wasm   func(testing.TB) []byte
	}{
		{"go", false, func(tb testing.TB) []byte { return testwasm.Bytes(tb, "abitest") }},
		{"tinygo", true, func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "abitest") }},
		{"rust", false, func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "abitest-rust") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, ok := testwasm.TinyGo(); c.tinygo && !ok {
				t.Skip("no TinyGo")
			}
			f(t, c.wasm(t))
		})
	}
}
