package main

import (
	"strings"
	"testing"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func newHarness() *shardhost.Harness {
	return shardhost.NewHarness("abitest", "a1", func(string) shardhost.Entity { return &abitest{} })
}

// step sends msg and checks the reply (want) or, with wantErr, the error text.
type step struct {
	msg     string
	want    string
	wantErr string
}

func run(t *testing.T, h *shardhost.Harness, steps ...step) {
	t.Helper()
	for _, s := range steps {
		out, err := h.Send([]byte(s.msg))
		switch {
		case s.wantErr != "" && (err == nil || err.Error() != s.wantErr):
			t.Errorf("%q: %q %v, want the error %q", s.msg, out, err, s.wantErr)
		case s.wantErr == "" && (err != nil || string(out) != s.want):
			t.Errorf("%q: %q %v, want %q", s.msg, out, err, s.want)
		}
	}
}

func TestBasics(t *testing.T) {
	h := newHarness()
	run(t, h,
		step{msg: "echo hello  world", want: "hello  world"},
		step{msg: "echo", want: ""},
		step{msg: "whoami", want: "abitest/a1"},
		step{msg: "source", want: "0 "},
		step{msg: "count", want: "1"},
		step{msg: "count", want: "2"},
		step{msg: "trace step one", want: "ok"},
		step{msg: "budget 3", want: "ok"},
		step{msg: "hooks", want: "activations=1 passivations=0"},
		step{msg: "passivate", want: "ok"},
	)
	if !h.Passivated() {
		t.Error("passivate did not passivate")
	}
	run(t, h,
		step{msg: "nonsense", wantErr: "unknown command"},
		step{msg: "", wantErr: "unknown command"},
		step{msg: "count 2", wantErr: "unknown command"},
	)
	if len(h.Traces) != 1 || h.Traces[0] != "step one" {
		t.Errorf("traces %q", h.Traces)
	}
	out, err := h.SendFrom("other/o1", []byte("source"))
	if err != nil || string(out) != "0 other/o1" {
		t.Errorf("source from an entity: %q %v", out, err)
	}
}

func TestMessaging(t *testing.T) {
	h := newHarness()
	h.Asker = func(typ, id string, msg []byte, timeout time.Duration) ([]byte, error) {
		switch id {
		case "slow":
			return nil, &shardhost.HostError{Code: shardhost.CodeTimeout, Text: "no reply in " + timeout.String()}
		case "sad":
			return nil, &shardhost.HostError{Code: shardhost.CodeEntityError, Text: "unknown command"}
		}
		return []byte(typ + "/" + id + ": " + string(msg)), nil
	}
	run(t, h,
		step{msg: "tell other/o1 hi there", want: "ok"},
		step{msg: "tell other/ hi", wantErr: "code 7: empty entity type or ID"},
		step{msg: "ask other/o1 echo y", want: "other/o1: echo y"},
		step{msg: "ask other/sad x", wantErr: "code 9: unknown command"},
		step{msg: "askms 250 other/slow x", wantErr: "code 4: no reply in 250ms"},
		step{msg: "askself", wantErr: "code 5: ask of abitest/a1 would wait on itself"},
		step{msg: "fwd other/o2 a b", want: "other/o2: fwd other/o2 a b"},
	)
	if len(h.Tells) != 1 || h.Tells[0].Type != "other" || h.Tells[0].ID != "o1" || string(h.Tells[0].Msg) != "hi there" {
		t.Errorf("tells %+v", h.Tells)
	}
	if len(h.Asks) != 4 || h.Asks[2].Timeout != 250*time.Millisecond || h.Asks[0].Timeout != 0 {
		t.Errorf("asks %+v", h.Asks)
	}
	if len(h.Forwards) != 1 || h.Forwards[0].ID != "o2" || string(h.Forwards[0].Msg) != "fwd other/o2 a b" {
		t.Errorf("forwards %+v", h.Forwards)
	}
	// The forwarded message reaches the entity it names: "got ... from" the original sender.
	out, err := h.SendFrom("other/o9", []byte("fwd abitest/a1 a b"))
	if err != nil || string(out) != "got a b from other/o9" {
		t.Errorf("fwd to itself: %q %v", out, err)
	}
}

func TestSendsWithKeys(t *testing.T) {
	h := newHarness()
	h.Asker = func(typ, id string, msg []byte, timeout time.Duration) ([]byte, error) {
		return []byte(typ + "/" + id + ": " + string(msg)), nil
	}
	run(t, h,
		step{msg: "tellkey k1 other/x count", want: "ok"},
		step{msg: "askkey k2 other/y count now", want: "other/y: count now"},
		step{msg: "tellkey k1 other/ count", wantErr: "code 7: empty entity type or ID"},
		step{msg: "tellkey " + strings.Repeat("k", 257) + " other/x count", wantErr: "code 7: invalid idempotency key: 257 bytes (at most 256)"},
		step{msg: "askkey k3", wantErr: "unknown command"},
	)
	if len(h.Tells) != 1 || h.Tells[0].Key != "k1" || h.Tells[0].ID != "x" || string(h.Tells[0].Msg) != "count" {
		t.Errorf("tells %+v", h.Tells)
	}
	if len(h.Asks) != 1 || h.Asks[0].Key != "k2" || h.Asks[0].ID != "y" || string(h.Asks[0].Msg) != "count now" {
		t.Errorf("asks %+v", h.Asks)
	}
}

func TestDistributedDataAndEvents(t *testing.T) {
	h := newHarness()
	run(t, h,
		step{msg: "ddget c local", wantErr: `code 2: key "c" not found`},
		step{msg: "ddup c pncounter majority incr 5", want: "5"},
		step{msg: "ddup c pncounter - decr 7", want: "-2"},
		step{msg: "ddget c all", want: "-2"},
		step{msg: "ddup c gcounter local incr", wantErr: `code 10: key "c" holds a pncounter, not a gcounter`},
		step{msg: "ddup s orset 2 add two words", want: `["two words"]`},
		step{msg: "ddget s bogus", wantErr: `code 7: bad consistency "bogus"`},
		step{msg: "dddel c majority+1", want: "ok"},
		step{msg: "ddget c local", wantErr: `code 3: key "c" was deleted`},
		step{msg: "sub s", want: "ok"},
		step{msg: "timer t1 100 0 tick one", want: "ok"},
		step{msg: "timer t2 50 1000 ", want: "ok"},
		step{msg: "cancel t2", want: "1"},
		step{msg: "cancel t2", want: "0"},
		step{msg: "events", want: ""},
	)
	if !h.Subscribed("s") {
		t.Fatal("sub did not subscribe")
	}
	if tm, ok := h.Timer("t1"); !ok || tm.Delay != 100*time.Millisecond || string(tm.Msg) != "tick one" {
		t.Fatalf("timer t1: %+v %v", tm, ok)
	}
	if out, err := h.FireTimer("t1"); err != nil || len(out) != 0 {
		t.Fatalf("timer message: %q %v", out, err)
	}
	if out, err := h.DeliverChanged("s"); err != nil || len(out) != 0 {
		t.Fatalf("changed message: %q %v", out, err)
	}
	run(t, h,
		step{msg: "events", want: "1 t1 tick one\n2 s [\"two words\"]"},
		step{msg: "unsub s", want: "ok"},
		step{msg: "timer " + strings.Repeat("n", 257) + " 1 0 x", wantErr: "code 7: timer name over 256 bytes"},
	)
}

func TestTimeAndRandom(t *testing.T) {
	h := newHarness()
	h.SetTime(time.Unix(1700000000, 5))
	h.Advance(2 * time.Second)
	run(t, h,
		step{msg: "now", want: "1700000002000000005 2000000000"},
		step{msg: "random 0", want: ""},
	)
	out, err := h.Send([]byte("random 5"))
	if err != nil || len(out) != 10 || strings.Trim(string(out), "0123456789abcdef") != "" {
		t.Fatalf("random 5: %q %v", out, err)
	}
	h2 := newHarness()
	out2, _ := h2.Send([]byte("random 5"))
	if string(out) != string(out2) {
		t.Fatalf("seeded random differs: %s %s", out, out2)
	}
}

func TestStateAndHooksAcrossIncarnations(t *testing.T) {
	h := newHarness()
	run(t, h, step{msg: "count", want: "1"}, step{msg: "sub k", want: "ok"})
	h.UpdateData("k", "flag", "enable")
	h.DeliverChanged("k")
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	run(t, h,
		step{msg: "count", want: "2"},
		step{msg: "hooks", want: "activations=2 passivations=1"},
		step{msg: "events", want: "2 k true"},
	)
	state, ok, err := h.Snapshot()
	if !ok || err != nil {
		t.Fatalf("snapshot: %v %v", ok, err)
	}
	next := newHarness()
	if err := next.Restore(state); err != nil {
		t.Fatal(err)
	}
	run(t, next, step{msg: "count", want: "3"}, step{msg: "hooks", want: "activations=3 passivations=1"})
}

func TestTrap(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("trap did not panic")
		}
	}()
	newHarness().Send([]byte("trap"))
}

func TestBudgetTraps(t *testing.T) {
	h := newHarness()
	run(t, h, step{msg: "budget 100", want: "ok"})
	defer func() {
		if recover() == nil {
			t.Fatal("budget 20000 did not trap")
		}
	}()
	h.Send([]byte("budget 20000"))
}
