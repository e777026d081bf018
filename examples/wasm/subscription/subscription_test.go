package main

import (
	"strings"
	"testing"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func newHarness() *shardhost.Harness {
	return shardhost.NewHarness("subscription", "s1", func(string) shardhost.Entity { return &subscription{} })
}

func send(t *testing.T, h *shardhost.Harness, msg, want string) {
	t.Helper()
	out, err := h.Send([]byte(msg))
	if err != nil || string(out) != want {
		t.Fatalf("%s: %q %v, want %q", msg, out, err, want)
	}
}

// TestBillsEachFiringOnce: each firing of the reminder bills one period and tells the
// ledger its charge; a firing with a due time already billed, or after stop, does not.
func TestBillsEachFiringOnce(t *testing.T) {
	h := newHarness()
	send(t, h, "start 2000 7 main", "ok")
	send(t, h, "start 2000 7 main", "ok") // a retry
	rs := h.Reminders()
	if len(rs) != 1 || rs[0].Name != "bill" || rs[0].Interval != 2*time.Second || !rs[0].Due.Equal(h.Now().Add(2*time.Second)) {
		t.Fatalf("reminders %+v", rs)
	}
	for i := 0; i < 3; i++ {
		h.Advance(2 * time.Second)
		if _, err := h.FireReminder("bill"); err != nil {
			t.Fatal(err)
		}
	}
	send(t, h, "status", "3")
	var got []string
	for _, m := range h.Tells {
		if m.Type != "ledger" || m.ID != "main" {
			t.Fatalf("told %s/%s", m.Type, m.ID)
		}
		got = append(got, string(m.Msg))
	}
	if want := "charge s1 1 7|charge s1 2 7|charge s1 3 7"; strings.Join(got, "|") != want {
		t.Fatalf("charges %q, want %q", got, want)
	}
	send(t, h, "stop", "3")
	if len(h.Reminders()) != 0 {
		t.Fatalf("reminders after stop: %+v", h.Reminders())
	}
	send(t, h, "status", "3")
	// A restart after stop goes on numbering.
	send(t, h, "start 1000 5 other", "ok")
	h.Advance(time.Second)
	if _, err := h.FireReminder("bill"); err != nil {
		t.Fatal(err)
	}
	if last := h.Tells[len(h.Tells)-1]; last.ID != "other" || string(last.Msg) != "charge s1 4 5" {
		t.Fatalf("last tell %+v", last)
	}
}

// TestRepeatedFiringIsSkipped: a firing delivered again after a crash, with the due
// time the saved state billed already, bills nothing more; the next one bills.
func TestRepeatedFiringIsSkipped(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	due := start.Add(time.Second)
	saved, err := (&subState{billed: 4, lastDue: due.UnixMilli(), periodMS: 1000, amount: 3, ledger: "main"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	h.SetTime(start)
	if err := h.Restore(saved); err != nil {
		t.Fatal(err)
	}
	send(t, h, "start 1000 3 main", "ok") // not active in saved: sets the reminder due at due
	h.Advance(time.Second)
	if _, err := h.FireReminder("bill"); err != nil {
		t.Fatal(err)
	}
	send(t, h, "status", "4")
	if len(h.Tells) != 0 {
		t.Fatalf("a repeated firing told %+v", h.Tells)
	}
	h.Advance(time.Second)
	if _, err := h.FireReminder("bill"); err != nil {
		t.Fatal(err)
	}
	send(t, h, "status", "5")
	if len(h.Tells) != 1 || string(h.Tells[0].Msg) != "charge s1 5 3" {
		t.Fatalf("tells %+v", h.Tells)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	h := newHarness()
	send(t, h, "start 1000 3 main", "ok")
	h.Advance(time.Second)
	if _, err := h.FireReminder("bill"); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	send(t, h, "status", "1")
	send(t, h, "start 1000 3 main", "ok")
	if _, err := h.Send([]byte("start 1000 4 main")); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Fatalf("a start with other arguments: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness()
	for _, bad := range []string{"", "bill", "start", "start 999 1 l", "start x 1 l", "start 1000 0 l", "start 1000 -1 l", "start 1000 y l", "status now"} {
		if _, err := h.Send([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if len(h.Reminders()) != 0 || len(h.Tells) != 0 {
		t.Fatalf("bad input changed something: %+v %+v", h.Reminders(), h.Tells)
	}
	send(t, h, "status", "0")
}
