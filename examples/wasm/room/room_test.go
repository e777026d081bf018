package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

func send(t *testing.T, h *shardhost.Harness, msg, want string) {
	t.Helper()
	out, err := h.Send([]byte(msg))
	if err != nil || string(out) != want {
		t.Fatalf("%s: %q %v, want %q", msg, out, err, want)
	}
}

func sendErr(t *testing.T, h *shardhost.Harness, msg, wantInErr string) {
	t.Helper()
	out, err := h.Send([]byte(msg))
	if err == nil || !strings.Contains(err.Error(), wantInErr) {
		t.Fatalf("%s: %q %v, want an error with %q", msg, out, err, wantInErr)
	}
}

func TestChat(t *testing.T) {
	h := shardhost.NewHarness("room", "lobby", newRoom)
	send(t, h, "members", "[]")
	send(t, h, "join bob", "ok")
	send(t, h, "join alice", "ok")
	send(t, h, "say alice hello, \"world\"", "ok")
	send(t, h, "say bob hi", "ok")
	sendErr(t, h, "say carol hey", "not a member")
	sendErr(t, h, "say bob", "say NAME TEXT")
	sendErr(t, h, "join", "join NAME")
	sendErr(t, h, "dance", "unknown message")
	send(t, h, "members", `["alice","bob"]`)
	send(t, h, "history", `["alice: hello, \"world\"","bob: hi"]`)
	send(t, h, "leave bob", "ok")
	send(t, h, "members", `["alice"]`)
	for i := 0; i < HistoryLines+5; i++ {
		send(t, h, "say alice line "+string(rune('a'+i%26)), "ok")
	}
	out, _ := h.Send([]byte("history"))
	lines, err := shardhost.ParseStrings(out)
	if err != nil || len(lines) != HistoryLines || lines[0] != "alice: line f" {
		t.Fatalf("history: %d lines, first %q, %v", len(lines), lines[0], err)
	}
}

func TestTopicFromDistributedData(t *testing.T) {
	h := shardhost.NewHarness("room", "lobby", newRoom)
	send(t, h, "topic", "")
	if !h.Subscribed(TopicsKey) {
		t.Fatal("the room does not subscribe to " + TopicsKey)
	}
	send(t, h, "set-topic cats and dogs", "ok")
	send(t, h, "topic", "cats and dogs")
	if v, err := h.Data(TopicsKey); err != nil || string(v) != `{"lobby":"cats and dogs"}` {
		t.Fatalf("room-topics: %s %v", v, err)
	}

	// Another room, or the CLI, changes the topic: the Changed message brings it.
	h.UpdateData(TopicsKey, "lwwmap", "put lobby birds")
	h.UpdateData(TopicsKey, "lwwmap", "put kitchen food")
	if _, err := h.DeliverChanged(TopicsKey); err != nil {
		t.Fatal(err)
	}
	send(t, h, "topic", "birds")
	h.UpdateData(TopicsKey, "lwwmap", "remove lobby")
	h.DeliverChanged(TopicsKey)
	send(t, h, "topic", "")

	// A write that a majority did not confirm in time is kept locally, and said so.
	h.DDataFault = func(op, key string) error {
		return &shardhost.HostError{Code: shardhost.CodeTimeout, Text: "majority not reached"}
	}
	sendErr(t, h, "set-topic fish", "a majority did not confirm")
	send(t, h, "topic", "fish")
	h.DDataFault = func(op, key string) error { return &shardhost.HostError{Code: shardhost.CodeUnavailable} }
	sendErr(t, h, "set-topic cows", "unavailable")
	send(t, h, "topic", "fish")
}

func TestIdleMembersExpire(t *testing.T) {
	h := shardhost.NewHarness("room", "lobby", newRoom)
	send(t, h, "expire-after 10s", "ok")
	if _, running := h.Timer(ExpireTimer); running {
		t.Fatal("an empty room runs the expire timer")
	}
	send(t, h, "join alice", "ok")
	tm, running := h.Timer(ExpireTimer)
	if !running || tm.Interval != 2500*time.Millisecond || tm.Delay != 2500*time.Millisecond {
		t.Fatalf("expire timer %+v %v", tm, running)
	}
	h.Advance(6 * time.Second)
	send(t, h, "join bob", "ok")
	h.Advance(3 * time.Second)
	send(t, h, "say alice still here", "ok") // alice active at 9s
	h.Advance(8 * time.Second)               // 17s: bob idle 11s, alice 8s
	if _, err := h.FireTimer(ExpireTimer); err != nil {
		t.Fatal(err)
	}
	send(t, h, "members", `["alice"]`)
	h.Advance(3 * time.Second) // 20s: alice idle 11s
	if fired, err := h.FireDue(); err != nil || len(fired) != 1 {
		t.Fatalf("FireDue: %v %v", fired, err)
	}
	send(t, h, "members", `[]`)
	if _, running := h.Timer(ExpireTimer); running {
		t.Fatal("the expire timer runs on in an empty room")
	}
	if len(h.Logs) != 2 || !strings.Contains(h.Logs[0], "bob left (idle)") {
		t.Fatalf("logs %q", h.Logs)
	}

	// The interval is a quarter of expire-after, at least MinExpireInterval.
	send(t, h, "join carol", "ok")
	send(t, h, "expire-after 200ms", "ok")
	if tm, _ := h.Timer(ExpireTimer); tm.Interval != MinExpireInterval {
		t.Fatalf("interval %v", tm.Interval)
	}
	sendErr(t, h, "expire-after soon", "expire-after DURATION")
	sendErr(t, h, "expire-after -1s", "expire-after DURATION")
}

func TestStateSurvivesPassivation(t *testing.T) {
	h := shardhost.NewHarness("room", "lobby", newRoom)
	send(t, h, "expire-after 1m", "ok")
	send(t, h, "join alice", "ok")
	send(t, h, "say alice before", "ok")
	send(t, h, "set-topic news", "ok")
	if _, ok, err := h.Snapshot(); !ok || err != nil {
		t.Fatalf("no guest-level snapshot: %v %v", ok, err)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	send(t, h, "members", `["alice"]`)
	send(t, h, "history", `["alice: before"]`)
	send(t, h, "topic", "news")
	if tm, running := h.Timer(ExpireTimer); !running || tm.Interval != 15*time.Second {
		t.Fatalf("expire timer after the restart: %+v %v", tm, running)
	}

	// A new harness from the state alone: the new incarnation subscribes and arms again.
	state, _, _ := h.Snapshot()
	next := shardhost.NewHarness("room", "lobby", newRoom)
	if err := next.Restore(state); err != nil {
		t.Fatal(err)
	}
	send(t, next, "members", `["alice"]`)
	if !next.Subscribed(TopicsKey) {
		t.Fatal("not subscribed after a restore")
	}
	if _, running := next.Timer(ExpireTimer); !running {
		t.Fatal("expire timer not armed after a restore")
	}
	if err := next.Restore(state); !errors.Is(err, shardhost.ErrRestoreAfterStart) {
		t.Fatalf("second restore: %v", err)
	}
	bad := shardhost.NewHarness("room", "lobby", newRoom)
	if err := bad.Restore([]byte{9}); err == nil {
		t.Fatal("an unknown state version restored")
	}
}
